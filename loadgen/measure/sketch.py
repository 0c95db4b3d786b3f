"""A mergeable log-bucketed histogram for latency samples too many to keep (ITL past
`ITL_SKETCH_AUTO_SAMPLES`, or `--itl-sketch`).

Bucket k holds the values in (m·γ^(k-1), m·γ^k] with γ = (1+α)/(1-α) and m = `min_value`; it
answers with 2·m·γ^k/(γ+1), within a relative α of every value in the bucket (DDSketch's mapping,
as in HDR histograms). Values below m (a zero ITL: two events in one read) have a bucket of their
own and answer 0, exactly. Sketches merge by adding counts; count, sum, sum of squares and max are
kept exactly, so the mean, std and max stay exact and only the percentiles are approximate: the
sketch's p-th percentile is within α of the exact order statistic at rank floor(p/100·(n-1)).
"""

from __future__ import annotations

import math

import numpy as np

DEFAULT_ALPHA = 0.01
MIN_VALUE_MS = 1e-6  # one nanosecond: stamps are integer ns, so a smaller gap is exactly 0
MAX_VALUE_MS = 1e9
#: Past this many ITL samples the summary's ITL comes from a sketch (see loadgen/README.md, "Memory").
ITL_SKETCH_AUTO_SAMPLES = 20_000_000


class LogHistogram:
    """Counts of non-negative values in log buckets of relative width 2α (about 2,100 buckets
    of int64 from 1 ns to 1e9 ms at α = 1%)."""

    def __init__(self, alpha: float = DEFAULT_ALPHA, min_value: float = MIN_VALUE_MS) -> None:
        if not 0 < alpha < 1 or min_value <= 0:
            raise ValueError("alpha in (0, 1) and min_value > 0 required")
        self.alpha, self.min_value = alpha, min_value
        self.gamma = (1 + alpha) / (1 - alpha)
        self.log_gamma = math.log(self.gamma)
        self.counts = np.zeros(self._key(np.asarray([MAX_VALUE_MS]))[0] + 1, dtype=np.int64)
        self.size, self.sum, self.sumsq, self.max = 0, 0.0, 0.0, 0.0

    def _key(self, values: np.ndarray) -> np.ndarray:
        keys = np.ceil(np.log(np.maximum(values, self.min_value) / self.min_value) / self.log_gamma)
        return np.where(values < self.min_value, 0, np.maximum(keys.astype(np.int64), 0) + 1)

    def add(self, values_ms) -> None:
        """Count these values (ms, >= 0; past 1e9 ms they land in the last bucket)."""
        arr = np.asarray(values_ms, dtype=np.float64)
        if arr.size == 0:
            return
        keys = np.minimum(self._key(arr), self.counts.size - 1)
        self.counts += np.bincount(keys, minlength=self.counts.size)
        self.size += int(arr.size)
        self.sum += float(arr.sum())
        self.sumsq += float(np.square(arr).sum())
        self.max = max(self.max, float(arr.max()))

    def merge(self, other: LogHistogram) -> None:
        """Add another sketch's counts (same α and min_value)."""
        if (other.alpha, other.min_value) != (self.alpha, self.min_value):
            raise ValueError("only sketches of the same alpha and min_value merge")
        self.counts += other.counts
        self.size += other.size
        self.sum += other.sum
        self.sumsq += other.sumsq
        self.max = max(self.max, other.max)

    def to_dict(self) -> dict:
        """A compact, JSON- and msgpack-safe form: the non-empty buckets and the exact moments."""
        keys = np.flatnonzero(self.counts)
        return {"alpha": self.alpha, "min_value": self.min_value, "keys": keys.tolist(),
                "counts": self.counts[keys].tolist(), "size": self.size, "sum": self.sum,
                "sumsq": self.sumsq, "max": self.max}

    @classmethod
    def from_dict(cls, d: dict) -> LogHistogram:
        """The sketch `to_dict` described."""
        out = cls(d["alpha"], d["min_value"])
        out.counts[np.asarray(d["keys"], dtype=np.int64)] = np.asarray(d["counts"], dtype=np.int64)
        out.size, out.sum, out.sumsq, out.max = d["size"], d["sum"], d["sumsq"], d["max"]
        return out

    def _value(self, key: np.ndarray) -> np.ndarray:
        k = key - 1
        return np.where(key == 0, 0.0, self.min_value * 2 * self.gamma ** k / (self.gamma + 1))

    def percentile(self, qs) -> np.ndarray:
        """The values at these percentiles (0-100), each within α of the exact order statistic."""
        ranks = np.floor(np.asarray(qs, dtype=np.float64) / 100 * (self.size - 1)).astype(np.int64)
        keys = np.searchsorted(np.cumsum(self.counts), ranks, side="right")
        return np.minimum(self._value(keys), self.max)

    def mean(self) -> float:
        return self.sum / self.size if self.size else math.nan

    def std(self) -> float:
        if not self.size:
            return math.nan
        return math.sqrt(max(self.sumsq / self.size - self.mean() ** 2, 0.0))


def value_stats(values, qs) -> tuple[int, float, float, float, np.ndarray]:
    """(count, mean, std, max, percentiles at `qs`) of a list of values (exact: numpy's linear
    interpolation) or of a LogHistogram (within its α); only meaningful when count > 0."""
    if isinstance(values, LogHistogram):
        return values.size, values.mean(), values.std(), values.max, values.percentile(qs)
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return 0, math.nan, math.nan, math.nan, np.full(len(qs), math.nan)
    return int(arr.size), float(arr.mean()), float(arr.std()), float(arr.max()), np.percentile(arr, qs)


class SketchBuilder:
    """Feeds arrays into a LogHistogram in batches (one bincount per ~1M values, not per request)."""

    BATCH = 1 << 20

    def __init__(self) -> None:
        self.sketch, self.parts, self.num = LogHistogram(), [], 0

    def extend(self, values: np.ndarray) -> None:
        self.parts.append(values)
        self.num += len(values)
        if self.num >= self.BATCH:
            self.flush()

    def flush(self) -> LogHistogram:
        if self.parts:
            self.sketch.add(np.concatenate(self.parts))
        self.parts, self.num = [], 0
        return self.sketch
