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
    for form in hp.choices:
        assert issubclass(hp.implementation(form), interface), form


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
        if hp.id == "H5":
            continue
        action = next(a for a in parser._actions if hp.flag in a.option_strings)
        assert tuple(action.choices) == hp.choices


def test_the_http_process_does_not_import_torch_through_the_registry():
    code = ("import sys; from reference_impl.config import from_cli; from reference_impl.hot_paths "
            "import HOT_PATHS; HOT_PATHS['H1'].create('batched', 16); HOT_PATHS['H2'].create('msgspec');"
            " HOT_PATHS['H3'].create('reference'); HOT_PATHS['H6'].implementation('offset');"
            " print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr
