"""Instruction counts under callgrind: real runs of one case, and the determinism check."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.instructions import REPEAT_BOUND, NonDeterministic, _collect, case_names
from benchmarks.ratios import instruction_and_wall_ratios

ROOT = Path(__file__).resolve().parents[2]
needs_valgrind = pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")


def test_every_hot_path_has_a_case():
    assert {name.split("-")[0] for name in case_names()} == {"h1", "h2", "h3", "h4", "h5", "h6"}


@pytest.fixture(scope="module")
def h2_counts(tmp_path_factory):
    """The command line's JSON for the H2 content chunk (one callgrind process)."""
    out = tmp_path_factory.mktemp("instructions") / "counts.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.instructions", "--only", "^h2-content-chunk$",
                           "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "| h2-content-chunk |" in proc.stdout
    return json.loads(out.read_text())


@needs_valgrind
@pytest.mark.timeout(600)
def test_counts_see_the_forms_apart(h2_counts):
    assert set(h2_counts) == {"h2-content-chunk/legacy", "h2-content-chunk/optimized"}
    legacy, optimized = h2_counts["h2-content-chunk/legacy"], h2_counts["h2-content-chunk/optimized"]
    for result in (legacy, optimized):
        assert result["calls"] == 1_000 and result["spread"] <= REPEAT_BOUND
    # pydantic against msgspec: several times the instructions per chunk
    assert legacy["per_call"] > 3 * optimized["per_call"]


@needs_valgrind
@pytest.mark.timeout(600)
def test_the_same_code_in_a_new_process_counts_the_same(h2_counts):
    (name, instr, wall), = instruction_and_wall_ratios(only="^h2-content-chunk$")
    assert name == "h2-content-chunk"
    for form in ("legacy", "optimized"):
        # far inside the count gate's factor of 1.015
        assert abs(instr[form] / h2_counts[f"{name}/{form}"]["per_call"] - 1) < 0.002
        assert 0 < wall[form] < 1


def _dumps(tmp_path: Path, counts: list[int]) -> Path:
    out = tmp_path / "callgrind.out"
    for k, count in enumerate(counts, 1):
        Path(f"{out}.{k}").write_text(f"events: Ir\nsummary: {count}\ntotals: {count}\n")
    return out


def test_two_counts_further_apart_than_the_bound_fail_loudly(tmp_path):
    manifest = {"regions": [{"key": "h2-first-chunk/legacy", "calls": 10},
                            {"key": "h2-first-chunk/optimized", "calls": 10}], "unavailable": {}}
    out = _dumps(tmp_path, [1000, 1000, 1000, 1000 + int(1000 * REPEAT_BOUND) + 5])
    with pytest.raises(NonDeterministic, match="h2-first-chunk/optimized"):
        _collect(manifest, out)
    out = _dumps(tmp_path, [1000, 1002, 500, 500])
    results = _collect(manifest, out)
    assert results["h2-first-chunk/legacy"]["per_call"] == pytest.approx(100.1)
    assert results["h2-first-chunk/optimized"]["counts"] == [500, 500]
