"""`loadgen compare`: saved runs side by side with their ratios to the first, and the baseline gate
(`--fail-on METRIC=+10%`) that fails a run whose metric moved past a stated bound."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from loadgen.report import peers
from loadgen.report.results import fmt
from loadgen.report.runfile import load_files
from loadgen.report.sweep_tables import compare_sweeps

#: `compare`'s rows before the latency statistics the runs hold (peers.latency_keys).
COMPARE_KEYS = (
    "completed", "failed", "duration", "total_input_tokens", "total_output_tokens", "request_throughput",
    "input_throughput", "output_throughput", "total_throughput", "max_output_tokens_per_s", "concurrency",
    "max_concurrent_requests", "request_goodput",
)


def compare(paths: list[str], console: Console | None = None) -> Table:
    """Print the runs in `paths` side by side, each with its ratio to the first: who made each file,
    a note on each cell whose tool defines the row otherwise (or lacks it), and each peer file's
    fields that reach no row."""
    names, runs = load_files(paths, plots=False)
    if runs[0].get("kind") == "sweep":
        return compare_sweeps(runs, names, console)
    console = console or Console()
    notes = peers.Notes()
    table = Table(title="loadgen compare (ratio to the first run)", caption_justify="left")
    table.add_column("metric")
    for name in names:
        table.add_column(name, justify="right")
    table.add_row("made by", *[run["provenance"]["made_by"] for run in runs])
    table.add_row("token events", *[peers.token_events(run) for run in runs])
    keys = (*COMPARE_KEYS, *peers.latency_keys(runs), "client_bound")
    for key in keys:
        table.add_row(key, *[_compare_cell(run, runs[0], key, notes) for run in runs])
    also = [f"{name} also holds: " + "; ".join(f"{k} {peers.brief(v)}" for k, v in extra.items())
            for name, run in zip(names, runs, strict=True) if (extra := peers.unshown(run, set(keys)))]
    table.caption = "\n".join(notes.lines() + also) or None
    console.print(table)
    return table


def _compare_cell(run: dict, base: dict, key: str, notes: peers.Notes) -> str:
    """A value with its ratio to the first run's and the note on it."""
    v, b = run.get(key), base.get(key)
    text = fmt(v)
    if run is not base and isinstance(v, int | float) and not isinstance(v, bool) and b:
        text += f" ({v / b:.2f}x)"
    return text + notes.ref(peers.note_for(run, key))


@dataclass(frozen=True)
class Bound:
    """`--fail-on METRIC=+10%`: fail when METRIC rose more than 10% over the baseline's (a latency);
    `METRIC=-5%`: when it fell more than 5% (a throughput)."""

    metric: str
    change_pct: float

    @classmethod
    def parse(cls, text: str) -> Bound:
        """`METRIC=+N%` or `METRIC=-N%`; ValueError otherwise."""
        match = re.fullmatch(r"\s*([\w.]+)\s*=\s*([+-])\s*(\d+(?:\.\d+)?)\s*%\s*", text)
        if match is None:
            raise ValueError(f"{text!r}: expected METRIC=+N% (fail when it rises more) or METRIC=-N% "
                             "(when it falls more), e.g. p99_ttft_ms=+10%")
        metric, sign, pct = match.groups()
        return cls(metric, float(pct) if sign == "+" else -float(pct))

    def change(self, value: float, base: float) -> float:
        """The change of `value` over `base`, in percent (inf where the base is 0 and value is not)."""
        if base == 0:
            return 0.0 if value == 0 else math.copysign(math.inf, value)
        return (value - base) / abs(base) * 100

    def passed(self, change_pct: float) -> bool:
        """Whether a change of `change_pct` passes the bound (a move the bound does not watch passes)."""
        return change_pct > self.change_pct if self.change_pct >= 0 else change_pct < self.change_pct

    def __str__(self) -> str:
        return f"{self.metric}={self.change_pct:+g}%"


def check_bounds(paths: list[str], bounds: list[Bound]) -> list[tuple[str, bool]]:
    """Each later run in `paths` against the first (the baseline) under each bound: a line saying
    the values, the change and the verdict, and whether the bound was passed. ValueError for a
    sweep or a run lacking the metric."""
    names, runs = load_files(paths, plots=False)
    if runs[0].get("kind") == "sweep":
        raise ValueError("--fail-on compares single runs, not sweeps")
    lines = []
    for name, run in zip(names[1:], runs[1:], strict=True):
        for bound in bounds:
            value, base = _metric(run, name, bound.metric), _metric(runs[0], names[0], bound.metric)
            change = bound.change(value, base)
            failed = bound.passed(change)
            lines.append((f"{name}: {bound.metric} {fmt(value)} vs {fmt(base)} in {names[0]}: {change:+.1f}% "
                          f"(fail past {bound.change_pct:+g}%): {'FAIL' if failed else 'ok'}", failed))
    return lines


def _metric(run: dict, name: str, metric: str) -> float:
    value = run.get(metric)
    if not isinstance(value, int | float) or isinstance(value, bool) or math.isnan(value):
        raise ValueError(f"{name} has no number under {metric!r} (a key of its results JSON, e.g. p99_ttft_ms)")
    return value
