"""The experiment harness end to end: a real server in a form, real loadgen, real readings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import Form, Load, Profiling, RunError, all_optimized, by_name, run_under_load
from harness.forms import FORM_NAMES, REGIMES
from harness.profiler import find_py_spy, read_stacks
from harness.run import PROCESSES, tokens_per_chunk

SMALL = Load(8, 8, 16, 8)
# NOTE: enough work that the HTTP process uses CPU clock ticks (10 ms) and py-spy samples even
# on a busy machine.
BUSY = Load(8, 32, 16, 32)


def test_a_run_reads_loadgen_cpu_and_metrics(tmp_path: Path):
    result = run_under_load(all_optimized(), BUSY, tmp_path, server_flags=("--sim-profile", "zero"))
    assert result.loadgen["completed"] == 32 and result.loadgen["failed"] == 0
    assert set(result.cpu_s) == set(PROCESSES) and result.cpu_s["http"] > 0
    generated = result.metrics.value("reference:generation_tokens_total")
    assert generated >= result.output_tokens == 32 * 32  # the warm-up request's tokens come first
    assert result.metrics.total("reference:num_requests_total", endpoint="chat", status="200") == 33
    assert 1.0 <= result.tokens_per_chunk <= 32.0
    assert result.http_cpu_us_per_token > 0
    assert json.loads((tmp_path / "all-optimized.json").read_text())["completed"] == 32
    assert (tmp_path / "all-optimized.server.log").exists()


def test_a_profiled_run_has_stacks_of_every_process(tmp_path: Path):
    profiling = Profiling(find_py_spy(), rate=1000)
    result = run_under_load(by_name("all-legacy"), BUSY, tmp_path, profiling=profiling,
                            server_flags=("--sim-profile", "zero"))
    assert set(result.profiles) == set(PROCESSES)
    assert sum(read_stacks(result.profiles["http"]).values()) > 0


def test_a_server_that_cannot_start_is_a_clear_error(tmp_path: Path):
    with pytest.raises(RunError, match="--no-such-flag") as info:
        run_under_load(Form("broken", ("--no-such-flag",)), SMALL, tmp_path)
    assert "server log tail" in str(info.value)


def test_tokens_per_chunk_counts_usage_over_content_chunks(tmp_path: Path):
    records = tmp_path / "r.jsonl"
    rows = [{"ok": True, "usage_completion_tokens": 12, "chunk_ms": [1, 2, 3]},
            {"ok": True, "usage_completion_tokens": 4, "chunk_ms": [1]},
            {"ok": False, "usage_completion_tokens": None, "chunk_ms": [1, 2]}]
    records.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert tokens_per_chunk(records) == 16 / 4


def test_form_names_are_known_and_unknown_ones_are_errors():
    assert by_name("all-legacy").flags == ("--all-legacy",)
    assert by_name("all-optimized").flags == ()
    for name in FORM_NAMES:
        assert by_name(name).name == name
    with pytest.raises(ValueError, match="unknown form"):
        by_name("h1-legacy-onl")
    assert by_name("H1-legacy-only").under("no-yield").name == "H1-legacy-only-no-yield"
    assert by_name("H1-legacy-only").under("yield").flags[-2:] == ("--ipc-recv", "yield")
    with pytest.raises(ValueError):
        all_optimized().under("sometimes")
    assert "pd-decode" in REGIMES
