"""End to end: a real server with DP attention (4 lockstep ranks, the gb200-moe-dp profile and
the queue-triggered delayer) streams through the OpenAI SDK like a single-rank server."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from loadgen.measure.prometheus import parse
from tests.reference_impl.conftest import MODEL, ServerProcess, metric

DP_FLAGS = ("--dp-size", "4", "--enable-dp-attention", "--sim-profile", "gb200-moe-dp",
            "--enable-prefill-delayer", "--prefill-delayer-queue-min-ratio", "0.1",
            "--prefill-delayer-max-delay-ms", "200")


@pytest.fixture(scope="module")
def dp_server():
    srv = ServerProcess(*DP_FLAGS).wait_ready()
    yield srv
    srv.stop()


def _client(srv) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def _stream_chat(client: openai.OpenAI, i: int) -> tuple[str, str]:
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": f"request {i}: café 日本"}],
        max_tokens=12 + 3 * i, seed=i, stream=True)
    text, finish = "", None
    for chunk in stream:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    return text, finish


def test_concurrent_streams_match_a_single_rank_server(dp_server, server):
    with ThreadPoolExecutor(8) as pool:
        dp = list(pool.map(lambda i: _stream_chat(_client(dp_server), i), range(8)))
    single = [_stream_chat(_client(server), i) for i in range(8)]
    assert dp == single
    assert all(finish in ("length", "stop") and text for text, finish in dp)


def test_metrics_count_lockstep_steps_and_delayer_outcomes(dp_server):
    _stream_chat(_client(dp_server), 99)
    text = httpx.get(dp_server.url + "/metrics", timeout=30).text
    assert metric(text, "num_prefill_steps", None) >= 1 and metric(text, "num_decode_steps", None) >= 1
    assert sum(v for _, v in parse(text).series("reference:prefill_delayer_outcomes")) >= 1


def test_completions_non_streamed(dp_server):
    out = _client(dp_server).completions.create(model=MODEL, prompt="Once upon", max_tokens=20,
                                                echo=True)
    assert out.choices[0].text.startswith("Once upon") and out.usage.completion_tokens <= 20
