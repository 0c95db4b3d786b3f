"""H5 prefill delayer: before each prefill, admit new requests now or let decode run on.

Delaying a prefill a few passes lets admissions come in larger groups instead of back-filling
one finished slot at a time with tiny prefills that fragment decode. The decision is the pure
function ``decide`` of (previous state, every rank's info, configuration, current time), so it
can be table-tested for any number of data-parallel ranks without processes; ``PrefillDelayer``
wraps it for one scheduler rank and counts outcomes.

Two forms, chosen by the configuration: the legacy form (``queue_min_ratio`` unset) delays only
on the slot condition; the optimized form (sglang#23189) adds the queue condition, capped by a
wall-clock time.

Behaviour taken from upstream where the spec is silent:
- a delay with every rank prefillable is capped by the wall-clock time (queue condition only),
  never by ``max_delay_passes``, which caps only the mixed-rank delay;
- a mixed-rank delay lasts ``max_delay_passes - 1`` delayed passes; the next pass is allowed
  with "wait_timeout";
- the one-shot skip-first lets the pass through as if no condition held, so it answers
  "no_wait", or "wait_success" when a (mixed-rank) delay was in progress;
- the wall-clock cap ends a delay with "wait_success", not "wait_timeout".
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from reference_impl.config import ServerArgs

REASONS = ("", "token_watermark", "delay", "wait_timeout", "wait_success", "no_wait")
NO_PREFILL = "no_prefill"
"""Outcome key under which ``PrefillDelayer.outcomes`` counts reason "" (no rank prefillable)."""
OUTCOME_KEYS = (NO_PREFILL,) + REASONS[1:]


@dataclass(frozen=True)
class DelayerConfig:
    """The delayer's knobs (upstream flag names without the ``prefill_delayer_`` prefix)."""

    max_delay_passes: int = 30
    token_usage_low_watermark: float | None = None
    queue_min_ratio: float | None = None
    max_delay_ms: float = 5000.0
    max_running_requests: int = 4096
    dp_size: int = 1
    enable_dp_attention: bool = False

    def __post_init__(self) -> None:
        _check_at_least("max_delay_passes", self.max_delay_passes, 1)
        _check_at_least("max_running_requests", self.max_running_requests, 1)
        _check_at_least("dp_size", self.dp_size, 1)
        if not self.max_delay_ms >= 0:
            raise ValueError(f"max_delay_ms must be >= 0, got {self.max_delay_ms}")
        watermark = self.token_usage_low_watermark
        if watermark is not None and not 0 <= watermark <= 1:
            raise ValueError(f"token_usage_low_watermark must be in [0, 1], got {watermark}")
        ratio = self.queue_min_ratio
        if ratio is not None and not 0 < ratio <= 1:
            raise ValueError(f"queue_min_ratio must be in (0, 1], got {ratio}")

    @classmethod
    def from_server_args(cls, args: ServerArgs, dp_size: int = 1) -> DelayerConfig:
        """The delayer configuration of a server started with ``args``."""
        return cls(
            max_delay_passes=args.prefill_delayer_max_delay_passes,
            token_usage_low_watermark=args.prefill_delayer_token_usage_low_watermark,
            queue_min_ratio=args.prefill_delayer_queue_min_ratio,
            max_delay_ms=args.effective_max_delay_ms,
            max_running_requests=args.max_running_requests,
            dp_size=dp_size,
        )

    @property
    def is_queue_trigger_enabled(self) -> bool:
        """Whether the queue condition exists (the optimized form of H5)."""
        return self.queue_min_ratio is not None

    @property
    def effective_max_running_requests(self) -> int:
        """Per-rank slots: without DP attention the limit is split over DP ranks, rounded up."""
        if self.enable_dp_attention:
            return self.max_running_requests
        return math.ceil(self.max_running_requests / self.dp_size)


@dataclass(frozen=True)
class RankInfo:
    """What one rank contributes to the decision, once per scheduling pass."""

    prefillable: bool
    token_usage: float
    running_batch: int
    max_prefill_bs: int
    waiting_queue_len: int


@dataclass(frozen=True)
class Delay:
    """A delay in progress: when its first delayed pass happened and how many passes it has."""

    start_time: float
    num_passes: int


@dataclass(frozen=True)
class DelayerState:
    """Everything the decision carries from one pass to the next."""

    delay: Delay | None = None
    is_skip_first_used: bool = False


@dataclass(frozen=True)
class Decision:
    """Whether to admit now, why (one of ``REASONS``), and the state for the next pass."""

    allow: bool
    reason: str
    state: DelayerState


def decide(prev: DelayerState, ranks: Sequence[RankInfo], config: DelayerConfig,
           now: float) -> Decision:
    """Decide whether every rank may prefill this pass; ``now`` is a clock value in seconds."""
    if not ranks:
        raise ValueError("decide needs at least one rank")
    num_prefillable = sum(rank.prefillable for rank in ranks)
    if num_prefillable == 0:
        return _allow(prev, "")
    if any(_is_watermark_force_allow(rank, config) for rank in ranks):
        return _allow(prev, "token_watermark")
    if num_prefillable < len(ranks):
        return _decide_mixed(prev, config, now)
    return _decide_all_prefillable(prev, ranks, config, now)


def _is_watermark_force_allow(rank: RankInfo, config: DelayerConfig) -> bool:
    # NOTE: a rank with nothing to prefill never forces the others through.
    watermark = config.token_usage_low_watermark
    return rank.prefillable and watermark is not None and rank.token_usage < watermark


def _decide_mixed(prev: DelayerState, config: DelayerConfig, now: float) -> Decision:
    num_passes = prev.delay.num_passes if prev.delay is not None else 0
    if num_passes + 1 < config.max_delay_passes:
        return _delay(prev, now)
    return _allow(prev, "wait_timeout")


def _decide_all_prefillable(prev: DelayerState, ranks: Sequence[RankInfo],
                            config: DelayerConfig, now: float) -> Decision:
    running_batch = max(rank.running_batch for rank in ranks)
    max_prefill_bs = max(rank.max_prefill_bs for rank in ranks)
    waiting_queue_len = max(rank.waiting_queue_len for rank in ranks)
    is_slot_short = config.effective_max_running_requests - running_batch < max_prefill_bs
    is_queue_short = _is_queue_short(prev.delay, running_batch, max_prefill_bs,
                                     waiting_queue_len, config, now)
    if is_slot_short or is_queue_short:
        if prev.is_skip_first_used:
            return _delay(prev, now)
        prev = dataclasses.replace(prev, is_skip_first_used=True)
    return _allow(prev, "no_wait" if prev.delay is None else "wait_success")


def _is_queue_short(delay: Delay | None, running_batch: int, max_prefill_bs: int,
                    waiting_queue_len: int, config: DelayerConfig, now: float) -> bool:
    """The queue condition: fewer waiting requests than worth a prefill, within the time cap."""
    if config.queue_min_ratio is None or running_batch == 0:
        return False
    queue_min = min(int(running_batch * config.queue_min_ratio), max_prefill_bs)
    if queue_min <= 0 or waiting_queue_len >= queue_min:
        return False
    # NOTE: the wall-clock cap ends only the queue condition; the slot condition is a hard limit.
    return delay is None or (now - delay.start_time) * 1000.0 < config.max_delay_ms


def _delay(prev: DelayerState, now: float) -> Decision:
    delay = prev.delay or Delay(start_time=now, num_passes=0)
    delay = dataclasses.replace(delay, num_passes=delay.num_passes + 1)
    return Decision(False, "delay", dataclasses.replace(prev, delay=delay))


def _allow(prev: DelayerState, reason: str) -> Decision:
    state = prev if prev.delay is None else dataclasses.replace(prev, delay=None)
    return Decision(True, reason, state)


class PrefillDelayer:
    """The delayer of one scheduler rank: asked once per scheduling pass, before admitting.

    Ask on every pass, with ``prefillable=False`` when nothing waits, so a delay ends when
    the queue empties. ``outcomes`` counts decisions by reason, reason "" as ``NO_PREFILL``.
    """

    def __init__(self, config: DelayerConfig):
        self.config = config
        self.state = DelayerState()
        self.outcomes: dict[str, int] = dict.fromkeys(OUTCOME_KEYS, 0)
        self.last_decision: Decision | None = None

    def should_allow(self, info: RankInfo, now: float) -> bool:
        """Decide for this pass, record the outcome, and say whether to admit now."""
        decision = decide(self.state, (info,), self.config, now)
        self.state = decision.state
        self.last_decision = decision
        self.outcomes[decision.reason or NO_PREFILL] += 1
        return decision.allow


def _check_at_least(name: str, value: int, minimum: int) -> None:
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
