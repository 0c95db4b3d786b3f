"""`loadgen compare`'s noise estimate: per headline metric, the difference of a run to the first
with a seeded bootstrap interval from the two runs' per-request samples, and whether it is
significant (the interval leaves out 0). The intervals are simultaneous: together they hold at 95%
(Bonferroni: each of the m metrics at 1 - 0.05/m), so two runs of one load mark nothing significant
in 95% of comparisons, not in 0.95^m of them (60% for m = 10).

The samples are the runs' `--records` files (one JSON line per request; the results JSON keeps
summaries, not samples): each run's own `records_file`, or the files given to `compare --records`;
else a file's own per-request lists (`--save-detailed`: loadgen's and vLLM's, SGLang's). Requests are resampled, each run apart: a mean by drawing request indices (at most
`MAX_DRAWS` draws per metric and run, so a huge run gets fewer resamples, never more time), a
percentile from its order statistic's exact bootstrap law (the k-th smallest of n uniform draws is
Beta(k, n - k + 1)-distributed), so its cost does not grow with the run.

A percentile near the edge of a small run is not bounded by its samples: the bootstrap can only
redraw the run's own top values, so the p99 of 30 requests would get a narrow interval around
their maximum. The exact (distribution-free) test says when it is: the largest of n samples is
above the q-quantile with probability 1 - q^n, so an upper bound at level L exists only when
q^n <= (1 - L) / 2, and a lower one when (1 - q)^n <= (1 - L) / 2 (p99 at 99.5%: from 597
requests on). Where a run's percentile has no bound on a side, the difference's interval is open
on the side that bound would close (`low` or `high` is None) and cannot be significant that way.
The intervals cover the requests' sampling noise, not a drift of the machine between two runs:
repeat a run to see that.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

import numpy as np

#: Resamples per metric and run (each tail of a 99.5% interval holds about 10 of them), and the
#: most request draws a mean's resampling may cost (about 1 s).
NUM_RESAMPLES = 4000
MAX_DRAWS = 100_000_000
#: The intervals' joint confidence.
CONFIDENCE = 0.95
#: A records file's bounds: its lines (requests) and one line's bytes.
MAX_RECORDS = 5_000_000
MAX_LINE_BYTES = 16 << 20
#: Headline metric -> (sample, statistic): a mean, a percentile, or "ratio" (pooled mean ITL).
HEADLINE = {
    "mean_ttft_ms": ("ttft", "mean"), "p50_ttft_ms": ("ttft", 50.0), "p99_ttft_ms": ("ttft", 99.0),
    "mean_tpot_ms": ("tpot", "mean"), "p50_tpot_ms": ("tpot", 50.0), "p99_tpot_ms": ("tpot", 99.0),
    "mean_itl_ms": ("itl", "ratio"),
    "mean_e2e_latency_ms": ("e2e", "mean"), "p50_e2e_latency_ms": ("e2e", 50.0),
    "p99_e2e_latency_ms": ("e2e", 99.0),
}


@dataclass(frozen=True)
class Samples:
    """One run's per-request samples (ms) of its successful requests."""

    ttft: np.ndarray
    tpot: np.ndarray
    e2e: np.ndarray
    itl: np.ndarray  # (requests, 2): each request's sum of gaps and its number of gaps


def read_records(path: str) -> Samples:
    """The samples of a `--records` file; ValueError naming the file and line for a bad one."""
    ttft, tpot, e2e, itl = [], [], [], []
    try:
        with open(path, "rb") as f:
            for n, line in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), 1):
                if n > MAX_RECORDS:
                    raise ValueError(f"{path}: more than {MAX_RECORDS:,} records")
                if len(line) > MAX_LINE_BYTES:
                    raise ValueError(f"{path} line {n}: longer than {MAX_LINE_BYTES >> 20} MiB")
                if line.strip():
                    _take(_row(line, path, n), ttft, tpot, e2e, itl)
    except OSError as exc:
        raise ValueError(f"cannot read records file {path}: {exc.strerror or exc}") from None
    return Samples(np.array(ttft, float), np.array(tpot, float), np.array(e2e, float),
                   np.array(itl, float).reshape(-1, 2))


def _row(line: bytes, path: str, n: int) -> dict:
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):
        raise ValueError(f"{path} line {n}: not a JSON record") from None
    if not isinstance(row, dict):
        raise ValueError(f"{path} line {n}: not a JSON record")
    return row


def _num(value) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _take(row: dict, ttft: list, tpot: list, e2e: list, itl: list) -> None:
    """A request's samples, as the summary measures them (measure/metrics.py)."""
    if row.get("ok") is not True:
        return
    if (e := _num(row.get("e2e_latency_ms"))) is not None:
        e2e.append(e)
    listed = row.get("chunk_ms")
    chunks = [c for c in listed if _num(c) is not None] if isinstance(listed, list) else []
    if (t := _num(row.get("ttft_ms"))) is not None:
        ttft.append(t)
        first, out = _num(row.get("first_token_ms")), _num(row.get("output_tokens"))
        if first is not None and out is not None and out > 1 and len(chunks) > 1:
            tpot.append((chunks[-1] - first) / (out - 1))
    if len(chunks) > 1:
        itl.append((chunks[-1] - chunks[0], len(chunks) - 1))


def lists_samples(run: dict) -> Samples | None:
    """The samples of a file's per-request lists, in seconds (`ttfts`, `itls`, `latencies`,
    `output_lens`, `errors`: vLLM's `--save-detailed`, loadgen's, SGLang's; a peer's sit in
    `provenance.also`); None without `ttfts`. E2E only where `latencies` is there."""
    held = run if isinstance(run.get("ttfts"), list) else (run.get("provenance") or {}).get("also") or {}
    ttfts = held.get("ttfts")
    if not isinstance(ttfts, list):
        return None
    n = len(ttfts)
    errors, itls, lat, lens = (_listed(held.get(k), n) for k in ("errors", "itls", "latencies", "output_lens"))
    ttft, tpot, e2e, itl = [], [], [], []
    for i in range(n):
        if errors[i]:
            continue
        if (t := _num(ttfts[i])) is not None:
            ttft.append(t * 1e3)
        if (e := _num(lat[i])) is not None:
            e2e.append(e * 1e3)
        gaps = [g for g in itls[i] if _num(g) is not None] if isinstance(itls[i], list) else []
        if gaps:
            itl.append((sum(gaps) * 1e3, len(gaps)))
            if (out := _num(lens[i])) is not None and out > 1:
                tpot.append(sum(gaps) * 1e3 / (out - 1))
    return Samples(np.array(ttft, float), np.array(tpot, float), np.array(e2e, float),
                   np.array(itl, float).reshape(-1, 2))


def _listed(value, n: int) -> list:
    return value if isinstance(value, list) and len(value) == n else [None] * n


def _statistic(samples: Samples, sample: str, stat) -> float | None:
    values = getattr(samples, sample)
    if not len(values):
        return None
    if stat == "ratio":
        return float(values[:, 0].sum() / values[:, 1].sum()) if values[:, 1].sum() else None
    return float(values.mean()) if stat == "mean" else float(np.percentile(values, stat))


def _replicates(values: np.ndarray, stat, rng: np.random.Generator, num: int) -> np.ndarray:
    """`num` bootstrap replicates of the statistic (fewer for a mean of a huge run: MAX_DRAWS)."""
    n = len(values)
    if stat not in ("mean", "ratio"):
        ordered = np.sort(values)
        k = min(n, max(1, math.ceil(stat / 100 * n)))
        # NOTE: resampled k-th order statistic = ordered[ceil(n * U)], U the k-th smallest of n uniforms
        u = rng.beta(k, n - k + 1, size=num)
        return ordered[np.clip(np.ceil(u * n).astype(np.int64) - 1, 0, n - 1)]
    out = np.empty(max(1, min(num, MAX_DRAWS // n)))
    for i in range(len(out)):
        drawn = values[rng.integers(0, n, n)]
        out[i] = drawn.mean() if stat == "mean" else drawn[:, 0].sum() / max(drawn[:, 1].sum(), 1.0)
    return out


def metric_level(confidence: float = CONFIDENCE, num_metrics: int = len(HEADLINE)) -> float:
    """Each metric's interval level for `confidence` jointly over `num_metrics` (Bonferroni)."""
    return 1 - (1 - confidence) / num_metrics


def difference(a: Samples, b: Samples, metric: str, seed: int = 0, num: int = NUM_RESAMPLES,
               level: float = metric_level()) -> dict | None:
    """B's metric minus A's, its bootstrap interval at `level` (`low`, `high`) and whether it
    leaves out 0; None where either run has no sample of it."""
    sample, stat = HEADLINE[metric]
    va, vb = getattr(a, sample), getattr(b, sample)
    base, value = _statistic(a, sample, stat), _statistic(b, sample, stat)
    if base is None or value is None:
        return None
    rng = np.random.default_rng(seed)
    ra, rb = _replicates(va, stat, rng, num), _replicates(vb, stat, rng, num)
    m = min(len(ra), len(rb))
    diffs = rb[:m] - ra[:m]
    tail = (1 - level) / 2 * 100
    low, high = (float(x) for x in np.percentile(diffs, [tail, 100 - tail]))
    out = {"metric": metric, "a": base, "b": value, "diff": value - base, "low": low, "high": high,
           "level": level, "resamples": m, "n_a": len(va), "n_b": len(vb)}
    if stat not in ("mean", "ratio"):
        (a_low, a_high), (b_low, b_high) = (bounded(len(v), stat, level) for v in (va, vb))
        out["low"] = low if b_low and a_high else None
        out["high"] = high if b_high and a_low else None
        if None in (out["low"], out["high"]):
            out["open"] = f"p{stat:g} is bounded at {level:.2%} from {requests_to_bound(stat, level):,} requests on"
    out["significant"] = (out["low"] is not None and out["low"] > 0) or (out["high"] is not None and out["high"] < 0)
    return out


def bounded(n: int, percentile: float, level: float) -> tuple[bool, bool]:
    """Whether n samples bound the percentile from below and from above at `level` (exact test:
    the smallest sample is below the q-quantile with probability 1 - (1 - q)^n, the largest above
    it with 1 - q^n)."""
    q, tail = percentile / 100, (1 - level) / 2
    return (1 - q) ** n <= tail, q ** n <= tail


def requests_to_bound(percentile: float, level: float) -> int:
    """The fewest requests that bound the percentile on both sides at `level`."""
    q, tail = percentile / 100, (1 - level) / 2
    return math.ceil(math.log(tail) / math.log(max(q, 1 - q)))


def open_note(noise: dict[str, dict[str, dict]]) -> str:
    """What an open side (inf) in these differences means, or "" where none is open."""
    opened = sorted({d["open"] for diffs in noise.values() for d in diffs.values() if "open" in d})
    return f"inf: too few requests to bound a percentile ({'; '.join(opened)})" if opened else ""


def interval_text(diff: dict) -> str:
    """A difference's interval as printed: `[low, high]`, an open side as -inf or +inf."""
    low = "-inf" if diff["low"] is None else f"{diff['low']:+,.2f}"
    high = "+inf" if diff["high"] is None else f"{diff['high']:+,.2f}"
    return f"[{low}, {high}]"


def records_path(run: dict, path: str) -> str | None:
    """The `--records` file a run wrote (its `records_file`), as given or beside its results
    file; None when it wrote none or the file is gone."""
    given = run.get("records_file")
    if not isinstance(given, str):
        return None
    for candidate in (given, os.path.join(os.path.dirname(path), given),
                      os.path.join(os.path.dirname(path), os.path.basename(given))):
        if os.path.isfile(candidate):
            return candidate
    return None
