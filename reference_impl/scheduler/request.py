"""The scheduler's request object: token ids in the chosen storage (H4) and finish checks."""

from __future__ import annotations

import time
from functools import lru_cache

from reference_impl.messages import FinishReason, ReqTiming, SamplingParams, TokenizedGenerateReq
from reference_impl.scheduler.token_storage import TokenStorage
from reference_impl.tokenizer import Tokenizer
from reference_impl.tokenizer.stop_strings import StopScanner


@lru_cache(maxsize=64)
def stop_token_id_set(ids: tuple[int, ...]) -> frozenset[int]:
    """The stop ids as a set: O(1) per token; the sub-requests of one request share one set."""
    return frozenset(ids)


class StopChecker:
    """Finish conditions shared by every request: EOS, stop token ids, stop strings, length."""

    def __init__(self, tokenizer: Tokenizer):
        self._tokenizer = tokenizer
        self.eos_token_id = tokenizer.eos_token_id

    def tail_window(self, stop: tuple[str, ...]) -> int:
        """Non-zero when a request with these stop strings must scan its output text."""
        return 1 if any(stop) else 0

    def check(self, req: Req, token_id: int) -> FinishReason | None:
        sampling = req.sampling
        if len(req.output_ids) >= sampling.max_new_tokens:
            return FinishReason("length")
        if token_id == self.eos_token_id and not sampling.ignore_eos:
            return FinishReason("stop", token_id)
        if token_id in req.stop_token_ids:
            return FinishReason("stop", token_id)
        if req.stop_window:
            matched = self._scan(req, token_id)
            if matched is not None:
                return FinishReason("stop", matched)
        return None

    def _scan(self, req: Req, token_id: int) -> str | None:
        """Feed the token's new text to the request's stop scan: O(new characters) per token."""
        if req.stop_scanner is None:
            req.stop_scanner = StopScanner(req.sampling.stop)
            req.stop_decoder = self._tokenizer.incremental_decoder()
        return req.stop_scanner.feed(req.stop_decoder.feed((token_id,)))


class Req:
    """One choice of one request, as the scheduler holds it."""

    __slots__ = ("rid", "origin_input_ids", "output_ids", "fill_ids", "sampling", "stream",
                 "choice_index", "finish_reason", "stop_window", "num_sent", "is_new",
                 "stop_scanner", "stop_decoder", "stop_token_ids", "prefill_start", "prefill_end",
                 "prefill_steps")

    def __init__(self, msg: TokenizedGenerateReq, storage: TokenStorage, stop_window: int):
        self.rid = msg.rid
        self.origin_input_ids = storage.from_ids(msg.input_ids)
        self.output_ids = storage.empty()
        self.fill_ids = self.origin_input_ids
        self.sampling: SamplingParams = msg.sampling
        self.stream = msg.stream
        self.choice_index = msg.choice_index
        self.finish_reason: FinishReason | None = None
        self.stop_window = stop_window
        self.num_sent = 0
        self.is_new = True
        self.stop_scanner: StopScanner | None = None
        self.stop_decoder = None
        self.stop_token_ids = stop_token_id_set(msg.sampling.stop_token_ids)
        # NOTE: real time (perf_counter), whatever the engine's clock: the HTTP process subtracts
        # its own stamps from these.
        self.prefill_start = self.prefill_end = 0.0
        self.prefill_steps = 0

    @property
    def prompt_len(self) -> int:
        return len(self.origin_input_ids)

    @property
    def seq_len(self) -> int:
        """Tokens in this request's KV cache."""
        return len(self.origin_input_ids) + len(self.output_ids)

    @property
    def num_reserved_tokens(self) -> int:
        """KV tokens held from admission to finish (prompt plus every possible output token)."""
        return self.prompt_len + self.sampling.max_new_tokens

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def timing(self, now: float) -> ReqTiming:
        """Where this request's time went, as it finishes at ``now``."""
        return ReqTiming(self.prefill_start or now, self.prefill_end or now, now,
                         self.prefill_steps)


def stamp_prefill_start(reqs: list[Req]) -> None:
    """Stamp the requests admitted to their first prefill step (or preallocated, PD decode)."""
    now = time.perf_counter()
    for req in reqs:
        if not req.prefill_start:
            req.prefill_start = now
