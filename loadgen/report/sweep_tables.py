"""Sweep files on the terminal: the table of points after `loadgen sweep`, and `loadgen compare` of
sweep files (side by side per point, differences outside the repeats' intervals marked)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from loadgen.report.results import fmt
from loadgen.sweep.search import HEADLINES
from loadgen.sweep.stats import significant

TABLE_KEYS = ("output_throughput", "request_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
              "p99_tpot_ms", "median_e2e_latency_ms", "p99_e2e_latency_ms", "request_goodput")
NAMES = dict(HEADLINES)


def is_sweep(data: dict) -> bool:
    """Whether a loaded JSON object is a sweep file (`loadgen sweep --output`)."""
    return data.get("kind") == "sweep"


def cell(stat: dict | None) -> str:
    """`mean ± half-width` (just the mean with one repeat; '-' without a value)."""
    if not stat:
        return "-"
    if stat.get("low") is None:
        return fmt(stat["mean"], "{:.1f}")
    return f"{stat['mean']:.1f} ± {(stat['high'] - stat['low']) / 2:.1f}"


def _verdict(point: dict) -> str:
    slo = point.get("slo")
    marks = []
    if slo is not None:
        marks.append({"pass": "pass", "fail": "FAIL"}.get(slo["verdict"], slo["verdict"]))
    if point.get("client_bound"):
        marks.append("client-bound")
    if (point.get("saturation") or {}).get("stop"):
        marks.append("over-saturated")
    if point.get("phase") == "search":
        marks.append("search")
    return ", ".join(marks) or "-"


def print_sweep_table(sweep: dict, console: Console | None = None) -> Table:
    """One row per point: mean ± 95% half-width of the headline figures, the SLO verdict and marks."""
    console = console or Console(width=max(Console().width, 160))
    table = Table(title=f"loadgen sweep over {sweep['variable']} ({sweep['repeats']} repeat(s) per point; "
                  "mean ± 95% t-interval half-width)")
    table.add_column(sweep["variable"], justify="right")
    keys = [k for k in TABLE_KEYS if any((p["metrics"].get(k) or {}).get("mean") is not None for p in sweep["points"])]
    for key in keys:
        table.add_column(NAMES[key], justify="right")
    table.add_column("verdict")
    for point in sweep["points"]:
        table.add_row(f"{point['value']:g}", *[cell(point["metrics"].get(k)) for k in keys], _verdict(point))
    console.print(table)
    stop = sweep.get("early_stop") or {}
    if stop.get("stopped_at") is not None:
        console.print(f"early stop at {stop['stopped_at']:g}: {stop['reason']}; not run: {stop['not_run']}")
    if sweep.get("answer"):
        console.print("SLO answer: " + sweep["answer"]["text"])
    return table


def compare_sweeps(sweeps: list[dict], names: list[str], console: Console | None = None) -> Table:
    """Sweeps side by side per point and headline; '*' marks a value whose 95% interval does not overlap
    the first sweep's at the same point (`stats.significant`); '?' when either has one repeat."""
    console = console or Console(width=max(Console().width, 160))
    table = Table(title="loadgen compare (sweeps): mean ± 95% half-width, ratio to the first; "
                  "* = intervals do not overlap (significant), ? = fewer than 2 repeats")
    table.add_column(sweeps[0]["variable"], justify="right")
    table.add_column("metric")
    for name in names:
        table.add_column(name, justify="right")
    by_value = [{p["value"]: p for p in s["points"]} for s in sweeps]
    values = sorted({v for points in by_value for v in points})
    for value in values:
        base = by_value[0].get(value)
        for key in TABLE_KEYS:
            cells = [_compare_cell(base, points.get(value), key, first=i == 0)
                     for i, points in enumerate(by_value)]
            if any(c != "-" for c in cells):
                table.add_row(f"{value:g}", NAMES[key], *cells)
    answers = [(s.get("answer") or {}).get("bracket") for s in sweeps]
    if any(answers):
        table.add_row("SLO", "bracket", *[str(a) if a else "-" for a in answers])
    console.print(table)
    return table


def _compare_cell(base: dict | None, point: dict | None, key: str, first: bool) -> str:
    if point is None:
        return "-"
    stat = point["metrics"].get(key)
    text = cell(stat)
    if first or text == "-":
        return text
    b = (base or {}).get("metrics", {}).get(key)
    if b and b.get("mean"):
        text += f" ({stat['mean'] / b['mean']:.2f}x)"
    sig = significant(b, stat)
    return text + {True: " *", False: "", None: " ?"}[sig]
