"""Summary arithmetic on recorded timestamps (no timing involved): TTFT, ITL, TPOT, E2E, throughput,
peaks, and the client-bound verdict."""

from __future__ import annotations

import pytest

from loadgen.measure.metrics import summarize
from loadgen.measure.records import RequestRecord, WorkerHealth
from loadgen.plan.config import RunConfig

MS = 1_000_000


def _rec(index: int, start_ms: float, chunks_ms: list[float], end_ms: float, usage: int | None = None):
    chunks = [int(t * MS) for t in chunks_ms]
    return RequestRecord(index=index, worker=0, intended_ns=int(start_ms * MS), start_ns=int(start_ms * MS),
                         end_ns=int(end_ms * MS), first_token_ns=chunks[0], chunk_ns=chunks,
                         chunk_tokens=[1.0] * len(chunks), client_output_tokens=len(chunks),
                         usage_completion_tokens=usage, input_len=10)


def _health(cpu_s: float = 0.1, wall_s: float = 1.0) -> list[WorkerHealth]:
    return [WorkerHealth(worker=0, cpu_s=cpu_s, wall_s=wall_s, loop_lag_ms=[0.1, 0.2])]


def test_latencies_from_recorded_stamps():
    records = [
        _rec(0, 0, [30, 50, 70, 90], 91),     # TTFT 30, gaps 20 20 20
        _rec(1, 10, [50, 60, 100], 100),      # TTFT 40, gaps 10 40
        _rec(2, 20, [45], 50),                # TTFT 25, one token
    ]
    s = summarize(RunConfig(concurrency=4, num_prompts=3), records, _health())
    assert s["median_ttft_ms"] == pytest.approx(30.0)
    assert s["mean_ttft_ms"] == pytest.approx(95 / 3)
    assert s["mean_itl_ms"] == pytest.approx(110 / 5) and s["median_itl_ms"] == pytest.approx(20.0)
    assert s["mean_tpot_ms"] == pytest.approx((60 / 3 + 50 / 2) / 2)
    assert s["mean_e2e_latency_ms"] == pytest.approx((91 + 90 + 30) / 3)
    assert s["duration"] == pytest.approx(0.1)
    assert s["total_output_tokens"] == 8 and s["output_throughput"] == pytest.approx(80.0)
    assert s["max_concurrent_requests"] == 3
    assert s["client_bound"] is False


def test_usage_counts_win_over_client_counts_and_their_difference_is_reported():
    records = [_rec(0, 0, [10, 20], 30, usage=3)]  # e.g. the EOS token was counted but not sent
    s = summarize(RunConfig(concurrency=1, num_prompts=1), records, _health())
    assert (s["total_output_tokens"], s["total_output_tokens_client"]) == (3, 2)
    assert s["output_tokens_usage_minus_client"] == 1 and s["output_tokens_source"] == "usage"
    assert s["mean_tpot_ms"] == pytest.approx(10 / 2)


def test_a_run_with_no_success_is_not_judged_for_client_health():
    failed = RequestRecord(index=0, worker=0, intended_ns=0, start_ns=0, end_ns=MS,
                           error_class="connection", error_message="refused")
    s = summarize(RunConfig(concurrency=1, num_prompts=1), [failed], _health(cpu_s=1.01, wall_s=1.0))
    assert s["client_bound"] is None
    assert s["client_health"]["client_bound_reasons"] == ["not judged: no request succeeded"]
    busy = summarize(RunConfig(concurrency=1, num_prompts=1), [_rec(0, 0, [1], 2)], _health(1.01, 1.0))
    assert busy["client_bound"] is True


def test_start_up_burst_lag_is_a_note_and_steady_lag_a_reason():
    from loadgen.measure.metrics import client_health
    from loadgen.plan.config import RunConfig

    cfg = RunConfig(concurrency=2048, num_prompts=1)
    at = [0.05 * i for i in range(200)]
    burst = [300.0 if t < 1.5 else 1.0 for t in at]
    h = WorkerHealth(worker=0, cpu_s=2.0, wall_s=10.0, loop_lag_ms=burst, lag_at_s=at, full_at_s=1.2, limit=2048)
    out = client_health(cfg, [h], [0.0])
    assert out["client_bound"] is False and "start-up burst of 2048 streams" in out["client_health_notes"][0]
    assert out["workers"][0]["loop_lag_steady_p99_ms"] == 1.0
    steady = [300.0 if i % 10 == 0 else 1.0 for i in range(200)]
    h = WorkerHealth(worker=0, cpu_s=2.0, wall_s=10.0, loop_lag_ms=steady, lag_at_s=at, full_at_s=1.2, limit=2048)
    out = client_health(cfg, [h], [0.0])
    assert out["client_bound"] is True and "steady state after 2.2 s" in out["client_bound_reasons"][0]
    short = WorkerHealth(worker=0, cpu_s=0.1, wall_s=1.0, loop_lag_ms=burst[:30], lag_at_s=at[:30], full_at_s=1.2)
    assert client_health(cfg, [short], [0.0])["client_bound"] is True  # no steady state to judge: full window


def test_goodput_counts_requests_within_every_bound_inclusive():
    from loadgen.measure.metrics import _goodput
    from loadgen.plan.config import SLO

    cfg = RunConfig(concurrency=4, num_prompts=4, slo=SLO(ttft_ms=20.0, tpot_ms=10.0, e2e_ms=100.0))
    at_bounds = _rec(0, 0, [20, 50, 100], 100)            # TTFT 20, TPOT (100-20)/2 = 40 > 10
    assert _goodput(cfg, [at_bounds], 2.0) == 0.0
    good = _rec(1, 0, [20] + [20 + 10 * k for k in range(1, 9)], 100)  # TTFT 20, TPOT 80/8 = 10, E2E 100
    assert _goodput(cfg, [good], 2.0) == 0.5
    late = _rec(2, 0, [20.001] + [20 + 10 * k for k in range(1, 9)], 100)
    slow = _rec(3, 0, [20] + [20 + 10 * k for k in range(1, 9)], 100.001)
    assert _goodput(cfg, [good, late, slow], 1.0) == 1.0
    one = _rec(4, 0, [100], 100)  # one token: TPOT 0; TTFT 100 > 20
    no_first = RequestRecord(index=5, worker=0, intended_ns=0, start_ns=0, end_ns=15 * MS, client_output_tokens=1)
    assert _goodput(RunConfig(concurrency=1, num_prompts=1, slo=SLO(e2e_ms=15.0)), [one, no_first], 1.0) == 1.0
    assert _goodput(RunConfig(concurrency=1, num_prompts=1, slo=SLO(ttft_ms=15.0)), [no_first], 1.0) == 1.0
    assert _goodput(cfg, [good], 0.0) == 0.0
    assert _goodput(RunConfig(concurrency=1, num_prompts=1), [good], 1.0) is None
    rate = RunConfig(request_rate=10.0, num_prompts=1, slo=SLO(ttft_ms=20.0))
    behind = _rec(6, 5, [21], 30)
    behind.intended_ns = 0  # sent 5 ms late: in rate mode latency counts from the intended start
    assert _goodput(rate, [behind], 1.0) == 0.0


def test_peaks_bucket_tokens_per_second_and_count_an_end_before_a_start_at_the_same_time():
    from loadgen.measure.metrics import _peaks

    a = _rec(0, 0, [100, 900, 1100], 1200)
    b = _rec(1, 1200, [1300, 1400, 1500], 2500)  # starts when a ends: never both in flight
    b.chunk_tokens = [1.0, 2.0, 3.0]
    assert _peaks([a, b], 0) == {"max_output_tokens_per_s": 7.0, "max_concurrent_requests": 1}
    failed = RequestRecord(index=2, worker=0, intended_ns=0, start_ns=1100 * MS, end_ns=1300 * MS,
                           error_class="timeout")
    assert _peaks([a, b, failed], 0) == {"max_output_tokens_per_s": 7.0, "max_concurrent_requests": 2}
    assert _peaks([a], 500 * MS) == {"max_output_tokens_per_s": 2.0, "max_concurrent_requests": 1}
    assert _peaks([], 0) == {"max_output_tokens_per_s": 0.0, "max_concurrent_requests": 0}


def test_tpot_itl_and_distributions_on_known_stamps():
    from loadgen.measure.metrics import distribution, itl_ms, pct_key, tpot_ms

    rec = _rec(0, 0, [10, 30, 70], 70, usage=5)
    assert tpot_ms(rec) == (70 - 10) / 4 and itl_ms(rec).tolist() == [20.0, 40.0]
    assert tpot_ms(_rec(1, 0, [10], 70, usage=5)) is None and tpot_ms(_rec(2, 0, [10, 20], 20, usage=1)) is None
    assert (pct_key(99.0), pct_key(99.9), pct_key(50)) == ("p99", "p99.9", "p50")
    assert distribution("x", [1.0, 2.0, 3.0, 4.0], [99.9]) == {
        "mean_x_ms": 2.5, "median_x_ms": 2.5, "std_x_ms": pytest.approx(1.118034), "p99.9_x_ms": pytest.approx(3.997),
        "max_x_ms": 4.0}
    assert distribution("x", [], [99.0]) == {"mean_x_ms": None, "median_x_ms": None, "std_x_ms": None,
                                             "p99_x_ms": None}


def test_ttft_split_parts_sum_to_each_ttft():
    from loadgen.measure.metrics import ttft_split

    rec = _rec(0, 0, [30], 40)
    rec.server_first_output_ms, rec.server_queue_ms, rec.server_prefill_ms, rec.server_decode_ms = 25.0, 5.0, 12.0, 9.0
    bare = _rec(1, 0, [30], 40)  # no server timing: left out
    stream = ttft_split(RunConfig(concurrency=1, num_prompts=1), [rec, bare])
    parts = {"client_network": 5.0, "queue": 5.0, "prefill": 12.0, "decode": 0.0, "server_other": 8.0}
    assert stream == {"requests": 1, "mean_ms": parts, "p50_ms": parts, "p99_ms": parts}
    whole = ttft_split(RunConfig(concurrency=1, num_prompts=1, stream=False), [rec])
    assert whole["mean_ms"] == {**parts, "decode": 9.0, "server_other": -1.0}
    assert ttft_split(RunConfig(concurrency=1, num_prompts=1), [bare]) is None


def test_per_turn_rows_and_errors_by_class():
    from loadgen.measure.metrics import _errors, _per_event_source, per_turn

    cfg = RunConfig(concurrency=1, num_prompts=4)
    recs = [_rec(i, 0, [10 * (i + 1)], 50) for i in range(4)]
    for r, turn in zip(recs, (0, 0, 1, 1), strict=True):
        r.turn, r.usage_prompt_tokens = turn, 100 * (turn + 1)
    recs[3].error_class, recs[3].error_message = "timeout", "first"
    recs.append(RequestRecord(index=4, worker=0, intended_ns=0, start_ns=0, end_ns=0, error_class="timeout",
                              error_message="second"))
    recs.append(RequestRecord(index=5, worker=0, intended_ns=0, start_ns=0, end_ns=0, error_class="http_500",
                              error_message="boom"))
    assert per_turn(cfg, recs) == [
        {"turn": 1, "count": 2, "failed": 0, "mean_ttft_ms": 15.0, "p50_ttft_ms": 15.0, "p99_ttft_ms": 19.9,
         "mean_input_tokens": 100.0},
        {"turn": 2, "count": 1, "failed": 1, "mean_ttft_ms": 30.0, "p50_ttft_ms": 30.0, "p99_ttft_ms": 30.0,
         "mean_input_tokens": 200.0}]
    assert per_turn(cfg, recs[4:]) is None
    assert _errors(recs) == {"http_500": {"count": 1, "example": "boom"}, "timeout": {"count": 2, "example": "first"}}
    recs[1].chunk_token_source = "usage deltas"
    assert _per_event_source(recs[:1]) == recs[0].chunk_token_source and _per_event_source(recs[:2]) == "mixed"
    assert _per_event_source([]) is None


def _later(rec: RequestRecord, ms: float = 1000.0) -> RequestRecord:
    """The record with every stamp `ms` later: figures must not depend on where the clock starts."""
    d = int(ms * MS)
    rec.intended_ns, rec.start_ns, rec.end_ns = rec.intended_ns + d, rec.start_ns + d, rec.end_ns + d
    rec.first_token_ns = None if rec.first_token_ns is None else rec.first_token_ns + d
    rec.chunk_ns = [t + d for t in rec.chunk_ns]
    return rec


def test_summary_figures_of_a_known_run_away_from_clock_zero():
    from loadgen.plan.config import SLO

    cfg = RunConfig(request_rate=10.0, num_prompts=3, slo=SLO(ttft_ms=25.0))
    a = _later(_rec(0, 0, [20, 40, 60], 100, usage=4))
    b = _later(_rec(1, 100, [130, 150], 200))
    a.usage_prompt_tokens, b.retokenized_output_tokens, a.retokenized_output_tokens = 12, 2, 3
    a.num_empty_text_events = 1
    a.start_ns += 2 * MS  # sent 2 ms after its intended start
    a.server_first_output_ms, a.server_queue_ms, a.server_prefill_ms = 10.0, 2.0, 3.0
    a.turn, b.turn = 0, 1
    lost = _later(RequestRecord(index=2, worker=0, intended_ns=200 * MS, start_ns=200 * MS, end_ns=500 * MS,
                                error_class="timeout", error_message="late", input_len=7, turn=1))
    s = summarize(cfg, [a, b, lost], _health())
    assert (s["duration"], s["completed"], s["failed"]) == (0.5, 2, 1)
    assert (s["total_input_tokens"], s["total_input_tokens_dataset"]) == (22, 20)  # usage 12 for a, 10 for b
    assert (s["total_output_tokens"], s["total_output_tokens_client"], s["output_tokens_usage_minus_client"],
            s["output_tokens_source"]) == (6, 5, 1, "usage")
    assert (s["total_output_tokens_retokenized"], s["token_event_rule"], s["num_empty_text_events"]) == (5, "loadgen", 1)
    assert s["output_tokens_per_event_source"] == "one per content event"
    assert (s["request_throughput"], s["input_throughput"], s["output_throughput"], s["total_throughput"]) == (
        4.0, 44.0, 12.0, 56.0)
    assert s["concurrency"] == pytest.approx((0.1 + 0.1) / 0.5)
    assert s["request_goodput"] == 2.0  # TTFT 20 and 30 from the intended starts: one within 25 ms
    assert s["mean_send_lag_ms"] == pytest.approx(2 / 3) and s["max_send_lag_ms"] == 2.0
    assert s["ttft_split"]["requests"] == 1 and s["ttft_split"]["mean_ms"]["client_network"] == 8.0
    assert [t["count"] for t in s["per_turn"]] == [1, 1] and s["per_turn"][1]["failed"] == 1
    assert s["errors"] == {"timeout": {"count": 1, "example": "late"}}
    assert s["itl_percentiles"] == "exact" and s["client_bound"] is s["client_health"]["client_bound"]
    assert s["client_health"]["mean_send_lag_ms"] == s["mean_send_lag_ms"]
    empty = summarize(cfg, [], _health())
    assert (empty["duration"], empty["request_throughput"], empty["max_concurrent_requests"]) == (0.0, 0.0, 0)
    assert "ttft_split" not in empty and "per_turn" not in empty


def test_latencies_from_the_origin_with_tokens_per_event_exact_or_sketched():
    from loadgen.measure.metrics import itl_ms, latencies, origin_ns, tpot_ms

    rec = _later(_rec(0, 0, [20, 30, 50], 91, usage=3))
    rec.chunk_tokens = [1.0, 2.0, 4.0]
    rec.intended_ns -= 5 * MS
    conc, rate = RunConfig(concurrency=1, num_prompts=1), RunConfig(request_rate=1.0, num_prompts=1)
    assert origin_ns(conc, rec) == rec.start_ns and origin_ns(rate, rec) == rec.intended_ns
    assert tpot_ms(_rec(1, 0, [10, 40], 40, usage=2)) == 30.0 and itl_ms(rec).tolist() == [10.0, 20.0]
    exact = latencies(conc, [rec])
    assert (exact["e2e_latency"], exact["ttft"], exact["tpot"]) == ([91.0], [20.0], [15.0])
    assert exact["itl"] == [10.0, 20.0] and exact["itl_per_token"] == [5.0, 5.0]
    sketched = latencies(RunConfig(concurrency=1, num_prompts=1, itl_sketch=True), [rec])
    assert (sketched["e2e_latency"], sketched["ttft"], sketched["tpot"]) == ([91.0], [20.0], [15.0])
    assert sketched["itl_per_token"].size == 2 and sketched["itl_per_token"].max == pytest.approx(5.0, rel=0.01)
    assert latencies(rate, [rec])["e2e_latency"] == [96.0]
    rec.chunk_tokens = [1.0]  # not one count per event: no per-token ITL
    assert latencies(conc, [rec])["itl_per_token"] == []
    assert latencies(RunConfig(concurrency=1, num_prompts=1, itl_sketch=True), [rec])["itl_per_token"].size == 0


def test_itl_goes_into_a_sketch_past_the_auto_threshold(monkeypatch):
    from loadgen.measure import metrics

    monkeypatch.setattr(metrics, "ITL_SKETCH_AUTO_SAMPLES", 4)  # NOTE: 20 M gaps in the code, 4 here
    cfg = RunConfig(concurrency=1, num_prompts=1)
    at = RequestRecord(index=0, worker=0, intended_ns=0, start_ns=0, end_ns=0, chunk_ns=[1, 2, 3, 4, 5])  # 4 gaps
    empty = RequestRecord(index=1, worker=0, intended_ns=0, start_ns=0, end_ns=0)
    assert metrics.is_itl_sketched(cfg, [at, empty]) is False
    at.chunk_ns.append(6)
    assert metrics.is_itl_sketched(cfg, [at]) is True


def test_goodput_tpot_rule_counts_gaps_between_tokens():
    from loadgen.measure.metrics import _goodput
    from loadgen.plan.config import SLO

    tpot_only = RunConfig(concurrency=1, num_prompts=1, slo=SLO(tpot_ms=10.0))
    over = _later(_rec(0, 0, [20] + [20 + 10 * k for k in range(1, 9)], 100.008))  # TPOT 80.008 / 8 > 10
    two = _later(_rec(1, 0, [20, 70], 70))  # two tokens: TPOT 50
    assert _goodput(tpot_only, [over, two], 1.0) == 0.0
    one = _later(_rec(2, 0, [20], 70))
    assert _goodput(RunConfig(concurrency=1, num_prompts=1, slo=SLO(tpot_ms=0.5)), [one], 1.0) == 1.0


def test_ttft_split_needs_every_server_part_and_reads_each_request():
    from loadgen.measure.metrics import ttft_split

    cfg = RunConfig(concurrency=1, num_prompts=1, stream=False)
    recs = []
    for i, (first, queue, prefill) in enumerate(((10.0, 2.0, None), (10.0, None, 3.0), (None, 2.0, 3.0),
                                                 (10.0, 2.0, 3.0), (20.0, 4.0, 6.0))):
        r = _later(_rec(i, 0, [30], 40))
        r.server_first_output_ms, r.server_queue_ms, r.server_prefill_ms = first, queue, prefill
        recs.append(r)
    split = ttft_split(cfg, recs)
    assert split["requests"] == 2 and split["mean_ms"]["decode"] == 0.0  # no decode span: 0
    assert split["p50_ms"]["queue"] == 3.0 and split["p99_ms"]["queue"] == pytest.approx(3.98)


def test_per_turn_with_only_failures_has_no_figures():
    from loadgen.measure.metrics import per_turn

    failed = _later(RequestRecord(index=0, worker=0, intended_ns=0, start_ns=0, end_ns=0, error_class="timeout",
                                  turn=0))
    ok = _later(_rec(1, 0, [25], 40))
    ok.turn = 1
    assert per_turn(RunConfig(concurrency=1, num_prompts=2), [failed, ok]) == [
        {"turn": 1, "count": 0, "failed": 1, "mean_ttft_ms": None, "p50_ttft_ms": None, "p99_ttft_ms": None,
         "mean_input_tokens": None},
        {"turn": 2, "count": 1, "failed": 0, "mean_ttft_ms": 25.0, "p50_ttft_ms": 25.0, "p99_ttft_ms": 25.0,
         "mean_input_tokens": 10.0}]


def test_summary_hands_client_health_its_records_and_median_ttft_and_reads_given_latencies():
    from loadgen.measure.metrics import latencies

    cfg = RunConfig(concurrency=2, num_prompts=2)
    recs = [_later(_rec(0, 0, [100, 110], 120)), _later(_rec(1, 0, [100, 120], 130))]
    recs[0].num_coalesced_events = 1
    s = summarize(cfg, recs, _health())
    assert (s["output_tokens_usage_minus_client"], s["output_tokens_source"]) == (None, "client")
    health = s["client_health"]
    assert health["ttft_tolerance_ms"] == 5.0 and health["coalesced_share"] == 0.25  # 5% of TTFT 100 ms; 1 of 4
    given = summarize(cfg, recs, _health(), lat=latencies(cfg, recs))
    assert {k: v for k, v in given.items() if k != "client_health"} == {
        k: v for k, v in s.items() if k != "client_health"}
    recs[0].usage_completion_tokens = 2
    assert summarize(cfg, recs, _health())["output_tokens_reconciliation"]["empty_text_events_dropped"] is False


def test_goodput_e2e_is_read_from_the_origin_to_the_nanosecond():
    from loadgen.measure.metrics import _goodput
    from loadgen.plan.config import SLO

    cfg = RunConfig(concurrency=1, num_prompts=1, slo=SLO(e2e_ms=100.0))
    just_over = _later(_rec(0, 0, [20], 100))
    just_over.end_ns += 50  # 100.00005 ms
    assert _goodput(cfg, [just_over], 1.0) == 0.0
    assert _goodput(cfg, [_later(_rec(1, 0, [20], 100))], 1.0) == 1.0


def test_peaks_buckets_are_whole_seconds_from_the_start():
    from loadgen.measure.metrics import _peaks

    t0 = 5_250 * MS
    rec = _later(_rec(0, 0, [0, 400, 999.999999, 1000], 1000), 5_250)  # the fourth token opens second 2
    assert _peaks([rec], t0)["max_output_tokens_per_s"] == 3.0
