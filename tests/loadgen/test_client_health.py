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


def _sketch(values: list[float]) -> dict:
    s = LogHistogram()
    s.add(values)
    return s.to_dict()


def _exact_records() -> list[RequestRecord]:
    """100 requests of 10 events: three TTFTs uncertain (10, 20, 40 ms), 10 of the 1,000 events
    uncertain (1%, the rule's bound), slots refilled 1 ms late but for one late 80 ms and one early."""
    out = []
    for i in range(100):
        start = i * 100 * MS
        refill = {0: None, 98: -5 * MS, 99: 80 * MS}.get(i, 1 * MS)
        out.append(RequestRecord(index=i, worker=3, intended_ns=start, start_ns=start, end_ns=start + 90 * MS,
                                 first_token_ns=start + 20 * MS, chunk_ns=[start + (20 + 7 * k) * MS for k in range(10)],
                                 ttft_uncertainty_ns={97: 10 * MS, 98: 20 * MS, 99: 40 * MS}.get(i, 0),
                                 num_coalesced_events=2 if i < 10 else 0, num_uncertain_events=1 if i < 10 else 0,
                                 slot_freed_ns=None if refill is None else start - refill))
    return out


def test_every_figure_of_a_kernel_stamped_run_on_two_ray_hosts():
    """Each figure of the verdict from known stamps, reads and ticks (a figure read from the wrong
    field, percentile or sum fails here), and the reasons, note and cause word for word."""
    busy = WorkerHealth(worker=3, cpu_s=9.5, wall_s=10.0, loop_lag_ms=[60.0] * 9 + [100.0] + [1.0] * 186 + [30.0, 30.0, 40.0, 50.0],
                        lag_at_s=[i / 20 for i in range(200)], full_at_s=2.0, limit=8, host="10.0.0.1", node_id="n1",
                        stamp_source="kernel", client_delay=_sketch([0.1, 0.2, 5.0]), num_events=1000,
                        parse_cpu_s=0.5, sys_cpu_s=1.5, num_sleeps=300, run_wait_ms=[0.0] * 195 + [5.0] * 4 + [25.0],
                        num_involuntary_switches=7, num_unstamped_reads=2, num_stamp_after_read=1, num_clock_steps=1,
                        max_clock_step_ms=4.0, num_full_reads=3, max_queued_bytes=2048)
    idle = WorkerHealth(worker=4, cpu_s=1.0, wall_s=10.0, loop_lag_ms=[1.0] * 200, limit=2, host="10.0.0.2",
                        node_id="n2", stamp_source="kernel", client_delay=_sketch([1.0, 2.0]), num_clock_steps=2,
                        max_clock_step_ms=6.0, num_full_reads=1, max_queued_bytes=4096)
    out = client_health(CFG, [busy, idle], [1.0, 2.0, 3.0, 10.0], 100, _exact_records(), median_ttft_ms=100.0)
    reference = LogHistogram()
    reference.add([0.1, 0.2, 5.0, 1.0, 2.0])
    p50, p99 = reference.percentile([50, 99])
    assert out.pop("client_delay") == {"reads": 5, "mean_ms": pytest.approx(1.66), "p50_ms": p50, "p99_ms": p99,
                                       "max_ms": 5.0}
    assert out.pop("workers") == [
        {"worker": 3, "cpu_s": 9.5, "wall_s": 10.0, "cpu_share": 0.95, "stamp_source": "kernel",
         "loop_lag_p50_ms": 1.0, "loop_lag_p99_ms": pytest.approx(60.0), "loop_lag_max_ms": 100.0,
         "loop_lag_steady_p99_ms": pytest.approx(36.2), "startup_burst_s": 3.0, "num_events": 1000,
         "parse_cpu_s": 0.5, "read_cpu_us_per_event": 9500.0, "parse_cpu_us_per_event": 500.0,
         "cpu_us_per_event": 10000.0, "sys_cpu_s": 1.5, "sleeps_per_s": 30.0, "run_wait_share": 0.0045,
         "run_wait_p99_ms": pytest.approx(5.0), "involuntary_switches": 7, "client_bound": False,
         "host": "10.0.0.1", "node_id": "n1", "streams": 8},
        {"worker": 4, "cpu_s": 1.0, "wall_s": 10.0, "cpu_share": 0.1, "stamp_source": "kernel",
         "loop_lag_p50_ms": 1.0, "loop_lag_p99_ms": 1.0, "loop_lag_max_ms": 1.0, "loop_lag_steady_p99_ms": None,
         "startup_burst_s": None, "num_events": 0, "parse_cpu_s": 0.0, "read_cpu_us_per_event": None,
         "parse_cpu_us_per_event": None, "cpu_us_per_event": None, "sys_cpu_s": 0.0, "sleeps_per_s": 0.0,
         "run_wait_share": None, "run_wait_p99_ms": None, "involuntary_switches": 0, "client_bound": False,
         "host": "10.0.0.2", "node_id": "n2", "streams": 2}]
    assert out == {
        "client_bound": True,
        "client_bound_reasons": [
            "TTFT stamps uncertain: p99 20.2 ms past the 5.0 ms tolerance (3.0% of first tokens shared a read "
            "with later bytes)",
            "the realtime clock stepped 3 time(s) (max 6.0 ms): kernel stamps near a step are off by up to that"],
        "client_bound_cause": "worker 3 on 10.0.0.1 saturated its core (95%, 10000.0 µs per event): add workers "
                              "(--workers) or cores",
        "client_health_notes": ["worker 3 on 10.0.0.1 used 95% of a core (event-loop lag p99 60.0 ms); its "
                                "latencies come from kernel stamps"],
        "stamp_source": "kernel", "coalesced_share": 0.02, "uncertain_event_share": 0.01,
        "ttft_exact_share": 0.97, "ttft_uncertainty_p99_ms": pytest.approx(20.2), "ttft_uncertainty_max_ms": 40.0,
        "ttft_tolerance_ms": 5.0, "clock_steps": 3, "max_clock_step_ms": 6.0, "stamps_after_read": 1,
        "unstamped_reads": 2,
        "drain": {"full_reads": 4, "window_full_reads": 0, "max_queued_bytes": 4096},
        "refill": {"refill_lag_p50_ms": 1.0, "refill_lag_p99_ms": pytest.approx(1 + 0.02 * 79),
                   "idle_share": pytest.approx(177 / (177 + 99 * 90))},
        "hosts": [{"host": "10.0.0.1", "node_id": "n1", "workers": [3], "streams": 8, "client_bound": False},
                  {"host": "10.0.0.2", "node_id": "n2", "workers": [4], "streams": 2, "client_bound": False}],
        "mean_send_lag_ms": 4.0, "p99_send_lag_ms": pytest.approx(3 + 0.97 * 7), "max_send_lag_ms": 10.0}


def _loop_worker(worker: int, cpu_s: float, lag_ms: float, node: str = "", wait_ms: float = 0.0, **kw) -> WorkerHealth:
    return WorkerHealth(worker=worker, cpu_s=cpu_s, wall_s=10.0, loop_lag_ms=[lag_ms] * 200, limit=4, host=node and f"host-{node}",
                        node_id=node, run_wait_ms=[wait_ms] * 200, num_involuntary_switches=worker, **kw)


def test_a_host_is_client_bound_when_any_of_its_workers_is_and_counts_its_streams():
    health = [_loop_worker(0, 9.5, 1.0, "n1"), _loop_worker(1, 1.0, 1.0, "n1"), _loop_worker(2, 1.0, 1.0, "n2")]
    out = client_health(CFG, health, [0.0], 10, _records(10))
    assert out["hosts"] == [
        {"host": "host-n1", "node_id": "n1", "workers": [0, 1], "streams": 8, "client_bound": True},
        {"host": "host-n2", "node_id": "n2", "workers": [2], "streams": 4, "client_bound": False}]
    assert [w["client_bound"] for w in out["workers"]] == [True, False, False]
    assert out["client_bound_reasons"] == ["worker 0 on host-n1 used 95% of a core"]
    assert out["client_bound_cause"] == ("worker 0 on host-n1 saturated its core (95%, 0.0 µs per event): add "
                                         "workers (--workers) or cores")
    assert "hosts" not in client_health(CFG, [_loop_worker(0, 9.5, 1.0)], [0.0], 10, _records(10))


def test_the_cause_of_a_late_loop_names_the_latest_worker_and_a_busy_machine_every_waiting_one():
    late = client_health(CFG, [_loop_worker(0, 1.0, 25.0), _loop_worker(1, 2.0, 30.0)], [0.0], 10, _records(10))
    assert late["client_bound_reasons"] == ["worker 0 event-loop lag p99 25.0 ms", "worker 1 event-loop lag p99 30.0 ms"]
    assert late["client_bound_cause"] == ("worker 1's event loop fell behind (lag p99 30.0 ms) at 20% of a core and "
                                          "no measured wait for a CPU")
    health = [_loop_worker(0, 9.5, 1.0, wait_ms=5.0), _loop_worker(1, 1.0, 1.0, wait_ms=6.0), _loop_worker(2, 1.0, 1.0)]
    busy = client_health(CFG, health, [0.0], 10, _records(10))
    assert busy["client_bound_cause"] == (
        "the machine is busy: worker 0 waited for a CPU held by other processes 10% of the time (p99 5.0 ms per 50 ms "
        "tick, 0 preemptions) while using 95% of a core; the machine is busy: worker 1 waited for a CPU held by other "
        "processes 12% of the time (p99 6.0 ms per 50 ms tick, 1 preemptions) while using 10% of a core")
    # not bound: with loop stamps the busy machine is a note without the kernel stamps' reassurance
    quiet = client_health(CFG, health[1:], [0.0], 10, _records(10))
    assert quiet["client_bound"] is False and quiet["client_bound_cause"] is None
    assert quiet["client_health_notes"] == [busy["client_bound_cause"].split("; ")[1]]


def test_rate_mode_send_lag_is_a_reason_from_20_ms_inclusive_with_no_worker_to_blame():
    rate = RunConfig(request_rate=10.0, num_prompts=8)
    out = client_health(rate, [], [20.0] * 4, 4)
    assert out["client_bound"] is True and out["client_bound_reasons"] == ["send lag p99 20.0 ms"]
    assert out["client_bound_cause"] == "unknown" and out["stamp_source"] == "loop" and "hosts" not in out
    assert out["client_delay"] is None and out["refill"] is None and out["clock_steps"] == 0
    assert out["drain"] == {"full_reads": 0, "window_full_reads": 0, "max_queued_bytes": 0}
    assert client_health(rate, [], [19.99] * 4, 4)["client_bound"] is False
    assert client_health(CFG, [], [30.0] * 4, 4)["client_bound"] is False  # concurrency mode: no send schedule


def test_stamp_source_of_a_mixed_client_and_steady_lag_from_its_twentieth_sample():
    kernel, loop = _health("kernel"), _health("loop")
    assert client_health(CFG, [kernel, loop], [0.0], 1)["stamp_source"] == "mixed"
    assert client_health(CFG, [kernel, kernel], [0.0], 1)["stamp_source"] == "kernel"
    h = _loop_worker(0, 1.0, 1.0, lag_at_s=[i / 20 for i in range(41)], full_at_s=0.0)
    h.loop_lag_ms = [1.0] * 41
    w = client_health(CFG, [h], [0.0], 1)["workers"][0]
    assert (w["loop_lag_steady_p99_ms"], w["startup_burst_s"]) == (1.0, 1.0)  # 20 samples after 1.0 s
    h.lag_at_s, h.loop_lag_ms = h.lag_at_s[:-1], h.loop_lag_ms[:-1]
    assert client_health(CFG, [h], [0.0], 1)["workers"][0]["loop_lag_steady_p99_ms"] is None  # 19
    h.lag_at_s = h.lag_at_s[:-1]  # stamps that do not match the samples: no steady state
    assert client_health(CFG, [h], [0.0], 1)["workers"][0]["startup_burst_s"] is None


def test_figures_of_a_worker_with_no_samples_no_wall_time_or_half_a_second():
    bare = WorkerHealth(worker=0, cpu_s=0.0, wall_s=0.0, loop_lag_ms=[], num_sleeps=5, run_wait_ms=[3.0])
    out = client_health(CFG, [bare], [], 1)
    w = out["workers"][0]
    assert (w["loop_lag_p50_ms"], w["loop_lag_p99_ms"], w["loop_lag_max_ms"]) == (0.0, 0.0, 0.0)
    assert (w["sleeps_per_s"], w["run_wait_share"], w["run_wait_p99_ms"]) == (0.0, None, 3.0)
    assert (out["mean_send_lag_ms"], out["p99_send_lag_ms"], out["max_send_lag_ms"]) == (0.0, 0.0, 0.0)
    assert (out["ttft_exact_share"], out["client_delay"], out["client_health_notes"]) == (None, None, [])
    half = WorkerHealth(worker=0, cpu_s=0.0, wall_s=0.5, loop_lag_ms=[1.0], num_sleeps=5, run_wait_ms=[3.0])
    w = client_health(CFG, [half], [0.0], 1)["workers"][0]
    assert (w["sleeps_per_s"], w["run_wait_share"]) == (10.0, 0.006)


def test_an_empty_delay_sketch_is_no_figure_and_the_median_is_the_50th_percentile():
    empty = _health()
    empty.client_delay = LogHistogram().to_dict()
    assert client_health(CFG, [empty], [0.0], 1)["client_delay"] is None
    halves = _health()
    sketch = LogHistogram()
    sketch.add([1.0] * 50 + [100.0] * 50)
    halves.client_delay = sketch.to_dict()
    delay = client_health(CFG, [halves], [0.0], 1)["client_delay"]
    assert delay["p50_ms"] == pytest.approx(1.0, rel=0.02) and delay["p99_ms"] == pytest.approx(100.0, rel=0.02)


def _record(start_ms: float, busy_ms: float, refill_ms: float | None, uncertainty_ms: float | None = 0.0) -> RequestRecord:
    start = int(start_ms * MS)
    return RequestRecord(index=0, worker=0, intended_ns=start, start_ns=start, end_ns=start + int(busy_ms * MS),
                         first_token_ns=start, chunk_ns=[start],
                         ttft_uncertainty_ns=None if uncertainty_ms is None else int(uncertainty_ms * MS),
                         slot_freed_ns=None if refill_ms is None else start - int(refill_ms * MS))


def test_refill_figures_clip_early_slots_and_judge_idle_share_past_5_percent_exclusive():
    early = [_record(100.0 * i, 90.0, -3.0) for i in range(3)]  # sent before the slot was freed
    assert client_health(CFG, [_health()], [0.0], 3, early)["refill"] == {
        "refill_lag_p50_ms": 0.0, "refill_lag_p99_ms": 0.0, "idle_share": 0.0}
    instant = [_record(0.0, 0.0, 5.0)]
    assert client_health(CFG, [_health()], [0.0], 1, instant)["refill"]["idle_share"] == 0.0
    short = [_record(0.0, 0.5, 0.5)]
    assert client_health(CFG, [_health()], [0.0], 1, short)["refill"]["idle_share"] == 0.5
    edge = client_health(CFG, [_health()], [0.0], 1, [_record(0.0, 95.0, 5.0)])  # 5 / (5 + 95)
    assert edge["refill"]["idle_share"] == 0.05 and edge["client_bound"] is False
    past = client_health(CFG, [_health()], [0.0], 1, [_record(0.0, 94.0, 6.0)])
    assert past["client_bound_reasons"] == [
        "slots stood empty 6.0% of the time waiting for the client's next request (refill lag p99 6.0 ms): the "
        "server saw less than the asked concurrency"]


def test_kernel_reasons_word_for_word_and_ttft_judged_past_its_tolerance_exclusive():
    at_tolerance = [_record(100.0 * i, 90.0, None, 5.0) for i in range(3)]  # 5 ms: 5% of a 100 ms TTFT
    out = client_health(CFG, [_health()], [0.0], 3, at_tolerance, median_ttft_ms=100.0)
    assert out["client_bound"] is False and out["ttft_uncertainty_p99_ms"] == 5.0
    h = _health(num_window_full=2, max_queued_bytes=3 << 20)
    records = _records(uncertain=1)
    out = client_health(CFG, [h], [0.0] * 100, 100, records, median_ttft_ms=20.0)
    assert out["client_bound_reasons"] == [
        "10.0% of events may be stamped more than 2 ms late (each shared a read with later bytes): ITL percentiles "
        "are not the server's",
        "reading fell behind: 2 reads found the receive queue at half its buffer or more (max 3,072 KiB queued): "
        "the server's writes may have stalled"]
    assert client_health(CFG, [], [0.0], 1)["max_clock_step_ms"] == 0.0


def test_the_cause_names_every_saturated_worker_from_90_percent_inclusive():
    health = [_loop_worker(0, 9.0, 1.0), _loop_worker(1, 9.5, 1.0)]
    assert client_health(CFG, health, [0.0], 1)["client_bound_cause"] == (
        "worker 0 saturated its core (90%, 0.0 µs per event): add workers (--workers) or cores; "
        "worker 1 saturated its core (95%, 0.0 µs per event): add workers (--workers) or cores")
    kernel = _health("kernel", cpu_s=9.0)
    assert client_health(CFG, [kernel], [0.0], 1)["client_health_notes"][0].startswith("worker 0 used 90% of a core")


@pytest.mark.parametrize(("burst_ms", "steady_ms", "is_note"), [(20.0, 19.0, True), (25.0, 20.0, False)])
def test_start_up_lag_from_20_ms_is_a_note_while_the_steady_state_stays_under_20_ms(burst_ms, steady_ms, is_note):
    h = _loop_worker(0, 1.0, steady_ms, lag_at_s=[i / 20 for i in range(200)], full_at_s=1.0)
    h.loop_lag_ms = [burst_ms] * 40 + [steady_ms] * 160
    out = client_health(CFG, [h], [0.0], 1)
    if is_note:
        assert out["client_bound"] is False and out["client_health_notes"] == [
            "worker 0 event-loop lag p99 20.0 ms came from the start-up burst of 4 streams (first 2.0 s); steady "
            "state p99 19.0 ms (--ramp-up spreads the start)"]
    else:
        assert out["client_bound_reasons"] == ["worker 0 event-loop lag p99 25.0 ms (steady state after 2.0 s: 20.0 ms)"]
