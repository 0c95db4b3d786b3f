"""The one Prometheus reader, on the reference server's own text and on vLLM's and SGLang's names."""

from __future__ import annotations

import math

import pytest

from loadgen.measure.prometheus import parse
from reference_impl.messages import SchedulerStats
from reference_impl.server.metrics import ServerMetrics

VLLM = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 7.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 16384.0
vllm:generation_tokens_created{engine="0",model_name="m"} 1.7e9
"""
SGLANG = """# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m"} 3
sglang:num_queue_reqs{model_name="other"} 2
"""


def test_reads_the_reference_servers_own_exposition():
    metrics = ServerMetrics()
    metrics.requests.labels(endpoint="chat", status="499").inc()
    metrics.requests.labels(endpoint="chat", status="200").inc(3)
    stats = SchedulerStats(request_id=0, num_running_reqs=5, num_waiting_reqs=2, num_used_tokens=10,
                           max_total_tokens=100, num_prefill_steps=4, num_decode_steps=9,
                           num_generated_tokens=12, prefill_delayer_outcomes={"delay": 6})
    parsed = parse(metrics.render(stats).decode())
    assert parsed.value("reference:num_requests_total", endpoint="chat", status="499") == 1
    assert parsed.total("reference:num_requests_total", endpoint="chat") == 4
    assert parsed.value("reference:num_running_reqs") == 5
    assert parsed.value("reference:num_prefill_steps") == 4
    assert list(parsed.series("reference:prefill_delayer_outcomes")) == [({"reason": "delay"}, 6.0)]


def test_reads_vllm_and_sglang_names_with_labels():
    vllm = parse(VLLM)
    assert vllm.value("vllm:num_requests_running", engine="0", model_name="m") == 7
    assert vllm.total("vllm:generation_tokens_total") == 16384
    sglang = parse(SGLANG)
    assert sglang.total("sglang:num_queue_reqs") == 5
    assert sglang.value("sglang:num_queue_reqs", model_name="m") == 3


def test_missing_sample_is_the_default_and_nan_is_kept_apart():
    parsed = parse('# TYPE reference:scheduler_up gauge\nreference:scheduler_up 0\n'
                   '# TYPE reference:num_running_reqs gauge\nreference:num_running_reqs NaN\n')
    assert parsed.value("reference:nothing", default=-1) == -1
    assert math.isnan(parsed.value("reference:num_running_reqs"))
    assert parsed.total("reference:num_running_reqs") == 0


def test_garbage_is_an_error():
    with pytest.raises(ValueError):
        parse("this is { not prometheus\n")
