"""The mergeable ITL sketch (measure/sketch.py) against exact percentiles, and in a summary."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.measure.metrics import latencies, summarize
from loadgen.measure.records import RequestRecord
from loadgen.measure.sketch import LogHistogram
from loadgen.plan.config import RunConfig

QS = [0, 1, 10, 25, 50, 75, 90, 99, 99.9, 100]


def _exact(values: np.ndarray) -> np.ndarray:
    # the order statistic the sketch approximates: rank floor(p/100 * (n-1))
    return np.percentile(values, QS, method="lower")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_percentiles_within_one_percent_of_exact_and_merging_adds_counts(seed):
    rng = np.random.default_rng(seed)
    # ITL-like: mostly ~20 ms, a long tail, and exact zeros (two events in one read)
    parts = [rng.lognormal(np.log(20), 0.5, 30_000), rng.pareto(1.5, 3_000) * 50, np.zeros(2_000),
             rng.uniform(1e-6, 1e-3, 500)]
    values = np.concatenate(parts)
    whole, merged = LogHistogram(), LogHistogram()
    whole.add(values)
    for part in parts:
        one = LogHistogram()
        one.add(part)
        merged.merge(one)
    np.testing.assert_array_equal(whole.counts, merged.counts)
    exact = _exact(values)
    for got in (whole.percentile(QS), merged.percentile(QS)):
        np.testing.assert_allclose(got, exact, rtol=0.01, atol=0)
    assert merged.size == values.size and merged.max == values.max()
    assert merged.mean() == pytest.approx(values.mean(), rel=1e-9)
    assert merged.std() == pytest.approx(values.std(), rel=1e-6)


def test_sketch_would_fail_a_coarser_bound():
    """The bound is not trivially loose: a 10% sketch misses 1% on the same data."""
    values = np.random.default_rng(5).lognormal(np.log(20), 0.5, 20_000)
    coarse = LogHistogram(alpha=0.10)
    coarse.add(values)
    error = np.abs(coarse.percentile(QS) / _exact(values) - 1)
    assert error.max() > 0.01 and error.max() <= 0.10


def test_summary_with_itl_sketch_agrees_with_the_exact_one():
    rng = np.random.default_rng(3)
    records = []
    for i in range(200):
        stamps = np.cumsum(rng.integers(0, 40_000_000, 64)) + 1_000_000_000
        records.append(RequestRecord(index=i, worker=0, intended_ns=0, start_ns=0, end_ns=int(stamps[-1]),
                                     first_token_ns=int(stamps[0]), chunk_ns=stamps.tolist(),
                                     chunk_tokens=[1.0] * 64, client_output_tokens=64))
    exact_cfg = RunConfig(concurrency=8, num_prompts=200)
    sketch_cfg = RunConfig(concurrency=8, num_prompts=200, itl_sketch=True)
    assert isinstance(latencies(sketch_cfg, records)["itl"], LogHistogram)
    exact, sketched = summarize(exact_cfg, records, []), summarize(sketch_cfg, records, [])
    assert exact["itl_percentiles"] == "exact" and sketched["itl_percentiles"].startswith("sketch")
    assert sketched["mean_itl_ms"] == pytest.approx(exact["mean_itl_ms"], rel=1e-9)
    assert sketched["max_itl_ms"] == exact["max_itl_ms"]
    # numpy interpolates between neighbours; with 12,600 dense samples they are within 1% too
    for key in ("median_itl_ms", "p90_itl_ms", "p99_itl_ms", "median_itl_per_token_ms"):
        assert sketched[key] == pytest.approx(exact[key], rel=0.011), key
    assert sketched["median_ttft_ms"] == exact["median_ttft_ms"]
