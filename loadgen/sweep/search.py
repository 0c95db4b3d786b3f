"""Per-point aggregates, the SLO verdict of a point, the bracket search and the over-saturation rule.

Pure functions over result dicts (`result_dict`'s JSON), so each rule is tested on synthetic points.
"""

from __future__ import annotations

import math

import numpy as np

from loadgen.measure.metrics import pct_key
from loadgen.plan.config import SLO
from loadgen.sweep.stats import interval

#: (key in the results JSON, name): the headline figures, each given as a mean and a 95% interval.
HEADLINES = (
    ("output_throughput", "output tok/s"), ("request_throughput", "req/s"),
    ("median_ttft_ms", "TTFT p50"), ("p99_ttft_ms", "TTFT p99"),
    ("median_tpot_ms", "TPOT p50"), ("p99_tpot_ms", "TPOT p99"),
    ("median_itl_ms", "ITL p50"), ("p99_itl_ms", "ITL p99"),
    ("median_e2e_latency_ms", "E2E p50"), ("p99_e2e_latency_ms", "E2E p99"),
    ("request_goodput", "goodput req/s"),
)
#: The over-saturation rule (README "Sweep"): a point is over-saturated when its mean output tok/s is
#: below THROUGHPUT_GROWTH x the previous point's while its mean TTFT p50 or E2E p50 is above
#: LATENCY_GROWTH x the previous point's (guidellm's over-saturation stop and inference-perf's
#: circuit breaker stop a load for the same reason: the queue grows, the output does not).
THROUGHPUT_GROWTH = 1.05
LATENCY_GROWTH = 1.5
SATURATION_RULE = (f"stop after point i when mean output tok/s(i) < {THROUGHPUT_GROWTH} x mean output "
                   f"tok/s(i-1) and (mean TTFT p50(i) > {LATENCY_GROWTH} x mean TTFT p50(i-1) or mean E2E "
                   f"p50(i) > {LATENCY_GROWTH} x mean E2E p50(i-1)); client-bound points are not judged")
SLO_RULE = ("each bounded latency (TTFT, TPOT, E2E) is pooled over the point's repeats (every successful "
            "request); its --slo-percentile gets a 95% distribution-free interval from the order statistics "
            "(normal approximation to the binomial ranks, clipped to the sample: an end whose rank falls past "
            "the sample is the smallest or largest value seen, marked clipped, and the real interval reaches "
            "past it). The point passes when every "
            "interval's high end is <= its bound, fails when any interval's low end is > its bound, and is "
            "marginal otherwise (the bound lies within the sampling noise); a client-bound point (any "
            "repeat) is unknown; a point with a failed request or a lost worker fails (a failed request met "
            "no bound). Only passes and fails make the bracket")
#: Counts that fail a point whatever its latencies (`slo.failed` entries with bound 0).
COUNTED_FAILURES = ("failed_requests", "workers_lost")
#: Two-sided 95%: the normal quantile of the rank interval.
_Z975 = 1.959964


def slo_keys(slo: SLO, percentile: float) -> list[tuple[str, float]]:
    """(results key, bound ms) for each bound the SLO sets, at `percentile`."""
    p = pct_key(percentile)
    pairs = (("ttft", slo.ttft_ms), ("tpot", slo.tpot_ms), ("e2e_latency", slo.e2e_ms))
    return [(f"{p}_{name}_ms", bound) for name, bound in pairs if bound is not None]


def quantile_interval(values_ms, percentile: float) -> dict | None:
    """`{n, value, low, high, clipped}`: the percentile of the pooled values (numpy's linear rule, as
    the summary's) and its 95% distribution-free interval: the order statistics at ranks ⌊n·q − h⌋
    and ⌈n·q + h⌉ + 1 (h = 1.96·√(n·q·(1−q))), clipped to the sample. `clipped` says which end a
    rank fell past ("low", "high", "both" or None): that end is then the smallest or largest value
    seen, and the real 95% interval reaches past it (with n = 16, p99's high end is the maximum)."""
    arr = np.sort(np.asarray(values_ms, dtype=np.float64))
    n = arr.size
    if n == 0:
        return None
    q = percentile / 100.0
    half = _Z975 * math.sqrt(n * q * (1.0 - q))
    lo_rank, hi_rank = math.floor(n * q - half) - 1, math.ceil(n * q + half)
    lo, hi = min(max(lo_rank, 0), n - 1), min(max(hi_rank, 0), n - 1)
    ends = [end for end, cut in (("low", lo_rank < 0), ("high", hi_rank > n - 1)) if cut]
    return {"n": int(n), "value": float(np.percentile(arr, percentile)), "low": float(arr[lo]),
            "high": float(arr[hi]), "clipped": "both" if len(ends) == 2 else ends[0] if ends else None}


def aggregate(value: float, runs: list[dict], slo: SLO, percentile: float, phase: str = "sweep",
              pooled: dict[str, list[float]] | None = None) -> dict:
    """One point: its value, phase (sweep or search), client-bound flag, intervals and SLO verdict.

    `pooled` maps "ttft", "tpot", "e2e_latency" to every successful request's latency over the
    repeats (ms); without it (a point rebuilt from saved runs) a bound is judged on the interval
    over repeats of the runs' percentile (`stats.interval`: a t-interval from 3 repeats, the min
    and max of 2, the mean alone of 1)."""
    keys = [k for k, _ in HEADLINES] + [k for k, _ in slo_keys(slo, percentile)]
    metrics = {k: interval([run.get(k) for run in runs]) for k in dict.fromkeys(keys)}
    bound = any(bool(run.get("client_bound")) for run in runs)
    point = {"value": value, "phase": phase, "repeats": len(runs), "client_bound": bound,
             "failed_requests": sum(int(run.get("failed") or 0) for run in runs),
             "workers_lost": sum(int(run.get("workers_lost") or 0) for run in runs),
             "interrupted": any(bool(run.get("interrupted")) for run in runs), "metrics": metrics}
    if pooled is not None:
        point["pooled"] = {key: quantile_interval(pooled[name], percentile)
                           for key, name in _pooled_names(slo, percentile)}
    point["slo"] = slo_verdict(point, slo, percentile) if slo.is_set else None
    return point


def _pooled_names(slo: SLO, percentile: float) -> list[tuple[str, str]]:
    prefix = f"{pct_key(percentile)}_"
    return [(key, key[len(prefix):-len("_ms")]) for key, _ in slo_keys(slo, percentile)]


def _bound_stat(point: dict, key: str) -> dict | None:
    """`{value, low, high, clipped}` of a bounded figure: the pooled interval, else the interval
    over repeats (low = high = the mean with one repeat)."""
    if "pooled" in point:
        return point["pooled"].get(key)
    stat = point["metrics"].get(key)
    if stat is None:
        return None
    if stat.get("low") is None:
        return {"value": stat["mean"], "low": stat["mean"], "high": stat["mean"], "clipped": None}
    return {"value": stat["mean"], "low": stat["low"], "high": stat["high"], "clipped": None}


def slo_verdict(point: dict, slo: SLO, percentile: float) -> dict:
    """`{verdict, passed, failed, marginal}` (SLO_RULE): verdict is pass, fail (also any failed request
    or lost worker), marginal or unknown (client-bound, or no value to judge); passed is True, False
    or None for the last two."""
    failed, marginal, missing = [], [], []
    for key, bound in slo_keys(slo, percentile):
        stat = _bound_stat(point, key)
        if stat is None:
            missing.append(key)
            continue
        entry = {"metric": key, "value": stat["value"], "low": stat["low"], "high": stat["high"], "bound": bound,
                 "clipped": stat.get("clipped")}
        if stat["low"] > bound:
            failed.append(entry)
        elif stat["high"] > bound:
            marginal.append(entry)
    if point["client_bound"]:
        return {"verdict": "unknown", "passed": None, "why": "client-bound: not used", "failed": failed,
                "marginal": marginal}
    counted = [{"metric": name, "value": point[name], "low": point[name], "high": point[name], "bound": 0}
               for name in COUNTED_FAILURES if point.get(name)]
    if counted:
        return {"verdict": "fail", "passed": False, "failed": counted + failed, "marginal": marginal}
    if missing:
        return {"verdict": "unknown", "passed": None, "why": f"no value for {', '.join(missing)}",
                "failed": failed, "marginal": marginal}
    verdict = "fail" if failed else "marginal" if marginal else "pass"
    return {"verdict": verdict, "passed": {"pass": True, "fail": False}.get(verdict), "failed": failed,
            "marginal": marginal}


def _mean(point: dict, key: str) -> float | None:
    stat = point["metrics"].get(key)
    return None if stat is None else stat["mean"]


def oversaturated(prev: dict, cur: dict) -> dict:
    """The rule (SATURATION_RULE) applied to two consecutive sweep points: `{stop, reason}`."""
    if prev["client_bound"] or cur["client_bound"]:
        return {"stop": False, "reason": "not judged: a client-bound point"}
    tp0, tp1 = _mean(prev, "output_throughput"), _mean(cur, "output_throughput")
    if not tp0 or tp1 is None:
        return {"stop": False, "reason": "not judged: no output throughput"}
    flat = tp1 < THROUGHPUT_GROWTH * tp0
    grown = []
    for key, name in (("median_ttft_ms", "TTFT p50"), ("median_e2e_latency_ms", "E2E p50")):
        a, b = _mean(prev, key), _mean(cur, key)
        if a and b is not None and b > LATENCY_GROWTH * a:
            grown.append(f"{name} {b:.1f} ms > {LATENCY_GROWTH} x {a:.1f}")
    reason = (f"output tok/s {tp1:.1f} {'<' if flat else '>='} {THROUGHPUT_GROWTH} x {tp0:.1f}; "
              + ("; ".join(grown) if grown else "latency p50 did not grow past "
                 f"{LATENCY_GROWTH}x"))
    return {"stop": flat and bool(grown), "reason": reason}


def bracket(points: list[dict]) -> dict:
    """From judged points: `{highest_passing, lowest_failing, unknown, marginal}`.

    lowest_failing is the smallest value that failed; highest_passing the largest value below it
    that passed (the largest passing value when none failed); unknown (client-bound) and marginal
    list the values between them that the answer does not use."""
    judged = sorted((p for p in points if p.get("slo")), key=lambda p: p["value"])
    fails = [p["value"] for p in judged if p["slo"]["verdict"] == "fail"]
    low_fail = min(fails) if fails else None
    passes = [p["value"] for p in judged if p["slo"]["verdict"] == "pass" and (low_fail is None or p["value"] < low_fail)]
    high_pass = max(passes) if passes else None

    def inside(verdict: str) -> list:
        return [p["value"] for p in judged if p["slo"]["verdict"] == verdict
                and (high_pass is None or p["value"] > high_pass) and (low_fail is None or p["value"] < low_fail)]

    return {"highest_passing": high_pass, "lowest_failing": low_fail, "unknown": inside("unknown"),
            "marginal": inside("marginal")}


def next_probe(low: float | None, high: float | None, integer: bool, rel_tol: float) -> float | None:
    """The middle of [low, high] to run next, or None when the bracket is tight enough.

    Integers (concurrency): done when high - low <= 1. Rates: done when (high - low) / low <= rel_tol."""
    if low is None or high is None:
        return None
    if integer:
        return None if high - low <= 1 else (low + high) // 2
    return None if (high - low) <= rel_tol * low else (low + high) / 2
