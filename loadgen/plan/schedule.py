"""Request arrival times for the open-loop rate mode: Poisson, gamma (burstiness) or constant, at a
fixed rate or ramping from one rate to another as vLLM's `--ramp-up-strategy` does."""

from __future__ import annotations

import math

import numpy as np


def arrival_offsets_s(rate: float, burstiness: float, num: int | None, duration_s: float | None, seed: int) -> list[float]:
    """Intended start times (seconds from the run's start) of the requests.

    Gaps are gamma-distributed with shape `burstiness` and mean 1/rate (shape 1 is Poisson);
    an infinite burstiness gives constant gaps. With `duration_s`, arrivals stop at the duration.
    """
    if math.isinf(rate):
        raise ValueError("arrival times need a finite rate")
    limit = num if num is not None else int(rate * duration_s * 1.5) + 16
    if math.isinf(burstiness):
        gaps = np.full(limit, 1.0 / rate)
    else:
        rng = np.random.default_rng(seed)
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=limit)
    times = np.cumsum(gaps) - gaps[0]
    if duration_s is not None:
        times = times[times < duration_s]
    return times.tolist()


def ramp_rate(strategy: str, start_rps: float, end_rps: float, index: int, num: int) -> float:
    """vLLM's rate for request `index` of `num`: linear or exponential in the request's progress."""
    progress = index / max(num - 1, 1)
    if strategy == "linear":
        return start_rps + (end_rps - start_rps) * progress
    if strategy == "exponential":
        return start_rps * (end_rps / start_rps) ** progress
    raise ValueError(f"unknown ramp-up strategy {strategy!r}")


def ramp_offsets_s(strategy: str, start_rps: float, end_rps: float, burstiness: float, num: int,
                   seed: int) -> list[float]:
    """Intended start times of `num` requests whose rate ramps from start_rps to end_rps."""
    rates = np.array([ramp_rate(strategy, start_rps, end_rps, i, num) for i in range(num)])
    if math.isinf(burstiness):
        gaps = 1.0 / rates
    else:
        gaps = np.random.default_rng(seed).gamma(shape=burstiness, scale=1.0 / (rates * burstiness))
    return (np.cumsum(gaps) - gaps[0]).tolist()
