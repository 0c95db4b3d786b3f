"""Parsing stamped SSE bodies: TTFT skips the role chunk, stamps follow the read, broken streams."""

from __future__ import annotations

import pytest

from loadgen.measure.records import RequestRecord
from loadgen.run.client import RawResponse, finish_record
from loadgen.run.sse import MalformedSSE, parse_stream

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


def _usage_tok(text: str, completion_tokens: int) -> bytes:
    return (b'data: {"choices":[{"index":0,"delta":{"content":"' + text.encode() + b'"}}],'
            b'"usage":{"prompt_tokens":3,"completion_tokens":%d}}\n\n' % completion_tokens)


def test_streamed_usage_gives_each_event_its_tokens():
    rec = _rec()
    body = [ROLE, _usage_tok("ab", 1), _usage_tok("cde", 4), _usage_tok("f", 5), USAGE.replace(b"2}", b"5}"), DONE]
    parse_stream(rec, body, [1, 2, 3, 4, 5, 6])
    assert rec.chunk_tokens == [1.0, 3.0, 1.0] and rec.chunk_token_source == "usage deltas"
    assert rec.client_output_tokens == 5 and rec.usage_completion_tokens == 5
    assert rec.chunk_ns == [2, 3, 4] and rec.first_token_ns == 2


def test_without_streamed_usage_each_event_is_one_token_and_retokenizing_is_apart():
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    rec = _rec()
    parse_stream(rec, [ROLE, TOK, TOK.replace(b'"a"', b'"aaa"'), USAGE, DONE], [1, 2, 3, 4, 5], tok)
    assert rec.chunk_tokens == [1.0, 1.0] and rec.chunk_token_source == "one per content event"
    assert rec.client_output_tokens == 2 and rec.retokenized_output_tokens == 4


def test_many_events_in_few_reads_take_the_stamp_of_the_read_that_ended_them():
    body = ROLE + TOK * 5 + USAGE + DONE
    cut = len(ROLE) + 2 * len(TOK) + 3  # inside the third token event
    rec = _rec()
    parse_stream(rec, [body[:cut], body[cut:]], [10, 20])
    assert rec.chunk_ns == [10, 10, 20, 20, 20]
    split_sep = len(ROLE) + len(TOK) - 1  # between the two newlines that end the first token event
    rec = _rec()
    parse_stream(rec, [body[:split_sep], body[split_sep:]], [10, 20])
    assert rec.chunk_ns == [20, 20, 20, 20, 20]


@pytest.mark.parametrize("value", [-5, 10**30, 1 << 63])
def test_usage_negative_or_past_int64_is_malformed(value):
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d}}\n\n' % value
    raw = RawResponse(_rec(), [TOK + usage + DONE], [1])
    rec = finish_record(raw)
    assert rec.error_class == "malformed_sse" and "usage" in rec.error_message


def test_a_leading_bom_is_dropped():
    rec = _rec()
    parse_stream(rec, [b"\xef\xbb\xbf" + TOK, TOK + DONE], [5, 6])
    assert rec.chunk_ns == [5, 6]


def test_multi_line_data_is_one_event_joined_with_newlines():
    rec = _rec()
    split = b'data: {"choices":[{"index":0,\ndata: "delta":{"content":"a"}}]}\n\n'
    parse_stream(rec, [split, split + USAGE + DONE], [5, 6])
    assert rec.chunk_ns == [5, 6] and rec.client_output_tokens == 2


@pytest.mark.parametrize("event", [b'event: error\ndata: {"message":"overloaded"}\n\n',
                                   b'data: {"error":{"message":"boom"}}\n\n'])
def test_error_events_fail_the_request_as_server_error_event(event):
    rec = finish_record(RawResponse(_rec(), [TOK + event + TOK + DONE], [1]))
    assert rec.error_class == "server_error_event", rec.error_message
