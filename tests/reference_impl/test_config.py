"""ServerArgs: the hot-path forms it reports, and the H3 variant's flag."""

from __future__ import annotations

import os

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


def test_api_key_from_a_file_or_vllms_variable_and_the_flags_win(tmp_path, monkeypatch):
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    key_file = tmp_path / "key"
    key_file.write_text("  sekrit-from-file\n")
    assert from_cli(["--api-key-file", str(key_file)]).api_key == "sekrit-from-file"
    assert from_cli([]).api_key is None
    monkeypatch.setenv("VLLM_API_KEY", "sekrit-from-env")
    assert from_cli([]).api_key == "sekrit-from-env"
    assert from_cli(["--api-key-file", str(key_file)]).api_key == "sekrit-from-file"
    assert from_cli(["--api-key", "k"]).api_key == "k"
    assert "sekrit" not in repr(from_cli([]))  # a logged ServerArgs does not show it


def _bad_key_files(tmp_path):
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "two-lines").write_text("key\nother\n")
    (tmp_path / "big").write_text("k" * 5000)
    (tmp_path / "binary").write_bytes(b"\xff\xfe")
    os.mkfifo(tmp_path / "fifo")  # NOTE: opened, it would block until a writer comes
    (tmp_path / "zero").symlink_to("/dev/zero")
    return {"empty": "one line", "two-lines": "one line", "big": "more than 4096", "binary": "not UTF-8",
            "fifo": "not a regular file", "zero": "not a regular file", ".": "not a regular file",
            "missing": "cannot read"}


def test_a_bad_api_key_file_is_one_line_and_exit_2(tmp_path, capsys):
    for name, why in _bad_key_files(tmp_path).items():
        with pytest.raises(SystemExit) as exc:
            from_cli(["--api-key-file", str(tmp_path / name)])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and why in err and "Traceback" not in err, (name, err)
    key_file = tmp_path / "key"
    key_file.write_text("k\n")
    with pytest.raises(SystemExit):
        from_cli(["--api-key", "k", "--api-key-file", str(key_file)])
    assert "not both" in capsys.readouterr().err
