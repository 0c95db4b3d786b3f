"""H1: how the tokenizer manager wakes the streams waiting on one batch output.

- ``ImmediateWakeups`` (legacy): a synchronous loop sets each request's event at once; the
  woken coroutines run only after the whole batch, all together (a wake-up storm).
- ``BatchedWakeups`` (optimized): events are set in groups of ``batch_notify_size`` and the
  handler yields to the event loop after each full group.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable

from reference_impl.messages import BatchStrOutput
from reference_impl.server.stream_outputs import ReqState

ProcessOne = Callable[[BatchStrOutput, int], "ReqState | None"]


class Wakeups(ABC):
    """H1's interface: hand one batch output to its requests and wake their waiting streams."""

    def __init__(self, batch_notify_size: int = 16):
        self.batch_notify_size = max(1, batch_notify_size)

    @abstractmethod
    async def deliver(self, batch: BatchStrOutput, process_one: ProcessOne) -> None:
        """Queue every request's output (``process_one``) and set the events of those it returns."""


class ImmediateWakeups(Wakeups):
    """Legacy: process and set every event in one synchronous pass (no groups)."""

    async def deliver(self, batch: BatchStrOutput, process_one: ProcessOne) -> None:
        for i in range(len(batch.rids)):
            state = process_one(batch, i)
            if state is not None:
                state.event.set()


class BatchedWakeups(Wakeups):
    """Optimized: set events a group of ``batch_notify_size`` at a time and yield between groups."""

    async def deliver(self, batch: BatchStrOutput, process_one: ProcessOne) -> None:
        size = self.batch_notify_size
        pending: list[ReqState] = []
        for i in range(len(batch.rids)):
            state = process_one(batch, i)
            if state is None:
                continue
            pending.append(state)
            if len(pending) >= size:
                for s in pending:
                    s.event.set()
                pending = []
                await asyncio.sleep(0)
        # NOTE: no yield after the remainder: the receive loop awaits the next message at once.
        for s in pending:
            s.event.set()
