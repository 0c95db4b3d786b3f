"""Request arrival times for the open-loop rate mode: Poisson, gamma (burstiness) or constant, at a
fixed rate, ramping from one rate to another as vLLM's `--ramp-up-strategy` does, or following a
piecewise series of (rate, seconds) stages (`--request-rate-stages`, inference-perf's load stages)."""

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


def stage_offsets_s(stages: tuple[tuple[float, float], ...], burstiness: float, num: int | None,
                    seed: int) -> list[float]:
    """Intended start times of requests whose rate follows `stages`, (rate, seconds) pairs in order.

    One arrival process runs through all stages: gamma gaps of mean 1 (shape `burstiness`; constant
    with inf) in units of expected requests, mapped to seconds through the inverse of the
    cumulative rate, so each stage expects rate x seconds requests and a gap runs on across a stage's
    end. The first request is at 0; arrivals stop at the last stage's end, or after `num`."""
    ends_s = np.cumsum([0.0] + [secs for _, secs in stages])
    ends_units = np.cumsum([0.0] + [rate * secs for rate, secs in stages])
    total = ends_units[-1]
    limit = int(total * 1.5) + 16 if num is None else min(int(total * 1.5) + 16, num)
    if math.isinf(burstiness):
        gaps = np.ones(limit)
    else:
        gaps = np.random.default_rng(seed).gamma(shape=burstiness, scale=1.0 / burstiness, size=limit)
    units = np.cumsum(gaps) - gaps[0]
    units = units[units < total]
    times = np.interp(units, ends_units, ends_s)
    return times[:num].tolist() if num is not None else times.tolist()


def stage_of(stages: tuple[tuple[float, float], ...], offset_s: float) -> int | None:
    """The index of the stage holding `offset_s` (seconds from the start), None past the last."""
    end = 0.0
    for k, (_, secs) in enumerate(stages):
        end += secs
        if offset_s < end:
            return k
    return None
