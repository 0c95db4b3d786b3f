"""The live panel shown on a terminal while a run goes: the client's counters and the server's queue."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from rich.table import Table

from loadgen.plan.config import RunConfig


class LivePanel:
    """Called by the runner a few times a second with the workers' shared totals and the scraper."""

    def __init__(self, cfg: RunConfig, show: Callable) -> None:
        self.cfg, self.show = cfg, show
        self.last: tuple[float, int] | None = None
        self.rate = 0.0

    def __call__(self, totals: dict, elapsed_s: float, scraper=None) -> None:
        if self.last is not None and elapsed_s - self.last[0] >= 0.5:
            self.rate = (totals["chunks"] - self.last[1]) / (elapsed_s - self.last[0])
            self.last = (elapsed_s, totals["chunks"])
        elif self.last is None:
            self.last = (elapsed_s, totals["chunks"])
        self.show(self.render(totals, elapsed_s, scraper.latest() if scraper is not None else None))

    def eta_s(self, done: int, elapsed_s: float) -> float | None:
        """Seconds left: what --duration leaves, else the pace so far over the requests left; None
        before the first request is done (no pace yet) or with no count to reach (a replayed trace)."""
        if self.cfg.duration_s is not None:
            return max(self.cfg.duration_s - elapsed_s, 0.0)
        if not done or self.cfg.num_prompts is None:
            return None
        return max(self.cfg.num_prompts - done, 0) * elapsed_s / done

    def render(self, totals: dict, elapsed_s: float, server: dict | None) -> Table:
        """One compact grid: client on the first line, the server's own gauges on the second."""
        grid = Table.grid(padding=(0, 2))
        grid.add_row("[b]client[/b]", f"in flight {totals['in_flight']:,}", f"done {totals['done']:,}",
                     f"errors {totals['errors']:,}", f"events/s {self.rate:,.0f}",
                     _ttft(totals.get("ttft_us") or []),
                     f"elapsed {elapsed_s:.1f}s", _eta(self.eta_s(totals['done'], elapsed_s)))
        if server is not None:
            grid.add_row("[b]server[/b]", _gauge("running", server.get("running")),
                         _gauge("waiting", server.get("waiting")),
                         _gauge("KV use", server.get("kv_usage"), percent=True),
                         _gauge("preempted", server.get("preemptions")), "", "", "")
        return grid


def _ttft(ttft_us: list[int]) -> str:
    """p50/p99 of the latest TTFTs (each worker's last 256; the first chunk holding content)."""
    if not ttft_us:
        return "TTFT -"
    p50, p99 = np.percentile(ttft_us, [50, 99]) / 1e3
    return f"TTFT p50 {p50:,.0f} ms  p99 {p99:,.0f} ms"


def _eta(seconds: float | None) -> str:
    return "ETA -" if seconds is None else f"ETA {seconds:.0f}s"


def _gauge(name: str, value: float | None, percent: bool = False) -> str:
    if value is None:
        return f"{name} -"
    return f"{name} {value:.0%}" if percent else f"{name} {value:,.0f}"
