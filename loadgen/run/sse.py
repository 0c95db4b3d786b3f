"""Turning a stamped response body into a request record, after the request (off the read path).

Each SSE event is stamped with the arrival time of the network read that completed it. Token events
(TTFT is the first, ITL the gaps between them) follow a rule (`RunConfig.token_event_rule`, README
"Token events"): loadgen's takes every event whose choice carries a text field, even an empty one,
except a role or finish announcement; `vllm` takes every event with `choices`, as `vllm bench serve`
does; `sglang` only events with non-empty text, as SGLang's bench_serving does.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Annotated, Any

import msgspec

from loadgen.measure.records import SOURCE_PER_EVENT, SOURCE_USAGE_DELTAS, RequestRecord
from loadgen.plan.config import (
    ANNOUNCEMENT,
    CLIENT_BOUND_STAMP_MS,
    EMPTY_TEXT,
    NO_TEXT,
    TOKEN_EVENT_RULES,
)
from loadgen.run import output_kinds

#: A kernel stamp that may lie further than this after its event's arrival counts as uncertain.
STAMP_TOLERANCE_NS = int(CLIENT_BOUND_STAMP_MS * 1e6)


class MalformedSSE(ValueError):
    """The stream broke the SSE / OpenAI chunk format."""


class ServerErrorEvent(MalformedSSE):
    """The server reported an error inside the stream (`event: error`, or a chunk with `error`)."""


# NOTE: gc=False: decoded JSON holds no cycles, and untracked structs cost the collector nothing.
# NOTE: Any: a server that sends arguments as an object (not OpenAI's string) still has a tool call;
# only its string parts are text.
class _Function(msgspec.Struct, gc=False):
    name: Any = None
    arguments: Any = None


class _ToolCall(msgspec.Struct, gc=False):
    function: _Function | None = None


class _Delta(msgspec.Struct, gc=False):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[_ToolCall] | None = None
    role: Any = None


class _Message(msgspec.Struct, gc=False):
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(msgspec.Struct, gc=False):
    delta: _Delta | None = None
    text: str | None = None
    message: _Message | None = None
    finish_reason: Any = None


# NOTE: usage is the server's word: a negative count or one past int64 is a broken stream (it
# once killed a worker in the records' msgpack encoding, and gave negative throughput).
MAX_COUNT = (1 << 63) - 1
_Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNT)]
#: The largest server-timing span taken (about 11.6 days); one past it, negative or not finite is
#: ignored, in the header and the comment alike (it once killed a worker, and made NaN of means).
MAX_SPAN_MS = 1e9


class _CompletionDetails(msgspec.Struct, gc=False):
    reasoning_tokens: _Count | None = None


class _PromptTokensDetails(msgspec.Struct, gc=False):
    cached_tokens: _Count | None = None  # issue 32: prompt tokens the server's prefix cache held


class _Usage(msgspec.Struct, gc=False):
    prompt_tokens: _Count | None = None
    completion_tokens: _Count | None = None
    completion_tokens_details: _CompletionDetails | None = None
    prompt_tokens_details: _PromptTokensDetails | None = None

    @property
    def cached_tokens(self) -> int | None:
        return self.prompt_tokens_details.cached_tokens if self.prompt_tokens_details is not None else None


class _Chunk(msgspec.Struct, gc=False):
    choices: list[_Choice] = []
    usage: _Usage | None = None
    error: dict | str | None = None


class _ServerTiming(msgspec.Struct, gc=False):
    """The reference server's per-request timing (reference_impl/server/timing.py)."""

    arrival_to_queue_ms: float | None = None
    queue_ms: float | None = None
    prefill_ms: float | None = None
    prefill_steps: _Count | None = None
    first_output_ms: float | None = None
    decode_ms: float | None = None


_decode_timing = msgspec.json.Decoder(_ServerTiming).decode
_TIMING_MARK = b"\n: server-timing "
_TIMING_TAIL_BYTES = 4096
_decode_chunk = msgspec.json.Decoder(_Chunk).decode
_decode_chunks = msgspec.json.Decoder(list[_Chunk]).decode
_DONE_TAIL = b"\n\ndata: [DONE]\n\n"
_CRLF = re.compile(b"\r\n")
#: Decoded events, the body piece that completed each, and which pieces ended their read right after an event.
_Decoded = tuple[list[_Chunk], list[int], list[bool]]
_BOM = b"\xef\xbb\xbf"


def _choice_text(choice: _Choice) -> str:
    d = choice.delta
    if d is not None:
        if d.reasoning_content is None and d.reasoning is None and d.tool_calls is None:
            return d.content or ""
        return (d.reasoning_content or d.reasoning or "") + (d.content or "") + _tool_text(d.tool_calls)
    if (m := choice.message) is not None:
        return (m.reasoning_content or "") + (m.content or "") + _tool_text(m.tool_calls)
    return choice.text or ""


def _tool_text(calls: list[_ToolCall] | None) -> str:
    """The streamed text of tool calls: each function's name, then its argument fragments."""
    if not calls:
        return ""
    return "".join([_str(f.name) + _str(f.arguments) for c in calls if (f := c.function) is not None])


def _str(value) -> str:
    return value if isinstance(value, str) else ""


def _events(chunks: list[bytes]) -> tuple[bytes, list[int]]:
    """The body with line ends made `\\n` and no leading BOM, and each read's end offset in it.

    A `\\r\\n` split across two reads is one line end that belongs to the later read: the `\\r` is
    dropped (not the `\\n`), so an event completed by that `\\n` takes the later read's stamp.
    """
    raw = b"".join(chunks)
    ends, total = [], 0
    for c in chunks:
        total += len(c)
        ends.append(total)
    if raw.startswith(_BOM):  # NOTE: the SSE spec drops one leading BOM
        raw, ends = raw[3:], [max(end - 3, 0) for end in ends]
    if b"\r" not in raw:
        return raw, ends
    dropped = [m.start() for m in _CRLF.finditer(raw)]
    body = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return body, [end - bisect_left(dropped, end) for end in ends]


@dataclass
class Reads:
    """How a body's pieces were read (`connection.py`): each piece's loop stamp (equal for the
    pieces of one read), whether the stamps are the kernel's, and each piece's lower bound: its
    read's bytes arrived after it (empty: unknown)."""

    loop_stamps: list[int]
    is_kernel: bool
    floors: list[int] = field(default_factory=list)


def parse_stream(record: RequestRecord, chunks: list[bytes], stamps: list[int], tokenizer=None,
                 want_text: bool = False, reads: Reads | None = None,
                 client_delays: list[int] | None = None, rule: str = "loadgen", decode=None) -> str | None:
    """Fill `record` from a streamed body; raises MalformedSSE on a broken stream. Returns the
    answer's text with `want_text` (multi-turn sessions), else None. `decode(body, ends, loop)`
    reads another API's events as chat chunks (run/responses.py); default: the chat stream's.

    Token events follow `rule` (TOKEN_EVENT_RULES). Output tokens are counted per token event as the server
    emitted them: the growth of `usage.completion_tokens` when the server streams usage in every
    chunk, else one per event (none for an announcement the vllm rule takes).
    Each event takes the stamp of the read that completed it; an event followed by more bytes in
    that read is coalesced (`record.num_coalesced_events`), and with kernel stamps the first
    token event's uncertainty is its stamp minus its read's lower bound (`ttft_uncertainty_ns`,
    0 when exact). `client_delays` gets each read's loop stamp minus its kernel stamp."""
    reads = reads or Reads(loop_stamps=stamps, is_kernel=False)
    loop = reads.loop_stamps
    body, ends = _events(chunks)
    body, ends = _take_server_timing(record, body, ends)
    decoded = _common_stream(body, ends, loop) if decode is None else decode(body, ends, loop)
    if decoded is None:
        decoded = _any_stream(body, ends, loop)
    events, pieces, exact = _take_chunks(record, decoded, stamps, loop, TOKEN_EVENT_RULES[rule])
    record.chunk_tokens, record.chunk_token_source = _per_event_tokens(events.cumulative, events.announced)
    if reads.is_kernel and reads.floors and pieces:
        _uncertainty(record, reads.floors, stamps, pieces, exact)
    if client_delays is not None and reads.is_kernel:
        # NOTE: a read's pieces share its stamps; reads differ in their loop stamps.
        client_delays.extend([lp - st for lp, st in dict.fromkeys(zip(loop, stamps, strict=True))])
    if output_kinds.has_kinds(body):
        output_kinds.time_stream(record, decoded[0], events.content)
    else:
        record.first_answer_ns = output_kinds.first_answer(record.chunk_ns, events.texts)
    _count_tokens(record, events.texts, tokenizer)
    return "".join(events.texts) if want_text else None


def _uncertainty(record: RequestRecord, floors: list[int], stamps: list[int], pieces: list[int],
                 exact: list[bool]) -> None:
    """How late the token events' kernel stamps may be: 0 for an event that ended its read, else
    its stamp minus its read's lower bound. Sets the first event's and counts those past
    STAMP_TOLERANCE_NS."""
    late = [stamps[p] - floors[p] for p, is_exact in zip(pieces, exact, strict=True) if not is_exact]
    record.ttft_uncertainty_ns = 0 if exact[0] else max(stamps[pieces[0]] - floors[pieces[0]], 0)
    record.num_uncertain_events = sum([u > STAMP_TOLERANCE_NS for u in late])


def _take_server_timing(record: RequestRecord, body: bytes, ends: list[int]) -> tuple[bytes, list[int]]:
    """Cut the server's `: server-timing {json}` comment out of the body's tail, into the record.

    Only the tail is searched: the reference server sends the comment just before [DONE]. Without
    it the common stream's one-pass decoding applies. A comment that is not the expected JSON is
    dropped all the same, and counts as nothing (a comment never breaks a stream)."""
    start = body.rfind(_TIMING_MARK, max(0, len(body) - _TIMING_TAIL_BYTES))
    if start < 0:
        return body, ends
    start += 1
    line_end = body.find(b"\n", start)
    if line_end < 0:
        return body, ends
    try:
        _set_server_timing(record, _decode_timing(body[start + len(_TIMING_MARK) - 1:line_end]))
    except msgspec.DecodeError:
        pass
    stop = line_end + 1
    if body[start - 2:start] == b"\n\n" and body[stop:stop + 1] == b"\n":
        stop += 1  # NOTE: an event of its own: its blank line goes too, else only its line
    cut = stop - start
    return body[:start] + body[stop:], [end if end <= start else max(start, end - cut) for end in ends]


def _in_range(value, high: float):
    """`value` when it is in [0, high] (so never NaN or infinite), else None."""
    return value if value is not None and 0 <= value <= high else None


def _set_server_timing(record: RequestRecord, timing: _ServerTiming) -> None:
    record.server_arrival_to_queue_ms = _in_range(timing.arrival_to_queue_ms, MAX_SPAN_MS)
    record.server_queue_ms = _in_range(timing.queue_ms, MAX_SPAN_MS)
    record.server_prefill_ms = _in_range(timing.prefill_ms, MAX_SPAN_MS)
    record.server_prefill_steps = _in_range(timing.prefill_steps, MAX_COUNT)
    record.server_first_output_ms = _in_range(timing.first_output_ms, MAX_SPAN_MS)
    record.server_decode_ms = _in_range(timing.decode_ms, MAX_SPAN_MS)


def parse_server_timing_header(record: RequestRecord, value: bytes) -> None:
    """Fill the record's server timing from a W3C `Server-Timing` header (a whole response):
    `name;dur=ms` per metric, `prefill_steps;desc="N"` (an integer); unknown or broken entries are
    skipped, and values out of range are ignored as in the comment."""
    fields: dict[str, float | int] = {}
    for entry in value.decode("latin-1").split(","):
        name, *params = (p.strip() for p in entry.split(";"))
        for param in params:
            key, _, number = param.partition("=")
            if key in ("dur", "desc"):
                try:
                    fields[name] = (int if name == "prefill_steps" else float)(number.strip('"'))
                except ValueError:
                    pass
    steps = fields.pop("prefill_steps", None)
    spans = {f"{name}_ms": ms for name, ms in fields.items() if f"{name}_ms" in _ServerTiming.__struct_fields__}
    _set_server_timing(record, _ServerTiming(**spans, prefill_steps=steps))


def _common_stream(body: bytes, ends: list[int], loop: list[int]) -> _Decoded | None:
    """The common stream, one `data: ` line per event and [DONE] last, decoded without a loop per event.

    JSON escapes newlines inside strings, so when the body holds exactly two `\\n` per event, every
    `\\n\\n` is an event end. Returns None for any other stream (or an undecodable one)."""
    num = body.count(b"\n\ndata: ") + 1
    if not (body.startswith(b"data: ") and body.endswith(_DONE_TAIL) and body.count(b"\n") == 2 * num):
        return None
    try:
        chunks = _decode_chunks(b"[" + body[6:-len(_DONE_TAIL)].replace(b"\n\ndata: ", b",") + b"]")
    except msgspec.DecodeError:
        return None
    if len(chunks) != num - 1:
        return None  # an event that was not one JSON value
    pieces: list[int] = []
    start, newlines, done = 0, 0, 0
    for j, end in enumerate(ends):
        newlines += body.count(b"\n", start, end)
        # NOTE: newlines come in pairs, one pair per event; an event ends at its pair's second one.
        if num_new := newlines // 2 - done:
            pieces += [j] * num_new
        start, done = end, newlines // 2
    # NOTE: here the only newlines are the pairs that end events: a piece ends right after an
    # event exactly when its last two bytes are a pair (and it ends its read when the next piece
    # came in another read).
    last = len(ends) - 1
    ends_read = [body[end - 1] == 10 and body[end - 2] == 10 and (j == last or loop[j + 1] != loop[j])
                 for j, end in enumerate(ends)]
    return chunks, pieces[: len(chunks)], ends_read


def _any_stream(body: bytes, ends: list[int], loop: list[int]) -> _Decoded:
    """Any valid SSE stream (comments, several lines per event, CR line ends); MalformedSSE otherwise."""
    events = body.split(b"\n\n")
    if (tail := events.pop()).strip():
        raise MalformedSSE(f"stream ended inside an event: {tail[:80]!r}")
    payloads, pieces, event_ends, is_done = _payloads(events, ends)
    if not is_done:
        raise MalformedSSE("stream ended without data: [DONE]")
    last, at_event_end = len(ends) - 1, set(event_ends)
    ends_read = [end in at_event_end and (j == last or loop[j + 1] != loop[j]) for j, end in enumerate(ends)]
    return decode_all(payloads), pieces, ends_read


def _payloads(events: list[bytes], ends: list[int]) -> tuple[list[bytes], list[int], list[int], bool]:
    """Each JSON `data:` payload with the piece that completed it, every event's end offset, and
    whether [DONE] came."""
    payloads, pieces, event_ends, pos, done = [], [], [], 0, False
    for event in events:
        pos += len(event) + 2
        event_ends.append(pos)
        if event.startswith(b"data: ") and b"\n" not in event:
            payload = event[6:].strip()  # NOTE: the common case, one data line, skips the split below
        elif (payload := _event_data(event)) is None:
            continue
        if payload == b"[DONE]":
            done = True
            continue
        payloads.append(payload)
        pieces.append(bisect_right(ends, pos - 1))
    return payloads, pieces, event_ends, done


def _event_data(event: bytes) -> bytes | None:
    """An event's `data:` lines joined with `\\n` (the SSE spec); None when it has none.

    Raises ServerErrorEvent for `event: error`, MalformedSSE for a line that is no SSE field."""
    data, kind = [], b""
    for line in event.split(b"\n"):
        name, _, value = line.partition(b":")
        value = value[1:] if value.startswith(b" ") else value
        if name == b"data":
            data.append(value)
        elif name == b"event":
            kind = value
        elif line and name not in (b"", b"id", b"retry"):
            raise MalformedSSE(f"unexpected SSE line {line[:80]!r}")
    if kind == b"error":
        raise ServerErrorEvent(f"event: error in stream: {b' '.join(data)[:200]!r}")
    return b"\n".join(data).strip() if data else None


def decode_all(payloads: list[bytes], decode_many=_decode_chunks, decode_one=_decode_chunk) -> list:
    """All events in one msgspec call (chat chunks by default); on a bad one, find and name it."""
    try:
        return decode_many(b"[" + b",".join(payloads) + b"]")
    except msgspec.DecodeError:
        pass
    for payload in payloads:
        try:
            decode_one(payload)
        except msgspec.DecodeError as exc:
            raise MalformedSSE(f"undecodable event {payload[:80]!r}: {exc}") from None
    raise MalformedSSE("undecodable stream")  # e.g. a payload that is not one JSON value


def _take_chunks(record: RequestRecord, decoded: _Decoded, stamps: list[int], loop: list[int],
                 takes: tuple[bool, ...]) -> tuple[_TokenEvents, list[int], list[bool]]:
    """Usage, the token events under a rule (`takes`, see TOKEN_EVENT_RULES) with their stamps, and each token
    event's piece and whether its stamp is exact (`_exact_content`)."""
    chunks, pieces, ends_read = decoded
    events = _token_events(chunks, takes)
    final = next((c.usage for c in reversed(chunks) if c.usage is not None), None)
    if final is not None:
        _take_usage(record, final)
    if events.closing is not None:
        _settle_closing(events, chunks, final, takes)
    content = events.content
    content_pieces = [pieces[k] for k in content]
    chunk_ns = record.chunk_ns
    chunk_ns += [stamps[p] for p in content_pieces]
    if chunk_ns:
        record.first_token_ns = chunk_ns[0]
    record.num_empty_text_events = events.num_empty
    exact = _exact_content(content, pieces, ends_read, loop, events.announced)
    record.num_coalesced_events = len(exact) - sum(exact)
    return events, content_pieces, exact


def _take_usage(record: RequestRecord, usage: _Usage) -> None:
    record.usage_prompt_tokens, record.usage_completion_tokens = usage.prompt_tokens, usage.completion_tokens
    record.usage_cached_tokens = usage.cached_tokens
    if (details := usage.completion_tokens_details) is not None:
        record.usage_reasoning_tokens = details.reasoning_tokens


@dataclass(slots=True)
class _TokenEvents:
    """One response's token events: event indices, texts and streamed usage (or None) of each;
    `announced`: positions (in these lists) of events taken that carry no token (the vllm rule's
    role and finish chunks); `num_empty`: events with an empty text that carry a token, taken or
    not; `closing`: the index of the last event with a finish_reason and no text (None: none)."""

    content: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    cumulative: list[int | None] = field(default_factory=list)
    announced: list[int] = field(default_factory=list)
    num_empty: int = 0
    closing: int | None = None


def _token_events(chunks: list[_Chunk], takes: tuple[bool, ...]) -> _TokenEvents:
    """The events a rule takes as token events (the per-event loop: a non-empty text costs one test)."""
    out = _TokenEvents()
    content, texts, cumulative = out.content, out.texts, out.cumulative
    for k, chunk in enumerate(chunks):
        if chunk.error is not None:
            raise ServerErrorEvent(f"error event in stream: {str(chunk.error)[:200]}")
        choices = chunk.choices
        if not choices:
            continue
        text = _choice_text(choices[0]) if len(choices) == 1 else "".join([_choice_text(c) for c in choices])
        if not text:  # NOTE: rare (a few % of vLLM's events): the kinds are looked at only here
            kind = _empty_kind(choices)
            out.num_empty += kind == EMPTY_TEXT
            if kind != EMPTY_TEXT and any([c.finish_reason is not None for c in choices]):
                out.closing = k
            if not takes[kind]:
                continue
            if kind != EMPTY_TEXT:
                out.announced.append(len(content))
        content.append(k)
        texts.append(text)
        usage = chunk.usage
        cumulative.append(usage.completion_tokens if usage is not None else None)
    return out


def _empty_kind(choices: list[_Choice]) -> int:
    """What an event whose choices' text is empty holds: EMPTY_TEXT when a choice carries an empty
    text that announces nothing, else ANNOUNCEMENT when one announces a role or a finish, else NO_TEXT."""
    kind = NO_TEXT
    for c in choices:
        d = c.delta
        if d is not None:
            if d.content is None and d.reasoning_content is None and d.reasoning is None and not d.tool_calls:
                continue
            if d.role is None and c.finish_reason is None:
                return EMPTY_TEXT
        elif c.text is None:
            continue
        elif c.finish_reason is None:
            return EMPTY_TEXT
        kind = ANNOUNCEMENT
    return kind


def _settle_closing(events: _TokenEvents, chunks: list[_Chunk], final: _Usage | None,
                    takes: tuple[bool, ...]) -> None:
    """The last event with a finish_reason and no text, when no token event follows it, carried the
    last token (one that decoded to no text, e.g. EOS: vLLM sends it with the finish_reason) when the
    usage counts one more token than the events before it; then it is an empty-text event under
    every rule."""
    k, content, announced = events.closing, events.content, events.announced
    if content and content[-1] > k:
        return
    is_taken = bool(content) and content[-1] == k
    seen = chunks[k].usage
    if seen is not None:  # NOTE: streamed usage: did it grow at this event?
        before = next((chunks[j].usage for j in range(k - 1, -1, -1) if chunks[j].usage is not None), None)
        carries = (seen.completion_tokens or 0) > ((before.completion_tokens or 0) if before else 0)
    else:  # one token per event before it with a text field, taken or not
        num_before = len(content) - is_taken
        counted = num_before - sum([p < num_before for p in announced])
        counted += 0 if takes[EMPTY_TEXT] else events.num_empty
        carries = final is not None and (final.completion_tokens or 0) > counted
    if not carries:
        return
    events.num_empty += 1
    if is_taken:
        announced.remove(len(content) - 1)
    elif takes[EMPTY_TEXT]:
        content.append(k)
        events.texts.append("")
        events.cumulative.append(seen.completion_tokens if seen is not None else None)


def _exact_content(content: list[int], pieces: list[int], ends_read: list[bool], loop: list[int],
                   announced: list[int] = ()) -> list[bool]:
    """For each token event (`content`: event indices), whether its stamp is exact: the next
    token event has no bytes in its read, i.e. completes in a later read and starts after this
    read's end (the event before it ended the read). Other events in between (a finish chunk,
    usage, [DONE]) do not count: servers write them with the last token. Likewise a taken event
    that carries no token (`announced`: positions in `content`, the vllm rule's role and finish
    chunks) is written with the token after it: it is passed over when judging the others, and
    when it shares a read with that token, it is as exact as that token."""
    if not announced:
        return _exact_carrying(content, pieces, ends_read, loop)
    skip = set(announced)
    carrying = [k for i, k in enumerate(content) if i not in skip]
    exact_of = dict(zip(carrying, _exact_carrying(carrying, pieces, ends_read, loop), strict=True))
    out, after = [], iter(carrying)
    nxt = next(after, None)
    for k in content:
        while nxt is not None and nxt <= k:
            nxt = next(after, None)
        if k in exact_of:
            out.append(exact_of[k])
        else:
            out.append(nxt is None or not _shares_read(k, nxt, pieces, ends_read, loop) or exact_of[nxt])
    return out


def _exact_carrying(content: list[int], pieces: list[int], ends_read: list[bool], loop: list[int]) -> list[bool]:
    """`_exact_content` of events that all carry tokens."""
    if not content:
        return []
    return [not _shares_read(k, nxt, pieces, ends_read, loop)
            for k, nxt in zip(content, content[1:], strict=False)] + [True]


def _shares_read(k: int, nxt: int, pieces: list[int], ends_read: list[bool], loop: list[int]) -> bool:
    """Whether event `nxt` has bytes in the read that completed event `k` (k < nxt)."""
    return (loop[pieces[nxt]] == loop[pieces[k]]
            or (loop[pieces[nxt - 1]] == loop[pieces[k]] and not ends_read[pieces[nxt - 1]]))


def _per_event_tokens(cumulative: list[int | None], announced: list[int]) -> tuple[list[float], str]:
    """Tokens per token event: growth of the streamed usage where every event has it, else 1 each
    (0 for the `announced` positions: events taken that carry no token)."""
    if not cumulative or any(c is None for c in cumulative):
        out = [1.0] * len(cumulative)
        for p in announced:
            out[p] = 0.0
        return out, SOURCE_PER_EVENT
    out, last = [], 0
    for c in cumulative:
        out.append(float(max(c - last, 0)))
        last = max(c, last)
    return out, SOURCE_USAGE_DELTAS


def parse_whole(record: RequestRecord, body: bytes, end_ns: int, tokenizer=None) -> str:
    """Fill `record` from a non-streamed JSON response (TTFT = E2E latency); returns its text."""
    try:
        chunk = _decode_chunk(body)
    except msgspec.DecodeError as exc:
        raise MalformedSSE(f"undecodable response {body[:80]!r}: {exc}") from None
    if chunk.usage is not None:
        _take_usage(record, chunk.usage)
    text = "".join(_choice_text(c) for c in chunk.choices)
    record.first_token_ns = end_ns
    output_kinds.time_whole(record, chunk.choices, end_ns)
    record.chunk_ns = [end_ns]
    usage = record.usage_completion_tokens
    record.chunk_tokens = [float(usage) if usage else 1.0]
    record.chunk_token_source = "usage" if usage else SOURCE_PER_EVENT
    _count_tokens(record, [text], tokenizer)
    return text


def _count_tokens(record: RequestRecord, texts: list[str], tokenizer) -> None:
    """The client's output count from the per-event counts; a re-tokenised count only on the side."""
    record.output_chars = sum(len(t) for t in texts)
    record.client_output_tokens = int(sum(record.chunk_tokens))
    if tokenizer is not None:
        record.retokenized_output_tokens = len(tokenizer.encode("".join(texts), add_special_tokens=False).ids)
