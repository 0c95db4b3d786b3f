"""End to end on a PD decode node: real server processes, the OpenAI SDK, /metrics."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from tests.reference_impl.conftest import MODEL, ServerProcess, metric

PROMPT = "Grüße aus 東京 🚀, naïve café?"
# A slow per-token transfer (1 ms) so that a long prompt is still in flight when it is aborted;
# short prompts land within ~50 ms.
FLAGS = ("--disaggregation-mode", "decode", "--sim-profile", "pd-decode-h100",
         "--disaggregation-transfer-per-token-us", "1000")
LONG_PROMPT_LEN = 30_000  # 30 s of transfer


@pytest.fixture(scope="module")
def server():
    srv = ServerProcess(*FLAGS).wait_ready()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def _metrics(server) -> str:
    return httpx.get(server.url + "/metrics", timeout=30).text


def _stream_chat(client, **kwargs) -> tuple[dict[int, str], dict[int, str]]:
    texts, reasons = {}, {}
    for chunk in client.chat.completions.create(model=MODEL, stream=True, **kwargs):
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
            if choice.finish_reason:
                reasons[choice.index] = choice.finish_reason
    return texts, reasons


def test_chat_streamed_deltas_join_to_the_full_text(client):
    kwargs = dict(messages=[{"role": "user", "content": PROMPT}], max_tokens=60, n=2, seed=7)
    full = client.chat.completions.create(model=MODEL, **kwargs)
    texts, reasons = _stream_chat(client, **kwargs)
    assert texts == {c.index: c.message.content for c in full.choices}
    assert reasons == {c.index: c.finish_reason for c in full.choices}
    stop = full.choices[0].message.content[20:23]
    stopped = client.chat.completions.create(model=MODEL, stop=[stop], **kwargs)
    texts, _ = _stream_chat(client, stop=[stop], **kwargs)
    assert texts == {c.index: c.message.content for c in stopped.choices}
    assert stop not in texts[0] and stopped.choices[0].finish_reason == "stop"


def test_completions_streamed_text_joins_to_the_full_text(client):
    kwargs = dict(model=MODEL, prompt=PROMPT, max_tokens=40, echo=True, seed=3)
    full = client.completions.create(**kwargs)
    streamed = "".join(c.choices[0].text for c in client.completions.create(stream=True, **kwargs)
                       if c.choices)
    assert streamed == full.choices[0].text and streamed.startswith(PROMPT)


def test_one_token_request_finishes_on_the_handed_over_token(client):
    messages = [{"role": "user", "content": PROMPT}]
    full = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=1)
    assert full.usage.completion_tokens == 1 and full.choices[0].finish_reason == "length"
    texts, reasons = _stream_chat(client, messages=messages, max_tokens=1)
    assert texts == {0: full.choices[0].message.content} and reasons == {0: "length"}


def test_metrics_show_transfers_and_no_prefill(client, server):
    client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=5)
    metrics = _metrics(server)
    assert metric(metrics, "num_prefill_steps", None) == 0
    assert metric(metrics, "num_decode_steps", None) > 0
    assert metric(metrics, "num_kv_transfers", None) > 0


async def _abort_while_in_flight(server) -> tuple[float, float]:
    body = {"model": MODEL, "prompt": "a" * LONG_PROMPT_LEN, "max_tokens": 10}
    async with httpx.AsyncClient(base_url=server.url, timeout=120) as http:
        landed_before = metric((await http.get("/metrics")).text, "num_kv_transfers", None)
        task = asyncio.create_task(http.post("/v1/completions", json=body))
        for _ in range(600):
            if metric((await http.get("/metrics")).text, "num_transferring_reqs", None) == 1:
                break
            await asyncio.sleep(0.05)
        in_flight = metric((await http.get("/metrics")).text, "num_transferring_reqs", None)
        task.cancel()  # the client goes away: the server aborts the request
        with pytest.raises(asyncio.CancelledError):
            await task
    return landed_before, in_flight


def test_client_gone_during_transfer_frees_the_request(server):
    landed_before, in_flight = asyncio.run(_abort_while_in_flight(server))
    assert in_flight == 1
    for _ in range(200):
        metrics = _metrics(server)
        if metric(metrics, "num_transferring_reqs", None) == 0:
            break
        asyncio.run(asyncio.sleep(0.1))
    assert metric(metrics, "num_transferring_reqs", None) == 0
    assert metric(metrics, "token_usage", None) == 0
    # freed by the abort, not by landing (its transfer takes 30 s)
    assert metric(metrics, "num_kv_transfers", None) == landed_before
