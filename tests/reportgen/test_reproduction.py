"""The reproduction table: one row per upstream claim, filled from the reports' summaries."""

from __future__ import annotations

import json
import os

import pytest

from harness import provenance
from reportgen.reproduction import (
    CLAIMS,
    TABLE_END,
    TABLE_START,
    SummaryError,
    load_summaries,
    readme_table,
    table,
    update_readme,
)
from tests.reportgen.conftest import run_cli


def _storm(legacy: float, optimized: float, suffix: str = "") -> dict:
    def run(name, tput, bound=False, chunk=1.5):
        return {"name": name + suffix, "client_bound": bound,
                "server": {"output tokens per SSE chunk": chunk},
                "loadgen": {"output_throughput": tput, "mean_tpot_ms": 10.0, "mean_itl_ms": 20.0,
                            "p99_itl_ms": 40.0}}
    return {"runs": [run("all-legacy", legacy, chunk=6.0), run("all-optimized", optimized),
                     run("H1-legacy-only", legacy), run("H2-legacy-only", optimized, True)]}


def test_one_row_per_claim_and_missing_reports_read_not_run():
    lines = table({}).splitlines()
    assert len(lines) == 2 + len(CLAIMS)
    assert all("not run" in line for line in lines[2:])


def test_storm_rows_are_measured_from_the_summary(tmp_path):
    (tmp_path / "storm").mkdir()
    yielding, no_yield = _storm(1000.0, 1200.0), _storm(900.0, 600.0, "-no-yield")
    summary = {"runs": yielding["runs"] + no_yield["runs"]}
    (tmp_path / "storm" / "summary.json").write_text(json.dumps(summary))
    rows = table(load_summaries(tmp_path)).splitlines()[2:]
    assert "all: 1,000 → 1,200 tok/s" in rows[0] and "| 1.20x (all); 1.20x (H1); 1.00x (H2) |" in rows[0]
    assert "tokens per SSE chunk: all-legacy 6.00, H1-legacy-only 1.50, all-optimized 1.50" in rows[0]
    assert "client-bound: H2-legacy-only |" in rows[0]
    assert "all: 900 → 600 tok/s" in rows[0] and "0.67x (all)" in rows[0]  # the no-yield column
    assert "client-bound: H2-legacy-only-no-yield" in rows[0]
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
    h5 = next(i for i, line in enumerate(lines) if "| H5 |" in line)
    assert "8,000 → 4,000 tok/s" in lines[h5] and "| 0.50x |" in lines[h5]
    assert "| 50.00x |" in lines[h5 + 1]
    assert "conc 16: 1.11x" in lines[h5 + 3] and "conc 128: 1.50x" in lines[h5 + 3]
    assert "not run" in lines[h5].split("|")[8]  # no one-rank setting in this summary


def _write(tmp_path, name: str, summary: dict) -> None:
    (tmp_path / name).mkdir()
    (tmp_path / name / "summary.json").write_text(json.dumps(summary))


def test_rows_from_fresh_summaries_carry_no_mark(tmp_path):
    _write(tmp_path, "storm", {**_storm(1000.0, 1200.0), "provenance": provenance.record((provenance.TORCH_ENGINE,)), "scale": 1.0})
    first = table(load_summaries(tmp_path)).splitlines()[2]
    assert "stale" not in first and "scratch" not in first


@pytest.mark.parametrize("summary_extra, mark", [
    ({}, "storm: stale: measured at unknown"),
    ({"provenance": {"commit": "abc1234", "fingerprint": "0" * 16, "fingerprint_excludes": []}},
     "storm: stale: measured at abc1234"),
    ({"scale": 0.05}, "storm: scale 0.05 (scratch), not a full run"),
])
def test_stale_or_scaled_rows_are_marked(tmp_path, summary_extra, mark):
    _write(tmp_path, "storm", {**_storm(1000.0, 1200.0), **summary_extra})
    rows = table(load_summaries(tmp_path)).splitlines()[2:]
    assert f"**{mark}" in rows[0] and f"**{mark}" in rows[1]
    assert "stale" not in rows[3]  # a row that reads no storm summary


def test_a_broken_summary_is_named(tmp_path):
    (tmp_path / "storm").mkdir()
    (tmp_path / "storm" / "summary.json").write_text("{not json")
    with pytest.raises(SummaryError, match="storm/summary.json"):
        load_summaries(tmp_path)
    proc = run_cli("table", "--reports-dir", str(tmp_path), timeout=120)
    assert proc.returncode == 1 and "storm/summary.json" in proc.stderr and "Traceback" not in proc.stderr


def test_a_missing_reports_dir_is_a_usage_error(tmp_path):
    proc = run_cli("table", "--reports-dir", str(tmp_path / "nowhere"), timeout=120)
    assert proc.returncode == 2 and "no such directory" in proc.stderr


def test_the_readme_table_is_replaced_between_its_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# Reports\n\nintro\n\n{TABLE_START}\nold rows\n{TABLE_END}\n\nafter\n")
    assert update_readme(readme, "| new |\n")
    assert readme_table(readme) == "| new |\n"
    assert readme.read_text().startswith("# Reports\n\nintro") and readme.read_text().endswith("after\n")
    assert not update_readme(readme, "| new |\n")
    readme.write_text("no markers")
    with pytest.raises(SummaryError, match="markers"):
        update_readme(readme, "x")


def test_table_in_a_terminal_is_one_wrapped_block_per_claim_and_markdown_on_request(tmp_path):
    (tmp_path / "storm").mkdir()
    (tmp_path / "storm" / "summary.json").write_text(json.dumps(_storm(100.0, 140.0)))
    env = {**os.environ, "COLUMNS": "80"}
    shown = run_cli("table", "--reports-dir", str(tmp_path), env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert max(map(len, lines)) <= 80 and "|" not in shown.stdout, max(lines, key=len)
    assert lines[0] == "1. H1+H2" and "   ratio here: 1.40x (all); 1.40x (H1); 1.00x (H2)" in lines
    assert sum(line[:1].isdigit() for line in lines) == len(CLAIMS)
    markdown = run_cli("table", "--reports-dir", str(tmp_path), "--markdown", timeout=120)
    assert markdown.stdout == table(load_summaries(tmp_path))
