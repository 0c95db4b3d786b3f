"""H1: how the tokenizer manager wakes the streams waiting on one batch output.

- ``ImmediateWakeups`` (legacy): a synchronous loop sets each request's event at once; the
  woken coroutines run only after the whole batch, all together (a wake-up storm).
- ``BatchedWakeups`` (optimized): events are set in groups of ``batch_notify_size`` and the
  handler yields to the event loop after each full group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from reference_impl.messages import BatchStrOutput
from reference_impl.server.stream_outputs import ReqState

ProcessOne = Callable[[BatchStrOutput, int], "ReqState | None"]


class ImmediateWakeups:
    """Legacy: process and set every event in one synchronous pass."""

    async def deliver(self, batch: BatchStrOutput, process_one: ProcessOne) -> None:
        for i in range(len(batch.rids)):
            state = process_one(batch, i)
            if state is not None:
                state.event.set()


class BatchedWakeups:
    """Optimized: set events a group at a time and yield between groups."""

    def __init__(self, batch_notify_size: int):
        self.batch_notify_size = max(1, batch_notify_size)

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


def make_wakeups(form: str, batch_notify_size: int):
    """The wake-up strategy for ``--wakeup`` and ``--batch-notify-size``."""
    return ImmediateWakeups() if form == "immediate" else BatchedWakeups(batch_notify_size)
