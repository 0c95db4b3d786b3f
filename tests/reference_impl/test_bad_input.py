"""Bad input gets an OpenAI-style 400 and the server keeps serving; gone clients free everything."""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest

from tests.reference_impl.conftest import MODEL

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


def test_unknown_path_is_an_openai_404(server):
    response = httpx.get(server.url + "/v1/nothing", timeout=10)
    assert response.status_code == 404 and "error" in response.json()


def _metric(text: str, name: str) -> float:
    match = re.search(rf"^reference:{name} (\S+)$", text, re.MULTILINE)
    assert match, name
    return float(match.group(1))


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
            if _metric(metrics, "num_running_reqs") == 0 and _metric(metrics, "num_waiting_reqs") == 0:
                break
            asyncio.run(asyncio.sleep(0.2))
        assert _metric(metrics, "num_running_reqs") == 0
        assert _metric(metrics, "num_waiting_reqs") == 0
        assert _metric(metrics, "token_usage") == 0
        response = httpx.post(srv.url + CHAT, json=GOOD_CHAT, timeout=30)
        assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"]
    finally:
        srv.stop()
