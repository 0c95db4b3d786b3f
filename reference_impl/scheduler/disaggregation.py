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

from reference_impl.config import ServerArgs
from reference_impl.engine.base import Clock, ForwardBatch
from reference_impl.scheduler.batch_state import BatchState
from reference_impl.scheduler.policy import BatchPolicy
from reference_impl.scheduler.prefill_adder import PrefillAdder
from reference_impl.scheduler.request import Req, stamp_prefill_start

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


class DecodePolicy(BatchPolicy):
    """The batch policy of a decode node: prealloc → transfer → prebuilt → decode."""

    def __init__(self, state: BatchState, adder: PrefillAdder, transfers: KVTransferQueue,
                 clock: Clock):
        super().__init__(state)
        self.adder = adder
        self.transfers = transfers
        self.clock = clock

    @classmethod
    def from_server_args(cls, args: ServerArgs, state: BatchState, clock: Clock) -> DecodePolicy:
        # NOTE: no prefill runs here, so only slots and the KV budget bound preallocation.
        adder = PrefillAdder(args.max_running_requests, state.max_total_tokens,
                             state.max_total_tokens)
        return cls(state, adder, KVTransferQueue(TransferModel.from_server_args(args), clock), clock)

    @property
    def num_transferring(self) -> int:
        return len(self.transfers)

    @property
    def num_kv_transfers(self) -> int:
        return self.transfers.num_landed

    def next_batch(self) -> ForwardBatch | None:
        """A prebuilt pass for landed requests, else a decode step; None while all KV is away."""
        state = self.state
        self._preallocate()
        landed = self.transfers.pop_landed()
        if landed:
            state.running.extend(landed)
            state.counts["prebuilt_steps"] += 1
            return ForwardBatch(is_prefill=False, reqs=landed, is_prebuilt=True)
        if state.running:
            state.counts["decode_steps"] += 1
            return ForwardBatch(is_prefill=False, reqs=state.running)
        wait = self.transfers.seconds_to_next_landing()
        if wait is not None:
            self.clock.sleep(min(wait, MAX_IDLE_WAIT_S))
        return None

    def abort(self, rid: str) -> Req | None:
        """Drop a request whose KV is in flight; the caller frees its reservation."""
        return self.transfers.remove(rid)

    def _preallocate(self) -> None:
        state = self.state
        num_holding = len(state.running) + len(self.transfers)
        reqs = self.adder.admit(state.waiting, num_holding, state.num_used_tokens)
        if reqs:
            stamp_prefill_start(reqs)
        state.reserve(reqs)
        for req in reqs:
            self.transfers.add(req)
