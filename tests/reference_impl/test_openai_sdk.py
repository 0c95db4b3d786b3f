"""The OpenAI Python SDK parses every response, streamed or not, in each form."""

from __future__ import annotations

import openai
import pytest

from tests.reference_impl.conftest import MODEL, start_servers


@pytest.fixture(scope="module", params=["optimized", "legacy"])
def client(request):
    flags = ["--sim-profile", "zero"] + (["--all-legacy"] if request.param == "legacy" else [])
    srv = start_servers({request.param: flags})[request.param]
    yield openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)
    srv.stop()


def test_models(client):
    assert [m.id for m in client.models.list()] == [MODEL]


def test_chat_full_and_streamed(client):
    messages = [{"role": "user", "content": "Bonjour, ça va? 日本"}]
    full = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=40, n=2, seed=1)
    assert len(full.choices) == 2 and full.usage.completion_tokens == 80
    stream = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=40, n=2,
                                            seed=1, stream=True, stream_options={"include_usage": True})
    texts, reasons, usage = {}, {}, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            assert choice.delta.model_extra["reasoning_content"] is None
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
            if choice.finish_reason:
                reasons[choice.index] = choice.finish_reason
    assert texts == {c.index: c.message.content for c in full.choices}
    assert reasons == {0: "length", 1: "length"}
    assert usage.completion_tokens == 80


def test_completions_full_and_streamed(client):
    full = client.completions.create(model=MODEL, prompt="Once upon", max_tokens=30, echo=True)
    assert full.choices[0].text.startswith("Once upon")
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL, prompt="Once upon", max_tokens=30, echo=True, stream=True) if c.choices)
    assert streamed == full.choices[0].text


def test_bad_request_raises_sdk_error(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    assert info.value.body["code"] == "model_not_found"
