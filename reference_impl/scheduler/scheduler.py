"""Continuous batching: waiting queue, running batch, admission, prefill delayer (H5).

Transport-free: the scheduler process feeds it messages and ships its outputs; benchmarks
drive it directly on a virtual clock.
"""

from __future__ import annotations

from collections import Counter, deque

from reference_impl.config import ServerArgs
from reference_impl.engine.base import Clock, Engine, ForwardBatch
from reference_impl.messages import (
    BatchTokenIDOutput,
    FinishReason,
    SchedulerStats,
    TokenizedGenerateReq,
)
from reference_impl.scheduler.disaggregation import DecodeNode
from reference_impl.scheduler.prefill_adder import PrefillAdder
from reference_impl.scheduler.prefill_delayer import (
    DelayerConfig,
    PrefillDelayer,
    RankInfo,
    RecentPrefillBatchSizes,
    estimated_attempt_size,
)
from reference_impl.scheduler.request import Req, StopChecker
from reference_impl.scheduler.token_storage import TokenStorage
from reference_impl.tokenizer import Tokenizer


class Scheduler:
    """One scheduling pass per ``step()``: schedule → run → process the result."""

    def __init__(self, args: ServerArgs, engine: Engine, tokenizer: Tokenizer,
                 storage: TokenStorage, clock: Clock):
        self.args = args
        self.engine = engine
        self.storage = storage
        self.clock = clock
        self.stop_checker = StopChecker(tokenizer)
        self.max_total_tokens = min(engine.max_total_num_tokens,
                                    args.max_total_tokens or engine.max_total_num_tokens)
        self.adder = PrefillAdder(args.max_running_requests_per_rank, args.max_prefill_tokens,
                                  self.max_total_tokens, args.prefill_max_requests)
        self.delayer = make_delayer(args)
        self.decode_node = (DecodeNode(args, clock, self.max_total_tokens)
                            if args.disaggregation_mode == "decode" else None)
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []
        self.num_used_tokens = 0
        self.recent_prefill_sizes = RecentPrefillBatchSizes()
        self.counts: Counter[str] = Counter()
        self._finished_early: list[Req] = []

    @property
    def is_idle(self) -> bool:
        return not (self.waiting or self.running or self._finished_early or self.num_transferring)

    @property
    def num_transferring(self) -> int:
        """Requests whose KV is in flight from a prefill node (PD decode mode only)."""
        return self.decode_node.num_transferring if self.decode_node else 0

    def add_request(self, msg: TokenizedGenerateReq) -> None:
        req = Req(msg, self.storage, self.stop_checker.tail_window(msg.sampling.stop))
        if self.adder.fits_ever(req):
            self.waiting.append(req)
        else:
            self._finish_early(req, FinishReason("abort", "request needs more KV tokens than the cache has"))

    def abort(self, rid: str) -> None:
        """Drop a waiting, transferring or running request now and free its budget."""
        if self.decode_node is not None and (req := self.decode_node.abort(rid)) is not None:
            self._release(req)
            self._finish_early(req, FinishReason("abort"))
            return
        for queue in (self.waiting, self.running):
            for req in queue:
                if req.rid == rid:
                    queue.remove(req)
                    if queue is self.running:
                        self._release(req)
                    self._finish_early(req, FinishReason("abort"))
                    return

    def step(self) -> BatchTokenIDOutput | None:
        """One scheduling pass; the outputs to stream, or None when there are none."""
        batch = self._next_batch()
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
        outcomes = dict(self.delayer.outcomes) if self.delayer else {}
        return SchedulerStats(
            request_id=request_id,
            num_running_reqs=len(self.running),
            num_waiting_reqs=len(self.waiting),
            num_used_tokens=self.num_used_tokens,
            max_total_tokens=self.max_total_tokens,
            num_prefill_steps=self.counts["prefill_steps"],
            num_decode_steps=self.counts["decode_steps"],
            num_generated_tokens=self.counts["generated_tokens"],
            prefill_delayer_outcomes=outcomes,
            num_transferring_reqs=self.num_transferring,
            num_kv_transfers=self.decode_node.transfers.num_landed if self.decode_node else 0,
        )

    def _next_batch(self) -> ForwardBatch | None:
        if self.decode_node is not None:
            return self.decode_node.next_batch(self)
        return self.schedule_batch(self._prefill_allowed())

    def schedule_batch(self, is_prefill_allowed: bool) -> ForwardBatch | None:
        """This pass's batch: a prefill of admitted requests if allowed and any fit, else decode."""
        if self.waiting:
            reqs = []
            if is_prefill_allowed:
                reqs = self.adder.admit(self.waiting, len(self.running), self.num_used_tokens)
            self.recent_prefill_sizes.observe_attempt(len(reqs) or estimated_attempt_size(
                len(self.waiting), self.adder.num_free_slots(len(self.running))))
            if reqs:
                self.num_used_tokens += sum(r.num_reserved_tokens for r in reqs)
                self.running.extend(reqs)
                self.counts["prefill_steps"] += 1
                return ForwardBatch(is_prefill=True, reqs=reqs)
        if self.running:
            self.counts["decode_steps"] += 1
            return ForwardBatch(is_prefill=False, reqs=self.running)
        return None

    @property
    def max_prefill_bs(self) -> int:
        return self.recent_prefill_sizes.max_prefill_bs

    def rank_info(self) -> RankInfo:
        """What this rank tells the prefill delayer this pass."""
        return RankInfo(
            prefillable=bool(self.waiting),
            token_usage=self.num_used_tokens / self.max_total_tokens,
            running_batch=len(self.running),
            max_prefill_bs=self.max_prefill_bs,
            waiting_queue_len=len(self.waiting),
        )

    def _prefill_allowed(self) -> bool:
        if self.delayer is None:
            return True
        return self.delayer.should_allow(self.rank_info(), self.clock.now())

    def _process_result(self, batch: ForwardBatch, next_ids: list[int]) -> None:
        check = self.stop_checker.check
        for req, token_id in zip(batch.reqs, next_ids, strict=True):
            req.output_ids.append(token_id)
            req.finish_reason = check(req, token_id)
        self.counts["generated_tokens"] += len(next_ids)
        if any(r.finished for r in batch.reqs):
            for req in batch.reqs:
                if req.finished:
                    req.fill_ids = self.storage.concat(req.origin_input_ids, req.output_ids)
                    self._release(req)
            self.running = [r for r in self.running if not r.finished]

    def _build_output(self, reqs) -> BatchTokenIDOutput | None:
        interval = self.args.stream_interval
        out = BatchTokenIDOutput([], [], [], [], [], [])
        for req in [*self._finished_early, *reqs]:
            num_new = len(req.output_ids) - req.num_sent
            if not req.finished and not (req.stream and num_new >= interval):
                continue
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
        self.num_used_tokens -= req.num_reserved_tokens
        self.engine.release(req)

    def _finish_early(self, req: Req, reason: FinishReason) -> None:
        req.finish_reason = reason
        self._finished_early.append(req)


def make_delayer(args: ServerArgs) -> PrefillDelayer | None:
    """The prefill delayer ``args`` ask for (H5), or None."""
    if not args.enable_prefill_delayer:
        return None
    return PrefillDelayer(DelayerConfig.from_server_args(args))
