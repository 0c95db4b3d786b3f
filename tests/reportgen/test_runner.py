"""End to end: every scenario at the smallest scale through the CLI, and the failure paths."""

from __future__ import annotations

import gzip
import json
import os
import sys
from pathlib import Path

from harness.profiler import read_stacks
from harness.run import PROCESSES
from tests.reportgen.conftest import run_cli


def test_report_has_its_files(report: Path):
    summary = json.loads((report / "summary.json").read_text())
    assert (report / "index.html").stat().st_size > 0
    assert (report / "README.md").read_text().startswith(f"# {summary['scenario']}")
    for run in summary["runs"]:
        result = json.loads((report / "results" / f"{run['name']}.json").read_text())
        assert result["completed"] == run["load"]["num_prompts"] and result["failed"] == 0
        assert (report / "raw" / f"{run['name']}.server.log").exists()
        if run["sweep"]:
            continue
        for process in PROCESSES:
            assert (report / "flamegraphs" / f"{run['name']}.{process}.svg").read_text().startswith("<svg")
            with gzip.open(report / "profiles" / f"{run['name']}.{process}.speedscope.json.gz") as f:
                profile = json.load(f)
            assert profile["profiles"][0]["type"] == "sampled"
    assert not list(report.parent.glob(f".{report.name}.*")), "temporary directories left behind"


# NOTE: /proc CPU time also counts ZMQ's I/O thread and the kernel, which py-spy (idle frames off)
# never samples: a long-prompt detokenizer used 0.07 s of CPU over its two runs and got no sample
# at 1 kHz. A process busy for this long has Python work the sampler cannot miss.
MIN_SAMPLED_CPU_S = 0.2


def test_every_busy_server_process_has_a_non_empty_profile(report: Path):
    """Per run, the busiest (HTTP) process has samples; per scenario, so has every process that
    used at least MIN_SAMPLED_CPU_S of CPU over the scenario's runs."""
    summary = json.loads((report / "summary.json").read_text())
    samples = dict.fromkeys(PROCESSES, 0)
    cpu_s = dict.fromkeys(PROCESSES, 0.0)
    for run in summary["runs"]:
        for process in PROCESSES:
            stacks = read_stacks(report / "raw" / f"{run['name']}.{process}.txt.gz")
            assert all(stack for stack in stacks), "empty stack parsed"
            samples[process] += sum(stacks.values())
            cpu_s[process] += run["cpu_s"][process]
        http = read_stacks(report / "raw" / f"{run['name']}.http.txt.gz")
        assert sum(http.values()) > 0, f"{run['name']}: no samples in the HTTP process"
        assert any("reference_impl/" in frame for stack in http for frame in stack)
    busy = [p for p in PROCESSES if cpu_s[p] >= MIN_SAMPLED_CPU_S]
    assert all(samples[p] for p in busy), (samples, cpu_s)


def test_report_records_the_scheduler_counters(report: Path):
    summary = json.loads((report / "summary.json").read_text())
    for run in summary["runs"]:
        is_pd_decode = "--disaggregation-mode" in run["flags"]
        # NOTE: a PD decode node gets its KV from a prefill node: it never runs a prefill step.
        assert (run["metrics"]["num_prefill_steps"] == 0) if is_pd_decode else \
            (run["metrics"]["num_prefill_steps"] >= 1)
        assert run["metrics"]["num_decode_steps"] >= 1
    if summary["scenario"] == "osl-variance":
        delayed = [r for r in summary["runs"] if r["params"]["delayer"] == "queue-trigger"]
        assert all(any(k.startswith("prefill_delayer_outcomes") for k in r["metrics"]) for r in delayed)
    if summary["scenario"] == "long-output":
        assert set(summary["cost_by_length"]) == {"all-legacy", "all-optimized"}


def _assert_nothing_written(out: Path, proc) -> None:
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert not out.exists()
    assert not [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}")]


def test_py_spy_flag_pointing_nowhere_is_a_clear_error(tmp_path):
    out = tmp_path / "storm"
    proc = run_cli("run", "storm", "--scale", "0.01", "--out-dir", str(out),
                   "--py-spy", str(tmp_path / "missing" / "py-spy"))
    _assert_nothing_written(out, proc)
    assert "py-spy not found" in proc.stderr and "pip install py-spy" in proc.stderr


def test_py_spy_missing_from_path_is_a_clear_error(tmp_path):
    out = tmp_path / "storm"
    env = dict(os.environ, PATH=str(Path(sys.executable).parent.parent / "no-bin"))
    proc = run_cli("run", "storm", "--scale", "0.01", "--out-dir", str(out), env=env)
    _assert_nothing_written(out, proc)
    assert "py-spy not found on PATH" in proc.stderr


def test_failing_server_is_a_clear_error_and_leaves_no_report(tmp_path):
    out = tmp_path / "storm"
    proc = run_cli("run", "storm", "--scale", "0.01", "--out-dir", str(out),
                   "--server-flag=--max-running-requests=0")
    _assert_nothing_written(out, proc)
    assert "server for 'all-legacy'" in proc.stderr and "failed" in proc.stderr


def test_failing_run_keeps_an_existing_report(tmp_path):
    out = tmp_path / "storm"
    out.mkdir()
    (out / "index.html").write_text("previous report")
    (out / "summary.json").write_text(json.dumps({"scenario": "storm"}))
    proc = run_cli("run", "storm", "--scale", "0.01", "--out-dir", str(out),
                   "--server-flag=--max-running-requests=0")
    assert proc.returncode == 1
    assert (out / "index.html").read_text() == "previous report"
