"""Growth exponents: the fit itself, and one quick pass of every family's fit."""

from __future__ import annotations

import math

import pytest

from benchmarks.bench_growth import TrackGrowth, growth_builders
from benchmarks.common import fit_exponent, growth_exponent
from tests.benchmarks.conftest import asv_params


@pytest.mark.parametrize("power", [1.0, 2.0])
def test_fit_exponent_recovers_a_power_law(power):
    sizes = [1_000, 4_000, 16_000]
    assert fit_exponent(sizes, [3e-9 * n**power for n in sizes]) == pytest.approx(power)


@asv_params(TrackGrowth)
def test_growth_exponent_is_finite(bench, hot_path, form):
    build, sizes = growth_builders(hot_path, form)
    exponent = bench.pedantic(growth_exponent, args=(build, sizes), kwargs={"repeat": 1, "min_time": 0.0},
                              rounds=1, iterations=1)
    assert math.isfinite(exponent)
