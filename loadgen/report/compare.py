"""`loadgen compare`: saved runs side by side with their ratios to the first, and the baseline gate
(`--fail-on METRIC=+10%`) that fails a run whose metric moved past a stated bound."""

from __future__ import annotations

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
