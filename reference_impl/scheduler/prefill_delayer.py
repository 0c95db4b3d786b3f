"""H5 prefill delayer: before each prefill, admit new requests now or let decode run on.

Delaying a prefill a few passes lets admissions come in larger groups instead of back-filling
one finished slot at a time with tiny prefills that fragment decode. The decision is the pure
function ``decide`` of (previous state, every rank's info, configuration, current time), so it
can be table-tested for any number of data-parallel ranks without processes; ``PrefillDelayer``
wraps it and counts outcomes. With DP attention one decision covers every rank of the group.

Two forms, chosen by the configuration: the legacy form (``queue_min_ratio`` unset) delays only
on the slot condition (and, with several ranks, while some but not all can prefill); the
optimized form adds the queue condition of sglang#23189 with upstream's later fixes.

Rules, with every rank prefillable (values are maxima over ranks):
- slot condition ``max_running_requests - running_batch < max_prefill_bs``: the first time in
  the delayer's life it is let through (the one-shot skip-first, answering "no_wait" or
  "wait_success"); afterwards it delays, and a delay ends by ``max_delay_passes`` (with 3:
  delay, delay, wait_timeout), as a mixed-rank delay does;
- queue condition ``waiting_queue_len < int(running_batch * queue_min_ratio)``, the threshold
  capped only by ``prefill_max_requests`` when set (never by the observed ``max_prefill_bs``,
  which collapses while a delay makes ranks observe short queues): it delays from its very first
  pass (the skip-first bypass belongs to the slot condition and stays unused) and is bounded
  by wall clock only (``max_delay_ms``), never by passes. Every rank sees one elapsed time (the
  delay's start and ``now`` are shared), so all ranks reach the deadline on the same pass;
- the wall-clock deadline ends only the queue condition, releasing with "wait_success"; a slot
  condition still holding goes on under its pass cap.

``RecentPrefillBatchSizes`` is each rank's ``max_prefill_bs``: the largest of the latest 16
non-empty prefill attempts (an admission counts its size, a delayed pass an estimate), as
upstream's ``RecentPrefillBatchSizeTracker``; passes with nothing waiting do not age it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from reference_impl.config import ServerArgs
from reference_impl.hot_paths import HOT_PATHS

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
    prefill_max_requests: int | None = None

    def __post_init__(self) -> None:
        _check_at_least("max_delay_passes", self.max_delay_passes, 1)
        if self.prefill_max_requests is not None:
            _check_at_least("prefill_max_requests", self.prefill_max_requests, 1)
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
    def from_server_args(cls, args: ServerArgs) -> DelayerConfig:
        """The delayer configuration of a server started with ``args``.

        With DP attention each rank's slot limit (``max_running_requests`` split over the
        ranks) is what a rank compares its running batch against.
        """
        return cls(
            max_delay_passes=args.prefill_delayer_max_delay_passes,
            token_usage_low_watermark=args.prefill_delayer_token_usage_low_watermark,
            queue_min_ratio=args.prefill_delayer_queue_min_ratio,
            max_delay_ms=args.effective_max_delay_ms,
            max_running_requests=args.max_running_requests_per_rank,
            dp_size=args.dp_size,
            enable_dp_attention=args.enable_dp_attention,
            prefill_max_requests=args.prefill_max_requests,
        )

    @property
    def is_queue_trigger_enabled(self) -> bool:
        """Whether the queue condition exists (the optimized form of H5)."""
        return self.queue_min_ratio is not None

    @functools.cached_property
    def queue_trigger(self) -> QueueTrigger:
        """H5's form, chosen once from ``queue_min_ratio`` through the hot-path registry."""
        h5 = HOT_PATHS["H5"]
        return h5.create(h5.form_of(self.queue_min_ratio))

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
    return _delay_within_pass_cap(prev, config, now)


def _delay_within_pass_cap(prev: DelayerState, config: DelayerConfig, now: float) -> Decision:
    num_passes = prev.delay.num_passes if prev.delay is not None else 0
    if num_passes + 1 < config.max_delay_passes:
        return _delay(prev, now)
    return _allow(prev, "wait_timeout")


def _decide_all_prefillable(prev: DelayerState, ranks: Sequence[RankInfo],
                            config: DelayerConfig, now: float) -> Decision:
    running_batch = max(rank.running_batch for rank in ranks)
    max_prefill_bs = max(rank.max_prefill_bs for rank in ranks)
    waiting_queue_len = max(rank.waiting_queue_len for rank in ranks)
    if config.queue_trigger.is_queue_short(prev.delay, running_batch, waiting_queue_len, config, now):
        # NOTE: the queue condition never spends the skip-first bypass, nor counts passes.
        return _delay(prev, now)
    if config.effective_max_running_requests - running_batch < max_prefill_bs:
        if prev.is_skip_first_used:
            return _delay_within_pass_cap(prev, config, now)
        prev = dataclasses.replace(prev, is_skip_first_used=True)
    return _allow(prev, "no_wait" if prev.delay is None else "wait_success")


def queue_min(running_batch: int, config: DelayerConfig) -> int:
    """Waiting requests worth a prefill: ``int(running * ratio)``, capped by the prefill limit."""
    threshold = int(running_batch * (config.queue_min_ratio or 0.0))
    if config.prefill_max_requests is not None:
        threshold = min(threshold, config.prefill_max_requests)
    return threshold


class QueueTrigger(ABC):
    """H5's interface: whether the queue condition asks this pass to wait for a longer queue."""

    @abstractmethod
    def is_queue_short(self, delay: Delay | None, running_batch: int, waiting_queue_len: int,
                       config: DelayerConfig, now: float) -> bool:
        """The queue condition for this pass (maxima over ranks)."""


class SlotOnly(QueueTrigger):
    """Legacy: no queue condition; only the slot condition (and mixed ranks) delay."""

    def is_queue_short(self, delay: Delay | None, running_batch: int, waiting_queue_len: int,
                       config: DelayerConfig, now: float) -> bool:
        return False


class QueueMinRatio(QueueTrigger):
    """Optimized (sglang#23189): fewer waiting requests than worth a prefill, within the time cap."""

    def is_queue_short(self, delay: Delay | None, running_batch: int, waiting_queue_len: int,
                       config: DelayerConfig, now: float) -> bool:
        if running_batch == 0:
            return False
        threshold = queue_min(running_batch, config)
        if threshold <= 0 or waiting_queue_len >= threshold:
            return False
        # NOTE: one elapsed time for every rank (shared start and now): all reach the deadline at once.
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
        """Decide for this pass (one rank), record the outcome, and say whether to admit now."""
        return self.negotiate((info,), now)

    def negotiate(self, ranks: Sequence[RankInfo], now: float) -> bool:
        """One decision for every rank of a DP group; whether all of them may admit now."""
        decision = decide(self.state, ranks, self.config, now)
        self.state = decision.state
        self.last_decision = decision
        self.outcomes[decision.reason or NO_PREFILL] += 1
        return decision.allow


class RecentPrefillBatchSizes:
    """A rank's ``max_prefill_bs``: the largest of its latest ``window_size`` prefill attempts.

    An admission counts its batch size; a pass that wanted to prefill but was delayed counts
    ``min(waiting, free slots)`` (at least 1), what it would have admitted. Passes with nothing
    waiting are not attempts, so decode-only stretches do not age the value.
    """

    def __init__(self, window_size: int = 16):
        _check_at_least("window_size", window_size, 1)
        self._sizes: deque[int] = deque(maxlen=window_size)

    @property
    def max_prefill_bs(self) -> int:
        return max(self._sizes, default=0)

    def observe_attempt(self, num_reqs: int) -> None:
        """Record one non-empty prefill attempt of ``num_reqs`` requests."""
        _check_at_least("num_reqs", num_reqs, 1)
        self._sizes.append(num_reqs)


def estimated_attempt_size(waiting_queue_len: int, num_free_slots: int) -> int:
    """What a delayed (or empty) attempt would have admitted, for the window."""
    return min(max(waiting_queue_len, 1), max(num_free_slots, 1))


def _check_at_least(name: str, value: int, minimum: int) -> None:
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
