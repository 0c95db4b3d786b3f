"""Runs a sweep: each point is a full in-process run (`run/runner.run`), repeated; then early stop
and the SLO bracket search; returns the sweep JSON (`kind: "sweep"`)."""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable

from loadgen import __version__
from loadgen.measure.metrics import latencies
from loadgen.plan.config import SLO, RunConfig, auto_workers
from loadgen.plan.datasets import DatasetConfig
from loadgen.report.results import _jsonable, result_dict
from loadgen.run.runner import run
from loadgen.sweep.search import (
    SATURATION_RULE,
    SLO_RULE,
    aggregate,
    bracket,
    next_probe,
    oversaturated,
    slo_keys,
)

VARIABLES = ("concurrency", "request_rate")
SEARCH_RULE = ("bisection between the highest passing and the lowest failing point: integers for "
               "concurrency (until they are adjacent), rates until (high - low) / low <= --rate-tolerance; "
               "at most --search-steps extra points; stops at a marginal point (the bound lies within its "
               "interval: the SLO is crossed there, within the sampling noise) or a client-bound point "
               "inside the bracket")
POOLED = ("ttft", "tpot", "e2e_latency")
SIGNIFICANCE_RULE = ("compare: a difference is significant when the two points' 95% Student-t intervals "
                     "over repeats do not overlap (needs >= 2 repeats on both sides)")


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    """What to sweep and how: the variable, its listed values, repeats, the SLO search, early stop."""

    variable: str
    values: tuple[float, ...]
    repeats: int = 1
    slo: SLO = dataclasses.field(default_factory=SLO)
    slo_percentile: float = 99.0
    search_steps: int = 8
    rate_tolerance: float = 0.05
    early_stop: bool = True
    prompts_per_level: float | None = None
    auto_workers: bool = True

    def __post_init__(self) -> None:
        if self.variable not in VARIABLES:
            raise ValueError(f"variable must be one of {VARIABLES}")
        if not self.values or list(self.values) != sorted(set(self.values)):
            raise ValueError("values must be distinct and ascending")
        if self.repeats < 1 or self.search_steps < 0 or not 0 < self.rate_tolerance < 1:
            raise ValueError("repeats >= 1, search steps >= 0, 0 < rate tolerance < 1 required")

    @property
    def is_integer(self) -> bool:
        return self.variable == "concurrency"


def point_configs(spec: SweepSpec, cfg: RunConfig, dcfg: DatasetConfig, value: float) -> tuple[RunConfig, DatasetConfig]:
    """The run and dataset configs of one point: the variable set to `value`, the prompt count scaled
    by --prompts-per-level (at least --num-prompts), the workers re-chosen when --workers auto."""
    num = cfg.num_prompts
    if spec.prompts_per_level is not None:
        num = max(num or 0, math.ceil(spec.prompts_per_level * value))
    change: dict = {"num_prompts": num}
    if spec.is_integer:
        change["concurrency"] = int(value)
        if spec.auto_workers:
            change["workers"] = auto_workers(int(value))
    else:
        change["request_rate"] = float(value)
    return dataclasses.replace(cfg, **change), dataclasses.replace(dcfg, num_prompts=num or dcfg.num_prompts)


class Sweep:
    """Runs points (each `repeats` full runs) and keeps them; `result()` is the sweep JSON."""

    def __init__(self, spec: SweepSpec, cfg: RunConfig, dcfg: DatasetConfig, label: str | None = None,
                 log: Callable[[str], None] | None = None, runner=run) -> None:
        self.spec, self.cfg, self.dcfg, self.label = spec, cfg, dcfg, label
        self.log = log or (lambda line: print(line, file=sys.stderr))
        self.runner = runner
        self.points: list[dict] = []
        self.interrupted = False
        self.early_stop: dict = {"enabled": spec.early_stop, "rule": SATURATION_RULE, "stopped_at": None,
                                 "reason": None, "not_run": []}
        self.search: dict = {"rule": SEARCH_RULE, "steps_used": 0, "max_steps": spec.search_steps,
                             "stopped_because": None}

    def run_point(self, value: float, phase: str) -> dict:
        """`repeats` full runs at `value`, aggregated; each repeat's whole results JSON is kept."""
        cfg, dcfg = point_configs(self.spec, self.cfg, self.dcfg, value)
        runs, pooled = [], {name: [] for name in POOLED}
        for i in range(self.spec.repeats):
            result = self.runner(cfg, dcfg)
            data = result_dict(result, {**vars(dcfg), **result.dataset_info}, label=self.label)
            runs.append(data)
            lat = latencies(cfg, [r for r in result.records if r.ok])
            for name in POOLED:
                pooled[name] += lat[name]
            self.log(f"loadgen sweep: {self.spec.variable}={value:g} repeat {i + 1}/{self.spec.repeats}: "
                     f"{data.get('output_throughput') or 0:,.1f} output tok/s, TTFT p99 "
                     f"{data.get('p99_ttft_ms') or math.nan:,.1f} ms"
                     + (" (client-bound)" if data.get("client_bound") else ""))
            if result.interrupted:
                self.interrupted = True
                break
        point = aggregate(value, runs, self.spec.slo, self.spec.slo_percentile, phase, pooled)
        point["runs"] = runs
        self.points.append(point)
        return point

    def run_listed(self) -> None:
        """The listed values in order, stopping early at an over-saturated point (unless disabled)."""
        prev = None
        for i, value in enumerate(self.spec.values):
            point = self.run_point(value, "sweep")
            if self.interrupted:
                return
            if prev is not None:
                point["saturation"] = oversaturated(prev, point)
                if self.spec.early_stop and point["saturation"]["stop"]:
                    self.early_stop.update(stopped_at=value, reason=point["saturation"]["reason"],
                                           not_run=list(self.spec.values[i + 1:]))
                    self.log(f"loadgen sweep: over-saturated at {value:g}, stopping: {point['saturation']['reason']}")
                    return
            prev = point

    def run_search(self) -> None:
        """Bisect between the highest passing and the lowest failing point (SEARCH_RULE)."""
        while self.search["steps_used"] < self.spec.search_steps and not self.interrupted:
            b = bracket(self.points)
            if b["unknown"]:
                self.search["stopped_because"] = f"client-bound point(s) {b['unknown']} inside the bracket"
                return
            if b["marginal"]:
                self.search["stopped_because"] = (f"marginal point(s) {b['marginal']} inside the bracket: "
                                                  "the bound lies within their interval")
                return
            probe = next_probe(b["highest_passing"], b["lowest_failing"], self.spec.is_integer,
                               self.spec.rate_tolerance)
            if probe is None:
                self.search["stopped_because"] = "bracket tight" if b["lowest_failing"] is not None \
                    and b["highest_passing"] is not None else "no bracket: no passing or no failing point"
                return
            self.search["steps_used"] += 1
            self.run_point(probe, "search")
        if self.search["stopped_because"] is None:
            self.search["stopped_because"] = "interrupted" if self.interrupted else "--search-steps reached"

    def answer(self) -> dict | None:
        """The SLO answer: bracket, percentile, what failed at the lowest failing point."""
        if not self.spec.slo.is_set:
            return None
        b = bracket(self.points)
        low_fail = next((p for p in self.points if p["value"] == b["lowest_failing"]), None)
        failed = low_fail["slo"]["failed"] if low_fail else []
        bounds = ", ".join(f"{k} <= {v:g} ms" for k, v in slo_keys(self.spec.slo, self.spec.slo_percentile))
        excluded = sorted(p["value"] for p in self.points if p["client_bound"])
        text = (f"highest {self.spec.variable} meeting {bounds} (pooled over repeats, 95% interval): "
                f"[{_fmt(b['highest_passing'])}, {_fmt(b['lowest_failing'])}]")
        if failed:
            text += " (at " + _fmt(b["lowest_failing"]) + ": " + "; ".join(
                f"{f['metric']} {f['value']:.1f} [{f['low']:.1f}, {f['high']:.1f}] > {f['bound']:g}"
                for f in failed) + ")"
        if b["marginal"]:
            text += f"; marginal (bound within the interval): {', '.join(map(_fmt, b['marginal']))}"
        if excluded:
            text += f"; client-bound, not used: {', '.join(map(_fmt, excluded))}"
        if b["unknown"]:
            text += f"; unknown inside the bracket: {', '.join(map(_fmt, b['unknown']))}"
        return {"percentile": self.spec.slo_percentile, "bounds": dict(slo_keys(self.spec.slo, self.spec.slo_percentile)),
                "bracket": [b["highest_passing"], b["lowest_failing"]], **b,
                "failed_at_lowest_failing": failed, "client_bound_excluded": excluded, "text": text}

    def result(self) -> dict:
        """The sweep JSON."""
        first = self.points[0]["runs"][0] if self.points and self.points[0]["runs"] else {}
        return {
            "kind": "sweep", "variable": self.spec.variable, "values": list(self.spec.values),
            "repeats": self.spec.repeats, "label": self.label, "date": time.strftime("%Y%m%d-%H%M%S"),
            "loadgen_version": __version__, "base_url": self.cfg.base_url, "model_id": first.get("model_id"),
            "interrupted": self.interrupted, "slo": _jsonable(self.spec.slo),
            "slo_percentile": self.spec.slo_percentile,
            "rules": {"saturation": SATURATION_RULE, "slo": SLO_RULE, "search": SEARCH_RULE,
                      "interval": "mean ± t(0.975, n-1) · s / sqrt(n) over the repeats",
                      "significance": SIGNIFICANCE_RULE},
            "spec": _jsonable(self.spec), "config": _jsonable(self.cfg),
            "early_stop": self.early_stop, "search": self.search if self.spec.slo.is_set else None,
            "answer": self.answer(),
            "points": sorted(self.points, key=lambda p: p["value"]),
        }


def _fmt(value) -> str:
    return "-" if value is None else f"{value:g}"


def run_sweep(spec: SweepSpec, cfg: RunConfig, dcfg: DatasetConfig, label: str | None = None,
              log: Callable[[str], None] | None = None, runner=run) -> dict:
    """The listed points (early stop), then the SLO search when an SLO is set; the sweep JSON."""
    sweep = Sweep(spec, cfg, dcfg, label, log, runner)
    sweep.run_listed()
    if spec.slo.is_set and not sweep.interrupted:
        sweep.run_search()
    return sweep.result()
