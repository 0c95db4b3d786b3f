"""The hot-path registry: one place names every form, and everything else reads it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from reference_impl.config import ServerArgs, build_parser, from_cli
from reference_impl.hot_paths import HOT_PATHS, all_legacy_flags, get, only_legacy_flags


@pytest.mark.parametrize("hot_path", list(HOT_PATHS))
def test_every_form_resolves_to_a_subclass_of_its_interface(hot_path):
    hp = HOT_PATHS[hot_path]
    interface = hp.interface_class()
    assert {hp.legacy, hp.optimized} <= set(hp.choices)
    assert getattr(interface, "__abstractmethods__", None), f"{interface} is not abstract"
    for form in hp.choices:
        for incremental in (False, True):
            impl = hp.implementation(form, incremental=incremental)
            assert issubclass(impl, interface) and not impl.__abstractmethods__, (form, impl)
    assert set(hp.incremental_forms) <= set(hp.forms)


@pytest.mark.parametrize("hot_path", list(HOT_PATHS))
def test_an_unknown_form_is_an_error_naming_the_choices(hot_path):
    hp = HOT_PATHS[hot_path]
    with pytest.raises(ValueError, match=hp.legacy):
        hp.create("no-such-form")
    if hot_path != "H5":
        with pytest.raises(ValueError, match=hp.legacy):
            ServerArgs(**{hp.field: "no-such-form"})
        with pytest.raises(SystemExit):
            from_cli([hp.flag, "no-such-form"])


def test_unknown_hot_path_is_an_error():
    with pytest.raises(ValueError, match="H7"):
        get("H7")
    with pytest.raises(ValueError):
        only_legacy_flags("h1")


def test_all_legacy_flags_equal_the_all_legacy_switch():
    assert from_cli([*all_legacy_flags(), "--enable-prefill-delayer"]) == \
        from_cli(["--all-legacy", "--enable-prefill-delayer"])
    assert from_cli(list(all_legacy_flags())) == ServerArgs().all_legacy()


@pytest.mark.parametrize("hot_path", list(HOT_PATHS))
def test_only_legacy_changes_that_hot_path_alone(hot_path):
    base = ServerArgs(enable_prefill_delayer=True, prefill_delayer_queue_min_ratio=0.1)
    flags = ["--enable-prefill-delayer", "--prefill-delayer-queue-min-ratio", "0.1"]
    if hot_path == "H5":  # legacy H5 is the ratio left unset
        args = from_cli(["--enable-prefill-delayer", *only_legacy_flags(hot_path)])
    else:
        args = from_cli([*flags, *only_legacy_flags(hot_path)])
    changed = {h for h in HOT_PATHS if base.hot_path_forms()[h] != args.hot_path_forms()[h]}
    assert changed == {hot_path}
    assert args.hot_path_forms()[hot_path] == "legacy"


def test_h5_optimized_flags_enable_the_queue_trigger():
    h5 = HOT_PATHS["H5"]
    assert from_cli(list(h5.server_flags(h5.optimized))).hot_path_forms()["H5"] == "optimized"
    assert h5.server_flags(h5.legacy) == ()


def test_argparse_choices_and_help_come_from_the_registry():
    parser = build_parser()
    for hp in HOT_PATHS.values():
        action = next(a for a in parser._actions if hp.flag in a.option_strings)
        assert action.help == hp.cli_help and hp.help and hp.upstream in action.help
        if hp.id != "H5":
            assert tuple(action.choices) == hp.choices


@pytest.mark.parametrize("hot_path", list(HOT_PATHS))
def test_server_flags_select_every_form_variants_included(hot_path):
    hp = HOT_PATHS[hot_path]
    for form in hp.choices:
        args = from_cli(["--enable-prefill-delayer", *hp.server_flags(form)])
        assert hp.form_of(getattr(args, hp.field)) == form
        label = {hp.legacy: "legacy", hp.optimized: "optimized"}.get(form, form)
        assert args.hot_path_forms()[hot_path] == label


def test_config_imports_no_heavy_module():
    code = ("import sys; import reference_impl.config; print(sorted(m for m in ('torch', 'numpy', "
            "'pydantic', 'msgspec') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stderr


def test_the_http_process_does_not_import_torch_through_the_registry():
    code = ("import sys; from reference_impl.config import from_cli; from reference_impl.hot_paths "
            "import HOT_PATHS; HOT_PATHS['H1'].create('batched', 16); HOT_PATHS['H2'].create('msgspec');"
            " [HOT_PATHS[h].implementation(f, incremental=m) for h in ('H3', 'H6')"
            " for f in HOT_PATHS[h].choices for m in (False, True)];"
            " print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr
