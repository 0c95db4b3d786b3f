"""Per-request server timing: an SSE comment before [DONE], a Server-Timing header, on request."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.reference_impl.conftest import MODEL, ServerProcess

ASK = {"x-server-timing": "1", "x-request-id": "timing-test-7"}
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "Hello there, how are you?"}],
        "max_tokens": 12, "seed": 3}


@pytest.fixture(scope="module")
def url():
    # NOTE: a small real-time profile, so every span has a duration; no assertion on its size.
    srv = ServerProcess("--sim-profile", "zero").wait_ready()
    yield srv.url
    srv.stop()


def _stream_lines(url: str, path: str, body: dict, headers: dict) -> list[str]:
    with httpx.stream("POST", url + path, json={**body, "stream": True}, headers=headers,
                      timeout=60) as response:
        assert response.status_code == 200, response.read()
        return [line for line in response.iter_lines() if line]


def _check_spans(timing: dict) -> None:
    spans = ("arrival_to_queue_ms", "queue_ms", "prefill_ms", "first_output_ms", "decode_ms")
    assert all(timing[k] >= 0 for k in spans), timing
    assert timing["prefill_steps"] >= 1
    # rounded to µs each, so allow a µs per term
    assert timing["arrival_to_queue_ms"] + timing["queue_ms"] + timing["prefill_ms"] \
        <= timing["first_output_ms"] + 0.003


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", BODY),
    ("/v1/completions", {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 12, "seed": 3}),
])
def test_streamed_comment_before_done(url, path, body):
    lines = _stream_lines(url, path, body, ASK)
    assert lines[-1] == "data: [DONE]"
    assert lines[-2].startswith(": server-timing ")
    assert all(line.startswith("data: ") for line in lines[:-2])
    timing = json.loads(lines[-2][len(": server-timing "):])
    assert timing["request_id"] == "timing-test-7"
    _check_spans(timing)


def test_no_comment_unless_asked(url):
    lines = _stream_lines(url, "/v1/chat/completions", BODY, {"x-request-id": "plain"})
    assert all(line.startswith("data: ") for line in lines)


def test_whole_response_server_timing_header(url):
    response = httpx.post(url + "/v1/chat/completions", json=BODY, headers=ASK, timeout=60)
    assert response.status_code == 200
    metrics = {}
    for part in response.headers["server-timing"].split(","):
        name, _, params = part.strip().partition(";")
        key, _, value = params.partition("=")
        metrics[name] = float(value.strip('"'))
    assert set(metrics) == {"arrival_to_queue", "queue", "prefill", "first_output", "decode",
                            "prefill_steps"}
    _check_spans({f"{k}_ms": v for k, v in metrics.items() if k != "prefill_steps"}
                 | {"prefill_steps": metrics["prefill_steps"]})
    plain = httpx.post(url + "/v1/chat/completions", json=BODY, timeout=60)
    assert "server-timing" not in plain.headers
    assert plain.json()["choices"] == response.json()["choices"]


def test_openai_sdk_sees_the_same_chunks(url):
    """The comment is invisible to the OpenAI SDK: same chunks, same content, no error."""
    def chunks(headers: dict) -> list[dict]:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0,
                               default_headers=headers)
        stream = client.chat.completions.create(**BODY, stream=True,
                                                stream_options={"include_usage": True})
        return [c.model_dump(exclude={"id", "created"}) for c in stream]

    with_timing, without = chunks(ASK), chunks({})
    assert with_timing == without
    assert len(with_timing) > 3 and with_timing[-1]["usage"]["completion_tokens"] == 12
