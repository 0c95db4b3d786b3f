"""Runs a sweep: each point is a full in-process run (`run/runner.run`), repeated; then early stop
and the SLO bracket search; returns the sweep JSON (`kind: "sweep"`).

A sweep stops before its end when a run could not start (the server went away), failed past
--max-error-rate (default: every request failed) or lost a worker: the points that finished are
kept, the JSON's `stopped` says where and why, and `exit_code` says the sweep did not finish."""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable

from loadgen import __version__
from loadgen.measure.metrics import latencies
from loadgen.plan.config import SLO, DatasetConfig, RunConfig, auto_workers
from loadgen.report.results import _jsonable, result_dict
from loadgen.report.sweep_tables import pooled_cell
from loadgen.run.pool import SetupError
from loadgen.run.runner import run
from loadgen.sweep.search import (
    COUNTED_FAILURES,
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
                     "over repeats do not overlap (needs >= 3 repeats on both sides; with fewer it is not judged)")
INTERVAL_RULE = ("each headline figure over a point's repeats: from 3 repeats the mean ± t(0.975, n-1) · s / "
                 "sqrt(n) (kind 't95'); with 2 their min and max (kind 'min-max': t(0.975, 1) = 12.7 makes a "
                 "2-repeat interval wider than the data); with 1 the value alone (kind null)")
#: `loadgen sweep`'s exit status when it stopped before its end (`stopped` in the JSON); 130 when
#: interrupted, 0 when it ran to its end.
EXIT_STOPPED = 4


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
        self.stopped: dict | None = None  # {value, reason, not_run}: why the sweep ended early
        self.early_stop: dict = {"enabled": spec.early_stop, "rule": SATURATION_RULE, "stopped_at": None,
                                 "reason": None, "not_run": []}
        self.search: dict = {"rule": SEARCH_RULE, "steps_used": 0, "max_steps": spec.search_steps,
                             "stopped_because": None}

    def run_point(self, value: float, phase: str) -> dict | None:
        """`repeats` full runs at `value`, aggregated; each repeat's whole results JSON is kept. None when
        no run finished (the sweep stopped or was interrupted before)."""
        cfg, dcfg = point_configs(self.spec, self.cfg, self.dcfg, value)
        runs, pooled = [], {name: [] for name in POOLED}
        for i in range(self.spec.repeats):
            try:
                result = self.runner(cfg, dcfg)
            except SetupError as exc:
                if not self.points and not runs:
                    raise  # NOTE: nothing measured yet: the sweep could not start
                self._stop(value, f"a run could not start: {exc}")
                break
            except KeyboardInterrupt:
                self.interrupted = True  # NOTE: Ctrl-C while a run was being set up
                break
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
            if (why := _broken(cfg, result.summary)) is not None:
                self._stop(value, why)
                break
        if not runs:
            return None
        point = aggregate(value, runs, self.spec.slo, self.spec.slo_percentile, phase, pooled)
        point["runs"] = runs
        self.points.append(point)
        return point

    def _stop(self, value: float, reason: str) -> None:
        done = {point["value"] for point in self.points}
        self.stopped = {"value": value, "reason": reason,
                        "not_run": [v for v in self.spec.values if v > value and v not in done]}

    @property
    def is_over(self) -> bool:
        """Interrupted, or stopped before its end."""
        return self.interrupted or self.stopped is not None

    def run_listed(self) -> None:
        """The listed values in order, stopping early at an over-saturated point (unless disabled)."""
        prev = None
        for i, value in enumerate(self.spec.values):
            point = self.run_point(value, "sweep")
            if self.is_over:
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
        while self.search["steps_used"] < self.spec.search_steps and not self.is_over:
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
            self.search["stopped_because"] = ("interrupted" if self.interrupted else "the sweep stopped (see stopped)"
                                              if self.stopped else "--search-steps reached")

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
            text += " (at " + _fmt(b["lowest_failing"]) + ": " + "; ".join(map(_failed_text, failed)) + ")"
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
            "interrupted": self.interrupted, "stopped": self.stopped, "slo": _jsonable(self.spec.slo),
            "slo_percentile": self.spec.slo_percentile,
            "rules": {"saturation": SATURATION_RULE, "slo": SLO_RULE, "search": SEARCH_RULE,
                      "interval": INTERVAL_RULE,
                      "significance": SIGNIFICANCE_RULE},
            "spec": _jsonable(self.spec), "config": _jsonable(self.cfg),
            "early_stop": self.early_stop, "search": self.search if self.spec.slo.is_set else None,
            "answer": self.answer(),
            "points": sorted(self.points, key=lambda p: p["value"]),
        }


def _fmt(value) -> str:
    return "-" if value is None else f"{value:g}"


def _failed_text(failed: dict) -> str:
    if failed["metric"] in COUNTED_FAILURES:
        return f"{failed['value']} {failed['metric'].replace('_', ' ')}"
    return f"{failed['metric']} {pooled_cell(failed)} > {failed['bound']:g}"


def _broken(cfg: RunConfig, summary: dict) -> str | None:
    """Why a run ends the sweep: a lost worker, or failed requests past --max-error-rate."""
    total = summary["completed"] + summary["failed"]
    if summary.get("workers_lost"):
        return f"{summary['workers_lost']} worker process(es) died without a result"
    if cfg.too_many_failed(summary["failed"], total):
        limit = "is the server up?" if cfg.max_error_rate is None else f"above --max-error-rate {cfg.max_error_rate:g}"
        return f"{summary['failed']} of {total} requests failed ({limit})"
    return None


def exit_code(sweep: dict) -> int:
    """`loadgen sweep`'s exit status: 130 interrupted, EXIT_STOPPED stopped before its end, else 0."""
    if sweep["interrupted"]:
        return 130
    return EXIT_STOPPED if sweep["stopped"] else 0


def run_sweep(spec: SweepSpec, cfg: RunConfig, dcfg: DatasetConfig, label: str | None = None,
              log: Callable[[str], None] | None = None, runner=run) -> dict:
    """The listed points (early stop), then the SLO search when an SLO is set; the sweep JSON."""
    sweep = Sweep(spec, cfg, dcfg, label, log, runner)
    sweep.run_listed()
    if spec.slo.is_set and not sweep.is_over:
        sweep.run_search()
    return sweep.result()
