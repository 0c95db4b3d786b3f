"""What a scheduler and its batch policy share: the queues, the KV budget in use, step counts."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable

from reference_impl.scheduler.request import Req


class BatchState:
    """The waiting queue, the running batch and the KV tokens their requests hold.

    The scheduler adds requests and retires finished or aborted ones; its batch policy moves
    requests from ``waiting`` into ``running`` (or holds them on the way, as a PD decode node
    does while their KV is in flight) and reserves their KV tokens.
    """

    __slots__ = ("max_total_tokens", "waiting", "running", "num_used_tokens", "counts")

    def __init__(self, max_total_tokens: int):
        self.max_total_tokens = max_total_tokens
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []
        self.num_used_tokens = 0
        self.counts: Counter[str] = Counter()

    def fits_ever(self, req: Req) -> bool:
        """Whether the request could be admitted into an empty server at all."""
        return req.num_reserved_tokens <= self.max_total_tokens

    def reserve(self, reqs: Iterable[Req]) -> None:
        """Hold the KV tokens of newly admitted requests until they finish."""
        self.num_used_tokens += sum(r.num_reserved_tokens for r in reqs)

    def free(self, req: Req) -> None:
        """Give back a finished or aborted request's KV tokens."""
        self.num_used_tokens -= req.num_reserved_tokens

    @property
    def token_usage(self) -> float:
        return self.num_used_tokens / self.max_total_tokens
