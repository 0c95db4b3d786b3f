"""Output kinds: which of a response's token events carry reasoning, the answer or a tool call, and
the request's stamps and counts of each (off the read path, after `sse.parse_stream` found them).

Only a stream whose body holds a reasoning or tool-call field with a value comes here (`has_kinds`:
one scan of the body in C); in any other stream the first answer token is the first token event
with text (`first_answer`).
"""

from __future__ import annotations

import re

from loadgen.measure.records import RequestRecord

# NOTE: a value other than null, "" or []. Inside a JSON string a quote is escaped, so text that
# merely mentions the field never matches; a false match would only cost the per-event pass.
_MARKED = re.compile(rb'"(?:reasoning_content|reasoning|tool_calls)"\s*:\s*(?!null|""|\[\s*\])\S')


def has_kinds(body: bytes) -> bool:
    """Whether a body may carry reasoning or tool-call deltas (never False when it does)."""
    return _MARKED.search(body) is not None


def first_answer(chunk_ns: list[int], texts: list[str]) -> int | None:
    """A stream without reasoning or tool calls: the stamp of its first token event with text."""
    return next((ns for ns, text in zip(chunk_ns, texts, strict=False) if text), None)


def time_stream(record: RequestRecord, chunks: list, content: list[int]) -> None:
    """Stamp the first answer, reasoning and tool-call token events and count the reasoning and
    tool-call ones. `content`: the token events' indices in `chunks`, in the order of
    `record.chunk_ns` and `record.chunk_tokens`; an event's reasoning tokens are counted as its
    output tokens are (usage deltas, else one per event)."""
    tokens = 0.0
    for k, ns, num in zip(content, record.chunk_ns, record.chunk_tokens, strict=False):
        is_answer, is_reasoning, is_tool = _kinds(chunks[k].choices)
        if is_reasoning:
            if record.first_reasoning_ns is None:
                record.first_reasoning_ns = ns
            record.last_reasoning_ns = ns
            record.num_reasoning_events += 1
            tokens += num
        if is_answer and record.first_answer_ns is None:
            record.first_answer_ns = ns
        if is_tool:
            if record.first_tool_call_ns is None:
                record.first_tool_call_ns = ns
            record.num_tool_call_events += 1
    record.reasoning_event_tokens = int(tokens)


def time_whole(record: RequestRecord, choices: list, end_ns: int) -> None:
    """A whole response: its answer, reasoning and tool calls all came at `end_ns`."""
    messages = [c.message for c in choices if c.message is not None]
    if any(m.content for m in messages) or any(c.text for c in choices):
        record.first_answer_ns = end_ns
    if any(m.tool_calls for m in messages):
        record.first_tool_call_ns = end_ns
        record.num_tool_call_events = 1
    if any(m.reasoning_content for m in messages):
        record.first_reasoning_ns = record.last_reasoning_ns = end_ns
        record.num_reasoning_events = 1


def _kinds(choices: list) -> tuple[bool, bool, bool]:
    """Whether an event's choices carry answer text, reasoning text, tool-call deltas."""
    is_answer = is_reasoning = is_tool = False
    for c in choices:
        d = c.delta
        if d is None:
            is_answer = is_answer or bool(c.text)
            continue
        is_answer = is_answer or bool(d.content)
        is_reasoning = is_reasoning or bool(d.reasoning_content or d.reasoning)
        is_tool = is_tool or bool(d.tool_calls)
    return is_answer, is_reasoning, is_tool
