"""Parsing stamped SSE bodies: TTFT skips the role chunk, stamps follow the read, broken streams."""

from __future__ import annotations

import pytest

from loadgen.measure.records import RequestRecord
from loadgen.run.client import RawResponse, finish_record
from loadgen.run.sse import MalformedSSE, Reads, parse_server_timing_header, parse_stream

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


def _chat(content: str, finish: str | None = None, usage: int | None = None) -> bytes:
    fin = "null" if finish is None else f'"{finish}"'
    tail = "" if usage is None else f',"usage":{{"prompt_tokens":3,"completion_tokens":{usage}}}'
    return (f'data: {{"choices":[{{"index":0,"delta":{{"content":"{content}"}},"finish_reason":{fin}}}]'
            f'{tail}}}\n\n').encode()


def _text(text: str, finish: str | None = None) -> bytes:
    fin = "null" if finish is None else f'"{finish}"'
    return f'data: {{"choices":[{{"index":0,"text":"{text}","finish_reason":{fin}}}]}}\n\n'.encode()


def _usage(completion_tokens: int) -> bytes:
    return USAGE.replace(b"2}", b"%d}" % completion_tokens)


def _parse(chunks: list[bytes], rule: str) -> RequestRecord:
    rec = _rec()
    parse_stream(rec, chunks, list(range(10, 10 * len(chunks) + 1, 10)), rule=rule)
    return rec


# vLLM's form (chat): the role chunk, one event per token, a token that decodes to no text, the
# last token with finish_reason, then usage; each event in its own read (stamps 10, 20, ...).
VLLM_CHAT = [ROLE, _chat("a"), _chat(""), _chat("b"), _chat("c", "length"), _usage(4), DONE]


@pytest.mark.parametrize(("rule", "stamps", "tokens"), [
    ("loadgen", [20, 30, 40, 50], [1.0] * 4),  # every token, the empty one too; not the role chunk
    ("vllm", [10, 20, 30, 40, 50], [0.0] + [1.0] * 4),  # vllm bench: TTFT at the role chunk
    ("sglang", [20, 40, 50], [1.0] * 3),  # bench_serving: non-empty text only; the gap merges
])
def test_each_rule_takes_its_token_events(rule, stamps, tokens):
    rec = _parse(VLLM_CHAT, rule)
    assert rec.chunk_ns == stamps and rec.first_token_ns == stamps[0]
    assert rec.chunk_tokens == tokens and rec.client_output_tokens == sum(tokens)
    assert rec.num_empty_text_events == 1 and rec.usage_completion_tokens == 4


def test_a_finish_chunk_with_empty_text_is_no_token_unless_usage_counts_one_more():
    # The reference server's and OpenAI's completions form: the finish in an event of its own.
    separate = [_text("a"), _text("b"), _text("", "length"), _usage(2), DONE]
    assert _parse(separate, "loadgen").chunk_ns == [10, 20]
    assert _parse(separate, "vllm").chunk_ns == [10, 20, 30]  # every event with choices
    assert _parse(separate, "vllm").client_output_tokens == 2
    # vLLM's form: the last token carries the finish, and decoded to no text (e.g. EOS).
    last_empty = [_text("a"), _text("b"), _text("", "stop"), _usage(3), DONE]
    for rule, stamps in (("loadgen", [10, 20, 30]), ("vllm", [10, 20, 30]), ("sglang", [10, 20])):
        rec = _parse(last_empty, rule)
        assert rec.chunk_ns == stamps, rule
        assert rec.num_empty_text_events == 1, rule
        assert rec.client_output_tokens == len(stamps), rule


@pytest.mark.parametrize("rule", ["loadgen", "vllm", "sglang"])
def test_empty_text_events_left_out_still_count_before_the_finish_chunk(rule):
    # Three tokens, the second empty; the finish in an event of its own: no fourth token.
    per_event = [_text("a"), _text(""), _text("b"), _text("", "length"), _usage(3), DONE]
    streamed = [_chat("a", usage=1), _chat("", usage=2), _chat("", "length", usage=2), _usage(2), DONE]
    assert _parse(per_event, rule).num_empty_text_events == 1
    assert _parse(streamed, rule).num_empty_text_events == 1


def test_streamed_usage_says_whether_the_closing_empty_event_carried_a_token():
    grew = [_chat("a", usage=1), _chat("b", usage=2), _chat("", "stop", usage=3), _usage(3), DONE]
    same = [_chat("a", usage=1), _chat("b", usage=2), _chat("", "stop", usage=2), _usage(2), DONE]
    rec = _parse(grew, "loadgen")
    assert rec.chunk_ns == [10, 20, 30] and rec.chunk_tokens == [1.0, 1.0, 1.0]
    assert rec.num_empty_text_events == 1
    rec = _parse(same, "loadgen")
    assert rec.chunk_ns == [10, 20] and rec.num_empty_text_events == 0


def test_a_finish_chunk_without_text_is_taken_only_by_the_vllm_rule():
    finish = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\n'
    body = [ROLE, TOK, TOK, finish, USAGE, DONE]
    assert _parse(body, "loadgen").chunk_ns == [20, 30]
    assert _parse(body, "sglang").chunk_ns == [20, 30]
    vllm = _parse(body, "vllm")
    assert vllm.chunk_ns == [10, 20, 30, 40] and vllm.chunk_tokens == [0.0, 1.0, 1.0, 0.0]
    assert vllm.num_empty_text_events == 0
    # ... unless the usage counts a token in it (an EOS that has no text): then every rule says so.
    eos = [ROLE, TOK, TOK, finish, _usage(3), DONE]
    assert _parse(eos, "loadgen").chunk_ns == [20, 30, 40]
    assert _parse(eos, "vllm").chunk_tokens == [0.0, 1.0, 1.0, 1.0]
    assert [_parse(eos, rule).num_empty_text_events for rule in ("loadgen", "vllm", "sglang")] == [1, 1, 1]


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
    # a number cut across two data lines is "3\n4" once joined (not JSON), never read as 34
    cut = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":3\ndata: 4}}\n\n'
    rec = finish_record(RawResponse(_rec(), [TOK + cut + DONE], [1]))
    assert rec.error_class == "malformed_sse" and rec.usage_completion_tokens is None, rec


@pytest.mark.parametrize("event", [b'event: error\ndata: {"message":"overloaded"}\n\n',
                                   b'data: {"error":{"message":"boom"}}\n\n'])
def test_error_events_fail_the_request_as_server_error_event(event):
    rec = finish_record(RawResponse(_rec(), [TOK + event + TOK + DONE], [1]))
    assert rec.error_class == "server_error_event", rec.error_message


TIMING = (b': server-timing {"request_id":"x-1","arrival_to_queue_ms":0.5,"queue_ms":1.25,'
          b'"prefill_ms":3.5,"prefill_steps":2,"first_output_ms":6.0,"decode_ms":40.0}\n\n')


def _timing(rec: RequestRecord) -> tuple:
    return (rec.server_arrival_to_queue_ms, rec.server_queue_ms, rec.server_prefill_ms,
            rec.server_prefill_steps, rec.server_first_output_ms, rec.server_decode_ms)


@pytest.mark.parametrize("crlf", [False, True])
def test_server_timing_comment_split_across_reads_is_taken_and_changes_nothing_else(crlf):
    body = ROLE + TOK + TOK + USAGE + TIMING + DONE
    if crlf:
        body = body.replace(b"\n", b"\r\n")
    cut = body.index(b"server-timing") + 20  # one read ends inside the comment
    tail = len(body) - (len(DONE) * (2 if crlf else 1)) - 3
    chunks = [body[:len(ROLE) + 5], body[len(ROLE) + 5:cut], body[cut:tail], body[tail:]]
    rec, plain = _rec(), _rec()
    parse_stream(rec, chunks, [10, 20, 30, 40])
    assert _timing(rec) == (0.5, 1.25, 3.5, 2, 6.0, 40.0)
    plain_body = ROLE + TOK + TOK + USAGE + DONE
    parse_stream(plain, [plain_body[:len(ROLE) + 5], plain_body[len(ROLE) + 5:]], [10, 20])
    assert rec.chunk_ns == [20, 20] and plain.chunk_ns == [20, 20]
    assert rec.client_output_tokens == plain.client_output_tokens == 2
    assert (rec.usage_prompt_tokens, rec.usage_completion_tokens) == (3, 2)
    assert _timing(plain) == (None,) * 6


@pytest.mark.parametrize("comment", [b": server-timing {not json\n\n", b": server-timing [1, 2]\n\n",
                                     b': server-timing {"queue_ms": "slow"}\n\n',
                                     b": server-timing \n\n"])
def test_malformed_server_timing_comment_is_ignored_and_the_request_stays_ok(comment):
    raw = RawResponse(record=_rec(), chunks=[ROLE + TOK + comment[:9], comment[9:] + DONE],
                      stamps=[1, 2])
    rec = finish_record(raw)
    assert rec.ok and rec.error_class is None
    assert rec.chunk_ns == [1] and rec.client_output_tokens == 1
    assert _timing(rec) == (None,) * 6


def test_server_timing_header_of_a_whole_response():
    rec = _rec()
    body = b'{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}'
    raw = RawResponse(record=rec, chunks=[body], stamps=[5], is_stream=False,
                      server_timing=b'arrival_to_queue;dur=0.5, queue;dur=1.25, prefill;dur=3.5, '
                                    b'first_output;dur=6, decode;dur=40, prefill_steps;desc="2", '
                                    b'other;dur=9, broken;dur=x')
    assert finish_record(raw).ok
    assert _timing(rec) == (0.5, 1.25, 3.5, 2, 6.0, 40.0)


def test_kernel_stamps_name_coalesced_events_and_bound_the_first_token():
    rec = _rec()
    delays: list[int] = []
    # Three reads: the role chunk; two tokens in one read (two body pieces); the last token with
    # the usage and [DONE]. Each piece: its read's kernel stamp, loop stamp and lower bound.
    chunks = [ROLE, TOK, TOK, TOK + USAGE + DONE]
    reads = Reads(loop_stamps=[100, 300, 300, 400], is_kernel=True, floors=[0, 100, 100, 300])
    parse_stream(rec, chunks, [90, 250, 250, 390], reads=reads, client_delays=delays)
    assert rec.chunk_ns == [250, 250, 390]
    # The first token shared its read with the second: coalesced, within (100, 250]; the second
    # ended its read, the third is followed only by usage and [DONE].
    assert rec.num_coalesced_events == 1 and rec.ttft_uncertainty_ns == 150
    assert rec.num_uncertain_events == 0  # 150 ns is within the 2 ms tolerance
    assert delays == [10, 50, 10]  # one per read: loop stamp - kernel stamp
    loop = _rec()
    parse_stream(loop, chunks, [100, 300, 300, 400])  # loop stamps: no bound claimed
    assert loop.ttft_uncertainty_ns is None and loop.num_coalesced_events == 1


def test_under_the_vllm_rule_a_role_chunk_in_the_first_tokens_read_is_as_exact_as_that_token():
    # vLLM writes the role chunk with the first token; the last token comes with its finish chunk.
    # Before, the role chunk (a token event under the vllm rule) counted as coalesced with the
    # first token, so every request's TTFT was "uncertain" by its whole TTFT.
    chunks = [ROLE, _chat("a"), _chat("b"), _chat("c"), _chat("", "length"), USAGE + DONE]
    reads = Reads(loop_stamps=[100, 100, 200, 300, 300, 400], is_kernel=True, floors=[0, 0, 100, 200, 200, 300])
    stamps = [90, 90, 190, 290, 290, 390]
    rec = _rec()
    parse_stream(rec, chunks, stamps, reads=reads, rule="vllm")
    assert rec.chunk_ns == [90, 90, 190, 290, 290]
    assert rec.num_coalesced_events == 0 and rec.ttft_uncertainty_ns == 0
    # The same role chunk in a read of its own, then two tokens sharing one: only the first of
    # those is coalesced; the role chunk ended its read and is exact.
    reads = Reads(loop_stamps=[100, 200, 200, 300, 300, 400], is_kernel=True, floors=[0, 100, 100, 200, 200, 300])
    rec = _rec()
    parse_stream(rec, chunks, [90, 190, 190, 290, 290, 390], reads=reads, rule="vllm")
    assert rec.num_coalesced_events == 1 and rec.ttft_uncertainty_ns == 0
    # The role chunk and the first token in one read, the first token sharing it with the second:
    # the role chunk is as uncertain as the first token.
    reads = Reads(loop_stamps=[100, 100, 100, 300, 300, 400], is_kernel=True, floors=[0, 0, 0, 200, 200, 300])
    rec = _rec()
    parse_stream(rec, chunks, [90, 90, 90, 290, 290, 390], reads=reads, rule="vllm")
    assert rec.num_coalesced_events == 2 and rec.ttft_uncertainty_ns == 90


# NOTE: before, desc="1e30" killed the worker (an int past int64 in the results' msgpack), and
# nan / inf failed the request; a span of 1e308 made the TTFT split's means NaN.
@pytest.mark.parametrize("steps", [b'"1e30"', b'"nan"', b'"inf"', b'"-1"', b"9223372036854775808", b'"1.5"'])
def test_server_timing_header_values_out_of_range_are_ignored(steps):
    rec = _rec()
    parse_server_timing_header(rec, b"arrival_to_queue;dur=0.5, queue;dur=nan, prefill;dur=inf, "
                                    b"first_output;dur=1e308, decode;dur=-1, prefill_steps;desc=" + steps)
    assert _timing(rec) == (0.5, None, None, None, None, None)
    parse_server_timing_header(rec, b'queue;dur=1000000000, prefill;dur=0, prefill_steps;desc="9223372036854775807"')
    assert _timing(rec) == (None, 1e9, 0.0, (1 << 63) - 1, None, None)


def test_server_timing_comment_values_out_of_range_are_ignored_the_same_way():
    rec = _rec()
    comment = (b': server-timing {"arrival_to_queue_ms":0.5,"queue_ms":1e308,"prefill_ms":-1,'
               b'"prefill_steps":2,"first_output_ms":1e9,"decode_ms":1000000000.5}\n\n')
    parse_stream(rec, [ROLE + TOK + comment + DONE], [1])
    assert rec.chunk_ns == [1] and _timing(rec) == (0.5, None, None, 2, 1e9, None)
