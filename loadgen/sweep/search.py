"""Per-point aggregates, the SLO verdict of a point, the bracket search and the over-saturation rule.

Pure functions over result dicts (`result_dict`'s JSON), so each rule is tested on synthetic points.
"""

from __future__ import annotations

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
SLO_RULE = ("a point passes when the mean over its repeats of each bounded percentile (TTFT, TPOT, E2E "
            "at --slo-percentile) is <= its bound; a client-bound point (any repeat) is unknown and not used")


def slo_keys(slo: SLO, percentile: float) -> list[tuple[str, float]]:
    """(results key, bound ms) for each bound the SLO sets, at `percentile`."""
    p = pct_key(percentile)
    pairs = (("ttft", slo.ttft_ms), ("tpot", slo.tpot_ms), ("e2e_latency", slo.e2e_ms))
    return [(f"{p}_{name}_ms", bound) for name, bound in pairs if bound is not None]


def aggregate(value: float, runs: list[dict], slo: SLO, percentile: float, phase: str = "sweep") -> dict:
    """One point: its value, phase (sweep or search), client-bound flag, intervals and SLO verdict."""
    keys = [k for k, _ in HEADLINES] + [k for k, _ in slo_keys(slo, percentile)]
    metrics = {k: interval([run.get(k) for run in runs]) for k in dict.fromkeys(keys)}
    bound = any(bool(run.get("client_bound")) for run in runs)
    point = {"value": value, "phase": phase, "repeats": len(runs), "client_bound": bound,
             "failed_requests": sum(int(run.get("failed") or 0) for run in runs),
             "interrupted": any(bool(run.get("interrupted")) for run in runs), "metrics": metrics}
    point["slo"] = slo_verdict(point, slo, percentile) if slo.is_set else None
    return point


def slo_verdict(point: dict, slo: SLO, percentile: float) -> dict:
    """`{passed, failed: [{metric, mean, bound}]}`; passed is None (unknown) for a client-bound point
    or when a bounded figure is missing (no request succeeded)."""
    failed, missing = [], []
    for key, bound in slo_keys(slo, percentile):
        stat = point["metrics"].get(key)
        if stat is None:
            missing.append(key)
        elif stat["mean"] > bound:
            failed.append({"metric": key, "mean": stat["mean"], "bound": bound})
    if point["client_bound"]:
        return {"passed": None, "why": "client-bound: not used", "failed": failed}
    if missing:
        return {"passed": None, "why": f"no value for {', '.join(missing)}", "failed": failed}
    return {"passed": not failed, "failed": failed}


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
    """From judged points: `{highest_passing, lowest_failing, unknown}`.

    lowest_failing is the smallest value that failed; highest_passing the largest value below it
    that passed (the largest passing value when none failed); unknown lists the values with no
    verdict (client-bound) between them, which the answer does not use."""
    judged = sorted((p for p in points if p.get("slo")), key=lambda p: p["value"])
    fails = [p["value"] for p in judged if p["slo"]["passed"] is False]
    low_fail = min(fails) if fails else None
    passes = [p["value"] for p in judged if p["slo"]["passed"] and (low_fail is None or p["value"] < low_fail)]
    high_pass = max(passes) if passes else None
    unknown = [p["value"] for p in judged if p["slo"]["passed"] is None
               and (high_pass is None or p["value"] > high_pass)
               and (low_fail is None or p["value"] < low_fail)]
    return {"highest_passing": high_pass, "lowest_failing": low_fail, "unknown": unknown}


def next_probe(low: float | None, high: float | None, integer: bool, rel_tol: float) -> float | None:
    """The middle of [low, high] to run next, or None when the bracket is tight enough.

    Integers (concurrency): done when high - low <= 1. Rates: done when (high - low) / low <= rel_tol."""
    if low is None or high is None:
        return None
    if integer:
        return None if high - low <= 1 else (low + high) // 2
    return None if (high - low) <= rel_tol * low else (low + high) / 2
