"""H2: both chat chunk encoders give the same parsed chunk (missing keys read as null)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionChunk

from reference_impl.hot_paths import HOT_PATHS
from reference_impl.server.protocol import (
    ChatCompletionStreamResponse,
    CompletionResponseStreamChoice,
    CompletionStreamResponse,
    UsageInfo,
)
from reference_impl.server.sse import (
    SSE_DONE,
    ChatChunkEncoder,
    sse_data,
)

LEGACY = HOT_PATHS["H2"].create("pydantic")
OPTIMIZED = HOT_PATHS["H2"].create("msgspec")
BASE = {"chunk_id": "chatcmpl-1", "created": 1_700_000_000, "model": "reference-sim"}

TEXTS = ["", "plain", "é 漢字 🦀 \u200d", 'quote " backslash \\ slash /',
         "line\nbreak\r\ttab", "ctrl \x00\x01\x1f\x7f", "</script> & <b>"]
LOGPROBS = {"content": [{"token": "a", "logprob": -0.25, "bytes": [97],
                         "top_logprobs": [{"token": "a", "logprob": -0.25, "bytes": [97]}]}]}
USAGE = UsageInfo.of(5, 3).model_dump()

CHUNKS = [
    {"index": 0, "role": "assistant", "content": ""},
    {"index": 3, "role": "assistant", "content": "", "reasoning_content": ""},
    *({"index": 1, "content": text} for text in TEXTS),
    *({"index": 0, "reasoning_content": text} for text in TEXTS),
    {"index": 0, "content": "x", "logprobs": LOGPROBS},
    {"index": 0, "finish_reason": "stop", "matched_stop": 2},
    {"index": 0, "finish_reason": "stop", "matched_stop": "END\n\"q\""},
    {"index": 2, "content": "", "finish_reason": "length"},
    {"index": 0, "finish_reason": "abort"},
]


def parse(event: bytes) -> dict:
    assert event.startswith(b"data: ") and event.endswith(b"\n\n")
    body = event[len(b"data: "):-2]
    assert b"\n" not in body
    return json.loads(body)


def fill_nulls(a: object, b: object) -> tuple[object, object]:
    """``a`` and ``b`` with every key missing on one side added as null."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = a.keys() | b.keys()
        pairs = {k: fill_nulls(a.get(k), b.get(k)) for k in keys}
        return {k: p[0] for k, p in pairs.items()}, {k: p[1] for k, p in pairs.items()}
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        pairs = [fill_nulls(x, y) for x, y in zip(a, b, strict=True)]
        return [p[0] for p in pairs], [p[1] for p in pairs]
    return a, b


def assert_same_chunk(fields: dict) -> tuple[dict, dict]:
    legacy = parse(LEGACY.encode(**BASE, **fields))
    optimized = parse(OPTIMIZED.encode(**BASE, **fields))
    filled_legacy, filled_optimized = fill_nulls(legacy, optimized)
    assert filled_legacy == filled_optimized
    return legacy, optimized


@pytest.mark.parametrize("usage", [None, USAGE], ids=["no-usage", "usage"])
@pytest.mark.parametrize("fields", CHUNKS)
def test_encoders_agree(fields, usage):
    legacy, optimized = assert_same_chunk({**fields, "usage": usage})
    assert optimized["choices"][0]["index"] == fields["index"]
    for key in ("content", "reasoning_content", "finish_reason", "matched_stop", "logprobs"):
        want = fields.get(key)
        got = optimized["choices"][0].get(key, optimized["choices"][0]["delta"].get(key))
        assert got == want


@given(content=st.text(), reasoning=st.none() | st.text(), index=st.integers(0, 64),
       matched=st.none() | st.integers(0, 2**31) | st.text(), first=st.booleans())
def test_encoders_agree_on_any_text(content, reasoning, index, matched, first):
    fields = {"index": index, "content": content, "reasoning_content": reasoning,
              "matched_stop": matched, "finish_reason": None if matched is None else "stop"}
    if first:
        fields["role"] = "assistant"
    legacy, optimized = assert_same_chunk(fields)
    assert optimized["choices"][0]["delta"]["content"] == content


@pytest.mark.parametrize("encoder", [LEGACY, OPTIMIZED], ids=lambda e: e.name)
def test_chunk_header(encoder):
    chunk = parse(encoder.encode(**BASE, index=0, content="a"))
    assert (chunk["id"], chunk["object"], chunk["created"], chunk["model"]) == (
        "chatcmpl-1", "chat.completion.chunk", 1_700_000_000, "reference-sim")
    assert len(chunk["choices"]) == 1


def test_optimized_wire_rules():
    first = parse(OPTIMIZED.encode(**BASE, index=0, role="assistant", content=""))
    assert "usage" not in first
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": "",
                                            "reasoning_content": None}
    assert set(first["choices"][0]) == {"index", "delta", "logprobs", "finish_reason",
                                        "matched_stop"}
    finish = parse(OPTIMIZED.encode(**BASE, index=0, finish_reason="stop"))
    assert finish["choices"][0]["delta"] == {"reasoning_content": None}
    with_usage = parse(OPTIMIZED.encode(**BASE, index=0, content="a", usage=USAGE))
    assert with_usage["usage"] == {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}


def test_legacy_sends_every_key():
    chunk = parse(LEGACY.encode(**BASE, index=0, content="a"))
    assert chunk["usage"] is None
    assert chunk["choices"][0]["delta"] == {"role": None, "content": "a",
                                            "reasoning_content": None}


def test_infinite_logprob_is_null_in_both():
    logprobs = {"content": [{"token": "a", "logprob": -math.inf, "bytes": None,
                             "top_logprobs": []}]}
    legacy, _ = assert_same_chunk({"index": 0, "content": "a", "logprobs": logprobs})
    assert legacy["choices"][0]["logprobs"]["content"][0]["logprob"] is None


@pytest.mark.parametrize("encoder", [LEGACY, OPTIMIZED], ids=lambda e: e.name)
@pytest.mark.parametrize("fields", [CHUNKS[0], {"index": 0, "content": "hi", "reasoning_content": "r"},
                                    {"index": 1, "finish_reason": "stop", "matched_stop": "END",
                                     "logprobs": LOGPROBS, "usage": USAGE}])
def test_sdk_accepts_chunks(encoder, fields):
    raw = encoder.encode(**BASE, **fields)[len(b"data: "):-2]
    chunk = ChatCompletionChunk.model_validate(json.loads(raw))
    delta = chunk.choices[0].delta
    assert delta.model_extra["reasoning_content"] == fields.get("reasoning_content")
    assert delta.reasoning_content == fields.get("reasoning_content")
    assert delta.content == fields.get("content")
    assert delta.role == fields.get("role")
    assert chunk.choices[0].finish_reason == fields.get("finish_reason")
    assert (chunk.usage is None) == ("usage" not in fields)


def test_usage_only_chunk_and_done():
    chunk = ChatCompletionStreamResponse(id="c", created=1, model="m", choices=[],
                                         usage=UsageInfo.of(2, 1))
    event = sse_data(chunk)
    sdk = ChatCompletionChunk.model_validate(parse(event))
    assert sdk.choices == [] and sdk.usage.total_tokens == 3
    assert SSE_DONE == b"data: [DONE]\n\n"


def test_sse_data_for_completions_chunk():
    chunk = CompletionStreamResponse(id="c", created=1, model="m", choices=[
        CompletionResponseStreamChoice(index=0, text='a"\n€', finish_reason="stop", matched_stop=7)])
    parsed = parse(sse_data(chunk))
    assert parsed["choices"][0] == {"index": 0, "text": 'a"\n€', "logprobs": None,
                                    "finish_reason": "stop", "matched_stop": 7}


def test_registry():
    assert [HOT_PATHS["H2"].create(n).name for n in ("pydantic", "msgspec")] == ["pydantic", "msgspec"]
    assert all(isinstance(e, ChatChunkEncoder) for e in (LEGACY, OPTIMIZED))
    with pytest.raises(ValueError, match="orjson"):
        HOT_PATHS["H2"].create("orjson")

