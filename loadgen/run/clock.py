"""The one clock a worker stamps with: `now_ns()`, perf_counter_ns (CLOCK_MONOTONIC on Linux).

Every time reading in a worker (intended, start, end and chunk stamps, the start wait) goes
through `now_ns`, so a test can give one worker process a clock of its own: with
`LOADGEN_TEST_CLOCK_SKEW_NS` set in its environment (the Ray pool sets it per actor for a test),
each reading is shifted by that many nanoseconds, as a host whose clock runs apart would be.
Unset, `now_ns` *is* `time.perf_counter_ns` (no wrapper on the hot path).
"""

from __future__ import annotations

import os
import time

SKEW_ENV = "LOADGEN_TEST_CLOCK_SKEW_NS"
SKEW_NS = int(os.environ.get(SKEW_ENV) or 0)

if SKEW_NS:
    def now_ns() -> int:
        """perf_counter_ns shifted by the injected test skew."""
        return time.perf_counter_ns() + SKEW_NS
else:
    now_ns = time.perf_counter_ns
