"""ITL quantiles from loadgen records, log-log fits, cost per request by output length."""

from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace

import pytest

from harness.forms import Form
from harness.load import Load
from reportgen.analysis import cost_by_length, from_records, loglog_slope, ratio
from reportgen.scenarios import Run


def test_itl_quantiles_from_records(tmp_path):
    path = tmp_path / "r.jsonl"
    rows = [{"ok": True, "chunk_ms": [0.0, 10.0, 30.0]}, {"ok": True, "chunk_ms": [5.0, 45.0]},
            {"ok": False, "chunk_ms": [0.0, 1000.0]}, {"ok": True, "chunk_ms": [1.0]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    derived = from_records(path)
    assert derived["num_itl"] == 3
    assert derived["itl_quantiles_ms"][0] == 10.0 and derived["itl_quantiles_ms"][-1] == 40.0


def test_loglog_slope_of_a_power_law():
    slope, intercept = loglog_slope([(n, 3 * n**2) for n in (100, 1000, 10000)])
    assert slope == pytest.approx(2.0) and 10**intercept == pytest.approx(3.0)
    assert loglog_slope([(100, 1.0)]) is None


def test_ratio_handles_missing_values():
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(None, 2.0) is None and ratio(1.0, 0) is None and ratio(float("nan"), 1.0) is None


def _outcome(form: str, output_len: int, http_cpu_s: float, sweep: bool):
    run = Run(Form(f"{form}-{output_len}"), Load(2, 2, 16, output_len), {"form": form, "sweep": sweep})
    return SimpleNamespace(run=run, result={"completed": 2}, cpu_s={"http": http_cpu_s},
                           stacks={"http": Counter()})


def test_cost_by_length_groups_sweep_and_main_runs_by_form():
    outcomes = [_outcome("legacy", 100, 0.2, True), _outcome("legacy", 200, 0.8, False),
                _outcome("only-one", 100, 1.0, False)]
    assert cost_by_length(outcomes) == {"legacy": [(100, 100.0), (200, 400.0)]}
