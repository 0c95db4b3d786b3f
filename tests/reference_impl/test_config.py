"""ServerArgs: the hot-path forms it reports, and the H3 variant's flag."""

from __future__ import annotations

import pytest

from reference_impl.config import ServerArgs, from_cli


def test_default_forms_are_optimized_and_h5_says_it_is_off():
    forms = ServerArgs().hot_path_forms()
    assert forms["H5"].startswith("off")
    assert {forms[h] for h in ("H1", "H2", "H3", "H4", "H6")} == {"optimized"}


def test_h5_form_follows_the_queue_ratio_once_enabled():
    assert ServerArgs(enable_prefill_delayer=True).hot_path_forms()["H5"] == "legacy"
    args = ServerArgs(enable_prefill_delayer=True, prefill_delayer_queue_min_ratio=0.1)
    assert args.hot_path_forms()["H5"] == "optimized"


def test_all_legacy_and_the_upstream_h3_variant():
    assert set(from_cli(["--all-legacy"]).hot_path_forms().values()) <= {"legacy", "off (no --enable-prefill-delayer)"}
    assert from_cli(["--stream-output", "reference-full"]).hot_path_forms()["H3"] == "reference-full"
    with pytest.raises(SystemExit):
        from_cli(["--stream-output", "bogus"])
