"""Sweep files on the terminal: the table of points after `loadgen sweep`, and `loadgen compare` of
sweep files (side by side per point, differences outside the repeats' intervals marked)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from loadgen.report.results import fmt
from loadgen.sweep.search import HEADLINES
from loadgen.sweep.stats import MIN_MAX, MIN_T_REPEATS, T95, interval_kind, significant

TABLE_KEYS = ("output_throughput", "request_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
              "p99_tpot_ms", "median_e2e_latency_ms", "p99_e2e_latency_ms", "request_goodput")
NAMES = dict(HEADLINES)
POOLED_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2e_latency": "E2E"}


def is_sweep(data: dict) -> bool:
    """Whether a loaded JSON object is a sweep file (`loadgen sweep --output`)."""
    return data.get("kind") == "sweep"


def cell(stat: dict | None) -> str:
    """`mean ± half-width` (a t-interval), `mean (min–max)` (2 repeats), the mean alone (1 repeat),
    '-' without a value."""
    kind = interval_kind(stat)
    if not stat:
        return "-"
    if kind == MIN_MAX:
        return f"{stat['mean']:.1f} ({stat['low']:.1f} – {stat['high']:.1f})"
    if kind == T95:
        return f"{stat['mean']:.1f} ± {(stat['high'] - stat['low']) / 2:.1f}"
    return fmt(stat["mean"], "{:.1f}")


def interval_note(repeats: int) -> str:
    """What a cell's spread is, for `repeats` repeats per point."""
    if repeats >= MIN_T_REPEATS:
        return f"{repeats} repeats per point: mean ± 95% t-interval half-width"
    if repeats == 2:
        return (f"2 repeats per point: mean (min–max of the two); no t-interval below {MIN_T_REPEATS} "
                "repeats (with 2 it is wider than the data)")
    return "1 repeat per point: the value alone"


def pooled_cell(stat: dict | None) -> str:
    """`value [low, high]` of a pooled percentile interval, an end clipped to the sample marked."""
    if not stat:
        return "-"
    clipped = stat.get("clipped")
    low = f"{stat['low']:.1f}" + (" clipped" if clipped in ("low", "both") else "")
    high = f"{stat['high']:.1f}" + (" clipped" if clipped in ("high", "both") else "")
    return f"{stat['value']:.1f} [{low}, {high}]"


CLIPPED_NOTE = ("clipped: too few requests for the interval's rank at this percentile, so that end is the "
                "largest (smallest) value seen and the real 95% interval reaches past it")


def pooled_columns(sweep: dict) -> list[tuple[str, str]]:
    """(pooled key, column name) of each SLO-bounded percentile the points judged, e.g.
    ("p99_ttft_ms", "SLO TTFT p99 pooled [95%]")."""
    keys = dict.fromkeys(k for p in sweep["points"] for k in (p.get("pooled") or {}))
    named = [(k, *k.split("_", 1)) for k in keys]
    return [(k, f"SLO {POOLED_NAMES.get(rest[:-3], rest)} {pct} pooled [95%]") for k, pct, rest in named]


def verdict_text(point: dict) -> str:
    """The SLO verdict and the point's marks: `pass`, `FAIL, client-bound, over-saturated, search`."""
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
    """One row per point: the headline figures (mean and spread over repeats, `interval_note`), the
    verdict and marks; then, with an SLO, the pooled interval of each bounded percentile per point."""
    console = console or Console(width=max(Console().width, 160))
    points = sweep["points"]
    keys = [k for k in TABLE_KEYS if any((p["metrics"].get(k) or {}).get("mean") is not None for p in points)]
    columns = [(NAMES[k], [cell(p["metrics"].get(k)) for p in points]) for k in keys]
    table = _table(f"loadgen sweep over {sweep['variable']} ({interval_note(sweep['repeats'])})", sweep, columns,
                   console.width)
    console.print(table)
    pooled = pooled_columns(sweep)
    if pooled:
        cells = [(name, [pooled_cell((p.get("pooled") or {}).get(k)) for p in points]) for k, name in pooled]
        console.print(_table("SLO judgement: the bounded percentile over every request of the point's repeats, "
                             "95% order-statistic interval (pass: high end <= bound; fail: low end > bound)",
                             sweep, cells, console.width))
        if any("clipped" in text for _, texts in cells for text in texts):
            console.print(CLIPPED_NOTE)
    stop = sweep.get("early_stop") or {}
    if stop.get("stopped_at") is not None:
        console.print(f"early stop at {stop['stopped_at']:g}: {stop['reason']}; not run: {stop['not_run']}")
    if sweep.get("answer"):
        console.print("SLO answer: " + sweep["answer"]["text"])
    return table


def _table(title: str, sweep: dict, columns: list[tuple[str, list[str]]], width: int) -> Table:
    """A table of points `width` characters wide at most: the variable, `columns` (name, one cell per
    point), the verdict. Cells wrap at their spaces and no word is cut ("client-bou…")."""
    points = sweep["points"]
    columns = [(sweep["variable"], [f"{p['value']:g}" for p in points]), *columns,
               ("verdict", [verdict_text(p) for p in points])]
    texts = [[name, *cells] for name, cells in columns]
    # NOTE: 3 characters a column (two of padding, one rule) and the closing rule.
    widths = fit_widths([max(len(w) for t in col for w in t.split()) for col in texts],
                        [max(map(len, col)) for col in texts], width - 3 * len(columns) - 1)
    table = Table(title=title)
    for (name, _), col_width in zip(columns, widths, strict=True):
        table.add_column(name, justify="left" if name == "verdict" else "right", width=col_width)
    for i in range(len(points)):
        table.add_row(*[cells[i] for _, cells in columns])
    return table


def fit_widths(mins: list[int], maxes: list[int], room: int) -> list[int]:
    """Column widths within `room`: each at its longest cell, the one with the most to spare narrowed
    one character at a time while the sum passes `room`, none below its longest word (`mins`)."""
    widths = list(maxes)
    while sum(widths) > room:
        i = max(range(len(widths)), key=lambda j: widths[j] - mins[j])
        if widths[i] <= mins[i]:
            break  # NOTE: the words alone are wider than the room: the console wraps the lines
        widths[i] -= 1
    return widths


def compare_sweeps(sweeps: list[dict], names: list[str], console: Console | None = None) -> Table:
    """Sweeps side by side per point and headline; '*' marks a value whose 95% t-interval does not
    overlap the first sweep's at the same point (`stats.significant`); '?' when either side has fewer
    than 3 repeats (no t-interval)."""
    console = console or Console(width=max(Console().width, 160))
    table = Table(title="loadgen compare (sweeps): mean ± 95% t-interval half-width (3+ repeats), mean "
                  "(min–max) (2 repeats), ratio to the first; * = t-intervals do not overlap "
                  f"(significant), ? = fewer than {MIN_T_REPEATS} repeats on a side: not judged")
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
