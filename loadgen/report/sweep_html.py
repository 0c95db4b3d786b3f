"""`loadgen report SWEEP.json ...`: the throughput-latency curve (Pareto) of sweep files, with error
bars from the repeats' intervals, the SLO bound and the answer marked, client-bound points marked."""

from __future__ import annotations

import math

import matplotlib

from loadgen.measure.metrics import pct_key
from loadgen.report import workload
from loadgen.report.html import TEXT_ONLY, Html, join, page, table, tag
from loadgen.report.plots import figure, png
from loadgen.report.sweep_tables import NAMES, TABLE_KEYS, cell, interval_note

#: The Pareto plots: (latency name in the keys, SLO field bounding it, axis label).
CURVES = (("ttft", "ttft_ms", "TTFT"), ("tpot", "tpot_ms", "TPOT"), ("e2e_latency", "e2e_ms", "E2E latency"))


def render_sweeps(sweeps: list[dict], labels: list[str]) -> str:
    """The whole page for sweep files, named by `labels` in the same order."""
    colors = [matplotlib.colormaps["tab10"](i % 10) for i in range(len(sweeps))]
    with matplotlib.rc_context(TEXT_ONLY):
        pareto = _pareto(sweeps, labels, colors)
    parts = [_answers(sweeps, labels), _workload(sweeps, labels), Html("<h2>Throughput vs latency (Pareto)</h2>"),
             tag("<img alt='Pareto' src='{}'>", pareto),
             Html("<p class='note'>y: output tok/s, x: the latency percentile the SLO uses (p99 unless "
                  "--slo-percentile), each point labelled with its concurrency or rate; bars: the spread "
                  "over repeats (95% t-interval from 3 repeats, min–max of 2); red x: client-bound (not used); star: highest passing; "
                  "dashed: the SLO bound.</p>")]
    parts += [_points(sweep, label) for sweep, label in zip(sweeps, labels, strict=True)]
    return page("loadgen sweep report: " + ", ".join(labels), parts)


def _answers(sweeps: list[dict], labels: list[str]) -> Html:
    out = [Html("<h2>SLO answer</h2><ul>")]
    for sweep, label in zip(sweeps, labels, strict=True):
        answer = sweep.get("answer")
        text = answer["text"] if answer else "no --slo given: no answer"
        stop = sweep.get("early_stop") or {}
        if stop.get("stopped_at") is not None:
            text += (f". Early stop at {stop['stopped_at']:g} ({stop.get('reason')}); "
                     f"not run: {stop.get('not_run')}")
        out.append(tag("<li><b>{}</b>: {}</li>", label, text))
    rules = sweeps[0].get("rules") or {}
    notes = join((f"{k}: {v}" for k, v in rules.items()), "<br>")
    return join([*out, tag("</ul><p class='note'>{}</p>", notes)])


def _first_run(sweep: dict) -> dict:
    """The sweep's first measured run (its points share every flag but the swept one)."""
    for point in sweep.get("points") or []:
        for run in point.get("runs") or []:
            if isinstance(run, dict):
                return run
    return {}


def _workload(sweeps: list[dict], labels: list[str]) -> Html:
    """What each sweep ran: what it swept, then its first run's workload (workload.rows) but the load,
    which is the swept value; rows that differ between sweeps highlighted."""
    columns = []
    for sweep in sweeps:
        first = _first_run(sweep)
        rows = dict(workload.rows(first))
        command = (sweep.get("workload") or {}).get("command") or sweep.get("command")
        of_run = (first.get("workload") or {}).get("command") if isinstance(first.get("workload"), dict) else None
        rows["command"] = command or (f"{of_run} (the first point's run)" if of_run else rows["command"])
        values = ", ".join(workload.number(v) for v in sweep.get("values") or [])
        rows["load"] = (f"swept {sweep.get('variable')}: {values}; {sweep.get('repeats')} repeat(s) each; "
                        f"first run: {rows['load']}")
        columns.append(rows)
    rows = [[name] + [c[name] for c in columns] for name in workload.ROWS]
    note = Html("<p class='note'>highlighted: rows that differ between the sweeps</p>") if len(sweeps) > 1 else ""
    return join([Html("<h2>Workload</h2>"), table(["", *labels], rows, mark_differences=True, cell_class="cmd"), note])


def _num(value) -> float:
    return float(value) if isinstance(value, int | float) else math.nan


def _xy(point: dict, key: str) -> tuple[float, float, list[float], list[float]]:
    """(x mean, y mean, x error [low, high], y error [low, high]) from a point's intervals."""
    x, y = point["metrics"].get(key) or {}, point["metrics"].get("output_throughput") or {}

    def err(stat):
        if stat.get("low") is None:
            return [0.0, 0.0]
        return [stat["mean"] - stat["low"], stat["high"] - stat["mean"]]
    return _num(x.get("mean")), _num(y.get("mean")), err(x), err(y)


def _pareto(sweeps: list[dict], labels: list[str], colors) -> str:
    fig, axes = figure(1, 5.0, cols=len(CURVES))
    for ax, (name, slo_field, axis) in zip(axes, CURVES, strict=True):
        for sweep, label, color in zip(sweeps, labels, colors, strict=True):
            key = f"{pct_key(sweep.get('slo_percentile') or 99)}_{name}_ms"
            pts = [p for p in sweep["points"] if (p["metrics"].get(key) or {}).get("mean") is not None]
            rows = [_xy(p, key) for p in pts]
            ax.errorbar([r[0] for r in rows], [r[1] for r in rows], xerr=[[r[2][0] for r in rows], [r[2][1] for r in rows]],
                        yerr=[[r[3][0] for r in rows], [r[3][1] for r in rows]], color=color, marker="o",
                        ls="-", capsize=3, label=label)
            for p, r in zip(pts, rows, strict=True):
                ax.annotate(f"{p['value']:g}", (r[0], r[1]), textcoords="offset points", xytext=(4, 4), fontsize=10)
                if p.get("client_bound"):
                    ax.plot(r[0], r[1], "x", color="red", ms=12, mew=2)
            best = (sweep.get("answer") or {}).get("highest_passing")
            for p, r in zip(pts, rows, strict=True):
                if best is not None and p["value"] == best:
                    ax.plot(r[0], r[1], "*", color=color, ms=18, mec="black")
            bound = (sweep.get("slo") or {}).get(slo_field)
            if bound is not None:
                ax.axvline(bound, color=color, ls="--", lw=1.2, label=f"{label} SLO {bound:g} ms")
        ax.set_xlabel(f"{axis} p{sweeps[0].get('slo_percentile') or 99:g} (ms)")
        ax.set_ylabel("output tok/s")
        ax.grid(alpha=0.3)
    if axes[0].lines:
        fig.legend(handles=[h for h in axes[0].get_legend_handles_labels()[0]], loc="outside upper center",
                   ncol=min(4, len(axes[0].get_legend_handles_labels()[0])))
    return png(fig)


def _verdict(slo: dict | None) -> Html:
    if slo is None:
        return Html("-")
    return {"pass": Html("<span class='good'>pass</span>"), "fail": Html("<span class='bad'>FAIL</span>")}.get(
        slo["verdict"]) or tag("<span class='note'>{}</span>", slo["verdict"])


def _points(sweep: dict, label: str) -> Html:
    keys = [k for k in TABLE_KEYS if any((p["metrics"].get(k) or {}).get("mean") is not None for p in sweep["points"])]
    head = [sweep["variable"]] + [NAMES[k] for k in keys] + ["SLO", "marks"]
    rows = []
    for p in sweep["points"]:
        marks = [m for m, on in (("client-bound: not used", p.get("client_bound")),
                                 ("search point", p.get("phase") == "search"),
                                 ("over-saturated", (p.get("saturation") or {}).get("stop"))) if on]
        rows.append([f"{p['value']:g}"] + [cell(p["metrics"].get(k)) for k in keys]
                    + [_verdict(p.get("slo")), ", ".join(marks)])
    return join([tag("<h2>Points: {}</h2><p class='note'>{}</p>", label, interval_note(sweep["repeats"])),
                 table(head, rows)])
