"""The SSE parser's parts on known bytes: the common stream's fast path agrees with the general one
piece by piece, the server-timing comment is cut out to the byte, reasoning text is read, a whole
response fills its record, and every refusal names what it refused."""

from __future__ import annotations

import pytest

from loadgen.measure.records import SOURCE_PER_EVENT, RequestRecord
from loadgen.run.sse import (
    MalformedSSE,
    Reads,
    ServerErrorEvent,
    _any_stream,
    _common_stream,
    _take_server_timing,
    parse_server_timing_header,
    parse_stream,
    parse_whole,
)

E0 = b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
E1 = b'data: {"choices":[{"index":0,"delta":{"content":"b"}}]}\n\n'
USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
DONE = b"data: [DONE]\n\n"
ROLE = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'


def _rec() -> RequestRecord:
    return RequestRecord(index=0, worker=0, intended_ns=0, start_ns=0, end_ns=0)


def _char_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")  # one token per character
    return tok


def test_the_common_fast_path_and_the_general_parser_agree_on_each_piece():
    body = E0 + E1 + USAGE + DONE
    e1_end = len(E0) + len(E1)
    # piece 0 ends E0 but its read goes on (piece 1, same loop stamp); piece 1 ends between E1's
    # two newlines, piece 2 one byte into USAGE; piece 3 ends the body.
    ends = [len(E0), e1_end - 1, e1_end + 1, len(body)]
    loop = [1, 1, 2, 3]
    common = _common_stream(body, ends, loop)
    assert common is not None, "the common stream must take the fast path"
    chunks, pieces, ends_read = common
    assert [c.choices[0].delta.content for c in chunks[:2]] == ["a", "b"] and chunks[2].usage.completion_tokens == 2
    assert (pieces, ends_read) == ([0, 2, 3], [False, False, False, True])
    assert _any_stream(body, ends, loop) == common
    # one read per event: each ends its read
    ends = [len(E0), e1_end, e1_end + len(USAGE), len(body)]
    assert _common_stream(body, ends, [1, 2, 3, 4])[1:] == ([0, 1, 2], [True, True, True, True])
    assert _any_stream(body, ends, [1, 2, 3, 4])[1:] == ([0, 1, 2], [True, True, True, True])


@pytest.mark.parametrize("body", [
    b": a comment\n\n" + E0 + DONE,  # not data first
    E0 + b"data: {}\ndata: {}\n\n" + DONE,  # an event of two data lines
    E0 + b"data: 1 2\n\n" + DONE,  # an event that is not one JSON value
    E0,  # no [DONE]
])
def test_any_other_stream_leaves_the_fast_path(body):
    assert _common_stream(body, [len(body)], [1]) is None


def test_reasoning_text_comes_before_the_content_and_choices_are_joined():
    events = [b'data: {"choices":[{"delta":{"reasoning_content":"r1","content":"c1"}}]}\n\n',
              b'data: {"choices":[{"delta":{"reasoning":"r2"}}]}\n\n',
              b'data: {"choices":[{"delta":{"reasoning_content":null,"reasoning":"r3","content":"c3"}}]}\n\n',
              b'data: {"choices":[{"delta":{"reasoning_content":"r4"}}]}\n\n',
              b'data: {"choices":[{"delta":{"content":"c5"}},{"delta":{"content":"c6"}}]}\n\n',
              b'data: {"choices":[{"text":"t7"}]}\n\n', DONE]
    rec = _rec()
    assert parse_stream(rec, events, list(range(len(events))), want_text=True) == "r1c1r2r3c3r4c5c6t7"
    assert rec.output_chars == 18 and rec.client_output_tokens == 6
    assert parse_stream(_rec(), events, list(range(len(events)))) is None  # no text unless asked


def test_a_whole_response_is_one_event_stamped_at_its_end():
    rec = _rec()
    body = (b'{"choices":[{"message":{"reasoning_content":"aa","content":"aaa"}}],'
            b'"usage":{"prompt_tokens":3,"completion_tokens":7}}')
    assert parse_whole(rec, body, 777, _char_tokenizer()) == "aaaaa"
    assert (rec.first_token_ns, rec.chunk_ns, rec.chunk_tokens, rec.chunk_token_source) == (777, [777], [7.0], "usage")
    assert (rec.usage_prompt_tokens, rec.usage_completion_tokens, rec.client_output_tokens) == (3, 7, 7)
    assert (rec.output_chars, rec.retokenized_output_tokens) == (5, 5)
    rec = _rec()
    assert parse_whole(rec, b'{"choices":[{"text":"ab"},{"text":"cd"},{"message":{"reasoning_content":"e"}}]}', 9) == "abcde"
    assert (rec.chunk_tokens, rec.chunk_token_source, rec.usage_completion_tokens) == ([1.0], SOURCE_PER_EVENT, None)
    assert parse_whole(_rec(), b'{"choices":[{"message":{"content":"f"}}]}', 9) == "f"
    with pytest.raises(MalformedSSE) as exc:
        parse_whole(_rec(), b"x" * 100, 1)
    assert str(exc.value).startswith(f"undecodable response {b'x' * 80!r}: ")


def _refusal(body: bytes) -> str:
    with pytest.raises(MalformedSSE) as exc:
        parse_stream(_rec(), [body], [1])
    return str(exc.value)


def test_each_refusal_names_what_it_refused_cut_at_its_length():
    tail = b"data: " + b"y" * 100
    assert _refusal(E0 + tail) == f"stream ended inside an event: {tail[:80]!r}"
    assert _refusal(E0) == "stream ended without data: [DONE]"
    line = b"bogus: " + b"z" * 100
    assert _refusal(E0 + line + b"\n\n" + DONE) == f"unexpected SSE line {line[:80]!r}"
    error = b"first " + b"e" * 250
    assert _refusal(b"event: error\ndata: first\ndata: " + b"e" * 250 + b"\n\n" + DONE) == (
        f"event: error in stream: {error[:200]!r}")
    assert _refusal(b'data: {"error":"' + b"E" * 300 + b'"}\n\n' + DONE) == "error event in stream: " + "E" * 200
    bad = b'{"choices":[' + b"q" * 100
    assert _refusal(E0 + b"data: " + bad + b"\n\n" + DONE).startswith(f"undecodable event {bad[:80]!r}: ")
    with pytest.raises(ServerErrorEvent):
        parse_stream(_rec(), [b"event: error\ndata: x\n\n" + DONE], [1])


def test_id_and_retry_lines_and_data_without_a_space_are_sse():
    rec = _rec()
    body = b'id: 5\nretry: 100\ndata:{"choices":[{"delta":{"content":"a"}}]}\n\n' + DONE
    assert parse_stream(rec, [body], [1], want_text=True) == "a" and rec.chunk_ns == [1]


COMMENT = b': server-timing {"queue_ms":1.5}\n'


def test_a_server_timing_event_is_cut_with_its_blank_line_and_reads_move_to_the_cut():
    rec = _rec()
    start = len(E0)
    body = E0 + COMMENT + b"\n" + DONE
    cut = len(COMMENT) + 1
    # a read ending before the comment, at its start, inside it, at its end, and the body's end
    ends = [start - 1, start, start + 5, start + cut, len(body)]
    assert _take_server_timing(rec, body, ends) == (E0 + DONE, [start - 1, start, start, start, len(body) - cut])
    assert rec.server_queue_ms == 1.5


def test_a_server_timing_line_inside_an_event_is_cut_alone():
    rec = _rec()
    line = E0[:-2]  # the data line of E0, without its blank line
    body = line + b"\n" + COMMENT + b"\n" + DONE
    assert _take_server_timing(rec, body, [len(body)]) == (E0 + DONE, [len(body) - len(COMMENT)])
    assert rec.server_queue_ms == 1.5


def test_only_the_last_server_timing_in_the_tail_is_read():
    rec = _rec()
    early = b': server-timing {"queue_ms":9.0}\n\n'
    body = E0 + early + E1 + COMMENT + b"\n" + DONE
    assert _take_server_timing(rec, body, [len(body)])[0] == E0 + early + E1 + DONE
    assert rec.server_queue_ms == 1.5
    far = E0 + COMMENT + b"\n" + E1 * 100 + DONE  # the comment is 5 KB before the end: not looked for
    rec = _rec()
    assert _take_server_timing(rec, far, [len(far)])[0] == far and rec.server_queue_ms is None


def test_kernel_uncertainty_is_the_stamp_minus_its_reads_floor_and_late_past_the_tolerance():
    # three tokens, the first two sharing their reads with the next one's first bytes: coalesced,
    # stamped 3 ms and 2 ms (the tolerance: not past it) after their reads' floors; then usage.
    ms = 1_000_000
    chunks = [E0, E1[:5], E1[5:], E0[:5], E0[5:], USAGE + DONE]
    loop = [10 * ms, 10 * ms, 20 * ms, 20 * ms, 30 * ms, 40 * ms]
    stamps = [13 * ms, 13 * ms, 22 * ms, 22 * ms, 32 * ms, 40 * ms]
    floors = [10 * ms, 10 * ms, 20 * ms, 20 * ms, 30 * ms, 40 * ms]
    rec = _rec()
    parse_stream(rec, chunks, stamps, reads=Reads(loop_stamps=loop, is_kernel=True, floors=floors))
    assert rec.chunk_ns == [13 * ms, 22 * ms, 32 * ms]
    assert (rec.num_coalesced_events, rec.ttft_uncertainty_ns, rec.num_uncertain_events) == (2, 3 * ms, 1)


def test_crlf_events_each_in_a_read_take_that_reads_stamp():
    events = [e.replace(b"\n", b"\r\n") for e in (E0, E1, E0, DONE)]
    rec = _rec()
    parse_stream(rec, events, [10, 20, 30, 40])
    assert rec.chunk_ns == [10, 20, 30]


def test_loop_stamps_give_no_uncertainty_and_no_client_delay():
    rec, delays = _rec(), []
    parse_stream(rec, [E0, E1, DONE], [1, 2, 3], client_delays=delays)
    assert delays == [] and rec.ttft_uncertainty_ns is None
    rec = _rec()  # kernel stamps without the reads' floors: no bound claimed, no crash
    parse_stream(rec, [E0, E1, DONE], [1, 2, 3], reads=Reads(loop_stamps=[1, 2, 3], is_kernel=True))
    assert rec.ttft_uncertainty_ns is None and rec.chunk_ns == [1, 2]


def test_a_usage_event_between_tokens_and_usage_that_does_not_grow():
    def tok(text: str, used: int) -> bytes:
        return (b'data: {"choices":[{"delta":{"content":"%s"}}],"usage":{"prompt_tokens":1,"completion_tokens":%d}}\n\n'
                % (text.encode(), used))

    rec = _rec()
    parse_stream(rec, [tok("a", 1), USAGE.replace(b"2}", b"1}"), tok("b", 1), tok("c", 3), DONE], [1, 2, 3, 4, 5])
    assert (rec.chunk_ns, rec.chunk_tokens) == ([1, 3, 4], [1.0, 0.0, 2.0])


@pytest.mark.parametrize("choices", [
    b'{"delta":{"reasoning_content":""}}', b'{"delta":{"reasoning":""}}', b'{"text":""}',
    b'{"delta":{}},{"delta":{"content":""}}', b'{"text":null},{"text":""}',
])
def test_an_empty_text_in_any_field_of_any_choice_is_an_empty_text_event(choices):
    rec = _rec()
    parse_stream(rec, [E0, b'data: {"choices":[' + choices + b"]}\n\n", E1, DONE], [1, 2, 3, 4], rule="sglang")
    assert rec.num_empty_text_events == 1 and rec.chunk_ns == [1, 3]


def test_a_server_timing_header_value_with_stray_characters_is_skipped():
    rec = _rec()
    parse_server_timing_header(rec, b'queue;dur=X1.5X, prefill;dur="2.5", prefill_steps;desc="X3"')
    assert (rec.server_queue_ms, rec.server_prefill_ms, rec.server_prefill_steps) == (None, 2.5, None)


def _event(content: str | None, finish: str | None = None, used: int | None = -1) -> bytes:
    """A chat event; `used`: its streamed completion_tokens (-1: no usage, None: usage without it)."""
    delta = "{}" if content is None else f'{{"content":"{content}"}}'
    fin = "null" if finish is None else f'"{finish}"'
    usage = "" if used == -1 else (',"usage":{"prompt_tokens":1}' if used is None else
                                   f',"usage":{{"prompt_tokens":1,"completion_tokens":{used}}}')
    return f'data: {{"choices":[{{"delta":{delta},"finish_reason":{fin}}}]{usage}}}\n\n'.encode()


def _closing(events: list[bytes]) -> tuple[RequestRecord, str]:
    rec = _rec()
    return rec, parse_stream(rec, events + [DONE], list(range(1, len(events) + 2)), want_text=True)


def test_streamed_usage_decides_whether_the_closing_event_carried_a_token():
    # usage grew 1 -> 3 in "b": two tokens; the closing event's usage stays 3: it carried none,
    # though counting events (2) against the final usage (3) would say it did
    rec, _ = _closing([_event("a", used=1), _event("b", used=3), _event("", "stop", used=3)])
    assert (rec.chunk_ns, rec.chunk_tokens, rec.num_empty_text_events) == ([1, 2], [1.0, 2.0], 0)
    # it grew 1 -> 2 at the closing event: a token, as an empty-text event with its usage
    rec, text = _closing([_event("a", used=1), _event("", "stop", used=2)])
    assert (rec.chunk_ns, rec.chunk_tokens, rec.chunk_token_source) == ([1, 2], [1.0, 1.0], "usage deltas")
    assert rec.num_empty_text_events == 1 and text == "a"
    # the first usage seen is the closing event's: it grew from none
    rec, _ = _closing([_event("a"), _event("", "stop", used=1), USAGE.replace(b"2}", b"1}")])
    assert (rec.chunk_ns, rec.num_empty_text_events) == ([1, 2], 1)
    # usage without completion_tokens counts none
    assert _closing([_event("", "stop", used=None)])[0].num_empty_text_events == 0
    # the usage before is the latest one before the closing event
    rec, _ = _closing([_event("a", used=1), _event("b", used=2), _event("c"), _event("", "stop", used=2)])
    assert rec.num_empty_text_events == 0


def test_without_streamed_usage_the_final_usage_against_the_events_decides():
    usage = USAGE.replace(b"2}", b"3}")
    # "a" and an empty-text event taken (2 tokens), the final usage 3: the closing event carried
    # the third, an empty-text event like the one before it
    rec, text = _closing([_event("a"), _event(""), _event(None, "stop"), usage])
    assert (rec.chunk_ns, rec.num_empty_text_events, text) == ([1, 2, 3], 2, "a")
    # a final usage without completion_tokens counts none
    rec, _ = _closing([_event(None, "stop"), b'data: {"choices":[],"usage":{"prompt_tokens":1}}\n\n'])
    assert (rec.chunk_ns, rec.num_empty_text_events) == ([], 0)



def test_under_the_vllm_rule_an_announcement_between_tokens_is_as_exact_as_the_token_after_it():
    # reads: "a"; the role chunk, "b" and the start of "c"; the rest of "c" and [DONE]. "b" shares
    # its read with "c", so the role chunk written with "b" is as uncertain as "b".
    chunks = [E0, ROLE + E1 + E0[:5], E0[5:] + DONE]
    rec = _rec()
    parse_stream(rec, chunks, [1, 2, 3], reads=Reads(loop_stamps=[1, 2, 3], is_kernel=True, floors=[0, 1, 2]),
                 rule="vllm")
    assert (rec.chunk_ns, rec.num_coalesced_events) == ([1, 2, 2, 3], 2)
    rec = _rec()  # announcements only: no token to judge them by
    parse_stream(rec, [ROLE, _event(None, "stop"), DONE], [1, 2, 3], rule="vllm")
    assert (rec.chunk_ns, rec.num_coalesced_events) == ([1, 2], 0)


def test_a_server_timing_comment_at_the_very_start_of_the_body_is_taken():
    rec = _rec()
    parse_stream(rec, [b"\n" + COMMENT + b"\n" + E0 + DONE], [1])
    assert rec.server_queue_ms == 1.5 and rec.chunk_ns == [1]


def test_a_role_chunk_is_no_closing_event_even_when_usage_counts_a_token_after_it():
    rec = _rec()
    parse_stream(rec, [ROLE, USAGE.replace(b"2}", b"1}"), DONE], [1, 2, 3])
    assert (rec.chunk_ns, rec.num_empty_text_events) == ([], 0)


def test_usage_without_completion_tokens_before_the_closing_event_counts_none():
    rec, _ = _closing([_event("a", used=None), _event("", "stop", used=1)])
    assert (rec.chunk_ns, rec.num_empty_text_events) == ([1, 2], 1)


def test_a_first_token_stamped_at_its_reads_floor_is_uncertain_by_nothing():
    rec = _rec()  # "a" shares its read with the start of "b" (coalesced), stamped at the floor itself
    parse_stream(rec, [E0, E1[:5], E1[5:] + DONE], [7, 7, 9],
                 reads=Reads(loop_stamps=[10, 10, 20], is_kernel=True, floors=[7, 7, 9]))
    assert (rec.num_coalesced_events, rec.ttft_uncertainty_ns) == (1, 0)
