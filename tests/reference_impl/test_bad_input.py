"""Bad input gets an OpenAI-style 400 and the server keeps serving; gone clients free everything."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.reference_impl.conftest import MODEL, metric

CHAT = "/v1/chat/completions"
GOOD_CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}

BAD_REQUESTS = {
    "malformed-json": (CHAT, b'{"model": "reference-sim", "messages": [', None),
    "missing-messages": (CHAT, {"model": MODEL}, "messages"),
    "ill-typed-n": (CHAT, {**GOOD_CHAT, "n": "two"}, "n"),
    "unknown-model": (CHAT, {**GOOD_CHAT, "model": "gpt-nope"}, "model"),
    "max-tokens-zero": (CHAT, {**GOOD_CHAT, "max_tokens": 0}, "max_tokens"),
    "max-tokens-negative": ("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": -3}, "max_tokens"),
    "max-tokens-past-context": (CHAT, {**GOOD_CHAT, "max_tokens": 10**9}, "max_tokens"),
    "prompt-too-long": ("/v1/completions", {"model": MODEL, "prompt": "x" * 140_000, "max_tokens": 1}, "prompt"),
    "n-over-limit": (CHAT, {**GOOD_CHAT, "n": 1000}, "n"),
    "empty-messages": (CHAT, {**GOOD_CHAT, "messages": []}, "messages"),
    "empty-prompt": ("/v1/completions", {"model": MODEL, "prompt": ""}, "prompt"),
    "token-id-out-of-vocab": ("/v1/completions", {"model": MODEL, "prompt": [1, 2, 99999]}, "prompt"),
    "seed-past-int64": (CHAT, {**GOOD_CHAT, "seed": 2**64}, "seed"),
    "seed-below-int64": (CHAT, {**GOOD_CHAT, "seed": -(2**63) - 1}, "seed"),
    "top-k-past-int64": (CHAT, {**GOOD_CHAT, "top_k": 2**63}, "top_k"),
    "seed-past-int64-streamed": (CHAT, {**GOOD_CHAT, "seed": 2**64, "stream": True}, "seed"),
    "top-k-past-int64-completions": ("/v1/completions", {"model": MODEL, "prompt": "x", "top_k": 2**70},
                                     "top_k"),
    "prompt-id-past-int64": ("/v1/completions", {"model": MODEL, "prompt": [1, 2**64]}, "prompt"),
    "stop-token-id-past-int64": (CHAT, {**GOOD_CHAT, "stop_token_ids": [2**64]}, "stop_token_ids"),
    "too-many-stop-strings": (CHAT, {**GOOD_CHAT, "stop": [f"s{i}" for i in range(17)]}, "stop"),
    "stop-string-too-long": (CHAT, {**GOOD_CHAT, "stop": "x" * 60_000}, "stop"),
    "too-many-prompts": ("/v1/completions", {"model": MODEL, "prompt": ["a"] * 65}, "prompt"),
    "prompt-times-n-too-large": ("/v1/completions", {"model": MODEL, "prompt": "x" * 100_000, "n": 16},
                                 "prompt"),
    "tokenize-neither-prompt-nor-messages": ("/tokenize", {"model": MODEL}, None),
    "tokenize-unknown-model": ("/tokenize", {"model": "nope", "prompt": "x"}, "model"),
    "detokenize-out-of-vocab": ("/detokenize", {"tokens": [1, 99999]}, "tokens"),
    "detokenize-negative-id": ("/detokenize", {"tokens": [-1]}, "tokens"),
}


@pytest.mark.parametrize("name", list(BAD_REQUESTS))
def test_bad_request_gets_openai_error_and_server_keeps_serving(server, name):
    path, body, param = BAD_REQUESTS[name]
    kwargs = {"content": body, "headers": {"content-type": "application/json"}} if isinstance(body, bytes) \
        else {"json": body}
    response = httpx.post(server.url + path, timeout=30, **kwargs)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"] and error["type"] == "invalid_request_error"
    if param is not None:
        assert error["param"] == param
    assert httpx.post(server.url + CHAT, json=GOOD_CHAT, timeout=30).status_code == 200


def _tracked(url: str) -> float:
    return metric(httpx.get(url + "/metrics", timeout=30).text, "num_tracked_reqs", None)


def test_out_of_range_ints_keep_the_connection_and_leave_no_state(server):
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for body in ({**GOOD_CHAT, "seed": 2**64}, {**GOOD_CHAT, "top_k": 2**64, "stream": True}):
            assert client.post(CHAT, json=body).status_code == 400
        assert client.post(CHAT, json=GOOD_CHAT).status_code == 200  # same keep-alive connection
    assert _tracked(server.url) == 0


def test_body_past_the_limit_is_413_by_length_and_by_streamed_count(server):
    big = b'{"model": "' + b"x" * (17 * 2**20) + b'"}'
    response = httpx.post(server.url + CHAT, content=big, timeout=60,
                          headers={"content-type": "application/json"})
    assert response.status_code == 413 and response.json()["error"]["code"] == 413

    def chunks():
        for _ in range(17):
            yield b" " * 2**20  # chunked: no Content-Length, counted while read

    response = httpx.post(server.url + CHAT, content=chunks(), timeout=60)
    assert response.status_code == 413
    assert httpx.post(server.url + CHAT, json=GOOD_CHAT, timeout=30).status_code == 200


def test_chat_errors_are_counted_under_chat(server):
    before = httpx.get(server.url + "/metrics", timeout=30).text
    httpx.post(server.url + CHAT, json={**GOOD_CHAT, "n": 1000}, timeout=30)
    after = httpx.get(server.url + "/metrics", timeout=30).text
    label = '_total{endpoint="chat",status="400"}'
    assert metric(after, "num_requests" + label, None) == metric(before, "num_requests" + label, 0) + 1


def test_tokenize_and_detokenize_round_trip(server):
    text = "Grüße 東京 🚀"
    tok = httpx.post(server.url + "/tokenize", json={"prompt": text}, timeout=30).json()
    assert tok["count"] == len(tok["tokens"]) > 0 and tok["max_model_len"] == 131072
    back = httpx.post(server.url + "/detokenize", json={"tokens": tok["tokens"]}, timeout=30).json()
    assert back == {"prompt": text}
    chat = httpx.post(server.url + "/tokenize", json={"model": MODEL, **{
        "messages": GOOD_CHAT["messages"]}}, timeout=30).json()
    response = httpx.post(server.url + CHAT, json=GOOD_CHAT, timeout=30).json()
    assert chat["count"] == response["usage"]["prompt_tokens"]


def test_unknown_path_is_an_openai_404(server):
    response = httpx.get(server.url + "/v1/nothing", timeout=10)
    assert response.status_code == 404 and "error" in response.json()


async def _open_and_drop_streams(url: str, num_streams: int) -> int:
    """Open streams that would run for long, read one chunk of each, then disconnect them all."""
    limits = httpx.Limits(max_connections=num_streams)
    body = {**GOOD_CHAT, "max_tokens": 100_000, "ignore_eos": True, "stream": True}
    got_chunk = 0
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as client:
        async def one() -> None:
            nonlocal got_chunk
            async with client.stream("POST", CHAT, json=body) as response:
                async for _ in response.aiter_lines():
                    got_chunk += 1
                    return  # leaving the block closes the connection mid-stream
        await asyncio.gather(*(one() for _ in range(num_streams)))
    return got_chunk


def test_disconnected_streams_are_aborted_and_freed():
    from tests.reference_impl.conftest import ServerProcess

    srv = ServerProcess("--max-total-tokens", str(60_000_000)).wait_ready()
    try:
        assert asyncio.run(_open_and_drop_streams(srv.url, 500)) == 500
        for _ in range(100):
            metrics = httpx.get(srv.url + "/metrics", timeout=30).text
            if metric(metrics, "num_running_reqs", None) == 0 and metric(metrics, "num_waiting_reqs", None) == 0:
                break
            asyncio.run(asyncio.sleep(0.2))
        assert metric(metrics, "num_running_reqs", None) == 0
        assert metric(metrics, "num_waiting_reqs", None) == 0
        assert metric(metrics, "token_usage", None) == 0
        response = httpx.post(srv.url + CHAT, json=GOOD_CHAT, timeout=30)
        assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"]
    finally:
        srv.stop()
