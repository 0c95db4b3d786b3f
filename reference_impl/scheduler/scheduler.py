"""Continuous batching: one pass per step, schedule → run → process the result.

Transport-free: the scheduler process feeds it messages and ships its outputs; benchmarks
drive it directly on a virtual clock. How each pass's batch is picked is the batch policy's
(``policy.py``), chosen once at start-up.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable

from reference_impl.config import ServerArgs
from reference_impl.engine.base import Clock, Engine, ForwardBatch
from reference_impl.messages import (
    BatchTokenIDOutput,
    FinishReason,
    SchedulerStats,
    TokenizedGenerateReq,
)
from reference_impl.scheduler.batch_state import BatchState
from reference_impl.scheduler.disaggregation import DecodePolicy
from reference_impl.scheduler.policy import AggregatedPolicy, BatchPolicy, DelayedPrefillPolicy
from reference_impl.scheduler.prefill_delayer import PrefillDelayer
from reference_impl.scheduler.request import Req, StopChecker
from reference_impl.scheduler.token_storage import TokenStorage
from reference_impl.tokenizer import Tokenizer

PolicyFactory = Callable[[ServerArgs, BatchState, Clock], BatchPolicy]


def policy_factory(args: ServerArgs) -> PolicyFactory:
    """The batch policy ``args`` ask for: PD decode node, delayed prefill (H5) or aggregated."""
    if args.disaggregation_mode == "decode":
        return DecodePolicy.from_server_args
    if args.enable_prefill_delayer:
        return DelayedPrefillPolicy.from_server_args
    return AggregatedPolicy.from_server_args


class Scheduler:
    """One scheduling pass per ``step()``: schedule → run → process the result."""

    def __init__(self, args: ServerArgs, engine: Engine, tokenizer: Tokenizer,
                 storage: TokenStorage, clock: Clock, make_policy: PolicyFactory | None = None):
        self.args = args
        self.engine = engine
        self.storage = storage
        self.clock = clock
        self.stop_checker = StopChecker(tokenizer)
        self.max_total_tokens = min(engine.max_total_num_tokens,
                                    args.max_total_tokens or engine.max_total_num_tokens)
        self.state = BatchState(self.max_total_tokens)
        self.policy = (make_policy or policy_factory(args))(args, self.state, clock)
        self._finished_early: list[Req] = []

    @property
    def waiting(self) -> deque[Req]:
        return self.state.waiting

    @property
    def running(self) -> list[Req]:
        return self.state.running

    @property
    def num_used_tokens(self) -> int:
        return self.state.num_used_tokens

    @property
    def counts(self) -> Counter[str]:
        return self.state.counts

    @property
    def delayer(self) -> PrefillDelayer | None:
        return self.policy.delayer

    @property
    def is_idle(self) -> bool:
        state = self.state
        return not (state.waiting or state.running or self._finished_early
                    or self.policy.num_transferring)

    @property
    def num_transferring(self) -> int:
        """Requests whose KV is in flight from a prefill node (PD decode mode only)."""
        return self.policy.num_transferring

    def add_request(self, msg: TokenizedGenerateReq) -> None:
        req = Req(msg, self.storage, self.stop_checker.tail_window(msg.sampling.stop))
        if self.state.fits_ever(req):
            self.state.waiting.append(req)
        else:
            self._finish_early(req, FinishReason("abort", "request needs more KV tokens than the cache has"))

    def abort(self, rid: str) -> None:
        """Drop a waiting, transferring or running request now and free its budget."""
        if (req := self.policy.abort(rid)) is not None:
            self._release(req)
            self._finish_early(req, FinishReason("abort"))
            return
        state = self.state
        for queue in (state.waiting, state.running):
            for req in queue:
                if req.rid == rid:
                    queue.remove(req)
                    if queue is state.running:
                        self._release(req)
                    self._finish_early(req, FinishReason("abort"))
                    return

    def step(self) -> BatchTokenIDOutput | None:
        """One scheduling pass; the outputs to stream, or None when there are none."""
        batch = self.policy.next_batch()
        if batch is None:
            return self._build_output([])
        next_ids = self.engine.forward(batch)
        return self.finish_step(batch, next_ids)

    def finish_step(self, batch: ForwardBatch | None, next_ids: list[int]) -> BatchTokenIDOutput | None:
        """Take a step's token ids (DP groups run the engine themselves); the outputs to stream."""
        if batch is None:
            return self._build_output([])
        self._process_result(batch, next_ids)
        return self._build_output(batch.reqs)

    def stats(self, request_id: int = 0) -> SchedulerStats:
        state = self.state
        outcomes = dict(self.delayer.outcomes) if self.delayer else {}
        return SchedulerStats(
            request_id=request_id,
            num_running_reqs=len(state.running),
            num_waiting_reqs=len(state.waiting),
            num_used_tokens=state.num_used_tokens,
            max_total_tokens=self.max_total_tokens,
            num_prefill_steps=state.counts["prefill_steps"],
            num_decode_steps=state.counts["decode_steps"],
            num_generated_tokens=state.counts["generated_tokens"],
            prefill_delayer_outcomes=outcomes,
            num_transferring_reqs=self.policy.num_transferring,
            num_kv_transfers=self.policy.num_kv_transfers,
        )

    def _process_result(self, batch: ForwardBatch, next_ids: list[int]) -> None:
        check = self.stop_checker.check
        if batch.is_prefill or batch.is_prebuilt:
            _stamp_prefill_end(batch)
        for req, token_id in zip(batch.reqs, next_ids, strict=True):
            req.output_ids.append(token_id)
            req.finish_reason = check(req, token_id)
        state = self.state
        state.counts["generated_tokens"] += len(next_ids)
        if any(r.finished for r in batch.reqs):
            for req in batch.reqs:
                if req.finished:
                    req.fill_ids = self.storage.concat(req.origin_input_ids, req.output_ids)
                    self._release(req)
            state.running = [r for r in state.running if not r.finished]

    def _build_output(self, reqs) -> BatchTokenIDOutput | None:
        interval = self.args.stream_interval
        out = BatchTokenIDOutput([], [], [], [], [], [])
        for req in [*self._finished_early, *reqs]:
            num_new = len(req.output_ids) - req.num_sent
            if not req.finished:
                if not (req.stream and num_new >= interval):
                    continue
            elif out.timings is None:
                now = time.perf_counter()
                out.timings = {req.rid: req.timing(now)}
            else:
                out.timings[req.rid] = req.timing(now)
            out.rids.append(req.rid)
            out.new_token_ids.append(list(req.output_ids[req.num_sent:]))
            out.finish_reasons.append(req.finish_reason)
            out.prompt_tokens.append(req.prompt_len)
            out.completion_tokens.append(len(req.output_ids))
            out.stop_strs.append(list(req.sampling.stop) if req.is_new else [])
            req.num_sent = len(req.output_ids)
            req.is_new = False
        self._finished_early = []
        return out if out.rids else None

    def _release(self, req: Req) -> None:
        self.state.free(req)
        self.engine.release(req)

    def _finish_early(self, req: Req, reason: FinishReason) -> None:
        req.finish_reason = reason
        self._finished_early.append(req)


def _stamp_prefill_end(batch: ForwardBatch) -> None:
    """A prefill (or PD prebuilt) step's output came: once per request and step, never per token."""
    now = time.perf_counter()
    count = 1 if batch.is_prefill else 0
    for req in batch.reqs:
        req.prefill_end = now
        req.prefill_steps += count

