"""`loadgen compare`: saved runs side by side with their ratios to the first, each headline metric's
difference to the first with a bootstrap 95% interval (report/noise.py), and the baseline gate
(`--fail-on METRIC=+10%`) that fails a run whose metric moved past a stated bound (with
`--significant-only`, only where the interval says the move is not noise)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from loadgen.report import peers
from loadgen.report.noise import (
    CONFIDENCE,
    HEADLINE,
    NUM_RESAMPLES,
    difference,
    interval_text,
    lists_samples,
    metric_level,
    open_note,
    read_records,
    records_path,
)
from loadgen.report.results import fmt
from loadgen.report.runfile import load_files, load_runs
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


def check_bounds(paths: list[str], bounds: list[Bound],
                 noise: dict[str, dict[str, dict]] | None = None) -> list[tuple[str, bool]]:
    """Each later run in `paths` against the first (the baseline) under each bound: a line saying
    the values, the change and the verdict, and whether the bound was passed. With `noise` (each
    run's `differences`, `--significant-only`) a bound fails only where the difference's interval
    leaves out 0. ValueError for a sweep, a run lacking the metric, or (with `noise`) its interval."""
    names, runs = load_files(paths, plots=False)
    if runs[0].get("kind") == "sweep":
        raise ValueError("--fail-on compares single runs, not sweeps")
    lines = []
    for name, run in zip(names[1:], runs[1:], strict=True):
        for bound in bounds:
            value, base = _metric(run, name, bound.metric), _metric(runs[0], names[0], bound.metric)
            change = bound.change(value, base)
            failed = bound.passed(change)
            line = (f"{name}: {bound.metric} {fmt(value)} vs {fmt(base)} in {names[0]}: {change:+.1f}% "
                    f"(fail past {bound.change_pct:+g}%)")
            if noise is not None:
                diff = _interval(noise, name, bound.metric)
                line += f", {diff['level']:.2%} interval of the difference {interval_text(diff)}"
                failed = failed and diff["significant"]
            lines.append((f"{line}: {'FAIL' if failed else 'ok'}", failed))
    return lines


def _interval(noise: dict, name: str, metric: str) -> dict:
    diff = noise.get(name, {}).get(metric)
    if diff is None:
        raise ValueError(f"--significant-only: no interval of {metric} for {name} (its per-request "
                         f"records are needed; intervals exist for {', '.join(HEADLINE)})")
    return diff


def differences(paths: list[str], records: list[str] | None = None, seed: int = 0,
                confidence: float = CONFIDENCE) -> tuple[dict[str, dict[str, dict]], list[str]]:
    """Each later run's headline differences to the first (`noise.difference`, by run name and
    metric; intervals that hold jointly at `confidence`) from the runs' records files (`records`,
    one per run in order, else each run's own `records_file`), and a note per run without records.
    ValueError for a bad records file."""
    pairs = [(path, name, run) for path in paths for name, run in load_runs(path, plots=False)]
    return differences_of(pairs, records, seed, confidence)


def differences_of(pairs: list[tuple[str, str, dict]], records: list[str] | None = None, seed: int = 0,
                   confidence: float = CONFIDENCE) -> tuple[dict[str, dict[str, dict]], list[str]]:
    """`differences` of loaded runs, each `(path of its file, name, run)`."""
    if not pairs or pairs[0][2].get("kind") == "sweep":
        return {}, []
    if records is not None and len(records) != len(pairs):
        raise ValueError(f"--records given {len(records)} times for {len(pairs)} runs")
    files = records or [records_path(run, path) for path, _, run in pairs]
    names = [name for _, name, _ in pairs]
    samples = [read_records(file) if file else lists_samples(run) for file, (_, _, run) in zip(files, pairs, strict=True)]
    notes = [f"{name}: no per-request samples (run it with --records PATH or --save-detailed, or give compare "
             "--records): no intervals" for name, got in zip(names, samples, strict=True) if got is None]
    if samples[0] is None:
        return {}, notes
    level = metric_level(confidence)
    out = {}
    for name, got in zip(names[1:], samples[1:], strict=True):
        if got is not None:
            out[name] = {m: d for m in HEADLINE
                         if (d := difference(samples[0], got, m, seed, NUM_RESAMPLES, level)) is not None}
    return out, notes


def print_differences(noise: dict[str, dict[str, dict]], notes: list[str], base: str,
                      console: Console | None = None) -> Table | None:
    """The differences as a table (significant ones marked), then the notes."""
    console = console or Console()
    table = None
    if noise:
        level = next(iter(next(iter(noise.values())).values()))["level"]
        table = Table(title=f"difference to {base}: bootstrap intervals that hold jointly at "
                      f"{1 - (1 - level) * len(HEADLINE):.1%} (each at {level:.2%}; * significant)",
                      caption_justify="left")
        for column in ("run", "metric", "first", "this", "difference", "interval", ""):
            table.add_column(column, justify="left" if column in ("run", "metric") else "right")
        for name, diffs in noise.items():
            for metric, d in diffs.items():
                table.add_row(name, metric, fmt(d["a"]), fmt(d["b"]), f"{d['diff']:+,.2f}",
                              interval_text(d), "*" if d["significant"] else "")
        table.caption = "; ".join(filter(None, (f"requests resampled (seeded), {NUM_RESAMPLES:,} resamples at most",
                                                "significant: the interval leaves out 0", open_note(noise))))
        console.print(table)
    for note in notes:
        console.print(note)
    return table


def _metric(run: dict, name: str, metric: str) -> float:
    value = run.get(metric)
    if not isinstance(value, int | float) or isinstance(value, bool) or math.isnan(value):
        raise ValueError(f"{name} has no number under {metric!r} (a key of its results JSON, e.g. p99_ttft_ms)")
    return value
