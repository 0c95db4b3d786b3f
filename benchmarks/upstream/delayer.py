"""H5's case: the prefill delayer's decisions, replayed through upstream's function and the reference.

Upstream's gain is a decision, not a call's speed: the seeded pass sequence of
`benchmarks.workloads.decide` goes through upstream's `PrefillDelayer` and the reference
`decide()` with the same rules, and the figures are passes allowed and passes that differ.
"""

from __future__ import annotations

import dataclasses
import inspect
import types


def _replay_clock(module) -> list[float]:
    """A virtual clock for upstream's delayer module: its `time.perf_counter` and `_State`'s
    start time (a default bound at import) both read ``clock[0]``."""
    clock = [0.0]
    module.time = types.SimpleNamespace(perf_counter=lambda: clock[0])

    @dataclasses.dataclass(frozen=True)
    class _ClockState(module._State):
        start_time: float = dataclasses.field(default_factory=lambda: clock[0])

    module._State = _ClockState
    return clock


def _upstream_delayer(module, config, queue_trigger: bool):
    """Upstream's `PrefillDelayer` made without `__init__` (which allocates the all-gather buffer
    and wants a process group); the settings its `__init__` would store, from ``config``."""
    delayer = object.__new__(module.PrefillDelayer)
    delayer.__dict__.update(
        _max_delay_passes=config.max_delay_passes,
        _token_usage_low_watermark=config.token_usage_low_watermark,
        _queue_min_ratio=config.queue_min_ratio, _max_delay_ms=config.max_delay_ms,
        _queue_trigger_enabled=queue_trigger, dp_size=config.dp_size,
        enable_dp_attention=config.enable_dp_attention, _metrics_collector=None,
        _curr_state=None, skip_first_delayer=True)
    return delayer


def delayer_replay() -> tuple[list[tuple[bool, str]], list[tuple[bool, str]]]:
    """(upstream's decisions, the reference `decide()`'s) over the seeded pass sequence of
    `benchmarks.workloads.decide` (4 DP ranks, 10 ms apart), the reference form with the same
    rules: the queue trigger (ratio 0.1) when this release has it, else the slot trigger alone.
    Every rank's values reach upstream's decision through its all-gather (`_gather_info`)."""
    import torch
    from sglang.srt.managers import prefill_delayer as module

    from benchmarks.workloads.decide import DecideSequence

    pure = inspect.signature(module.PrefillDelayer._negotiate_should_allow_prefill_pure)
    queue_trigger = "waiting_queue_len" in pure.parameters
    reference = DecideSequence("optimized" if queue_trigger else "legacy")
    config, clock = reference.config, _replay_clock(module)
    delayer = _upstream_delayer(module, config, queue_trigger)
    low = config.token_usage_low_watermark
    upstream, ours, state = [], [], reference.initial
    for ranks, now in reference.passes:
        clock[0] = now
        infos = [[int(r.prefillable), int(r.prefillable and low is not None and r.token_usage < low),
                  r.running_batch, r.max_prefill_bs, r.waiting_queue_len] for r in ranks]
        delayer._gather_info = lambda infos=infos, **_: torch.tensor(infos, dtype=torch.int64)
        local = {"local_prefillable": ranks[0].prefillable, "token_usage": ranks[0].token_usage,
                 "running_batch": ranks[0].running_batch, "max_prefill_bs": ranks[0].max_prefill_bs,
                 "max_running_requests": config.max_running_requests,
                 "waiting_queue_len": ranks[0].waiting_queue_len}
        out = delayer._negotiate_should_allow_prefill(
            **{k: v for k, v in local.items() if k in pure.parameters})
        upstream.append((bool(out.output_allow), out.output_reason))
        decision = reference.decide(state, ranks, config, now)
        state = decision.state
        ours.append((bool(decision.allow), decision.reason))
    return upstream, ours


def passes_allowed():
    """A callable: how many of the passes upstream's delayer allowed."""
    return lambda: sum(allow for allow, _ in delayer_replay()[0])


def decisions_differ():
    """A callable: how many passes upstream and the reference decided differently."""
    def count() -> int:
        upstream, ours = delayer_replay()
        return sum(a != b for a, b in zip(upstream, ours, strict=True))
    return count
