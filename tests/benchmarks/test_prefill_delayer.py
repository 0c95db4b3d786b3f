"""H5 prefill delayer runs on the virtual clock: deterministic figures."""

from __future__ import annotations

from benchmarks.bench_prefill_delayer import TrackPrefillDelayer
from benchmarks.workloads import PrefillDelayerRun
from tests.benchmarks.conftest import asv_params


@asv_params(TrackPrefillDelayer)
def test_prefill_delayer_run(bench, delayer, range_ratio, concurrency):
    workload = PrefillDelayerRun(delayer, range_ratio, concurrency)
    result = bench(workload.run)
    assert result["output_throughput"] > 0 and result["num_prefill_steps"] > 0
    assert workload.run() == result


def test_delayer_groups_the_back_fill_prefills():
    """Range ratio 0.8: without the delayer requests finish one by one and prefills fragment."""
    off = PrefillDelayerRun("off", 0.8, 16).run()["num_prefill_steps"]
    slot_only = PrefillDelayerRun("slot-only", 0.8, 16).run()["num_prefill_steps"]
    assert slot_only < off
