"""Each plot renders a PNG from run outcomes."""

from __future__ import annotations

import base64
from types import SimpleNamespace

import pytest

from reportgen.plots import PLOTS
from reportgen.scenarios import SCENARIOS


def _outcomes():
    outcomes = []
    for i, run in enumerate(SCENARIOS["osl-variance"].runs(1.0)):
        outcomes.append(SimpleNamespace(
            run=run, result={"output_throughput": 100.0 + i, "completed": 10},
            derived={"itl_quantiles_ms": [1.0 + i] * 201},
            cpu_s={"http": 1.0 + i, "scheduler": 0.5, "detokenizer": 0.2},
            metrics={"num_prefill_steps": 3 + i}))
    return outcomes


@pytest.mark.parametrize("name", sorted(PLOTS))
def test_plot_is_a_png(name):
    png = base64.b64decode(PLOTS[name](_outcomes()))
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 2000
