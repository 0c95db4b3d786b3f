"""The committed reports describe the code as committed: full scale and fresh fingerprints."""

from __future__ import annotations

import json

import pytest

from reportgen.output import REPORTS_DIR
from reportgen.reproduction import load_summaries, readme_table, staleness, table

COMMITTED = sorted(p.parent.name for p in REPORTS_DIR.glob("*/summary.json"))


def test_reports_are_committed():
    assert {"storm", "long-output", "long-prompt", "osl-variance", "bench"} <= set(COMMITTED)


@pytest.mark.parametrize("scenario", COMMITTED)
def test_committed_report_is_fresh(scenario):
    summary = json.loads((REPORTS_DIR / scenario / "summary.json").read_text())
    why = staleness(summary)
    assert not why, (f"reports/{scenario}: {why}; re-make it with `python -m reportgen run "
                     f"{scenario}` (or `bench`), or mark it stale in the docs")


def test_the_published_table_has_no_stale_row():
    text = table(load_summaries())
    assert "stale:" not in text and "scratch" not in text


def test_reports_readme_shows_the_table_the_summaries_give():
    assert readme_table(REPORTS_DIR / "README.md") == table(load_summaries()), \
        "run `python -m reportgen table --update-readme`"
