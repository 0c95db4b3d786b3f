"""The client verdict's rules on known figures: with kernel stamps it judges the stamps, the queues,
the refills and the clock, and names its cause; with loop stamps the loop-lag rule stays."""

from __future__ import annotations

import pytest

from loadgen.measure.client_health import client_health
from loadgen.measure.records import RequestRecord, WorkerHealth
from loadgen.measure.sketch import LogHistogram
from loadgen.plan.config import RunConfig
from loadgen.run.clock import STEP_NS, KernelClock

MS = 1_000_000
CFG = RunConfig(concurrency=8, num_prompts=8)


def _health(source: str = "kernel", cpu_s: float = 2.0, wait_ms: float = 0.0, **kw) -> WorkerHealth:
    delays = LogHistogram()
    delays.add([0.1, 0.2, 5.0])
    ticks = 200  # 10 s of 50 ms ticks
    return WorkerHealth(worker=0, cpu_s=cpu_s, wall_s=10.0, loop_lag_ms=[1.0] * ticks, stamp_source=source,
                        client_delay=delays.to_dict() if source == "kernel" else None,
                        run_wait_ms=[wait_ms] * ticks, num_involuntary_switches=int(wait_ms * 10), **kw)


def _records(n: int = 100, uncertainty_ms: float = 0.0, inexact_every: int = 0, uncertain: int = 0,
             refill_ms: float = 0.0) -> list[RequestRecord]:
    out = []
    for i in range(n):
        start = i * 100 * MS
        is_inexact = bool(inexact_every) and i % inexact_every == 0
        out.append(RequestRecord(index=i, worker=0, intended_ns=start, start_ns=start, end_ns=start + 90 * MS,
                                 first_token_ns=start + 20 * MS, chunk_ns=[start + (20 + 7 * k) * MS for k in range(10)],
                                 ttft_uncertainty_ns=int(uncertainty_ms * MS) if is_inexact else 0,
                                 num_coalesced_events=uncertain, num_uncertain_events=uncertain,
                                 slot_freed_ns=start - int(refill_ms * MS) if i else None))
    return out


def _judge(health: WorkerHealth, records: list[RequestRecord], cfg: RunConfig = CFG) -> dict:
    return client_health(cfg, [health], [0.0] * len(records), len(records), records, median_ttft_ms=20.0)


def test_exact_kernel_stamps_on_a_busy_machine_are_trusted_and_the_wait_is_named():
    out = _judge(_health(wait_ms=20.0), _records())
    assert out["client_bound"] is False and out["stamp_source"] == "kernel"
    assert out["ttft_exact_share"] == 1.0 and out["coalesced_share"] == 0.0
    assert out["workers"][0]["run_wait_share"] == 0.4
    assert "the machine is busy" in out["client_health_notes"][0]
    assert out["client_health_notes"][0].endswith("latencies use kernel stamps and are unaffected")
    assert out["client_delay"]["reads"] == 3 and out["client_delay"]["max_ms"] == 5.0


def test_a_late_loop_alone_is_no_reason_with_kernel_stamps():
    h = _health(cpu_s=9.5)
    h.loop_lag_ms = [300.0] * 200
    out = _judge(h, _records())
    assert out["client_bound"] is False
    assert "used 95% of a core" in out["client_health_notes"][0]


def test_uncertain_ttft_stamps_are_a_reason_and_a_saturated_worker_the_cause():
    out = _judge(_health(cpu_s=9.8), _records(uncertainty_ms=30.0, inexact_every=2))
    assert out["client_bound"] is True
    assert out["client_bound_reasons"][0].startswith("TTFT stamps uncertain: p99 30.0 ms past the 2.0 ms")
    assert "50.0% of first tokens" in out["client_bound_reasons"][0]
    assert out["client_bound_cause"].startswith("worker 0 saturated its core (98%")


def test_events_that_may_be_late_are_a_reason_and_a_busy_machine_the_cause():
    out = _judge(_health(wait_ms=10.0), _records(uncertain=1))  # 10% of the events
    assert out["client_bound"] is True and "10.0% of events may be stamped" in out["client_bound_reasons"][0]
    assert out["client_bound_cause"].startswith("the machine is busy: worker 0 waited for a CPU held by other "
                                                "processes 20% of the time")


def test_a_full_receive_queue_a_late_refill_and_a_clock_step_are_reasons():
    h = _health(num_full_reads=3, num_window_full=2, max_queued_bytes=3 << 20, num_clock_steps=1,
                max_clock_step_ms=250.0)
    out = _judge(h, _records(refill_ms=50.0))
    text = " | ".join(out["client_bound_reasons"])
    assert "reading fell behind: 2 reads" in text and "3,072 KiB queued" in text
    assert "slots stood empty" in text and "refill lag p99 50.0 ms" in text
    assert "the realtime clock stepped 1 time(s) (max 250.0 ms)" in text
    assert out["refill"]["idle_share"] == 50 / (50 + 90)
    # NOTE: in rate mode a slot is not refilled on completion: there is no refill figure to judge.
    rate = RunConfig(request_rate=10.0, num_prompts=8)
    assert _judge(_health(), _records(refill_ms=50.0), rate)["refill"] is None


def test_loop_stamps_keep_the_loop_rule():
    h = _health(source="loop", cpu_s=9.5)
    out = _judge(h, _records())
    assert out["stamp_source"] == "loop" and out["client_delay"] is None
    assert out["client_bound"] is True and out["client_bound_reasons"] == ["worker 0 used 95% of a core"]


def test_the_clock_counts_a_step_of_the_realtime_clock():
    clock = KernelClock()
    clock.recheck()
    assert clock.num_steps == 0  # slewing moves the offset by microseconds, never a millisecond
    clock.offset_ns += 3 * STEP_NS  # as if CLOCK_REALTIME had been stepped back 3 ms since
    clock.recheck()
    assert clock.num_steps == 1 and clock.max_step_ns >= 3 * STEP_NS - STEP_NS // 10


def _loop_judged(lag_ms: float = 1.0, cpu_s: float = 2.0) -> dict:
    h = _health(source="loop", cpu_s=cpu_s)
    h.loop_lag_ms = [lag_ms] * 200
    return _judge(h, _records())


@pytest.mark.parametrize(("lag_ms", "is_bound"), [(19.99, False), (20.0, True), (20.01, True)])
def test_loop_lag_rule_is_bound_from_20_ms_inclusive(lag_ms, is_bound):
    out = _loop_judged(lag_ms=lag_ms)
    assert out["client_bound"] is is_bound, out
    assert out["client_bound_reasons"] == ([f"worker 0 event-loop lag p99 {lag_ms:.1f} ms"] if is_bound else [])


@pytest.mark.parametrize(("cpu_s", "is_bound"), [(8.99, False), (9.0, True), (9.01, True)])
def test_cpu_share_rule_is_bound_from_90_percent_inclusive(cpu_s, is_bound):
    out = _loop_judged(cpu_s=cpu_s)  # of a 10 s wall time
    assert out["client_bound"] is is_bound, out
    assert bool([r for r in out["client_bound_reasons"] if "of a core" in r]) is is_bound
