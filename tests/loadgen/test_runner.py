"""End-to-end runs against the scripted server: accuracy, errors, rate mode, client-bound flag."""

from __future__ import annotations

import math

import numpy as np

from loadgen.plan.config import RunConfig
from loadgen.plan.datasets import DatasetConfig
from loadgen.run.runner import run

SMALL = DatasetConfig(random_input_len=8, random_output_len=20, random_range_ratio=1.0)


def client_lag_ms(summary: dict) -> float:
    """The worst worker's event-loop lag p99: how late this client could be to stamp a read."""
    return max(w["loop_lag_p99_ms"] for w in summary["client_health"]["workers"])


def _ttft_itl_errors(server) -> tuple[dict, list, float, float]:
    cfg = RunConfig(base_url=server.base_url, concurrency=256, num_prompts=1024, workers=2, warmup=256)
    # NOTE: output lengths 10-20 keep the streams from moving in lock-step bursts.
    result = run(cfg, DatasetConfig(random_input_len=8, random_output_len=20, random_range_ratio=0.5))
    s = result.summary
    truth = server.stats()
    true_ttft = float(np.median(truth["ttft_ms"][-1024:]))  # the measured requests, after warm-up
    # NOTE: on a busy machine the client is descheduled and stamps reads late; the bound grows by
    # the lag the client measured on itself in this run (about 0.1 ms on a quiet machine).
    lag = client_lag_ms(s)
    ttft_error = abs(s["median_ttft_ms"] - true_ttft) - max(1.0, 0.02 * true_ttft) - lag
    itl_error = abs(s["mean_itl_ms"] - truth["mean_gap_ms"]) - max(1.0, 0.02 * truth["mean_gap_ms"]) - lag
    return s, result.records, ttft_error, itl_error


def test_measures_true_ttft_itl_and_counts_at_256_streams_2_workers(start_server):
    server = start_server("--ttft-ms", "30", "--gap-ms", "20")
    # NOTE: the claim checked is "loadgen measures within 1 ms (or 2%) plus its own measured lag";
    # a neighbour's burst can still land between the lag samples, hence up to three runs.
    for _ in range(3):
        s, records, ttft_error, itl_error = _ttft_itl_errors(server)
        if ttft_error <= 0 and itl_error <= 0:
            break
    assert ttft_error <= 0, f"median TTFT off by {ttft_error:.2f} ms past the bound"
    assert itl_error <= 0, f"mean ITL off by {itl_error:.2f} ms past the bound"
    assert s["completed"] == 1024 and s["failed"] == 0
    asked = sum(r.output_len_asked for r in records)
    assert s["total_output_tokens"] == s["total_output_tokens_client"] == asked
    assert s["output_tokens_usage_minus_client"] == 0
    assert s["max_concurrent_requests"] == 256
    assert all(len(r.chunk_ns) == r.output_len_asked for r in records)
    # the divisor of the per-event CPU figures: content events, as parsed
    assert sum(w["num_events"] for w in s["client_health"]["workers"]) == asked
    for w in s["client_health"]["workers"]:
        # paced streams: the loop waits on the network between tokens, and the kernel is part of the CPU
        assert 0 < w["sys_cpu_s"] <= w["cpu_s"] and w["sleeps_per_s"] > 10


def test_every_error_class_is_counted_with_an_example(start_server):
    server = start_server("--ttft-ms", "5", "--gap-ms", "2", "--num-tokens", "10",
                          "--faults", "ok,http_500,reset,malformed,hang")
    cfg = RunConfig(base_url=server.base_url, concurrency=10, num_prompts=10, timeout_s=2.0)
    s = run(cfg, SMALL).summary
    assert s["completed"] == 2
    assert {k: v["count"] for k, v in s["errors"].items()} == {
        "http_500": 2, "connection": 2, "malformed_sse": 2, "timeout": 2,
    }
    assert all(v["example"] for v in s["errors"].values())


def test_rate_mode_measures_from_the_intended_start(start_server):
    server = start_server("--ttft-ms", "5", "--gap-ms", "5", "--num-tokens", "4")
    cfg = RunConfig(base_url=server.base_url, request_rate=100.0, burstiness=math.inf,
                    num_prompts=40, workers=2)
    result = run(cfg, SMALL)
    intended = np.sort([r.intended_ns for r in result.records])
    assert result.summary["completed"] == 40
    np.testing.assert_allclose(np.diff(intended) / 1e6, 10.0, atol=0.5)
    assert all(r.start_ns >= r.intended_ns for r in result.records)


def test_duration_mode_stops_by_itself(start_server):
    server = start_server("--ttft-ms", "5", "--gap-ms", "5", "--num-tokens", "4")
    cfg = RunConfig(base_url=server.base_url, concurrency=8, duration_s=1.0, num_prompts=None)
    result = run(cfg, SMALL)
    assert result.summary["completed"] > 8
    assert len({r.index for r in result.records}) == len(result.records)


def test_flood_sets_the_pace_and_is_flagged_client_bound(start_server):
    server = start_server("--ttft-ms", "0", "--gap-ms", "0", "--num-tokens", "400")
    # NOTE: the stock httpx transport costs ~7x more CPU per read than the lean one, so it is the
    # side that saturates against a flooding server on any machine.
    cfg = RunConfig(base_url=server.base_url, concurrency=64, duration_s=3.0, num_prompts=None,
                    transport="httpx")
    s = run(cfg, SMALL).summary
    assert s["client_bound"], s["client_health"]


def test_burst_server_writes_each_response_at_once(start_server):
    server = start_server("--ttft-ms", "5", "--gap-ms", "0", "--burst")
    result = run(RunConfig(base_url=server.base_url, concurrency=4, num_prompts=8), SMALL)
    s = result.summary
    assert s["completed"] == 8 and s["total_output_tokens_client"] == 8 * 20
    assert server.stats()["num_tokens_sent"] >= 8 * 20
    # a response's 20 tokens come in one write, so in one or two reads: at most two stamps, where
    # the one-write-per-token flood gives up to 20
    assert all(len(set(r.chunk_ns)) <= 2 for r in result.records)


def test_slow_server_is_not_flagged_client_bound(start_server):
    server = start_server("--ttft-ms", "50", "--gap-ms", "50", "--num-tokens", "10")
    cfg = RunConfig(base_url=server.base_url, concurrency=8, num_prompts=16)
    s = run(cfg, SMALL).summary
    # NOTE: a busy machine can delay this client's loop (a loop-lag reason with loop stamps, rightly
    # reported), but it cannot make the client use more CPU: no CPU-share reason may appear. With
    # kernel stamps a late loop is no reason at all. The rule's thresholds are pinned in
    # test_client_health.py on injected figures.
    health = s["client_health"]
    reasons = health["client_bound_reasons"]
    assert s["client_bound"] is bool(reasons) and health["client_bound"] is s["client_bound"], health
    assert not [r for r in reasons if "of a core" in r], health
    if health["stamp_source"] == "kernel":
        assert not [r for r in reasons if "event-loop lag" in r], health
    assert all(w["cpu_share"] < 0.9 for w in health["workers"]), health


def test_stock_httpx_transport_and_non_streaming_agree_on_counts(start_server):
    server = start_server("--ttft-ms", "5", "--gap-ms", "2", "--num-tokens", "12")
    for cfg in (
        RunConfig(base_url=server.base_url, concurrency=4, num_prompts=8, transport="httpx"),
        RunConfig(base_url=server.base_url, concurrency=4, num_prompts=8, stream=False),
        RunConfig(base_url=server.base_url, concurrency=4, num_prompts=8, backend="openai-completions"),
    ):
        s = run(cfg, SMALL).summary
        assert s["completed"] == 8 and s["total_output_tokens"] == 8 * 12, cfg
