"""Turning a stamped response body into a request record, after the request (off the read path).

Each SSE event is stamped with the arrival time of the network read that completed it. TTFT uses
the first event with non-empty `content` or `reasoning_content` (the role-only first chat chunk
does not count).
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right

import msgspec

from loadgen.records import RequestRecord


class MalformedSSE(ValueError):
    """The stream broke the SSE / OpenAI chunk format."""


class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


class _Message(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    text: str | None = None
    message: _Message | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] = []
    usage: _Usage | None = None
    error: dict | str | None = None


_decode_chunk = msgspec.json.Decoder(_Chunk).decode
_CRLF = re.compile(b"\r\n")


def _choice_text(choice: _Choice) -> str:
    if choice.delta is not None:
        d = choice.delta
        return (d.reasoning_content or d.reasoning or "") + (d.content or "")
    if choice.message is not None:
        return (choice.message.reasoning_content or "") + (choice.message.content or "")
    return choice.text or ""


def _events(chunks: list[bytes]) -> tuple[bytes, list[int]]:
    """The body with line ends made `\\n`, and each read's end offset in it.

    A `\\r\\n` split across two reads is one line end that belongs to the later read: the `\\r` is
    dropped (not the `\\n`), so an event completed by that `\\n` takes the later read's stamp.
    """
    raw = b"".join(chunks)
    ends, total = [], 0
    for c in chunks:
        total += len(c)
        ends.append(total)
    if b"\r" not in raw:
        return raw, ends
    dropped = [m.start() for m in _CRLF.finditer(raw)]
    body = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return body, [end - bisect_left(dropped, end) for end in ends]


def parse_stream(record: RequestRecord, chunks: list[bytes], stamps: list[int], tokenizer=None) -> None:
    """Fill `record` from a streamed body; raises MalformedSSE on a broken stream."""
    body, ends = _events(chunks)
    pos, is_done, texts = 0, False, []
    while True:
        sep = body.find(b"\n\n", pos)
        if sep < 0:
            break
        stamp = stamps[bisect_right(ends, sep + 1)]
        for line in body[pos:sep].split(b"\n"):
            if line.startswith(b"data:"):
                is_done |= _data_line(record, line[5:].strip(), stamp, texts)
            elif line and not line.startswith((b":", b"event:", b"id:", b"retry:")):
                raise MalformedSSE(f"unexpected SSE line {line[:80]!r}")
        pos = sep + 2
    if body[pos:].strip():
        raise MalformedSSE(f"stream ended inside an event: {body[pos:pos + 80]!r}")
    if not is_done:
        raise MalformedSSE("stream ended without data: [DONE]")
    _count_tokens(record, texts, tokenizer)


def _data_line(record: RequestRecord, payload: bytes, stamp: int, texts: list[str]) -> bool:
    if payload == b"[DONE]":
        return True
    try:
        chunk = _decode_chunk(payload)
    except msgspec.DecodeError as exc:
        raise MalformedSSE(f"undecodable event {payload[:80]!r}: {exc}") from None
    if chunk.error is not None:
        raise MalformedSSE(f"error event in stream: {str(chunk.error)[:200]}")
    if chunk.usage is not None:
        record.usage_prompt_tokens = chunk.usage.prompt_tokens
        record.usage_completion_tokens = chunk.usage.completion_tokens
    text = "".join(_choice_text(c) for c in chunk.choices)
    if text:
        if record.first_token_ns is None:
            record.first_token_ns = stamp
        record.chunk_ns.append(stamp)
        texts.append(text)
    return False


def parse_whole(record: RequestRecord, body: bytes, end_ns: int, tokenizer=None) -> None:
    """Fill `record` from a non-streamed JSON response (TTFT = E2E latency)."""
    try:
        chunk = _decode_chunk(body)
    except msgspec.DecodeError as exc:
        raise MalformedSSE(f"undecodable response {body[:80]!r}: {exc}") from None
    if chunk.usage is not None:
        record.usage_prompt_tokens = chunk.usage.prompt_tokens
        record.usage_completion_tokens = chunk.usage.completion_tokens
    text = "".join(_choice_text(c) for c in chunk.choices)
    record.first_token_ns = end_ns
    record.chunk_ns = [end_ns]
    _count_tokens(record, [text], tokenizer)


def _count_tokens(record: RequestRecord, texts: list[str], tokenizer) -> None:
    record.output_chars = sum(len(t) for t in texts)
    if tokenizer is not None:
        per_chunk = [len(tokenizer.encode(t, add_special_tokens=False).ids) for t in texts]
        record.client_output_tokens = len(tokenizer.encode("".join(texts), add_special_tokens=False).ids)
    else:
        per_chunk = [1] * len(texts)
        record.client_output_tokens = len(texts)
    usage = record.usage_completion_tokens
    if usage and len(texts) and tokenizer is None:
        # NOTE: without a tokenizer the server's count is spread evenly over the chunks.
        record.chunk_tokens = [usage / len(texts)] * len(texts)
    else:
        record.chunk_tokens = [float(n) for n in per_chunk]
