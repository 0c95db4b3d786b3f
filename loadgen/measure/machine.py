"""The machine a run ran on: its cores, those loadgen may use, the platform and how busy it was."""

from __future__ import annotations

import os
import platform


def load_avg_1m() -> float | None:
    """The 1-minute load average now; None where the platform has none."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def machine(load_avg: float | None) -> dict:
    """The machine: its cores, those this process may use, the platform and `load_avg`."""
    return {"cpu_count": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0)),
            "platform": platform.platform(), "load_avg_1m": load_avg}
