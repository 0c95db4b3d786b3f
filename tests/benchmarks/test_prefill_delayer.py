"""H5 prefill delayer runs (DP-attention regime) on the virtual clock: deterministic figures.

Small sizes (ISL = OSL = 100) so that a broken workload or ``h5_regime`` fails the tests fast;
the benchmarks themselves run ISL = OSL = 1000.
"""

from __future__ import annotations

import json

import pytest

from benchmarks import h5_regime
from benchmarks.bench_prefill_delayer import TrackPrefillDelayer
from benchmarks.workloads import PrefillDelayerRun
from tests.benchmarks.conftest import asv_params

SMALL = dict(input_len=100, output_len=100)


@asv_params(TrackPrefillDelayer)
def test_prefill_delayer_run(bench, delayer, range_ratio, concurrency):
    workload = PrefillDelayerRun(delayer, range_ratio, concurrency, num_requests=2 * concurrency,
                                 **SMALL)
    result = bench(workload.run)
    assert result["output_tok_s"] > 0 and result["prefill_steps"] > 0
    assert workload.run() == result


def test_queue_trigger_is_what_the_workload_measures():
    """Range 0.8: the queue trigger groups back-fill prefills beyond the slot-only delayer."""
    steps = {mode: PrefillDelayerRun(mode, 0.8, 128, **SMALL).run()["prefill_steps"]
             for mode in ("off", "slot", "queue")}
    assert steps["queue"] < steps["slot"] < steps["off"]


def test_h5_regime_prints_one_json_row_per_run(capsys):
    argv = ["--concurrency", "8", "--prompts-per-client", "2", "--input-len", "40",
            "--output-len", "40", "--queue-min-ratios", "0.1,0.5"]
    assert h5_regime.main(argv) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["range_ratio"], r["delayer"], r.get("queue_min_ratio")) for r in rows] == [
        (rr, mode, ratio) for rr in (1.0, 0.8)
        for mode, ratio in (("off", None), ("slot", None), ("queue", 0.1), ("queue", 0.5))]
    for row in rows:
        assert row["concurrency"] == 8 and row["output_tok_s"] > 0 and row["prefill_steps"] > 0
        assert {"p99_decode_gap_ms", "sim_seconds"} <= set(row)


def test_h5_regime_refuses_unknown_delayer():
    with pytest.raises(SystemExit, match="unknown delayer"):
        h5_regime.main(["--delayers", "slot-only"])


@pytest.mark.parametrize("form", ["legacy", "optimized"])
def test_decide_sequence(bench, form):
    """The instruction-count workload of H5: ``decide`` over seeded passes of 4 DP ranks."""
    from benchmarks.workloads.decide import NUM_PASSES, DecideSequence

    workload = DecideSequence(form)
    allowed = bench(workload.run)
    assert 0 < allowed < NUM_PASSES
    assert workload.run() == allowed


def test_decide_sequence_holds_more_passes_with_the_queue_trigger():
    from benchmarks.workloads.decide import DecideSequence

    assert DecideSequence("optimized").run() < DecideSequence("legacy").run()
