"""PD disaggregation, decode side (``--disaggregation-mode decode``).

A request's life on a decode node, as upstream's ``disaggregation/decode.py``:

1. prealloc: it waits until a slot and its KV budget are free, then reserves them;
2. transfer: the prefill node computes the prompt and copies its KV here; this is a modelled
   delay (``TransferModel``) that holds the reservation and blocks no step;
3. prebuilt: once landed, it joins the running batch through a pass with no model time, its
   first token being the one the prefill node sampled (stop checks and streaming run on it);
4. decode: ordinary decode steps.

No prefill ever runs here, so the decode steps pace the node, and at thousands of streams the
HTTP process is what limits streaming throughput (upstream's setting for H1+H2).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from reference_impl.config import ServerArgs
from reference_impl.engine.base import Clock, ForwardBatch
from reference_impl.scheduler.prefill_adder import PrefillAdder
from reference_impl.scheduler.request import Req

if TYPE_CHECKING:
    from reference_impl.scheduler.scheduler import Scheduler

#: Longest sleep while nothing runs and KV is in flight, so new requests and aborts still get in.
MAX_IDLE_WAIT_S = 0.002


@dataclass(frozen=True)
class TransferModel:
    """Delay from KV preallocation to the KV landing: fixed + per prompt token (seconds)."""

    fixed_s: float
    per_token_s: float

    @classmethod
    def from_server_args(cls, args: ServerArgs) -> TransferModel:
        return cls(args.disaggregation_transfer_ms * 1e-3,
                   args.disaggregation_transfer_per_token_us * 1e-6)

    def delay(self, prompt_len: int) -> float:
        return self.fixed_s + self.per_token_s * prompt_len


class KVTransferQueue:
    """Requests whose KV is in flight, popped in landing order once their delay has passed."""

    def __init__(self, model: TransferModel, clock: Clock):
        self.model = model
        self.clock = clock
        self._heap: list[tuple[float, int, Req]] = []
        self._seq = itertools.count()
        self.num_landed = 0

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, req: Req) -> None:
        landing = self.clock.now() + self.model.delay(req.prompt_len)
        heapq.heappush(self._heap, (landing, next(self._seq), req))

    def pop_landed(self) -> list[Req]:
        """The requests whose KV has landed by now (possibly none)."""
        now = self.clock.now()
        landed = []
        while self._heap and self._heap[0][0] <= now:
            landed.append(heapq.heappop(self._heap)[2])
        self.num_landed += len(landed)
        return landed

    def remove(self, rid: str) -> Req | None:
        """Drop one request's transfer (an abort); the request, or None if it is not here."""
        for i, entry in enumerate(self._heap):
            if entry[2].rid == rid:
                self._heap[i] = self._heap[-1]
                self._heap.pop()
                heapq.heapify(self._heap)
                return entry[2]
        return None

    def seconds_to_next_landing(self) -> float | None:
        return max(0.0, self._heap[0][0] - self.clock.now()) if self._heap else None


class DecodeNode:
    """The decode-node part of a scheduler: prealloc → transfer → prebuilt → decode."""

    def __init__(self, args: ServerArgs, clock: Clock, max_total_tokens: int):
        self.clock = clock
        self.transfers = KVTransferQueue(TransferModel.from_server_args(args), clock)
        # NOTE: no prefill runs here, so only slots and the KV budget bound preallocation.
        self.adder = PrefillAdder(args.max_running_requests, max_total_tokens, max_total_tokens)

    @property
    def num_transferring(self) -> int:
        return len(self.transfers)

    def next_batch(self, sched: Scheduler) -> ForwardBatch | None:
        """A prebuilt pass for landed requests, else a decode step; None while all KV is away."""
        self._preallocate(sched)
        landed = self.transfers.pop_landed()
        if landed:
            sched.running.extend(landed)
            sched.counts["prebuilt_steps"] += 1
            return ForwardBatch(is_prefill=False, reqs=landed, is_prebuilt=True)
        if sched.running:
            sched.counts["decode_steps"] += 1
            return ForwardBatch(is_prefill=False, reqs=sched.running)
        wait = self.transfers.seconds_to_next_landing()
        if wait is not None:
            self.clock.sleep(min(wait, MAX_IDLE_WAIT_S))
        return None

    def abort(self, rid: str) -> Req | None:
        """Drop a request whose KV is in flight; the caller frees its reservation."""
        return self.transfers.remove(rid)

    def _preallocate(self, sched: Scheduler) -> None:
        num_holding = len(sched.running) + len(self.transfers)
        reqs = self.adder.admit(sched.waiting, num_holding, sched.num_used_tokens)
        for req in reqs:
            sched.num_used_tokens += req.num_reserved_tokens
            self.transfers.add(req)
