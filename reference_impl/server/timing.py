"""Per-request server timing, for a client that asks with ``x-server-timing`` (loadgen does).

Spans, in ms, from the HTTP process's arrival stamp and the scheduler's ``ReqTiming``: all are
``time.perf_counter`` (CLOCK_MONOTONIC on Linux, one clock for every process of the machine).

- ``arrival_to_queue_ms``: request received → sent to the scheduler (body read, validation,
  tokenizing: the HTTP process's part);
- ``queue_ms``: sent to the scheduler → its first prefill step began (its wait in the scheduler's
  inbox while a step runs, then in the waiting queue);
- ``prefill_ms``: first prefill step began → its last prefill step's output; ``prefill_steps``;
- ``first_output_ms``: request received → its first output was handed to the response (a whole
  response: the response was ready);
- ``decode_ms``: last prefill step's output → its last output.

A streamed response carries them as one SSE comment just before ``data: [DONE]`` (every SSE
client skips comments); a whole response as a W3C ``Server-Timing`` header. Only on request:
benchmark clients that read each line as JSON (vLLM's and SGLang's) would fail on a comment.
"""

from __future__ import annotations

import msgspec

from reference_impl.messages import ReqTiming

#: Request header that asks for the timing (any value).
ASK_HEADER = "x-server-timing"
#: The comment line's start: loadgen looks for exactly this.
COMMENT_PREFIX = b": server-timing "

_encode = msgspec.json.Encoder().encode


def timing_fields(received: float, first_output: float,
                  timings: dict[int, tuple[float, ReqTiming]], request_id: str | None = None) -> dict:
    """The spans of the sub-request whose prefill ended first (n > 1: the first output's);
    ``timings``: per sub-request, when it was sent to the scheduler and its ``ReqTiming``."""
    out: dict = {} if request_id is None else {"request_id": request_id}
    if not timings:
        return out
    sent, t = min(timings.values(), key=lambda item: item[1].prefill_end)
    out.update(arrival_to_queue_ms=_ms(sent - received), queue_ms=_ms(t.prefill_start - sent),
               prefill_ms=_ms(t.prefill_end - t.prefill_start), prefill_steps=t.prefill_steps,
               first_output_ms=_ms(first_output - received), decode_ms=_ms(t.finished - t.prefill_end))
    return out


def sse_comment(fields: dict) -> bytes:
    """``: server-timing {json}\\n\\n``, an SSE comment."""
    return COMMENT_PREFIX + _encode(fields) + b"\n\n"


def header_value(fields: dict) -> str:
    """The W3C ``Server-Timing`` value: ``queue;dur=1.2, prefill;dur=3.4;desc="1 steps", ...``."""
    parts = []
    for key, value in fields.items():
        if key.endswith("_ms"):
            parts.append(f"{key[:-3]};dur={value}")
    if "prefill_steps" in fields:
        parts.append(f'prefill_steps;desc="{fields["prefill_steps"]}"')
    return ", ".join(parts)


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)
