"""The run over time: per-interval buckets, the steady-state window, and CDF points.

Computed after the run from the merged records (nothing is added to the measured window). Time 0
is the first intended send. A request counts in the bucket where it started, finished, or where
its first token or an event arrived; ITL gaps count in the bucket of their later event.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loadgen.measure.metrics import latencies, origin_ns
from loadgen.measure.records import RequestRecord
from loadgen.measure.sketch import value_stats
from loadgen.plan.config import RunConfig

STEADY_FRACTION = 0.9
MIN_STEADY_BUCKETS = 2
CDF_PERCENTILES = (*range(0, 100), 99.5, 99.9, 100)
STEADY_RULE = (f"from the first to the last interval whose mean requests in flight reach "
               f"{STEADY_FRACTION:.0%} of the peak interval's (the start-up burst and the drain lie "
               f"outside); at least {MIN_STEADY_BUCKETS} intervals, and requests kept starting in it (one started "
               f"after its first interval): a batch sent at once, such as N prompts at concurrency N, has none")


def _quantiles(values_ms: np.ndarray) -> dict | None:
    if values_ms.size == 0:
        return None
    p50, p90, p99 = np.percentile(values_ms, [50, 90, 99])
    return {"n": int(values_ms.size), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def _by_bucket(index: np.ndarray, values: np.ndarray, num: int) -> list[np.ndarray]:
    """values split by their bucket index (0..num-1), each part in its original order."""
    order = np.argsort(index, kind="stable")
    cuts = np.searchsorted(index[order], np.arange(1, num))
    return np.split(values[order], cuts)


def _in_flight(starts: np.ndarray, ends: np.ndarray, num: int, step: int) -> np.ndarray:
    """Mean requests in flight per bucket: the integral of the in-flight count over each bucket
    (piecewise linear between starts and ends, so exact at the bucket edges), over its width."""
    times = np.concatenate([starts, ends])
    deltas = np.concatenate([np.ones(starts.size), -np.ones(ends.size)])
    order = np.argsort(times, kind="stable")
    times, count = times[order], np.cumsum(deltas[order])
    area = np.concatenate([[0.0], np.cumsum(count[:-1] * np.diff(times))])
    edges = np.arange(num + 1, dtype=np.float64) * step
    return np.diff(np.interp(edges, times, area)) / step


@dataclass(frozen=True)
class Stamps:
    """A run's times as int64 ns from the origin, with what each carries: each request's start and
    end (`failed` marks it), first-token times with their TTFTs (ms), event times with their
    tokens, and ITL gaps (ms) at their later event."""

    starts: np.ndarray
    ends: np.ndarray
    failed: np.ndarray
    first_at: np.ndarray
    ttft_ms: np.ndarray
    event_at: np.ndarray
    event_tokens: np.ndarray
    gap_at: np.ndarray
    gap_ms: np.ndarray


def record_stamps(cfg: RunConfig, records: list[RequestRecord], t0: int) -> Stamps:
    """The records' Stamps, from the origin `t0`."""
    ok = [r for r in records if r.ok]
    first = [r for r in ok if r.first_token_ns is not None]
    gaps = [np.asarray(r.chunk_ns, dtype=np.int64) for r in ok if len(r.chunk_ns) > 1]
    return Stamps(
        starts=np.asarray([r.start_ns - t0 for r in records], dtype=np.int64),
        ends=np.asarray([max(r.end_ns, r.start_ns) - t0 for r in records], dtype=np.int64),
        failed=np.asarray([r.is_failed for r in records], dtype=bool),
        first_at=np.asarray([r.first_token_ns - t0 for r in first], dtype=np.int64),
        ttft_ms=np.asarray([(r.first_token_ns - origin_ns(cfg, r)) / 1e6 for r in first]),
        event_at=_join([np.asarray(r.chunk_ns, dtype=np.int64) - t0 for r in ok], np.int64),
        event_tokens=_join([_event_tokens(r) for r in ok], np.float64),
        gap_at=_join([g[1:] - t0 for g in gaps], np.int64),
        gap_ms=_join([np.diff(g) / 1e6 for g in gaps], np.float64))


def _join(parts: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)


def _event_tokens(rec: RequestRecord) -> np.ndarray:
    if len(rec.chunk_tokens) == len(rec.chunk_ns):
        return np.asarray(rec.chunk_tokens, dtype=np.float64)
    return np.ones(len(rec.chunk_ns))


def buckets(stamps: Stamps, interval_s: float = 1.0) -> list[dict]:
    """The `timeline.buckets` of `stamps`: one per `interval_s` from the origin to the last start or end."""
    step = max(1, int(interval_s * 1e9))
    if stamps.starts.size == 0:
        return []
    return _buckets(stamps, int(max(stamps.ends.max(), stamps.starts.max()) // step) + 1, step)


def _buckets(s: Stamps, num: int, step: int) -> list[dict]:
    idx = lambda at: np.minimum(at // step, num - 1)  # noqa: E731
    started = np.bincount(idx(s.starts), minlength=num)
    finished = np.bincount(idx(s.ends), minlength=num)
    errors = np.bincount(idx(s.ends[s.failed]), minlength=num)
    tokens = np.bincount(idx(s.event_at), weights=s.event_tokens, minlength=num)
    in_flight = _in_flight(s.starts, s.ends, num, step)
    ttft = _by_bucket(idx(s.first_at), s.ttft_ms, num)
    itl = _by_bucket(idx(s.gap_at), s.gap_ms, num)
    return [{"t_s": k * step / 1e9, "started": int(started[k]), "finished": int(finished[k]),
             "errors": int(errors[k]), "in_flight": float(in_flight[k]),
             "output_tokens": int(round(tokens[k])), "output_tok_s": float(tokens[k] / (step / 1e9)),
             "ttft_ms": _quantiles(ttft[k]), "itl_ms": _quantiles(itl[k])} for k in range(num)]


def _stats(values_ms) -> dict | None:
    num, mean, _, _, (p50, p90, p99) = value_stats(values_ms, [50, 90, 99])
    if num == 0:
        return None
    return {"mean": mean, "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def steady_state(cfg: RunConfig, records: list[RequestRecord], buckets: list[dict], t0: int,
                 step: int) -> dict | None:
    """The window between the start-up burst and the drain (STEADY_RULE), and its own figures:
    throughput from the events inside it, latencies of the requests that started inside it."""
    flight = np.asarray([b["in_flight"] for b in buckets])
    if flight.size == 0 or flight.max() <= 0:
        return None
    high = np.flatnonzero(flight >= STEADY_FRACTION * flight.max())
    first, last = int(high[0]), int(high[-1])
    if last - first + 1 < MIN_STEADY_BUCKETS or not any(b["started"] for b in buckets[first + 1:last + 1]):
        return None
    lo, hi = t0 + first * step, t0 + (last + 1) * step
    inside = [r for r in records if lo <= r.start_ns < hi]
    ok = [r for r in inside if r.ok]
    lat = latencies(cfg, ok)
    tokens = sum(b["output_tokens"] for b in buckets[first:last + 1])
    seconds = (hi - lo) / 1e9
    return {"start_s": (lo - t0) / 1e9, "end_s": (hi - t0) / 1e9, "rule": STEADY_RULE,
            "requests": len(inside), "completed": len(ok),
            "output_throughput": tokens / seconds,
            "request_throughput": sum(b["finished"] for b in buckets[first:last + 1]) / seconds,
            "mean_in_flight": float(flight[first:last + 1].mean()),
            "ttft_ms": _stats(lat["ttft"]), "itl_ms": _stats(lat["itl"]), "tpot_ms": _stats(lat["tpot"])}


def timeline(cfg: RunConfig, records: list[RequestRecord], interval_s: float = 1.0) -> dict:
    """The `timeline` block of the results JSON: buckets of `interval_s` and the steady state."""
    step = max(1, int(interval_s * 1e9))
    if not records:
        return {"interval_s": interval_s, "buckets": [], "steady_state": None}
    t0 = min(r.intended_ns for r in records)
    parts = buckets(record_stamps(cfg, records, t0), interval_s)
    return {"interval_s": interval_s, "buckets": parts,
            "steady_state": steady_state(cfg, records, parts, t0, step)}


def cdf(cfg: RunConfig, records: list[RequestRecord], lat: dict[str, list[float]] | None = None) -> dict:
    """`[percentile, value]` points of each latency's distribution, for CDF plots; `lat`: the
    successful records' `latencies`, when the caller already has them."""
    lat = lat if lat is not None else latencies(cfg, [r for r in records if r.ok])
    return {f"{name}_ms": cdf_points(lat[name]) for name in ("ttft", "itl", "tpot", "e2e_latency")}


def cdf_points(values) -> list[list[float]]:
    """`[percentile, value]` at CDF_PERCENTILES of `values` (a list, an array or a LogHistogram); [] when empty."""
    num, _, _, _, points = value_stats(values, CDF_PERCENTILES)
    return [[float(p), float(v)] for p, v in zip(CDF_PERCENTILES, points, strict=True)] if num else []
