"""Admission: which waiting requests join the next prefill step."""

from __future__ import annotations

from collections import deque

from reference_impl.scheduler.request import Req


class PrefillAdder:
    """First come, first served, within slot, prefill-token, request and KV-token budgets.

    A request holds ``prompt + max_new_tokens`` KV tokens from admission to finish, so a
    running request never needs to be retracted. ``prefill_max_requests`` (upstream's
    ``--prefill-max-requests``) caps the requests of one prefill step.
    """

    def __init__(self, max_running_requests: int, max_prefill_tokens: int, max_total_tokens: int,
                 prefill_max_requests: int | None = None):
        self.max_running_requests = max_running_requests
        self.max_prefill_tokens = max_prefill_tokens
        self.max_total_tokens = max_total_tokens
        self.prefill_max_requests = prefill_max_requests

    def admit(self, waiting: deque[Req], num_running: int, num_used_tokens: int) -> list[Req]:
        """Pop and return the requests to prefill now (possibly none)."""
        admitted: list[Req] = []
        num_slots = self.num_free_slots(num_running)
        if self.prefill_max_requests is not None:
            num_slots = min(num_slots, self.prefill_max_requests)
        prefill_budget = self.max_prefill_tokens
        kv_free = self.max_total_tokens - num_used_tokens
        while waiting and len(admitted) < num_slots:
            req = waiting[0]
            if req.num_reserved_tokens > kv_free:
                break
            # NOTE: one request longer than the prefill budget still runs, alone.
            if admitted and req.prompt_len > prefill_budget:
                break
            waiting.popleft()
            admitted.append(req)
            kv_free -= req.num_reserved_tokens
            prefill_budget -= req.prompt_len
        return admitted

    def num_free_slots(self, num_running: int) -> int:
        """Requests the running batch can still take."""
        return self.max_running_requests - num_running

    def fits_ever(self, req: Req) -> bool:
        """Whether the request could be admitted into an empty server at all."""
        return req.num_reserved_tokens <= self.max_total_tokens
