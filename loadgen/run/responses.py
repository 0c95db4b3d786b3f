"""Parsing the answers of /v1/responses (streamed) and /v1/embeddings (whole), after the request.

A Responses stream has typed events (`event: response.output_text.delta` with `data: {"type":
..., "delta": "..."}`), no `[DONE]`, and ends with `response.completed` (or `response.incomplete`)
whose `response.usage` holds `input_tokens` and `output_tokens`; `response.failed` and `error`
events are server errors. Each event becomes the chat chunk it stands for, so the stamps, token
events, exactness and uncertainty are sse.py's, as for chat.

An embeddings answer is one JSON object: `data` (one vector per input) and `usage.prompt_tokens`.
Its record has a latency and inputs, and no token events (no TTFT, ITL or TPOT).
"""

from __future__ import annotations

import msgspec

from loadgen.measure.records import RequestRecord
from loadgen.run.sse import (
    MalformedSSE,
    ServerErrorEvent,
    _Choice,
    _Chunk,
    _Count,
    _Decoded,
    _Delta,
    _payloads,
    _Usage,
    decode_all,
)

#: Events that end a Responses stream normally (incomplete: it stopped at max_output_tokens).
TERMINAL_EVENTS = ("response.completed", "response.incomplete")
FAILED_EVENTS = ("response.failed", "error")


class _ResponseUsage(msgspec.Struct, gc=False):
    input_tokens: _Count | None = None
    output_tokens: _Count | None = None


class _Response(msgspec.Struct, gc=False):
    usage: _ResponseUsage | None = None
    error: dict | None = None


class _Event(msgspec.Struct, gc=False):
    type: str = ""
    delta: str | None = None
    response: _Response | None = None
    message: str | None = None  # an `error` event's


class _EmbeddingItem(msgspec.Struct, gc=False):
    index: int = 0


class _EmbeddingsUsage(msgspec.Struct, gc=False):
    prompt_tokens: _Count | None = None


class _Embeddings(msgspec.Struct, gc=False):
    data: list[_EmbeddingItem]
    usage: _EmbeddingsUsage | None = None


_decode_events = msgspec.json.Decoder(list[_Event]).decode
_decode_event = msgspec.json.Decoder(_Event).decode
_decode_embeddings = msgspec.json.Decoder(_Embeddings).decode


def decode_responses_stream(body: bytes, ends: list[int], loop: list[int]) -> _Decoded:
    """A Responses stream's events as chat chunks, the piece that completed each and which pieces
    ended their read after an event (sse.py's `_Decoded`); MalformedSSE for a broken stream."""
    events = body.split(b"\n\n")
    if (tail := events.pop()).strip():
        raise MalformedSSE(f"stream ended inside an event: {tail[:80]!r}")
    payloads, pieces, event_ends, _ = _payloads(events, ends)
    decoded = decode_all(payloads, _decode_events, _decode_event)
    chunks = [_as_chunk(event) for event in decoded]
    if not any(event.type in TERMINAL_EVENTS for event in decoded):
        raise MalformedSSE("stream ended without response.completed")
    last, at_event_end = len(ends) - 1, set(event_ends)
    ends_read = [end in at_event_end and (j == last or loop[j + 1] != loop[j]) for j, end in enumerate(ends)]
    return chunks, pieces, ends_read


def _as_chunk(event: _Event) -> _Chunk:
    """The chat chunk an event stands for: a text delta, the final usage, or nothing."""
    kind = event.type
    if kind == "response.output_text.delta":
        return _Chunk(choices=[_Choice(delta=_Delta(content=event.delta or ""))])
    if kind == "response.reasoning_text.delta":
        return _Chunk(choices=[_Choice(delta=_Delta(reasoning_content=event.delta or ""))])
    if kind in FAILED_EVENTS:
        error = event.message or (event.response.error if event.response is not None else None)
        raise ServerErrorEvent(f"{kind} event in stream: {str(error)[:200]}")
    if kind in TERMINAL_EVENTS and event.response is not None and (usage := event.response.usage) is not None:
        return _Chunk(usage=_Usage(prompt_tokens=usage.input_tokens, completion_tokens=usage.output_tokens))
    return _Chunk()


def parse_embeddings(record: RequestRecord, body: bytes) -> None:
    """Fill `record` from an embeddings answer: the vectors it holds and the server's prompt tokens.
    No token events: the request has a latency, not a TTFT."""
    try:
        answer = _decode_embeddings(body)
    except msgspec.DecodeError as exc:
        raise MalformedSSE(f"undecodable embeddings response {body[:80]!r}: {exc}") from None
    record.num_embeddings = len(answer.data)
    if answer.usage is not None:
        record.usage_prompt_tokens = answer.usage.prompt_tokens
