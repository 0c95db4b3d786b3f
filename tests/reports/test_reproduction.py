"""The reproduction table: one row per upstream claim, filled from the reports' summaries."""

from __future__ import annotations

import json

from reports.reproduction import CLAIMS, load_summaries, table


def _storm(legacy: float, optimized: float) -> dict:
    def run(name, tput):
        return {"name": name, "loadgen": {"output_throughput": tput, "mean_tpot_ms": 10.0,
                                          "mean_itl_ms": 20.0, "p99_itl_ms": 40.0}}
    return {"runs": [run("all-legacy", legacy), run("all-optimized", optimized)]}


def test_one_row_per_claim_and_missing_reports_read_not_run():
    lines = table({}).splitlines()
    assert len(lines) == 2 + len(CLAIMS)
    assert all("not run" in line for line in lines[2:])


def test_storm_rows_are_measured_from_the_summary(tmp_path):
    (tmp_path / "storm").mkdir()
    (tmp_path / "storm" / "summary.json").write_text(json.dumps(_storm(1000.0, 1200.0)))
    rows = table(load_summaries(tmp_path)).splitlines()[2:]
    assert "1,000 → 1,200 tok/s" in rows[0] and "| 1.20x |" in rows[0]
    assert "TPOT 1.00x" in rows[1]
    assert "not run" in rows[2]
