"""DP attention: N scheduler ranks behind a round-robin router, stepping in lockstep.

One scheduler process holds every rank (a simulation needs no more): each pass the prefill
delayer makes one decision over all ranks' ``RankInfo`` (H5 negotiates across DP ranks), every
rank schedules its batch, the sim engines produce tokens, and the group waits out one lockstep
step: as long as the slowest rank, and eager on every rank when any rank extends. A tiny
back-fill prefill on one rank therefore stalls decode on all of them, the regime of upstream's
H5 figures. Each rank schedules with an ``AggregatedPolicy`` and no delayer of its own; the
group's prefill gate (the delayer's negotiation, or always open) is chosen once at start-up.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from reference_impl.config import ServerArgs
from reference_impl.engine.base import Clock, ForwardBatch
from reference_impl.engine.sim import SimEngine
from reference_impl.messages import BatchTokenIDOutput, SchedulerStats, TokenizedGenerateReq
from reference_impl.scheduler.policy import AggregatedPolicy, make_delayer
from reference_impl.scheduler.scheduler import Scheduler
from reference_impl.scheduler.token_storage import TokenStorage
from reference_impl.tokenizer import Tokenizer


class DPGroup:
    """The lockstep group of a DP-attention server: the same surface as ``Scheduler``."""

    def __init__(self, args: ServerArgs, tokenizer: Tokenizer, storage: TokenStorage,
                 clock: Clock):
        self.args = args
        self.clock = clock
        self.engines = [SimEngine(tokenizer, storage, clock, profile=args.sim_profile,
                                  seed=args.sim_seed, max_total_num_tokens=args.max_total_tokens)
                        for _ in range(args.dp_size)]
        # NOTE: ranks hold no delayer of their own: the group negotiates once for all of them
        self.ranks = [Scheduler(args, engine, tokenizer, storage, clock,
                                make_policy=AggregatedPolicy.from_server_args)
                      for engine in self.engines]
        self.policies: list[AggregatedPolicy] = [rank.policy for rank in self.ranks]
        self.delayer = make_delayer(args) if args.enable_prefill_delayer else None
        self._is_prefill_allowed: Callable[[], bool] = (
            self._negotiate if self.delayer is not None else _always_allowed)
        self.profile = self.engines[0].profile
        self.counts: Counter[str] = Counter()
        self._next_rank = 0
        self._rank_of: dict[str, Scheduler] = {}

    @property
    def is_idle(self) -> bool:
        return all(rank.is_idle for rank in self.ranks)

    def add_request(self, msg: TokenizedGenerateReq) -> None:
        """Route round robin (upstream's default DP load balancing)."""
        rank = self.ranks[self._next_rank]
        self._next_rank = (self._next_rank + 1) % len(self.ranks)
        self._rank_of[msg.rid] = rank
        rank.add_request(msg)

    def abort(self, rid: str) -> None:
        rank = self._rank_of.pop(rid, None)
        if rank is not None:
            rank.abort(rid)

    def step(self) -> BatchTokenIDOutput | None:
        """One lockstep pass over every rank; the outputs of all ranks, merged."""
        is_allowed = self._is_prefill_allowed()
        batches = [policy.schedule(is_allowed) for policy in self.policies]
        next_ids = [engine.run(b) if b is not None else [] for engine, b in zip(self.engines, batches, strict=True)]
        if any(b is not None for b in batches):
            self._count_step(batches)
            self.clock.sleep(self.profile.lockstep_time(batches))
        outputs = [rank.finish_step(b, ids) for rank, b, ids in zip(self.ranks, batches, next_ids, strict=True)]
        return self._merge([out for out in outputs if out is not None])

    def stats(self, request_id: int = 0) -> SchedulerStats:
        """Group totals; prefill steps count lockstep steps holding any extend."""
        per_rank = [rank.stats() for rank in self.ranks]
        return SchedulerStats(
            request_id=request_id,
            num_running_reqs=sum(s.num_running_reqs for s in per_rank),
            num_waiting_reqs=sum(s.num_waiting_reqs for s in per_rank),
            num_used_tokens=sum(s.num_used_tokens for s in per_rank),
            max_total_tokens=sum(s.max_total_tokens for s in per_rank),
            num_prefill_steps=self.counts["prefill_steps"],
            num_decode_steps=self.counts["decode_steps"],
            num_generated_tokens=sum(s.num_generated_tokens for s in per_rank),
            prefill_delayer_outcomes=dict(self.delayer.outcomes) if self.delayer else {},
        )

    def _negotiate(self) -> bool:
        return self.delayer.negotiate([p.rank_info() for p in self.policies], self.clock.now())

    def _count_step(self, batches: list[ForwardBatch | None]) -> None:
        is_extend = any(b is not None and b.is_prefill for b in batches)
        self.counts["prefill_steps" if is_extend else "decode_steps"] += 1

    def _merge(self, outputs: list[BatchTokenIDOutput]) -> BatchTokenIDOutput | None:
        if not outputs:
            return None
        merged = outputs[0]
        for out in outputs[1:]:
            for name in _LIST_FIELDS:
                getattr(merged, name).extend(getattr(out, name))
            if out.timings:
                merged.timings = {**(merged.timings or {}), **out.timings}
        for rid, reason in zip(merged.rids, merged.finish_reasons, strict=True):
            if reason is not None:
                self._rank_of.pop(rid, None)
        return merged


_LIST_FIELDS = tuple(name for name in BatchTokenIDOutput.__struct_fields__ if name != "timings")


def _always_allowed() -> bool:
    return True
