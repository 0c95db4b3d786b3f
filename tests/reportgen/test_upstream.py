"""reports/upstream: the summary's entries, its README and the reproduction table's upstream column."""

from __future__ import annotations

import pytest

from reportgen.reproduction import COLUMNS, rows, upstream_cell
from reportgen.upstream import entry, readme

CASE = {"hot_path": "H2", "case": "h2-first-chunk", "unit": "us", "before": "0.5.10.post1",
        "after": "0.5.11", "releases": {"0.5.10.post1": 10.0, "0.5.11": 1.0},
        "functions": {"0.5.10.post1": "pydantic", "0.5.11": "serving_chat._fast_sse_content"}}


@pytest.mark.parametrize(("optimized", "finding"), [(1.0, False), (1.2, False), (1.3, True), (0.7, True)])
def test_entry_marks_a_fidelity_finding_beyond_25_percent(optimized, finding):
    # upstream ratio 0.1; reference ratio optimized / 10
    got = entry(CASE, {"h2-first-chunk": {"legacy": 10.0, "optimized": optimized, "unit": "us"}})
    assert got["upstream_ratio"] == pytest.approx(0.1)
    assert got["reference_ratio"] == pytest.approx(optimized / 10)
    assert got["fidelity_finding"] is finding
    assert (got["release_before"], got["release_after"]) == ("0.5.10.post1", "0.5.11")


def _summary(cases):
    return {"scenario": "upstream", "command": "python -m reportgen run upstream", "elapsed_s": 3.0,
            "machine": {"node": "n", "cpu": "c", "note": "shared"}, "errors": [], "cases": cases, "provenance": None}


def test_readme_has_one_row_per_case_with_both_ratios():
    data = _summary([entry(CASE, {"h2-first-chunk": {"legacy": 6.0, "optimized": 1.0, "unit": "us"}})])
    text = readme(data)
    assert "| H2 | h2-first-chunk | 0.5.10.post1 → 0.5.11 | 10 → 1 us | 0.10 | 6 → 1 us | 0.17 | yes |" in text


def test_reproduction_column_shows_each_hot_path_once_and_says_when_absent():
    cell = COLUMNS.index("upstream code, release before → after")
    absent = rows({})
    assert {r[cell] for r in absent if r[1] != "H1+H2" or r[0] == "1"} <= {"not run", "as above"}
    data = _summary([entry(CASE, {"h2-first-chunk": {"legacy": 10.0, "optimized": 1.0, "unit": "us"}})])
    table = rows({"upstream": data})
    h1h2 = [r[cell] for r in table if r[1] == "H1+H2"]
    assert "h2-first-chunk 0.5.10.post1 → 0.5.11: 10 → 1 us (0.10x; reference 0.10x)" in h1h2[0]
    assert h1h2[1:] == ["as above"] * (len(h1h2) - 1)
    assert upstream_cell({"upstream": data}, "H5") == "no upstream case yet"
    assert upstream_cell({"upstream": data}, "H2").startswith("**upstream: stale")


def test_a_case_without_reference_figure_is_reported_alone():
    case = {**CASE, "hot_path": "H5", "case": "h5-decisions-differ", "unit": "passes",
            "before": "0.5.11", "after": "0.5.12", "releases": {"0.5.11": 0, "0.5.12": 8},
            "functions": {"0.5.11": "d", "0.5.12": "d"}}
    got = entry(case, {})
    assert (got["reference_ratio"], got["fidelity_finding"]) == (None, True)
    data = _summary([got])
    assert "| H5 | h5-decisions-differ | 0.5.11 → 0.5.12 | 0 → 8 passes | | (no reference figure) | | yes |" \
        in readme(data)
    assert upstream_cell({"upstream": data}, "H5").endswith("h5-decisions-differ 0.5.11 → 0.5.12: 0 → 8 passes")
