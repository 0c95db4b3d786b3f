"""The reference forms on the upstream cases' workloads, so each upstream row has its reference row.

Same case names, sizes and units as `cases.py`, through the reference benchmarks' own workload
builders (`benchmarks.workloads`). Where one upstream release carries several hot paths' changes
in the function measured, the reference row toggles the same set: upstream's chat stream went
from pydantic and string buffers (0.5.10.post1) to msgspec and offsets (0.5.11) at once, so
"h6-chat" is H2+H6 legacy against both optimized.
"""

from __future__ import annotations

import dataclasses

from benchmarks.common import best_time
from benchmarks.upstream.cases import (
    H1_STREAMS,
    H3_STEPS_PER_WAKEUP,
    H3_TOKENS,
    H4_PROMPT_LEN,
    H6_TOKENS,
    count_loop_turns,
)
from benchmarks.workloads import (
    H2_CHUNKS,
    ChunkEncoding,
    OneRequestStream,
    TokenLifecycle,
    WakeupStep,
    form_args,
)
from benchmarks.workloads.decide import DecideSequence

UPSTREAM_FORM = "upstream_form"


def _chat_args(form: str):
    """H6 (incremental output, as bench_stream_deltas) with H2 in the same form."""
    args = form_args("H6", form, incremental_streaming_output=True)
    return dataclasses.replace(args, sse_encoder=form_args("H2", form).sse_encoder)


def _h3_args(form: str):
    """H3 in ``form``; "upstream_form" is the reference form of upstream's own change
    (`reference-full`: the whole text filled in once per wake-up), beside the default optimized
    form, which goes beyond upstream (only the new text per wake-up)."""
    if form == UPSTREAM_FORM:
        return dataclasses.replace(form_args("H3", "optimized"), stream_output="reference-full")
    return form_args("H3", form)


def _turns(step):
    """A callable giving the event-loop turns of one step of reference ``WakeupStep`` ``step``."""
    turns = count_loop_turns(step.loop)

    def count() -> int:
        turns[0] = 0
        step.run()
        return turns[0]

    return count


def _workloads(form: str) -> dict:
    """Case name -> (timed callable, unit scale, unit) for ``form``."""
    if form == UPSTREAM_FORM:
        return {f"h3-request-{n // 1000}k": (OneRequestStream(
            _h3_args(form), "tokenizer-manager", n, H3_STEPS_PER_WAKEUP).run, 1e3, "ms")
            for n in H3_TOKENS}
    work = {f"h2-{kind}-chunk": (ChunkEncoding(form_args("H2", form), kind).run, 1e6, "us")
            for kind in H2_CHUNKS}
    for n in H3_TOKENS:
        work[f"h3-request-{n // 1000}k"] = (OneRequestStream(
            _h3_args(form), "tokenizer-manager", n, H3_STEPS_PER_WAKEUP).run, 1e3, "ms")
    for n in H6_TOKENS:
        work[f"h6-chat-{n // 1000}k"] = (OneRequestStream(
            _chat_args(form), "chat", n).run, 1e3, "ms")
    for n in H1_STREAMS:
        step = WakeupStep(form_args("H1", form), n)
        work[f"h1-step-{n}"] = (step.run, 1e3, "ms")
        work[f"h1-loop-turns-{n}"] = (_turns(step), 1, "turns")
    work["h5-passes-allowed"] = (DecideSequence(form).run, 1, "passes")
    lifecycle = TokenLifecycle(form_args("H4", form), H4_PROMPT_LEN, "fill_rebuild", num_reqs=1)
    work["h4-fill-rebuild-10k"] = (lifecycle.run, 1e6, "us")
    return work


def reference_rows(cases: set[str] | None = None) -> dict[str, dict]:
    """Case name -> {"legacy": figure, "optimized": figure, "unit": unit} (``cases``: all if None),
    and for H3 also "upstream_form" (see `_h3_args`)."""
    out: dict[str, dict] = {}
    for form in ("legacy", "optimized", UPSTREAM_FORM):
        work = _workloads(form)
        for case, (fn, scale, unit) in work.items():
            if cases is None or case in cases:
                if unit in ("turns", "passes"):
                    out.setdefault(case, {"unit": unit})[form] = fn()
                    continue
                repeat, min_time = (3, 0.2) if unit == "ms" else (5, 0.05)
                out.setdefault(case, {"unit": unit})[form] = best_time(fn, repeat, min_time) * scale
        for fn, _, _ in work.values():
            close = getattr(getattr(fn, "__self__", None), "close", None)
            if close is not None:
                close()
    return out
