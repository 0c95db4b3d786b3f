"""The one clock a worker stamps with: `now_ns()`, perf_counter_ns (CLOCK_MONOTONIC on Linux), and
the move of kernel receive stamps into it.

Every time reading in a worker (intended, start, end and chunk stamps, the start wait) goes
through `now_ns`, so a test can give one worker process a clock of its own: with
`LOADGEN_TEST_CLOCK_SKEW_NS` set in its environment (the Ray pool sets it per actor for a test),
each reading is shifted by that many nanoseconds, as a host whose clock runs apart would be.
Unset, `now_ns` *is* `time.perf_counter_ns` (no wrapper on the hot path).

Kernel receive stamps (`SO_TIMESTAMPNS`) are CLOCK_REALTIME; `KernelClock` holds the offset that
moves them into `now_ns`'s clock, measured at start and re-checked on every health tick. The
realtime clock can be stepped (NTP, an operator): a re-check that finds the offset moved by more
than `STEP_NS` counts a step, and the run says so.
"""

from __future__ import annotations

import os
import time

SKEW_ENV = "LOADGEN_TEST_CLOCK_SKEW_NS"
SKEW_NS = int(os.environ.get(SKEW_ENV) or 0)
#: An offset that moved by more than this between two checks is a step of the realtime clock
#: (slewing moves it by at most 0.5 ms/s, 25 µs per 50 ms health tick).
STEP_NS = 1_000_000
_SAMPLES = 5

if SKEW_NS:
    def now_ns() -> int:
        """perf_counter_ns shifted by the injected test skew."""
        return time.perf_counter_ns() + SKEW_NS
else:
    now_ns = time.perf_counter_ns


def realtime_offset() -> tuple[int, int]:
    """(CLOCK_REALTIME − now_ns, uncertainty), both ns: the narrowest of a few bracketed readings."""
    best = None
    for _ in range(_SAMPLES):
        before = now_ns()
        real = time.clock_gettime_ns(time.CLOCK_REALTIME)
        after = now_ns()
        if best is None or after - before < best[1]:
            best = (real - (before + after) // 2, after - before)
    return best[0], (best[1] + 1) // 2


class KernelClock:
    """The offset from kernel (realtime) receive stamps to `now_ns`, and the steps seen on re-checks."""

    def __init__(self) -> None:
        self.offset_ns, self.uncertainty_ns = realtime_offset()
        self.num_steps = 0
        self.max_step_ns = 0

    def recheck(self) -> None:
        """Measure the offset again; a move past STEP_NS counts as a step of the realtime clock."""
        offset, uncertainty = realtime_offset()
        moved = abs(offset - self.offset_ns)
        if moved > STEP_NS:
            self.num_steps += 1
            self.max_step_ns = max(self.max_step_ns, moved)
        self.offset_ns, self.uncertainty_ns = offset, max(self.uncertainty_ns, uncertainty)
