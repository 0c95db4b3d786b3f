"""Every series of one scraped target over the run, bounded: counters' first, last and delta,
gauges' mean, min, max and last, for at most `max_series` series (the rest counted, not kept).

The Scraper feeds it each scrape it keeps; its memory is a few floats per series whatever the
target sends (`prometheus.SampleLines` bounds each scrape, `max_series` the series kept here).
"""

from __future__ import annotations

import math

from loadgen.measure.prometheus import Labels, Metrics
from loadgen.plan.config import DEFAULT_MAX_SERIES


def series_key(name: str, labels: Labels) -> str:
    """`name{a="x",b="y"}`, labels sorted: Prometheus's own spelling of one series."""
    if not labels:
        return name
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels)) + "}"


class AllSeries:
    """The run's figures of every series of one target, from the scrapes `add`ed to it."""

    def __init__(self, max_series: int = DEFAULT_MAX_SERIES) -> None:
        self.max_series = max_series
        self.num_dropped = 0  # the most series one scrape left out (its cap, or this one)
        self._counters: dict[str, list[float]] = {}  # key -> [first, last]
        self._gauges: dict[str, list[float]] = {}  # key -> [n, sum, min, max, last]

    def add(self, metrics: Metrics) -> None:
        """One scrape's samples; a series past `max_series` is counted as dropped."""
        dropped = metrics.num_dropped
        for (name, labels), value in metrics.samples.items():
            key = series_key(name, labels)
            if name in metrics.counters:
                if key in self._counters:
                    self._counters[key][1] = value
                elif self._has_room():
                    self._counters[key] = [value, value]
                else:
                    dropped += 1
            elif key in self._gauges:
                _update(self._gauges[key], value)
            elif self._has_room():
                self._gauges[key] = [0, 0.0, math.inf, -math.inf, value]
                _update(self._gauges[key], value)
            else:
                dropped += 1
        self.num_dropped = max(self.num_dropped, dropped)

    def reset(self) -> None:
        """Forget what was added (the baseline moved past the warm-up)."""
        self._counters.clear()
        self._gauges.clear()

    def _has_room(self) -> bool:
        return len(self._counters) + len(self._gauges) < self.max_series

    def block(self) -> dict:
        """The `all_series` block: the cap, the series kept and dropped, and each one's figures."""
        return {"max_series": self.max_series, "num_series": len(self._counters) + len(self._gauges),
                "num_dropped": self.num_dropped,
                "counters": {k: {"first": f, "last": la, "delta": la - f} for k, (f, la) in self._counters.items()},
                "gauges": {k: _gauge(g) for k, g in self._gauges.items()}}


def _update(g: list[float], value: float) -> None:
    g[4] = value
    if math.isnan(value):
        return
    g[0] += 1
    g[1] += value
    g[2], g[3] = min(g[2], value), max(g[3], value)


def _gauge(g: list[float]) -> dict:
    n, total, low, high, last = g
    if not n:
        return {"mean": None, "min": None, "max": None, "last": last, "scrapes": 0}
    return {"mean": total / n, "min": low, "max": high, "last": last, "scrapes": int(n)}


def cap_note(block: dict) -> str | None:
    """One line when a target had more series than the cap, else None."""
    sub = block.get("all_series") or {}
    if not sub.get("num_dropped"):
        return None
    return (f"{block.get('url')}: series cap {sub['max_series']:,} hit, {sub['num_dropped']:,} series "
            "not kept (--server-metrics-max-series)")
