"""py-spy helpers: finding the binary, parsing raw collapsed stacks, gzip round trip."""

from __future__ import annotations

import pytest

from harness.profiler import ProfilerError, find_py_spy, gzip_file, parse_collapsed, read_stacks

RAW = """<module> (<string>:1);run (app/server.py:10);handle (app/server.py:42) 7
<module> (<string>:1);run (app/server.py:11);handle (app/server.py:43) 3
<module> (<string>:1);run (app/server.py:10) 2
not a stack line
"""


def test_parse_merges_line_numbers_and_sums_counts():
    stacks = parse_collapsed(RAW)
    assert stacks == {("<module> (<string>)", "run (app/server.py)", "handle (app/server.py)"): 10,
                      ("<module> (<string>)", "run (app/server.py)"): 2}


def test_parse_keeps_spaces_inside_frames():
    stacks = parse_collapsed("a b (x.py:1);c (<frozen importlib._bootstrap>:5) 4\n")
    assert stacks == {("a b (x.py)", "c (<frozen importlib._bootstrap>)"): 4}


def test_gzip_round_trip(tmp_path):
    raw = tmp_path / "p.txt"
    raw.write_text(RAW)
    gz = gzip_file(raw)
    assert not raw.exists() and gz.name == "p.txt.gz"
    assert read_stacks(gz) == parse_collapsed(RAW)


def test_missing_py_spy_is_a_clear_error(tmp_path):
    with pytest.raises(ProfilerError, match="py-spy not found at .*pip install py-spy"):
        find_py_spy(str(tmp_path / "no-such-py-spy"))


def test_py_spy_on_path_is_found():
    assert find_py_spy().endswith("py-spy")
