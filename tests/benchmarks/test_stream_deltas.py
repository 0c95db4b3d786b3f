"""H6 stream deltas through the serving layer: concat vs offset."""

from __future__ import annotations

import pytest

from benchmarks.bench_stream_deltas import ENDPOINTS, TimeStreamDeltas, h6_stream
from tests.benchmarks.conftest import asv_params


@asv_params(TimeStreamDeltas)
def test_stream_deltas(bench, form, endpoint, num_tokens):
    workload = h6_stream(form, endpoint, num_tokens)
    try:
        assert bench(workload.run) > num_tokens
    finally:
        workload.close()


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_both_forms_stream_the_same_bytes(endpoint):
    sizes = []
    for form in ("legacy", "optimized"):
        workload = h6_stream(form, endpoint, 1_000)
        sizes.append(workload.run())
        workload.close()
    assert sizes[0] == sizes[1]
