"""The reproduction table: one row per upstream claim, filled from the reports' summaries."""

from __future__ import annotations

import json

from reports.reproduction import CLAIMS, load_summaries, table


def _storm(legacy: float, optimized: float) -> dict:
    def run(name, tput, bound=False):
        return {"name": name, "client_bound": bound,
                "loadgen": {"output_throughput": tput, "mean_tpot_ms": 10.0, "mean_itl_ms": 20.0,
                            "p99_itl_ms": 40.0}}
    return {"runs": [run("all-legacy", legacy), run("all-optimized", optimized),
                     run("H1-legacy-only", legacy), run("H2-legacy-only", optimized, True)]}


def test_one_row_per_claim_and_missing_reports_read_not_run():
    lines = table({}).splitlines()
    assert len(lines) == 2 + len(CLAIMS)
    assert all("not run" in line for line in lines[2:])


def test_storm_rows_are_measured_from_the_summary(tmp_path):
    (tmp_path / "storm").mkdir()
    (tmp_path / "storm" / "summary.json").write_text(json.dumps(_storm(1000.0, 1200.0)))
    rows = table(load_summaries(tmp_path)).splitlines()[2:]
    assert "all: 1,000 → 1,200 tok/s" in rows[0] and "| 1.20x (all); 1.20x (H1); 1.00x (H2) |" in rows[0]
    assert "client-bound: H2-legacy-only" in rows[0]
    assert "TPOT 1.00x" in rows[1]
    assert "not run" in rows[2]


def test_h5_rows_are_read_from_the_bench_summary(tmp_path):
    def row(ratio, conc, delayer, tput, steps):
        return {"range_ratio": ratio, "concurrency": conc, "delayer": delayer, "output_tok_s": tput,
                "prefill_steps": steps, "p99_decode_gap_ms": 10.0}
    rows = [row(1.0, 128, "off", 8000.0, 8), row(0.8, 128, "off", 4000.0, 400),
            row(0.8, 128, "queue", 6000.0, 50), row(0.8, 16, "off", 900.0, 40),
            row(0.8, 16, "queue", 1000.0, 20)]
    bench = {"h5_regime": {"dp-attention": {"rows": rows}}, "h3_growth": {"rows": []}}
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "summary.json").write_text(json.dumps(bench))
    lines = table(load_summaries(tmp_path)).splitlines()[2:]
    assert "8,000 → 4,000 tok/s" in lines[6] and "| 0.50x |" in lines[6]
    assert "| 50.00x |" in lines[7]
    assert "conc 16: 1.11x" in lines[9] and "conc 128: 1.50x" in lines[9]
    assert "not run" in lines[6].split("|")[8]  # no one-rank setting in this summary
