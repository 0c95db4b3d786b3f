"""The one Prometheus reader, on the reference server's own text and on vLLM's and SGLang's names."""

from __future__ import annotations

import math
import socket
import tracemalloc

import httpx
import pytest

from loadgen.measure.prometheus import (
    MAX_BYTES,
    MAX_SAMPLES,
    Deadline,
    SampleLines,
    ScrapeError,
    fetch,
    parse,
)
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


def test_sample_lines_keep_only_the_names_asked_and_stop_at_their_bounds():
    lines = SampleLines(frozenset({"a_total"}))
    for piece in (b"# TYPE a counter\na_to", b"tal 1\nab_total 2\na_total{x=\"", b'y"} 3\nb 4'):
        lines.feed(piece)
    assert lines.text() == 'a_total 1\na_total{x="y"} 3\n'
    too_big = SampleLines(frozenset({"a_total"}))
    with pytest.raises(ScrapeError, match="body past 16 MiB"):
        for _ in range(MAX_BYTES // 65536 + 1):
            too_big.feed(b"# " + b"x" * 65533 + b"\n")
    too_many = SampleLines()
    with pytest.raises(ScrapeError, match="more than 10,000 samples$"):
        too_many.feed(b"".join(b'a_total{i="%d"} 1\n' % i for i in range(MAX_SAMPLES + 1)))


READ = frozenset({"reference:num_running_reqs", "reference:num_waiting_reqs"})


# Each hostile /metrics costs one ScrapeError, within the deadline and a few MiB of Python memory
# (before: 4 GB in 22 s for an endless body, a drip held the scrape forever).
@pytest.mark.parametrize("mode, names, deadline_s, why", [
    ("endless", READ, 30, "body past 16 MiB"),
    ("huge", READ, 30, "body past 16 MiB"),
    ("many_other", READ, 30, "body past 16 MiB"),
    ("many_read", READ, 30, "more than 10,000 samples of the names read"),
    ("many_other", None, 30, "more than 10,000 samples$"),
    ("drip", READ, 1, "no whole answer within 1 s"),
    ("drip_head", READ, 1, "no whole answer within 1 s"),
])
def test_fetch_is_bounded_whatever_the_target_sends(start_hostile_metrics, mode, names, deadline_s, why):
    _, url = start_hostile_metrics("--metrics", mode)
    with httpx.Client(limits=httpx.Limits(max_keepalive_connections=0)) as client:
        tracemalloc.start()
        try:
            with pytest.raises(ScrapeError, match=why):
                fetch(client, url + "/metrics", Deadline(deadline_s), names)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 8 << 20  # what is kept, not what was sent
        # and the client's next scrape of a good target still works
        _, good = start_hostile_metrics("--metrics", "ok")
        assert fetch(client, good + "/metrics", Deadline(30), READ).value("reference:num_waiting_reqs") == 2


def test_the_deadline_cuts_a_tls_answer_that_drips(start_hostile_metrics, certificate):
    _, url = start_hostile_metrics("--metrics", "drip_head", "--certfile", certificate[0],
                                   "--keyfile", certificate[1])
    with httpx.Client(verify=False, limits=httpx.Limits(max_keepalive_connections=0)) as client:
        with pytest.raises(ScrapeError, match="no whole answer within 1 s"):
            fetch(client, url + "/metrics", Deadline(1), READ)


def test_an_unanswered_scrape_past_its_deadline_is_cut_not_waited_for_per_read():
    # A listener that never answers: without the cut the read timeout (30 s) would end it.
    with socket.create_server(("127.0.0.1", 0)) as server:
        url = f"http://127.0.0.1:{server.getsockname()[1]}/metrics"
        deadline = Deadline(1)
        with httpx.Client() as client, pytest.raises(ScrapeError, match="within 1 s"):
            fetch(client, url, deadline, READ)
        assert deadline.is_cut
