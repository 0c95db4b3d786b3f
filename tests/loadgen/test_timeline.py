"""The timeline from records with known stamps: buckets, requests in flight, the steady-state window."""

from __future__ import annotations

import pytest

from loadgen.measure.records import RequestRecord
from loadgen.measure.timeline import STEADY_RULE, cdf, timeline
from loadgen.plan.config import RunConfig

S = 1_000_000_000
CFG = RunConfig(concurrency=4, num_prompts=1)


def _rec(index: int, start_s: float, first_s: float, gap_s: float, tokens: int, error: str | None = None):
    first = int(first_s * S)
    chunks = [first + int(k * gap_s * S) for k in range(tokens)]
    end = chunks[-1] + 1 if chunks else int(first_s * S)
    return RequestRecord(index=index, worker=0, intended_ns=int(start_s * S), start_ns=int(start_s * S),
                         end_ns=end, first_token_ns=None if error else first, chunk_ns=[] if error else chunks,
                         chunk_tokens=[] if error else [1.0] * tokens, error_class=error)


def test_buckets_count_starts_ends_tokens_and_gaps():
    records = [_rec(0, 0.0, 0.1, 0.1, 5),   # tokens at 0.1..0.5, ends at 0.5 s
               _rec(1, 0.5, 1.2, 0.2, 4),   # tokens at 1.2, 1.4, 1.6, 1.8
               _rec(2, 1.5, 1.5, 0.0, 0, error="http_500")]
    tl = timeline(CFG, records, interval_s=1.0)
    b0, b1 = tl["buckets"]
    assert (b0["t_s"], b0["started"], b0["finished"], b0["errors"], b0["output_tokens"]) == (0.0, 2, 1, 0, 5)
    assert (b1["t_s"], b1["started"], b1["finished"], b1["errors"], b1["output_tokens"]) == (1.0, 1, 2, 1, 4)
    assert b0["ttft_ms"]["n"] == 1 and b0["ttft_ms"]["p50"] == pytest.approx(100.0)
    assert b1["ttft_ms"]["n"] == 1 and b1["ttft_ms"]["p50"] == pytest.approx(700.0)
    assert b0["itl_ms"]["n"] == 4 and b1["itl_ms"]["n"] == 3 and b1["itl_ms"]["p99"] == pytest.approx(200.0)
    # In flight: request 0 over [0, 0.5], request 1 over [0.5, 1.8], request 2 for an instant.
    assert b0["in_flight"] == pytest.approx(0.5 + 0.5, abs=1e-6)
    assert b1["in_flight"] == pytest.approx(0.8, abs=1e-6)


def test_the_steady_state_leaves_out_the_burst_and_the_drain():
    # Ramp: 1 then 4 streams; 4 streams for 4 s (three refilled at 2.9 s); then a drain with one stream.
    records = [_rec(0, 0.0, 0.1, 0.1, 60)]  # 0.1 .. 6.0 s
    records += [_rec(i, 1.0, 1.1, 0.1, 19) for i in range(1, 4)]  # 1.1 .. 2.9 s
    records += [_rec(i, 2.9, 3.0, 0.1, 20) for i in range(4, 7)]  # 3.0 .. 4.9 s
    tl = timeline(CFG, records, interval_s=1.0)
    steady = tl["steady_state"]
    assert (steady["start_s"], steady["end_s"], steady["rule"]) == (1.0, 5.0, STEADY_RULE)
    assert steady["requests"] == 6 and steady["mean_in_flight"] == pytest.approx((4 + 4 + 4 + 1 + 3 * 0.9) / 4, abs=1e-6)
    tokens_inside = sum(b["output_tokens"] for b in tl["buckets"][1:5])
    assert steady["output_throughput"] == pytest.approx(tokens_inside / 4.0)
    assert steady["ttft_ms"]["p50"] == pytest.approx(100.0)


def test_a_batch_sent_at_once_has_no_steady_state():
    """N prompts at concurrency N: in flight stays at its peak for seconds, but nothing refills it."""
    batch = [_rec(i, 0.0, 0.1, 0.1, 30 + i % 3) for i in range(8)]  # 0.1 .. 3.2 s, no request after
    tl = timeline(CFG, batch, interval_s=1.0)
    assert [b["started"] for b in tl["buckets"]] == [8, 0, 0, 0]
    assert min(b["in_flight"] for b in tl["buckets"][:3]) == pytest.approx(8.0, abs=1e-6)
    assert tl["steady_state"] is None
    assert "N prompts at concurrency N, has none" in STEADY_RULE


def test_too_short_a_plateau_is_no_steady_state():
    tl = timeline(CFG, [_rec(0, 0.0, 0.1, 0.1, 5)], interval_s=1.0)
    assert len(tl["buckets"]) == 1 and tl["steady_state"] is None


def test_no_records():
    assert timeline(CFG, [], 1.0) == {"interval_s": 1.0, "buckets": [], "steady_state": None}
    assert cdf(CFG, []) == {"ttft_ms": [], "itl_ms": [], "tpot_ms": [], "e2e_latency_ms": []}


def test_cdf_runs_from_the_minimum_to_the_maximum():
    points = cdf(CFG, [_rec(i, 0.0, 0.01 * (i + 1), 0.1, 3) for i in range(10)])["ttft_ms"]
    assert points[0] == [0.0, pytest.approx(10.0)] and points[-1] == [100.0, pytest.approx(100.0)]
    assert [p for p, _ in points] == sorted(p for p, _ in points)
