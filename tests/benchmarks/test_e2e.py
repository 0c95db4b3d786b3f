"""End to end: server and loadgen on 127.0.0.1 (a few streams in the normal test run)."""

from __future__ import annotations

import pytest

from benchmarks.workloads import E2E_CONFIGS, e2e_run


@pytest.mark.parametrize("config", list(E2E_CONFIGS))
def test_e2e_run(bench, config):
    result = bench.pedantic(e2e_run, args=(config,), kwargs={"concurrency": 16, "output_len": 16},
                            rounds=1, iterations=1)
    assert result["completed"] == 16 and result["failed"] == 0
    assert result["output_throughput"] > 0
