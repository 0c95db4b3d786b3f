"""`loadgen report`: one self-contained HTML page of one or more saved runs.

Plots are matplotlib PNGs (loadgen/report/plots.py) inlined as base64, so the page needs no network;
several runs share each plot, one colour per run. Each run states its workload first
(loadgen/report/workload.py). Every value from a file reaches the page through `esc` (markup is only
what this module writes, typed `Html`) and the plots as plain text, never as mathtext.
"""

from __future__ import annotations

import html
import json
import math
import os
import time

from loadgen.measure.targets import figure_lines
from loadgen.measure.timeline import STEADY_RULE
from loadgen.report import peers, plots, workload
from loadgen.report.compare import differences_of
from loadgen.report.noise import interval_text, open_note
from loadgen.report.plots import SPLIT_PARTS, TEXT_ONLY, log_x, plt
from loadgen.report.results import TABLE_ROWS, fmt

__all__ = ["TEXT_ONLY", "log_x", "render", "page", "table", "tag", "join", "esc", "Html"]

LATENCY_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL per chunk", "e2e_latency": "E2E latency",
                 "client_queue_time": "client queue time (vLLM)",
                 "e2el_including_client_queue": "E2E incl. client queue (vLLM)",
                 "ttfo": "TTFO (first answer token)", "reasoning_duration": "reasoning duration",
                 "ttf_tool_call": "time to first tool-call token"}
HEADER_KEYS = ("date", "base_url", "model_id", "backend", "transport", "loadgen_version")
NO_TIMELINE = "no timeline in this file (older loadgen)"
NO_CDF = "no CDF in this file (older loadgen)"
CSS = """
body { font-family: sans-serif; margin: 24px; color: #222; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f2f2f2; }
.bad { color: #b00020; font-weight: bold; } .good { color: #1b7a1b; font-weight: bold; }
.note { color: #666; font-style: italic; } img { width: 100%; max-width: 1600px; display: block; }
tr.diff td { background: #fff3bf; } td.cmd { font-family: monospace; white-space: pre-wrap; overflow-wrap: anywhere; }
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
        parts = [_header(runs, labels, colors), _workload(runs, labels), _summary(runs, labels),
                 _verdicts(runs, labels), _plan_knobs(runs, labels),
                 _plots(runs, labels, colors), _server_vs_client(runs, labels), _targets(runs, labels),
                 _differences(runs, labels),
                 _flags_and_machine(runs, labels), _also_in_the_files(runs, labels)]
    return page("loadgen report: " + ", ".join(labels), parts)


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _cell(value) -> str:
    """A value as a table shows it (text: `table` escapes it)."""
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, bool | int):
        return workload.number(value)
    if not isinstance(value, float):
        return fmt(value)
    return fmt(value) if abs(value) >= 0.1 or not math.isfinite(value) else f"{value:.3g}"


def table(head: list, rows: list[list], mark_differences: bool = False, cell_class: str = "num") -> Html:
    """A table; every cell goes through `esc`; the first column is a name, the rest values (numbers
    unless `cell_class` says otherwise). With `mark_differences`, a row whose values differ is
    highlighted (class `diff`)."""
    out = [tag("<tr>{}</tr>", join(tag("<th>{}</th>", h) for h in head))]
    for row in rows:
        cells = [tag("<td>{}</td>", row[0]), *(tag(f"<td class='{cell_class}'>{{}}</td>", c) for c in row[1:])]
        differs = mark_differences and len({str(c) for c in row[1:]}) > 1
        out.append(tag("<tr class='diff'>{}</tr>" if differs else "<tr>{}</tr>", join(cells)))
    return tag("<table>{}</table>", join(out))


def _differences_note(runs: list[dict]) -> Html:
    return Html("<p class='note'>highlighted: rows that differ between the runs</p>") if len(runs) > 1 else Html("")


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


def _workload(runs: list[dict], labels: list[str]) -> Html:
    """What each run ran (loadgen/report/workload.py), one column per run, differing rows highlighted."""
    per_run = [dict(workload.rows(run)) for run in runs]
    rows = [[name] + [w[name] for w in per_run] for name in workload.ROWS]
    return join([Html("<h2>Workload</h2>"), table(["", *labels], rows, mark_differences=True, cell_class="cmd"),
                 _differences_note(runs), _per_turn(runs, labels), _per_group(runs, labels)])


def _per_turn(runs: list[dict], labels: list[str]) -> Html:
    """A multi-turn run's figures per turn (its `per_turn` list)."""
    out = []
    for run, label in zip(runs, labels, strict=True):
        turns = [_dict(t) for t in run.get("per_turn") or [] if isinstance(t, dict)]
        if turns:
            keys = [k for k in turns[0] if k != "turn"]
            out.append(join([tag("<h3>{}: per turn</h3>", label),
                             table(["turn", *keys], [[_cell(t.get("turn"))] + [_cell(t.get(k)) for k in keys]
                                                     for t in turns])]))
    return join(out, "\n")


def _plan_knobs(runs: list[dict], labels: list[str]) -> Html:
    """issue 32: the prefix cache (asked, planned, measured), the cache-bust salt and each rate stage."""
    data = [(_dict(run.get("dataset")), _dict(_dict(run.get("summary")).get("prefix_cache")),
             _dict(run.get("summary")).get("rate_stages") or []) for run in runs]
    rows = [["prefix-cache hit rate asked"] + [_cell(d.get("prefix_cache_hit_rate") or None) for d, _, _ in data],
            ["planned (shared with an earlier prompt)"] + [_cell(d.get("planned_hit_rate")) for d, _, _ in data],
            ["measured (server cached_tokens / prompt tokens)"] + [_cell(c.get("measured_hit_rate")) for _, c, _ in data],
            ["cached / prompt tokens"] + [f"{_cell(c.get('cached_tokens'))} / {_cell(c.get('prompt_tokens'))}"
                                          if c else "-" for _, c, _ in data],
            ["cache-bust salt"] + [_cell(d.get("cache_bust")) for d, _, _ in data]]
    for k in range(max(len(stages) for _, _, stages in data)):
        rows.append([f"stage {k + 1}: asked / achieved req/s (s)"] + [_stage_cell(stages, k) for _, _, stages in data])
    shown = [row for row in rows if any(cell not in ("-", "- / -") for cell in row[1:])]
    if not shown:
        return Html("")
    return join([Html("<h2>Prefix cache and rate stages</h2>"), table(["", *labels], shown)])


def _stage_cell(stages: list, k: int) -> str:
    row = _dict(stages[k]) if k < len(stages) else {}
    if not row:
        return "-"
    return f"{_cell(row.get('rate'))} / {_cell(row.get('achieved_rate'))} ({_cell(row.get('duration_s'))})"


#: Issue 32's breakdowns: the summary list, its name column, and the heading.
GROUPS = (("per_url", "url", "per server (--base-url)"), ("per_model", "model", "per model (--model)"))


def _per_group(runs: list[dict], labels: list[str]) -> Html:
    """Cancelled requests where a run has any, and a run's figures per server and per model."""
    out = []
    if any(run.get("cancelled") for run in runs):
        out.append(table(["", *labels], [["cancelled requests (by the client, not failed)",
                                          *(_cell(run.get("cancelled")) for run in runs)]]))
    for run, label in zip(runs, labels, strict=True):
        for key, name, heading in GROUPS:
            rows = [_dict(r) for r in run.get(key) or [] if isinstance(r, dict)]
            if rows:
                keys = [k for k in rows[0] if k != name]
                out.append(join([tag("<h3>{}: {}</h3>", label, heading),
                                 table([name, *keys], [[_cell(r.get(name))] + [_cell(r.get(k)) for k in keys]
                                                       for r in rows])]))
    return join(out, "\n")


def _ratio_head(labels: list[str]) -> list[str]:
    """The summary's columns: the first run, then each other run followed by its ratio to the first."""
    return [labels[0]] + [h for label in labels[1:] for h in (label, f"{label} / {labels[0]}")]


def _with_ratios(values: list, cells: list[str]) -> list[str]:
    """`cells` (one per run) with, after each but the first, the ratio of its value to the first's."""
    base = values[0]
    out = [cells[0]]
    for value, cell in zip(values[1:], cells[1:], strict=True):
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (value, base))
        out += [cell, f"{value / base:.2f}x" if numeric and base else "-"]
    return out


def _summary(runs: list[dict], labels: list[str]) -> Html:
    """The terminal table's rows and every latency statistic the runs hold; a cell whose tool
    defines its row otherwise, or lacks it, carries a numbered note (peers.note_for)."""
    notes = peers.Notes()
    rows = []
    for key, name, spec in TABLE_ROWS:
        if any(run.get(key) is not None for run in runs):
            cells = [fmt(run.get(key), spec) + notes.ref(peers.note_for(run, key)) for run in runs]
            rows.append([name] + _with_ratios([run.get(key) for run in runs], cells))
    for key in peers.latency_keys(runs):
        stat, metric = peers.LATENCY_KEY.fullmatch(key).groups()
        cells = [_latency_cell(run, key) + notes.ref(peers.note_for(run, key)) for run in runs]
        rows.append([f"{LATENCY_NAMES[metric]} {stat} (ms)"] + _with_ratios([run.get(key) for run in runs], cells))
    footnotes = join(tag("<li>{}</li>", line) for line in notes.lines())
    ratio_note = Html("<p class='note'>'B / A': B's value over the first run's, as loadgen compare prints it</p>")
    return join([Html("<h2>Summary</h2>"), table(["metric", *_ratio_head(labels)], rows),
                 ratio_note if len(runs) > 1 else "",
                 tag("<ul class='note'>{}</ul>", footnotes) if notes.lines() else ""])


def _latency_cell(run: dict, key: str) -> str:
    """A latency statistic; where the run's token latencies do not apply, the reason (issue 32)."""
    if run.get(key) is None and run.get("token_latencies") and not key.endswith(("e2e_latency_ms", "send_lag_ms")):
        return str(run["token_latencies"])
    return fmt(run.get(key))


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
        out.append(join([tag("<h2>{}</h2>", title), table(["key", *labels], rows, mark_differences=True),
                         _differences_note(runs)]))
    return join(out, "\n")


def _server_vs_client(runs: list[dict], labels: list[str]) -> Html:
    out = []
    for run, label in zip(runs, labels, strict=True):
        svc = _dict(_dict(run.get("summary")).get("server_vs_client"))
        if not svc:
            continue
        rows = [[fmt(r.get("name"))] + [_count(r.get(k)) if "tokens" in str(r.get("name")) else _cell(r.get(k))
                                        for k in ("server", "client")] + [_cell(r.get("ratio"))]
                for r in svc.get("rows") or []]
        notes = join(tag("<li>{}</li>", n) for n in svc.get("notes") or [])
        out.append(join([tag("<h3>{} (margin {})</h3>", label, fmt(svc.get("margin"))),
                         table(["metric", "server", "client", "ratio"], rows),
                         tag("<ul>{}</ul>", notes) if notes else ""]))
    if not out:
        return Html("")
    return join([Html("<h2>Server vs client</h2>"), *out], "\n")


def _targets(runs: list[dict], labels: list[str]) -> Html:
    """Each run's scraped targets: their mapped figures, series kept, the cap when hit, and energy
    per output token (as the terminal table prints them)."""
    out = []
    for run, label in zip(runs, labels, strict=True):
        rows = figure_lines(_dict(run.get("server_metrics")), _dict(run.get("summary")))
        if rows:
            out.append(join([tag("<h3>{}</h3>", label), table(["figure", "value"], [list(r) for r in rows])]))
    if not out:
        return Html("")
    return join([Html("<h2>Server metrics: every target</h2>"), *out], "\n")


def _differences(runs: list[dict], labels: list[str]) -> Html:
    """Each later run's headline differences to the first with their bootstrap intervals (as
    `compare` prints them), where the runs' records files are there."""
    pairs = [("", label, run) for label, run in zip(labels, runs, strict=True)]
    if len(runs) < 2:
        return Html("")
    try:
        noise, notes = differences_of(pairs)
    except ValueError as exc:
        notes, noise = [str(exc)], {}
    if not noise:
        return Html("")
    rows = [[name, metric, _cell(d["a"]), _cell(d["b"]), f"{d['diff']:+,.2f}",
             interval_text(d), "*" if d["significant"] else ""]
            for name, diffs in noise.items() for metric, d in diffs.items()]
    return join([Html("<h2>Differences to the first run (bootstrap intervals, * significant)</h2>"),
                 table(["run", "metric", "first", "this", "difference", "interval", ""], rows) if rows else "",
                 *(tag("<p class='note'>{}</p>", note) for note in (open_note(noise), *notes) if note)])


def _count(value) -> str:
    """A count (tokens), as an integer even when the file holds it as a float (Prometheus counters)."""
    whole = isinstance(value, float) and math.isfinite(value) and value.is_integer()
    return workload.number(int(value) if whole else value)


def _section(title: str, uri: str | None, notes: list[str]) -> Html:
    """A plot with a line per note (a run lacking its data, and why); only the notes when no run has it."""
    return join([tag("<h3>{}</h3>", title), tag("<img alt='{}' src='{}'>", title, uri) if uri else "",
                 *(tag("<p class='note'>{}</p>", note) for note in notes)])


def _timeline(run: dict) -> dict | None:
    tl = run.get("timeline")
    return tl if isinstance(tl, dict) and tl.get("buckets") else None


def _plots(runs: list[dict], labels: list[str], colors) -> Html:
    series = list(zip(runs, labels, colors, strict=True))
    timed = [(_without_batch_window(_timeline(r)), label, c) for r, label, c in series if _timeline(r)]
    no_tl = [f"{label}: {_missing(r, 'no_timeline', NO_TIMELINE)}" for r, label, _ in series if not _timeline(r)]
    tl_notes = [f"{label}: {note}" for r, label, _ in series
                if _timeline(r) and (note := _dict(r.get("provenance")).get("timeline_note"))]
    cdfs = [(r["cdf"], label, c) for r, label, c in series if _dict(r.get("cdf"))]
    no_cdf = [f"{label}: {_missing(r, 'no_cdf', NO_CDF)}" for r, label, _ in series if not _dict(r.get("cdf"))]
    splits = [(_dict(r.get("summary"))["ttft_split"], label) for r, label, _ in series
              if isinstance(_dict(r.get("summary")).get("ttft_split"), dict)]
    steady = [f"{label}: {_steady_note(r)}" for r, label, _ in series if _timeline(r)]
    steady += [f"the steady-state rule: {STEADY_RULE}"] if any("no steady state" in n for n in steady) else []
    warm = [f"{label}: warm-up of {n} requests before time 0, in no plot" for r, label, _ in series
            if isinstance(n := _dict(r.get("workload")).get("warmup", _dict(r.get("config")).get("warmup")), int)
            and n > 0]
    parts = [
        Html("<h2>Plots</h2>"),
        _section("Output throughput and requests in flight", plots.throughput_plot(timed) if timed else None,
                 no_tl + tl_notes + steady + warm),
        _section("TTFT and ITL over time", *(plots.latency_plot(timed) if timed else (None, no_tl))),
        _section("Latency distributions (CDF)", plots.cdf_plot(cdfs) if cdfs else None, no_cdf),
        _server_section(series),
    ]
    if splits:
        parts += [_section("TTFT split (mean ms)", plots.split_plot(splits), []), _split_table(splits)]
    return join(parts, "\n")


def _steady_note(run: dict) -> str:
    """The run's steady-state window and its figures, or that it has none and by which rule."""
    ss = _dict(_timeline(run)).get("steady_state")
    if _dict(run.get("provenance")).get("tool") in peers.TOOLS:
        return "no steady state drawn for a peer's file"
    if not isinstance(ss, dict):
        return "no steady state (by the rule below)"
    if not _refilled(_timeline(run), ss):
        return (f"no steady state: the file's window {fmt(ss.get('start_s'), '{:g}')}-{fmt(ss.get('end_s'), '{:g}')}"
                " s saw no request start after its first interval (a batch sent at once; the rule below)")
    figures = [fmt(ss.get(key), spec) + unit for key, spec, unit in
               (("mean_in_flight", "{:.1f}", " in flight"), ("output_throughput", "{:.0f}", " output tok/s"))
               if ss.get(key) is not None]
    return (f"steady state {fmt(ss.get('start_s'), '{:g}')}-{fmt(ss.get('end_s'), '{:g}')} s (shaded)"
            + (": " + ", ".join(figures) if figures else ""))


def _without_batch_window(tl: dict) -> dict:
    """`tl`, without a steady-state window that no request refilled (older files), so that none is shaded."""
    ss = tl.get("steady_state")
    return tl if not isinstance(ss, dict) or _refilled(tl, ss) else {**tl, "steady_state": None}


def _refilled(tl: dict, ss: dict) -> bool:
    """Whether a request started in the steady-state window after its first interval (files written
    before that was part of timeline.STEADY_RULE may carry a window without one)."""
    step = plots.num(tl.get("interval_s"))
    inside = [b for b in tl["buckets"] if isinstance(b, dict)
              and plots.num(ss.get("start_s")) + step <= plots.num(b.get("t_s")) < plots.num(ss.get("end_s"))]
    return any(b.get("started") for b in inside) or any(not isinstance(b.get("started"), int) for b in inside)


def _server_section(series) -> Html:
    """The server's queue and KV cache from the runs' scrapes; per run, its failed scrapes, and why a run
    has no line (no series, or nothing but zeros: a flat line would read as an idle server)."""
    drawn, notes = [], []
    for run, label, color in series:
        sm = _dict(run.get("server_metrics"))
        failed, ok = sm.get("failed_scrapes"), sm.get("scrapes")
        if isinstance(failed, int) and failed:
            notes.append(f"{label}: {failed} of {failed + (ok or 0)} scrapes of /metrics failed (last: "
                         f"{sm.get('last_failure') or '-'}); its series holds only the {ok or 0} that answered")
        s = _server_series(run)
        if s is None:
            notes.append(f"{label} ({_server_status(run)}): no server metrics series")
        elif not any(v for key, _ in plots.SERVER_PANELS[0][0] + plots.SERVER_PANELS[1][0]
                     for v in s.get(key) or [] if isinstance(v, int | float)):
            notes.append(f"{label}: its {len(s['t_s'])} scrapes read 0 for every series, not drawn")
        else:
            drawn.append((s, label, color))
    uri, panel_notes = plots.server_plot(drawn) if drawn else (None, [])
    return _section("Server queue and KV cache", uri, notes + panel_notes)

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


def _split_table(splits) -> Html:
    head = ["part"] + [f"{label} {stat}" for _, label in splits for stat in ("mean", "p50", "p99")]
    rows = [[name] + [_cell((split.get(f"{stat}_ms") or {}).get(key)) for split, _ in splits
                          for stat in ("mean", "p50", "p99")] for key, name, _ in SPLIT_PARTS]
    rows.append(["requests"] + [c for split, _ in splits for c in (_cell(split.get("requests")), "", "")])
    return table(head, rows)

