"""Usage against the client's count: each cause named with its count, from parsed streams."""

from __future__ import annotations

from loadgen.measure.records import RequestRecord
from loadgen.measure.token_counts import reconcile_tokens
from loadgen.plan.config import RunConfig
from loadgen.run.sse import parse_stream

ROLE = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
DONE = b"data: [DONE]\n\n"


def _tok(text: str, usage: int | None = None) -> bytes:
    tail = "" if usage is None else f',"usage":{{"prompt_tokens":3,"completion_tokens":{usage}}}'
    return f'data: {{"choices":[{{"index":0,"delta":{{"content":"{text}"}}}}]{tail}}}\n\n'.encode()


def _usage(n: int) -> bytes:
    return f'data: {{"choices":[],"usage":{{"prompt_tokens":3,"completion_tokens":{n}}}}}\n\n'.encode()


def _reconcile(events: list[bytes], rule: str, tokenizer=None) -> dict:
    rec = RequestRecord(index=0, worker=0, intended_ns=0, start_ns=0, end_ns=0)
    parse_stream(rec, events, list(range(1, len(events) + 1)), tokenizer, rule=rule)
    cfg = RunConfig(concurrency=1, num_prompts=1, token_event_rule=rule)
    return reconcile_tokens([rec], cfg.drops_empty_text)


# Four tokens, the second decoded to no text (as vLLM sends it); final usage only.
EMPTY_SECOND = [ROLE, _tok("a"), _tok(""), _tok("b"), _tok("c"), _usage(4), DONE]


def test_empty_text_events_dropped_by_the_sglang_rule_are_the_shortfall():
    r = _reconcile(EMPTY_SECOND, "sglang")
    assert (r["usage_minus_client"], r["empty_text_events"], r["empty_text_events_dropped"]) == (1, 1, True)
    assert r["lost_or_unsent"] == 0 and r["several_token_events_from"] is None


def test_empty_text_events_counted_leave_no_shortfall():
    for rule in ("loadgen", "vllm"):
        r = _reconcile(EMPTY_SECOND, rule)
        assert (r["usage_minus_client"], r["empty_text_events"], r["empty_text_events_dropped"]) == (0, 1, False)
        assert r["lost_or_unsent"] == 0


def test_the_rest_is_lost_or_never_sent():
    r = _reconcile([ROLE, _tok("a"), _tok("b"), _usage(5), DONE], "loadgen")
    assert (r["usage_minus_client"], r["empty_text_events"], r["lost_or_unsent"]) == (3, 0, 3)


def test_streamed_usage_counts_several_tokens_and_the_dropped_ones_inside_them():
    # The empty event's token shows up in the next event's usage growth (2): no shortfall.
    events = [ROLE, _tok("a", 1), _tok("", 2), _tok("bc", 4), _usage(4), DONE]
    r = _reconcile(events, "sglang")
    assert (r["usage_minus_client"], r["empty_text_events"], r["lost_or_unsent"]) == (0, 1, 0)
    assert (r["several_token_extra"], r["several_token_events_from"]) == (2, "usage deltas")


def test_retokenized_text_past_the_events_names_several_token_events():
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")  # one token per character
    r = _reconcile([ROLE, _tok("a"), _tok("aaa"), _tok(""), _usage(6), DONE], "sglang", tok)
    # usage 6, two events with text counted: 1 empty dropped, 2 more tokens in "aaa", 1 lost
    assert (r["usage_minus_client"], r["empty_text_events"]) == (4, 1)
    assert (r["several_token_extra"], r["several_token_events_from"], r["lost_or_unsent"]) == (2, "retokenized", 1)
