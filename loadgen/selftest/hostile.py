"""Hostile and odd responses for the scripted server's `--faults` (tests of loadgen's defences).

Each fault writes a whole response at once (no pacing): "endless_headers" (header lines until the
client gives up), "long_header" (one header line that never ends), "huge_usage" / "negative_usage"
(usage of 10^30 / -5 tokens), "early_hints" (a 100 and a 103 head before the real 200), "double"
(a second, unasked-for response right after a complete one), "bom" (a UTF-8 BOM before the first
event), "multiline_data" (each event's JSON split over several `data:` lines), "error_event"
(`event: error` in the middle of the stream), "stray" (a different, unasked-for response right after
a complete one), "big_head" (a complete head of 32 KiB of header lines, sent in one write),
"gzip_always" (a gzip body with `content-encoding: gzip`, whatever the request accepted).
"""

from __future__ import annotations

import asyncio
import gzip

import msgspec

FAULTS = frozenset({"endless_headers", "long_header", "huge_usage", "negative_usage", "early_hints",
                    "double", "bom", "multiline_data", "error_event", "stray", "big_head", "gzip_always"})
_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
_EARLY = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n"
_BOM = b"\xef\xbb\xbf"
_STRAY = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5\r\n\r\nstray"
_PAD_LINE = b"x-pad: " + b"a" * 1015 + b"\r\n"  # 1 KiB
_WRITE_BUFFER_CAP = 1 << 20


def respond(conn, fault: str, is_chat: bool, n: int, prompt_tokens: int) -> None:
    """Write the response `fault` names on `conn` (a testserver handler with `write` and `transport`)."""
    if fault in ("endless_headers", "long_header"):
        is_lines = fault == "endless_headers"
        conn.write(_HEAD + (b"" if is_lines else b"x-long: "))
        _endless_head(conn, b"x-pad: " + b"a" * 1000 + b"\r\n" if is_lines else b"a" * 1024)
        return
    usage = {"huge_usage": 10**30, "negative_usage": -5}.get(fault, n)
    events = [_event(is_chat, " tok") for _ in range(n)]
    events.append(b"data: " + msgspec.json.encode(
        {"id": "c", "choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": usage,
                                             "total_tokens": prompt_tokens + usage}}) + b"\n\n")
    if fault == "multiline_data":
        events = [e.replace(b'"choices":', b'"choices":\ndata: ') for e in events]
    if fault == "error_event":
        events.insert(n // 2, b'event: error\ndata: {"message":"server overloaded"}\n\n')
    body = b"".join(events) + b"data: [DONE]\n\n"
    if fault == "bom":
        body = _BOM + body
    head = _HEAD + (_PAD_LINE * 32 if fault == "big_head" else b"")
    if fault == "gzip_always":
        body, head = gzip.compress(body), head + b"content-encoding: gzip\r\n"
    response = head + b"content-length: %d\r\n\r\n" % len(body) + body
    if fault == "early_hints":
        response = _EARLY + response
    if fault == "double":
        response += response
    elif fault == "stray":
        response += _STRAY
    conn.write(response)


def _event(is_chat: bool, text: str) -> bytes:
    choice = {"index": 0, "delta": {"content": text}} if is_chat else {"index": 0, "text": text}
    return b"data: " + msgspec.json.encode({"id": "c", "choices": [choice]}) + b"\n\n"


def _endless_head(conn, piece: bytes) -> None:
    """Write `piece` every millisecond while the client reads (bounded write buffer)."""
    if conn.transport is None or conn.transport.is_closing():
        return
    if conn.transport.get_write_buffer_size() < _WRITE_BUFFER_CAP:
        conn.write(piece * 64)
    asyncio.get_running_loop().call_later(0.001, _endless_head, conn, piece)
