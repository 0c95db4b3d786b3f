"""What the two worker pools share: the forked one (run/runner.py) and the Ray one (run/ray_pool.py)."""

from __future__ import annotations

from loadgen.run.worker import NUM_COUNTERS, TTFT_RING, LiveCount

STOP_GRACE_S = 10.0


class SetupError(RuntimeError):
    """The run could not start (server unreachable, dataset unreadable); the message says why."""


def live_totals(c: list[int]) -> dict:
    """The workers' live counters (NUM_COUNTERS slots each, back to back) summed, with every
    worker's latest live TTFTs in µs under `ttft_us` (empty unless `cfg.live`)."""
    totals: dict = {slot.name.lower(): sum(c[slot::NUM_COUNTERS]) for slot in LiveCount}
    totals["ttft_us"] = []
    for base in range(0, len(c), NUM_COUNTERS):
        written = min(c[base + LiveCount.TTFT_WRITTEN], TTFT_RING)
        totals["ttft_us"] += c[base + len(LiveCount):base + len(LiveCount) + written]
    return totals
