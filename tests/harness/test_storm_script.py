"""scripts/storm.py, the README's main job, end to end at a tiny size: it runs through the
harness, prints tokens per SSE chunk, and records provenance in its summary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness import provenance

STORM = Path(__file__).resolve().parents[2] / "scripts" / "storm.py"


def _storm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(STORM), *args], capture_output=True, text=True,
                          timeout=600)


def test_storm_runs_both_ipc_regimes_and_records_provenance(tmp_path: Path):
    proc = _storm("--concurrency", "8", "--output-len", "16", "--ipc-recv", "yield", "no-yield",
                  "--server-flag=--sim-profile=zero", "--regime", "h100-llama-8b",
                  "--out-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "output tokens per SSE chunk" in proc.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["runs"]) == {"all-legacy", "all-optimized", "all-legacy-no-yield",
                                    "all-optimized-no-yield"}
    assert all(run["requests completed"] == 8 for run in summary["runs"].values())
    assert all(run["output tokens per SSE chunk"] >= 1 for run in summary["runs"].values())
    assert provenance.is_fresh(summary["provenance"])


def test_storm_refuses_a_directory_it_did_not_write(tmp_path: Path):
    (tmp_path / "notes.md").write_text("mine")
    proc = _storm("--concurrency", "8", "--out-dir", str(tmp_path))
    assert proc.returncode == 2 and "not a directory of earlier storm results" in proc.stderr
    assert (tmp_path / "notes.md").read_text() == "mine"


def test_storm_refuses_an_unknown_form(tmp_path: Path):
    proc = _storm("--forms", "h1-legacy-onl", "--out-dir", str(tmp_path))
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
