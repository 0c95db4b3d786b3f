"""The report page in headless Chromium: it renders, and its DOM holds the tables and flamegraphs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from reportgen.render import fmt, fmt_ratio


@pytest.mark.parametrize("value, text", [(None, "–"), (20, "20"), (1234.0, "1,234"), (1234.5, "1,234"),
                                         (12.34, "12.3"), (1.234, "1.23"), (True, "True")])
def test_fmt(value, text):
    assert fmt(value) == text


def test_fmt_ratio():
    assert fmt_ratio(1.5) == "1.50x" and fmt_ratio(None) == ""


def test_page_renders_in_chromium_with_tables_and_flamegraphs(chromium, report: Path, tmp_path):
    page = (report / "index.html").as_uri()
    shot = tmp_path / "page.png"
    proc = chromium(tmp_path / "profile", "--window-size=1300,2400", f"--screenshot={shot}", page)
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", proc.stderr[-2000:]
    assert shot.stat().st_size > 10_000
    dom = chromium(tmp_path / "profile", "--dump-dom", page).stdout
    assert dom.count("<table") >= 5  # loadgen, server, top functions x3, machine
    assert re.search(r'<svg class="flamegraph"[^>]*>.*?<rect ', dom, re.S), "no flamegraph in the DOM"
    assert "Top functions by own time" in dom
    assert 'src="data:image/png;base64,' in dom


def _outcome(name: str, completed: int):
    from types import SimpleNamespace

    return SimpleNamespace(run=SimpleNamespace(name=name), result={"completed": completed, "x": 2.0})


def test_runs_too_small_to_judge_get_no_ratios():
    from reportgen.render import MIN_COMPLETED, _compare_rows, too_few_note

    big, small = _outcome("a", MIN_COMPLETED), _outcome("b", MIN_COMPLETED - 1)
    data = {"a": {"x": 1.0}, "b": {"x": 2.0}, "c": {"x": 3.0}}
    assert "too few samples" in _compare_rows(data, [big, small], [("x", "x")])[0][2]
    assert "3.00x" in _compare_rows(data, [big, _outcome("c", MIN_COMPLETED)], [("x", "x")])[0][2]
    assert too_few_note([big]) == ""
    assert "b (29)" in too_few_note([big, small]).replace(str(MIN_COMPLETED - 1), "29")
