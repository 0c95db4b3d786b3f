"""`loadgen report`: one self-contained HTML page of one or more saved runs.

Plots are matplotlib PNGs inlined as base64, so the page needs no network; several runs share each
plot, one colour per run.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from loadgen.report.results import TABLE_ROWS, fmt  # noqa: E402

LATENCY_ROWS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL per chunk"),
                ("e2e_latency", "E2E latency"))
HEADER_KEYS = ("date", "base_url", "model_id", "backend", "transport", "loadgen_version")
CDF_KEYS = (("ttft_ms", "TTFT (ms)"), ("itl_ms", "ITL per chunk (ms)"), ("tpot_ms", "TPOT (ms)"),
            ("e2e_latency_ms", "E2E latency (ms)"))
SPLIT_PARTS = (("client_network", "client / network", "#8da0cb"), ("queue", "queue", "#fc8d62"),
               ("prefill", "prefill", "#66c2a5"), ("server_other", "server other", "#b3b3b3"),
               ("decode", "decode (--no-stream: TTFT is the whole response)", "#e78ac3"))
NO_TIMELINE = "no timeline in this file (older loadgen)"
CSS = """
body { font-family: sans-serif; margin: 24px; color: #222; max-width: 1150px; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f2f2f2; }
.bad { color: #b00020; font-weight: bold; } .good { color: #1b7a1b; font-weight: bold; }
.note { color: #666; font-style: italic; } img { max-width: 100%; display: block; }
.swatch { display: inline-block; width: 12px; height: 12px; margin-right: 4px; }
"""


def default_label(run: dict, path: str) -> str:
    """The run's `label` key, else the file's basename."""
    return str(run.get("label") or os.path.basename(path))


def render(runs: list[dict], labels: list[str]) -> str:
    """The whole page for `runs` (results JSON objects), named by `labels` in the same order."""
    colors = [plt.get_cmap("tab10")(i % 10) for i in range(len(runs))]
    parts = [_header(runs, labels, colors), _summary(runs, labels), _verdicts(runs, labels),
             _plots(runs, labels, colors), _server_vs_client(runs, labels),
             _flags_and_machine(runs, labels)]
    title = "loadgen report: " + ", ".join(labels)
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{_e(title)}</title>"
            f"<style>{CSS}</style></head><body>\n<h1>{_e(title)}</h1>\n" + "\n".join(parts)
            + f"\n<p class='note'>made by loadgen report, {_e(time.strftime('%Y-%m-%d %H:%M:%S'))}"
            "</p>\n</body></html>\n")


def _e(value) -> str:
    return html.escape(str(value))


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _cell(value) -> str:
    if isinstance(value, dict | list):
        return _e(json.dumps(value, separators=(",", ":")))
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _e(fmt(value))
    if isinstance(value, int):
        return f"{value:d}"
    return _e(fmt(value) if abs(value) >= 0.1 or value == 0 else f"{value:.3g}")


def _table(head: list[str], rows: list[list[str]]) -> str:
    """A table from already-escaped cells; the first column is a name, the rest numbers."""
    out = ["<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for row in rows:
        cells = [f"<td>{row[0]}</td>"] + [f"<td class='num'>{c}</td>" for c in row[1:]]
        out.append("<tr>" + "".join(cells) + "</tr>")
    return "".join(out) + "</table>"


def _run_head(labels: list[str], first: str = "") -> list[str]:
    return [_e(first)] + [_e(label) for label in labels]


def _swatch(color) -> str:
    r, g, b = (int(255 * c) for c in color[:3])
    return f"<span class='swatch' style='background: rgb({r},{g},{b})'></span>"


def _header(runs: list[dict], labels: list[str], colors) -> str:
    rows = [["colour"] + [_swatch(c) for c in colors]]
    rows += [[_e(key)] + [_cell(run.get(key)) for run in runs] for key in HEADER_KEYS]
    return "<h2>Runs</h2>" + _table(_run_head(labels), rows)


def _summary(runs: list[dict], labels: list[str]) -> str:
    rows = []
    for key, name, spec in TABLE_ROWS:
        if any(run.get(key) is not None for run in runs):
            rows.append([_e(name)] + [_e(fmt(run.get(key), spec)) for run in runs])
    for key, name in LATENCY_ROWS:
        for stat in ("mean", "median", "p99"):
            values = [run.get(f"{stat}_{key}_ms") for run in runs]
            if any(v is not None for v in values):
                rows.append([_e(f"{name} {stat} (ms)")] + [_e(fmt(v)) for v in values])
    return "<h2>Summary</h2>" + _table(_run_head(labels, "metric"), rows)


def _verdicts(runs: list[dict], labels: list[str]) -> str:
    out = ["<h2>Client health</h2><ul>"]
    for run, label in zip(runs, labels, strict=True):
        health = _dict(_dict(run.get("summary")).get("client_health"))
        reasons = "; ".join(map(str, health.get("client_bound_reasons") or []))
        bound = run.get("client_bound")
        if bound is None:
            verdict = "<span class='note'>client health not judged</span>"
        elif bound:
            verdict = "<span class='bad'>client-bound: numbers not trustworthy</span>"
        else:
            verdict = "<span class='good'>client healthy</span>"
        notes = "".join(f"<br><span class='note'>{_e(n)}</span>"
                        for n in health.get("client_health_notes") or [])
        out.append(f"<li><b>{_e(label)}</b>: {verdict}{' (' + _e(reasons) + ')' if reasons else ''}"
                   f"{notes}</li>")
    return "".join(out) + "</ul>"


def _flags_and_machine(runs: list[dict], labels: list[str]) -> str:
    out = []
    for key, title in (("config", "Flags (config)"), ("environment", "Machine (environment)")):
        blocks = [_dict(run.get(key)) for run in runs]
        names = sorted({k for b in blocks for k in b})
        if not names:
            out.append(f"<h2>{title}</h2><p class='note'>none in these files</p>")
            continue
        rows = [[_e(k)] + [_cell(b.get(k)) for b in blocks] for k in names]
        out.append(f"<h2>{title}</h2>" + _table(_run_head(labels, "key"), rows))
    return "\n".join(out)


def _server_vs_client(runs: list[dict], labels: list[str]) -> str:
    out = []
    for run, label in zip(runs, labels, strict=True):
        svc = _dict(_dict(run.get("summary")).get("server_vs_client"))
        if not svc:
            continue
        rows = [[_e(r.get("name")), _cell(r.get("server")), _cell(r.get("client")),
                 _cell(r.get("ratio"))] for r in svc.get("rows") or [] if isinstance(r, dict)]
        notes = "".join(f"<li>{_e(n)}</li>" for n in svc.get("notes") or [])
        out.append(f"<h3>{_e(label)} (margin {_e(fmt(svc.get('margin')))})</h3>"
                   + _table(["metric", "server", "client", "ratio"], rows)
                   + (f"<ul>{notes}</ul>" if notes else ""))
    if not out:
        return ""
    return "<h2>Server vs client</h2>" + "\n".join(out)


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _section(title: str, uri: str | None, missing: list[str], why: str) -> str:
    """A plot with a note naming the runs that lack its data (only the note when none has it)."""
    out = f"<h3>{_e(title)}</h3>"
    if uri is not None:
        out += f"<img alt='{_e(title)}' src='{uri}'>"
    if missing:
        out += f"<p class='note'>{_e(', '.join(missing))}: {_e(why)}</p>"
    return out


def _num(value) -> float:
    return float(value) if isinstance(value, int | float) else math.nan


def _timeline(run: dict) -> dict | None:
    tl = run.get("timeline")
    return tl if isinstance(tl, dict) and tl.get("buckets") else None


def _plots(runs: list[dict], labels: list[str], colors) -> str:
    series = list(zip(runs, labels, colors, strict=True))
    timed = [(_timeline(r), label, c) for r, label, c in series if _timeline(r)]
    no_tl = [label for r, label, _ in series if not _timeline(r)]
    cdfs = [(r["cdf"], label, c) for r, label, c in series if isinstance(r.get("cdf"), dict)]
    no_cdf = [label for r, label, _ in series if not isinstance(r.get("cdf"), dict)]
    server = [(_server_series(r), label, c) for r, label, c in series]
    splits = [(_dict(r.get("summary"))["ttft_split"], label) for r, label, _ in series
              if isinstance(_dict(r.get("summary")).get("ttft_split"), dict)]
    parts = [
        "<h2>Plots</h2>",
        _section("Output throughput and requests in flight", _throughput_plot(timed) if timed else None,
                 no_tl, NO_TIMELINE),
        _section("TTFT and ITL over time", _latency_plot(timed) if timed else None, no_tl, NO_TIMELINE),
        _section("Latency distributions (CDF)", _cdf_plot(cdfs) if cdfs else None, no_cdf,
                 "no CDF in this file (older loadgen)"),
        _section("Server queue and KV cache",
                 _server_plot([s for s in server if s[0]]) if any(s for s, _, _ in server) else None,
                 [f"{label} ({_server_status(r)})" for (s, label, _), r in zip(server, runs, strict=True)
                  if not s], "no server metrics series"),
    ]
    if splits:
        parts.append(_section("TTFT split (mean ms)", _split_plot(splits), [], "") + _split_table(splits))
    return "\n".join(parts)


def _steady(ax, tl: dict, color) -> None:
    ss = tl.get("steady_state")
    if isinstance(ss, dict) and ss.get("start_s") is not None and ss.get("end_s") is not None:
        ax.axvspan(ss["start_s"], ss["end_s"], color=color, alpha=0.12, lw=0)
        for edge in (ss["start_s"], ss["end_s"]):
            ax.axvline(edge, color=color, ls=":", lw=1)


def _bucket_series(tl: dict, key: str, sub: str | None = None) -> tuple[list[float], list[float]]:
    """(interval middles, values): each bucket covers [t_s, t_s + interval_s)."""
    half = _num(tl.get("interval_s")) / 2
    xs, ys = [], []
    for b in tl["buckets"]:
        value = b.get(key)
        if sub is not None:
            value = value.get(sub) if isinstance(value, dict) else None
        xs.append(_num(b.get("t_s")) + (0.0 if math.isnan(half) else half))
        ys.append(_num(value))
    return xs, ys


def _throughput_plot(timed) -> str:
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 5.5), sharex=True)
    for tl, label, color in timed:
        top.plot(*_bucket_series(tl, "output_tok_s"), color=color, marker=".", label=label)
        bottom.plot(*_bucket_series(tl, "in_flight"), color=color, marker=".", label=label)
        for ax in (top, bottom):
            _steady(ax, tl, color)
    top.set_ylabel("output tok/s")
    bottom.set_ylabel("requests in flight")
    bottom.set_xlabel("time since the first intended send (s), per interval; shaded: steady state")
    _finish(top, bottom)
    return _png(fig)


def _latency_plot(timed) -> str:
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 5.5), sharex=True)
    for tl, label, color in timed:
        for ax, key in ((top, "ttft_ms"), (bottom, "itl_ms")):
            ax.plot(*_bucket_series(tl, key, "p50"), color=color, marker=".", label=f"{label} p50")
            ax.plot(*_bucket_series(tl, key, "p99"), color=color, ls="--", marker=".", label=f"{label} p99")
            _steady(ax, tl, color)
    top.set_ylabel("TTFT (ms)")
    bottom.set_ylabel("ITL per chunk (ms)")
    bottom.set_xlabel("time since the first intended send (s); solid p50, dashed p99")
    _finish(top, bottom)
    return _png(fig)


def _cdf_plot(cdfs) -> str:
    fig, axes = plt.subplots(2, 2, figsize=(11, 6.5))
    for ax, (key, name) in zip(axes.flat, CDF_KEYS, strict=True):
        for cdf, label, color in cdfs:
            points = [p for p in cdf.get(key) or [] if isinstance(p, list | tuple) and len(p) == 2
                      and isinstance(p[1], int | float)]
            if points:
                ax.plot([v for _, v in points], [q / 100 for q, _ in points], color=color, label=label)
        if ax.lines and min(min(line.get_xdata()) for line in ax.lines) > 0:
            ax.set_xscale("log")
        ax.set_xlabel(name)
        ax.set_ylabel("fraction of samples")
    _finish(*axes.flat)
    return _png(fig)


def _server_series(run: dict) -> dict | None:
    sm = run.get("server_metrics")
    series = sm.get("series") if isinstance(sm, dict) else None
    if not isinstance(series, dict) or not series.get("t_s"):
        return None
    has = any(any(v is not None for v in series.get(k) or []) for k in ("running", "waiting", "kv_usage"))
    return series if has else None


def _server_status(run: dict) -> str:
    sm = run.get("server_metrics")
    return str(sm.get("status")) if isinstance(sm, dict) else "not in this file"


def _server_plot(server) -> str:
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 5.5), sharex=True)
    for series, label, color in server:
        t = [_num(v) for v in series["t_s"]]
        for key, ax, style, name in (("running", top, "-", "running"), ("waiting", top, "--", "waiting"),
                                     ("kv_usage", bottom, "-", "KV use")):
            values = series.get(key)
            if values and len(values) == len(t):
                ax.plot(t, [_num(v) for v in values], color=color, ls=style, label=f"{label} {name}")
    top.set_ylabel("server requests")
    bottom.set_ylabel("KV-cache use")
    bottom.set_xlabel("time since the first intended send (s); solid running, dashed waiting")
    _finish(top, bottom)
    return _png(fig)


def _split_plot(splits) -> str:
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.6 * len(splits)))
    names = [label for _, label in splits]
    left = [0.0] * len(splits)
    for key, name, color in SPLIT_PARTS:
        widths = [_num((split.get("mean_ms") or {}).get(key)) for split, _ in splits]
        widths = [0.0 if math.isnan(w) else w for w in widths]
        ax.barh(names, widths, left=left, color=color, label=name)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.invert_yaxis()
    ax.set_xlim(0, max(max(left), 1e-9) * 1.3)  # room on the right for the legend
    ax.set_xlabel("mean TTFT (ms), split by where it was spent")
    ax.legend(fontsize=8, loc="center right")
    ax.grid(alpha=0.3, axis="x")
    return _png(fig)


def _split_table(splits) -> str:
    head = ["part"] + [_e(f"{label} {stat}") for _, label in splits for stat in ("mean", "p50", "p99")]
    rows = [[_e(name)] + [_cell((split.get(f"{stat}_ms") or {}).get(key)) for split, _ in splits
                          for stat in ("mean", "p50", "p99")] for key, name, _ in SPLIT_PARTS]
    rows.append(["requests"] + [c for split, _ in splits for c in (_cell(split.get("requests")), "", "")])
    return _table(head, rows)


def _finish(*axes) -> None:
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7, ncol=2)
