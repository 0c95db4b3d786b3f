"""The engine interface the scheduler drives, and the batch it hands over."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from reference_impl.scheduler.request import Req


@dataclass
class ForwardBatch:
    """One engine step: a prefill (extend) of new requests, or a decode of running ones.

    On a PD decode node a *prebuilt* batch stands in for the prefill: the requests' KV and
    first tokens came from the prefill node, so the engine runs no model for it.
    """

    is_prefill: bool
    reqs: Sequence[Req]
    is_prebuilt: bool = False

    @property
    def num_reqs(self) -> int:
        return len(self.reqs)


class Engine(ABC):
    """Runs forward steps; one new token id per request in batch order."""

    #: KV-cache budget in tokens, reported to the scheduler.
    max_total_num_tokens: int

    @abstractmethod
    def forward(self, batch: ForwardBatch) -> list[int]:
        """Run one step and return each request's next token id."""

    def release(self, req: Req) -> None:  # noqa: B027 - optional hook
        """Free whatever the engine holds for a finished or aborted request."""


class Clock(ABC):
    """Time as the scheduler and engine see it (seconds)."""

    @abstractmethod
    def now(self) -> float: ...

    @abstractmethod
    def sleep(self, seconds: float) -> None: ...


class RealClock(Clock):
    """Wall-clock time; ``sleep`` blocks without spinning."""

    def now(self) -> float:
        return time.perf_counter()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class VirtualClock(Clock):
    """A clock that only moves when slept on: deterministic, no waiting."""

    def __init__(self, start: float = 0.0):
        self._now = start

    def now(self) -> float:
        return self._now

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._now += seconds


def make_clock(sim_time: str) -> Clock:
    """``"real"`` or ``"virtual"``."""
    return VirtualClock() if sim_time == "virtual" else RealClock()
