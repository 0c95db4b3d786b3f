"""`loadgen report`: one self-contained HTML page of one or more saved runs.

Plots are matplotlib PNGs inlined as base64, so the page needs no network; several runs share each
plot, one colour per run. Every value from a file reaches the page through `esc` (markup is only
what this module writes, typed `Html`) and the plots as plain text, never as mathtext.
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
import matplotlib.ticker  # noqa: E402

from loadgen.report import peers  # noqa: E402
from loadgen.report.results import TABLE_ROWS, fmt  # noqa: E402

LATENCY_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL per chunk", "e2e_latency": "E2E latency",
                 "client_queue_time": "client queue time (vLLM)",
                 "e2el_including_client_queue": "E2E incl. client queue (vLLM)"}
HEADER_KEYS = ("date", "base_url", "model_id", "backend", "transport", "loadgen_version")
CDF_KEYS = (("ttft_ms", "TTFT (ms)"), ("itl_ms", "ITL per chunk (ms)"), ("tpot_ms", "TPOT (ms)"),
            ("e2e_latency_ms", "E2E latency (ms)"))
SPLIT_PARTS = (("client_network", "client / network", "#8da0cb"), ("queue", "queue", "#fc8d62"),
               ("prefill", "prefill", "#66c2a5"), ("server_other", "server other", "#b3b3b3"),
               ("decode", "decode (--no-stream: TTFT is the whole response)", "#e78ac3"))
NO_TIMELINE = "no timeline in this file (older loadgen)"
NO_CDF = "no CDF in this file (older loadgen)"
#: Labels and names from files are text: `$...$` in them is not parsed as mathtext.
TEXT_ONLY = {"text.parse_math": False}
PLAIN_TICKS = matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g}")
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


class Html(str):
    """Markup written by this module; any other value is escaped by `esc` on its way into a page."""


def esc(value) -> Html:
    """The one place a value becomes HTML: escaped, unless it is `Html` made here."""
    return value if isinstance(value, Html) else Html(html.escape(str(value)))


def tag(template: str, *values) -> Html:
    """`template` (markup written here) with each `{}` filled by `esc(value)`."""
    return Html(template.format(*map(esc, values)))


def join(parts, sep: str = "") -> Html:
    """`parts` joined, each through `esc`."""
    return Html(sep.join(map(esc, parts)))


def page(title: str, parts: list[Html]) -> str:
    """The self-contained document: `title`, then `parts`, then when it was made."""
    return tag("<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{}</title><style>{}</style>"
               "</head><body>\n<h1>{}</h1>\n{}\n<p class='note'>made by loadgen report, {}</p>\n"
               "</body></html>\n", title, Html(CSS), title, join(parts, "\n"),
               time.strftime("%Y-%m-%d %H:%M:%S"))


def render(runs: list[dict], labels: list[str]) -> str:
    """The whole page for `runs` (results JSON objects), named by `labels` in the same order."""
    colors = [plt.get_cmap("tab10")(i % 10) for i in range(len(runs))]
    with plt.rc_context(TEXT_ONLY):
        parts = [_header(runs, labels, colors), _summary(runs, labels), _verdicts(runs, labels),
                 _plots(runs, labels, colors), _server_vs_client(runs, labels),
                 _flags_and_machine(runs, labels), _also_in_the_files(runs, labels)]
    return page("loadgen report: " + ", ".join(labels), parts)


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _cell(value) -> str:
    """A value as a table shows it (text: `table` escapes it)."""
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, bool) or not isinstance(value, int | float):
        return fmt(value)
    if isinstance(value, int):
        return f"{value:d}"
    return fmt(value) if abs(value) >= 0.1 or value == 0 else f"{value:.3g}"


def table(head: list, rows: list[list]) -> Html:
    """A table; every cell goes through `esc`; the first column is a name, the rest numbers."""
    out = [tag("<tr>{}</tr>", join(tag("<th>{}</th>", h) for h in head))]
    for row in rows:
        cells = [tag("<td>{}</td>", row[0]), *(tag("<td class='num'>{}</td>", c) for c in row[1:])]
        out.append(tag("<tr>{}</tr>", join(cells)))
    return tag("<table>{}</table>", join(out))


def _swatch(color) -> Html:
    r, g, b = (int(255 * c) for c in color[:3])
    return Html(f"<span class='swatch' style='background: rgb({r},{g},{b})'></span>")


def _header(runs: list[dict], labels: list[str], colors) -> Html:
    rows = [["colour"] + [_swatch(c) for c in colors], ["made by"] + [_made_by(run) for run in runs],
            ["token events"] + [peers.token_events(run) for run in runs]]
    rows += [[key] + [_cell(run.get(key)) for run in runs] for key in HEADER_KEYS]
    return join([Html("<h2>Runs</h2>"), table(["", *labels], rows)])


def _made_by(run: dict) -> str:
    return str(_dict(run.get("provenance")).get("made_by") or "-")


def _summary(runs: list[dict], labels: list[str]) -> Html:
    """The terminal table's rows and every latency statistic the runs hold; a cell whose tool
    defines its row otherwise, or lacks it, carries a numbered note (peers.note_for)."""
    notes = peers.Notes()
    rows = []
    for key, name, spec in TABLE_ROWS:
        if any(run.get(key) is not None for run in runs):
            rows.append([name] + [fmt(run.get(key), spec) + notes.ref(peers.note_for(run, key)) for run in runs])
    for key in peers.latency_keys(runs):
        stat, metric = peers.LATENCY_KEY.fullmatch(key).groups()
        rows.append([f"{LATENCY_NAMES[metric]} {stat} (ms)"]
                    + [fmt(run.get(key)) + notes.ref(peers.note_for(run, key)) for run in runs])
    footnotes = join(tag("<li>{}</li>", line) for line in notes.lines())
    return join([Html("<h2>Summary</h2>"), table(["metric", *labels], rows),
                 tag("<ul class='note'>{}</ul>", footnotes) if notes.lines() else ""])


def _verdict(bound, run: dict) -> Html:
    if _dict(run.get("provenance")).get("tool") in peers.TOOLS:
        return tag("<span class='note'>no client-health verdict in this file; made by {}</span>", _made_by(run))
    if bound is None:
        return Html("<span class='note'>client health not judged</span>")
    if bound:
        return Html("<span class='bad'>client-bound: numbers not trustworthy</span>")
    return Html("<span class='good'>client healthy</span>")


def _verdicts(runs: list[dict], labels: list[str]) -> Html:
    out = [Html("<h2>Client health</h2><ul>")]
    healths = [_dict(_dict(run.get("summary")).get("client_health")) for run in runs]
    for run, label, health in zip(runs, labels, healths, strict=True):
        reasons = "; ".join(health.get("client_bound_reasons") or [])
        cause = health.get("client_bound_cause")
        notes = join(tag("<br><span class='note'>{}</span>", n) for n in health.get("client_health_notes") or [])
        out.append(tag("<li><b>{}</b>: {}{}{}{}</li>", label, _verdict(run.get("client_bound"), run),
                       tag(" ({})", reasons) if reasons else "", tag("<br>cause: {}", cause) if cause else "",
                       notes))
    return join([*out, Html("</ul>"), _stamps_table(runs, healths, labels)])


def _stamps(run: dict, health: dict) -> str:
    """Where a run's event times came from: loadgen's stamp source, or the peer's clock."""
    return _dict(run.get("provenance")).get("stamps") or health.get("stamp_source", "loop")


def _pct(value) -> str:
    return "-" if not isinstance(value, int | float) or isinstance(value, bool) else f"{value:.1%}"


def _stamps_table(runs: list[dict], healths: list[dict], labels: list[str]) -> Html:
    """Where the times came from and how exact they were, per run (see loadgen/README.md, "Client health")."""
    delay = [_dict(h.get("client_delay")) for h in healths]
    refill = [_dict(h.get("refill")) for h in healths]
    workers = [[_dict(w) for w in h.get("workers") or [] if isinstance(w, dict)] for h in healths]
    rows = [
        ["stamps"] + [_stamps(run, h) for run, h in zip(runs, healths, strict=True)],
        ["client delay, loop - kernel, median / p99 / max (ms)"]
        + [" / ".join(fmt(d.get(k)) for k in ("p50_ms", "p99_ms", "max_ms")) if d else "-" for d in delay],
        ["reads"] + [_cell(d.get("reads")) for d in delay],
        ["events sharing a read with later bytes"] + [_pct(h.get("coalesced_share")) for h in healths],
        ["events possibly > 2 ms late"] + [_pct(h.get("uncertain_event_share")) for h in healths],
        ["TTFT exact (requests)"] + [_pct(h.get("ttft_exact_share")) for h in healths],
        ["TTFT uncertainty p99 / tolerance (ms)"]
        + [f"{fmt(h.get('ttft_uncertainty_p99_ms'))} / {fmt(h.get('ttft_tolerance_ms'))}" for h in healths],
        ["refill lag p99 (ms), slots empty"]
        + [f"{fmt(r.get('refill_lag_p99_ms'))}, {_pct(r.get('idle_share'))}" if r else "-" for r in refill],
        ["waited for a CPU (share of the run, per worker)"]
        + [", ".join(_pct(w.get("run_wait_share")) for w in ws) or "-" for ws in workers],
    ]
    return join([Html("<h3>Where the times come from</h3>"), table(["", *labels], rows)])


def _flags_and_machine(runs: list[dict], labels: list[str]) -> Html:
    out = []
    for key, title in (("config", "Flags (config)"), ("environment", "Machine (environment)")):
        blocks = [_dict(run.get(key)) for run in runs]
        names = sorted({k for b in blocks for k in b})
        if not names:
            out.append(tag("<h2>{}</h2><p class='note'>none in these files</p>", title))
            continue
        rows = [[k] + [_cell(b.get(k)) for b in blocks] for k in names]
        out.append(join([tag("<h2>{}</h2>", title), table(["key", *labels], rows)]))
    return join(out, "\n")


def _server_vs_client(runs: list[dict], labels: list[str]) -> Html:
    out = []
    for run, label in zip(runs, labels, strict=True):
        svc = _dict(_dict(run.get("summary")).get("server_vs_client"))
        if not svc:
            continue
        rows = [[fmt(r.get("name")), _cell(r.get("server")), _cell(r.get("client")), _cell(r.get("ratio"))]
                for r in svc.get("rows") or []]
        notes = join(tag("<li>{}</li>", n) for n in svc.get("notes") or [])
        out.append(join([tag("<h3>{} (margin {})</h3>", label, fmt(svc.get("margin"))),
                         table(["metric", "server", "client", "ratio"], rows),
                         tag("<ul>{}</ul>", notes) if notes else ""]))
    if not out:
        return Html("")
    return join([Html("<h2>Server vs client</h2>"), *out], "\n")


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _section(title: str, uri: str | None, notes: list[str]) -> Html:
    """A plot with a line per note (a run lacking its data, and why); only the notes when no run has it."""
    return join([tag("<h3>{}</h3>", title), tag("<img alt='{}' src='{}'>", title, uri) if uri else "",
                 *(tag("<p class='note'>{}</p>", note) for note in notes)])


def _num(value) -> float:
    return float(value) if isinstance(value, int | float) else math.nan


def _timeline(run: dict) -> dict | None:
    tl = run.get("timeline")
    return tl if isinstance(tl, dict) and tl.get("buckets") else None


def _plots(runs: list[dict], labels: list[str], colors) -> Html:
    series = list(zip(runs, labels, colors, strict=True))
    timed = [(_timeline(r), label, c) for r, label, c in series if _timeline(r)]
    no_tl = [f"{label}: {_missing(r, 'no_timeline', NO_TIMELINE)}" for r, label, _ in series if not _timeline(r)]
    tl_notes = [f"{label}: {note}" for r, label, _ in series
                if _timeline(r) and (note := _dict(r.get("provenance")).get("timeline_note"))]
    cdfs = [(r["cdf"], label, c) for r, label, c in series if _dict(r.get("cdf"))]
    no_cdf = [f"{label}: {_missing(r, 'no_cdf', NO_CDF)}" for r, label, _ in series if not _dict(r.get("cdf"))]
    server = [(_server_series(r), label, c) for r, label, c in series]
    splits = [(_dict(r.get("summary"))["ttft_split"], label) for r, label, _ in series
              if isinstance(_dict(r.get("summary")).get("ttft_split"), dict)]
    parts = [
        Html("<h2>Plots</h2>"),
        _section("Output throughput and requests in flight", _throughput_plot(timed) if timed else None,
                 no_tl + tl_notes),
        _section("TTFT and ITL over time", _latency_plot(timed) if timed else None, no_tl),
        _section("Latency distributions (CDF)", _cdf_plot(cdfs) if cdfs else None, no_cdf),
        _section("Server queue and KV cache",
                 _server_plot([s for s in server if s[0]]) if any(s for s, _, _ in server) else None,
                 [f"{label} ({_server_status(r)}): no server metrics series"
                  for (s, label, _), r in zip(server, runs, strict=True) if not s]),
    ]
    if splits:
        parts += [_section("TTFT split (mean ms)", _split_plot(splits), []), _split_table(splits)]
    return join(parts, "\n")


def _missing(run: dict, key: str, default: str) -> str:
    """Why a run lacks a plot's data: its provenance says for a peer's file, else `default`."""
    return _dict(run.get("provenance")).get(key) or default


def _also_in_the_files(runs: list[dict], labels: list[str]) -> Html:
    """Each peer file's fields that reach no other table or plot, as they are (peers.brief)."""
    out = []
    for run, label in zip(runs, labels, strict=True):
        also = _dict(_dict(run.get("provenance")).get("also"))
        if also:
            out.append(join([tag("<h3>{}</h3>", label),
                             table(["field", "value"], [[k, peers.brief(v)] for k, v in also.items()])]))
    if not out:
        return Html("")
    return join([Html("<h2>Also in the files</h2><p class='note'>fields of the peers' files that no table "
                      "above shows; their per-request times feed the plots</p>"), *out], "\n")


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
            log_x(ax)
        ax.set_xlabel(name)
        ax.set_ylabel("fraction of samples")
    _finish(*axes.flat)
    return _png(fig)


def log_x(ax) -> None:
    """A log x axis labelled in plain numbers: its own labels are mathtext, which TEXT_ONLY turns
    off (they would show as `$\\mathdefault{10^{1}}$`)."""
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(PLAIN_TICKS)
    ax.xaxis.set_minor_formatter(_minor_ticks(ax))


def _minor_ticks(ax) -> matplotlib.ticker.Formatter:
    """Plain labels on a log axis's minor ticks while it spans less than a decade (else none)."""
    def label(value, _) -> str:
        low, high = ax.get_xlim()
        return f"{value:g}" if high < 10 * low else ""
    return matplotlib.ticker.FuncFormatter(label)


def _server_series(run: dict) -> dict | None:
    sm = run.get("server_metrics")
    series = sm.get("series") if isinstance(sm, dict) else None
    if not isinstance(series, dict) or not series.get("t_s"):
        return None
    has = any(any(v is not None for v in series.get(k) or []) for k in ("running", "waiting", "kv_usage"))
    return series if has else None


def _server_status(run: dict) -> str:
    if (tool := _dict(run.get("provenance")).get("tool")) in peers.TOOLS:
        return f"{peers.TOOLS[tool].name} reads none"
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


def _split_table(splits) -> Html:
    head = ["part"] + [f"{label} {stat}" for _, label in splits for stat in ("mean", "p50", "p99")]
    rows = [[name] + [_cell((split.get(f"{stat}_ms") or {}).get(key)) for split, _ in splits
                          for stat in ("mean", "p50", "p99")] for key, name, _ in SPLIT_PARTS]
    rows.append(["requests"] + [c for split, _ in splits for c in (_cell(split.get("requests")), "", "")])
    return table(head, rows)


def _finish(*axes) -> None:
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7, ncol=2)
