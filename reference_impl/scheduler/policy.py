"""Batch policies: how a scheduler picks each pass's batch, chosen once at start-up.

- ``AggregatedPolicy``: the prefill adder admits waiting requests into a prefill whenever any
  fit, else the running batch decodes.
- ``DelayedPrefillPolicy``: the same, with the prefill delayer (H5) asked before each prefill.
- ``DecodePolicy`` (``disaggregation.py``): a PD decode node, prealloc → transfer → prebuilt →
  decode.

A policy reads and changes only the ``BatchState`` it is given; the scheduler runs the batch
and retires finished requests.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from reference_impl.config import ServerArgs
from reference_impl.engine.base import Clock, ForwardBatch
from reference_impl.scheduler.batch_state import BatchState
from reference_impl.scheduler.prefill_adder import PrefillAdder
from reference_impl.scheduler.prefill_delayer import (
    DelayerConfig,
    PrefillDelayer,
    RankInfo,
    RecentPrefillBatchSizes,
    estimated_attempt_size,
)
from reference_impl.scheduler.request import Req, stamp_prefill_start


class BatchPolicy(ABC):
    """Picks the next batch from a ``BatchState``; may hold requests outside its queues."""

    #: The prefill delayer this policy consults (H5), if any.
    delayer: PrefillDelayer | None = None

    def __init__(self, state: BatchState):
        self.state = state

    @abstractmethod
    def next_batch(self) -> ForwardBatch | None:
        """This pass's batch, or None when there is nothing to run."""

    def abort(self, rid: str) -> Req | None:
        """Drop a request held outside the queues; the request (its KV still reserved) or None."""
        return None

    @property
    def num_transferring(self) -> int:
        """Requests whose KV is in flight from a prefill node."""
        return 0

    @property
    def num_kv_transfers(self) -> int:
        """KV transfers landed so far."""
        return 0


class AggregatedPolicy(BatchPolicy):
    """Prefill the waiting requests the adder admits, else decode the running batch."""

    def __init__(self, state: BatchState, adder: PrefillAdder):
        super().__init__(state)
        self.adder = adder
        self.recent_prefill_sizes = RecentPrefillBatchSizes()

    @classmethod
    def from_server_args(cls, args: ServerArgs, state: BatchState, clock: Clock) -> AggregatedPolicy:
        return cls(state, _prefill_adder(args, state))

    def next_batch(self) -> ForwardBatch | None:
        return self.schedule(True)

    def schedule(self, is_prefill_allowed: bool) -> ForwardBatch | None:
        """A prefill of admitted requests if allowed and any fit, else a decode of the running."""
        state = self.state
        if state.waiting:
            reqs = []
            if is_prefill_allowed:
                reqs = self.adder.admit(state.waiting, len(state.running), state.num_used_tokens)
            self.recent_prefill_sizes.observe_attempt(len(reqs) or estimated_attempt_size(
                len(state.waiting), self.adder.num_free_slots(len(state.running))))
            if reqs:
                stamp_prefill_start(reqs)
                state.reserve(reqs)
                state.running.extend(reqs)
                state.counts["prefill_steps"] += 1
                return ForwardBatch(is_prefill=True, reqs=reqs)
        if state.running:
            state.counts["decode_steps"] += 1
            return ForwardBatch(is_prefill=False, reqs=state.running)
        return None

    @property
    def max_prefill_bs(self) -> int:
        return self.recent_prefill_sizes.max_prefill_bs

    def rank_info(self) -> RankInfo:
        """What this rank tells the prefill delayer this pass."""
        state = self.state
        return RankInfo(
            prefillable=bool(state.waiting),
            token_usage=state.token_usage,
            running_batch=len(state.running),
            max_prefill_bs=self.max_prefill_bs,
            waiting_queue_len=len(state.waiting),
        )


class DelayedPrefillPolicy(AggregatedPolicy):
    """``AggregatedPolicy`` that asks the prefill delayer before each prefill (H5)."""

    def __init__(self, state: BatchState, adder: PrefillAdder, delayer: PrefillDelayer,
                 clock: Clock):
        super().__init__(state, adder)
        self.delayer = delayer
        self.clock = clock

    @classmethod
    def from_server_args(cls, args: ServerArgs, state: BatchState, clock: Clock
                         ) -> DelayedPrefillPolicy:
        return cls(state, _prefill_adder(args, state), make_delayer(args), clock)

    def next_batch(self) -> ForwardBatch | None:
        return self.schedule(self.delayer.should_allow(self.rank_info(), self.clock.now()))


def make_delayer(args: ServerArgs) -> PrefillDelayer:
    """The prefill delayer ``args`` configure (H5)."""
    return PrefillDelayer(DelayerConfig.from_server_args(args))


def _prefill_adder(args: ServerArgs, state: BatchState) -> PrefillAdder:
    return PrefillAdder(args.max_running_requests_per_rank, args.max_prefill_tokens,
                        state.max_total_tokens, args.prefill_max_requests)
