"""Parsing stamped SSE bodies: TTFT skips the role chunk, stamps follow the read, broken streams."""

from __future__ import annotations

import pytest

from loadgen.records import RequestRecord
from loadgen.sse import MalformedSSE, parse_stream

ROLE = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
TOK = b'data: {"choices":[{"index":0,"delta":{"content":"a","reasoning_content":null}}]}\n\n'
USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
DONE = b"data: [DONE]\n\n"


def _rec() -> RequestRecord:
    return RequestRecord(index=0, worker=0, intended_ns=0, start_ns=0, end_ns=0)


def test_role_chunk_is_not_the_first_token_and_events_take_their_read_stamp():
    rec = _rec()
    body = TOK + USAGE + DONE
    chunks = [ROLE, TOK[:10], TOK[10:] + body[:5], body[5:]]
    parse_stream(rec, chunks, [100, 200, 300, 400])
    assert rec.first_token_ns == 300
    assert rec.chunk_ns == [300, 400]
    assert (rec.usage_prompt_tokens, rec.usage_completion_tokens, rec.client_output_tokens) == (3, 2, 2)


def test_crlf_separators_and_comments_are_accepted():
    rec = _rec()
    parse_stream(rec, [b": keep-alive\r\n\r\n" + TOK.replace(b"\n", b"\r\n") + DONE], [7])
    assert rec.chunk_ns == [7]


@pytest.mark.parametrize("body", [TOK, TOK + b"data: {oops\n\n" + DONE, TOK + b"garbage\n\n" + DONE,
                                  TOK + b'data: {"error":{"message":"boom"}}\n\n' + DONE])
def test_broken_streams_are_malformed(body):
    with pytest.raises(MalformedSSE):
        parse_stream(_rec(), [body], [1])


def test_crlf_split_across_reads_is_one_line_end_stamped_by_the_later_read():
    crlf_tok, crlf_done = TOK.replace(b"\n", b"\r\n"), DONE.replace(b"\n", b"\r\n")
    # each event's last "\r" ends one read; its "\n" starts the next
    chunks = [crlf_tok[:-1], b"\n" + crlf_tok[:-1], b"\n" + crlf_done[:-1], b"\n"]
    rec = _rec()
    parse_stream(rec, chunks, [10, 20, 30, 40])
    assert rec.chunk_ns == [20, 30]
    assert rec.client_output_tokens == 2


def test_lone_cr_line_ends_are_accepted():
    rec = _rec()
    parse_stream(rec, [TOK.replace(b"\n", b"\r"), DONE.replace(b"\n", b"\r")], [5, 6])
    assert rec.chunk_ns == [5]
