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
