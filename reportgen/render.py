"""Write a report directory: flamegraph SVGs, speedscope files, summary.json, index.html, README.md."""

from __future__ import annotations

import gzip
import json
from dataclasses import asdict
from html import escape
from pathlib import Path

from harness import provenance
from harness.run import PROCESSES
from reference_impl.placement import describe
from reportgen import flamegraph, machine, plots
from reportgen.analysis import cost_by_length, is_sweep, loglog_slope, ratio

LOADGEN_ROWS = (
    ("completed", "completed requests"), ("failed", "failed requests"), ("duration", "duration (s)"),
    ("total_input_tokens", "input tokens (server count)"), ("total_output_tokens", "output tokens"),
    ("output_throughput", "output tokens/s"), ("max_output_tokens_per_s", "peak output tokens/s (1 s)"),
    ("concurrency", "mean requests in flight"), ("median_ttft_ms", "median TTFT (ms)"),
    ("p99_ttft_ms", "p99 TTFT (ms)"), ("mean_tpot_ms", "mean TPOT (ms)"),
    ("mean_itl_ms", "mean ITL (ms)"), ("median_itl_ms", "median ITL (ms)"), ("p99_itl_ms", "p99 ITL (ms)"),
    ("median_e2e_latency_ms", "median E2E latency (ms)"),
)
TOP_FUNCTIONS = 15
MIN_COMPLETED = 30
"""Fewer completed requests than this in a run and its ratios are not printed (too few to judge)."""
CSS = """body{font-family:system-ui,sans-serif;margin:24px;max-width:1300px;color:#222}
table{border-collapse:collapse;margin:8px 0 20px;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}th{background:#f0f0f0}
td:first-child,th:first-child{text-align:left}td.fn{text-align:left;font-family:monospace;font-size:12px}
.ratio{color:#666;font-size:11px}svg.flamegraph{border:1px solid #ddd;margin:4px 0}
details{margin:4px 0 10px}summary{cursor:pointer;font-weight:600}img{max-width:100%}
code{background:#f4f4f4;padding:1px 4px}"""


def fmt(value) -> str:
    """A number for a table cell: thousands separators, few decimals; a dash when missing."""
    if value is None:
        return "–"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,d}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def fmt_ratio(value: float | None) -> str:
    """``1.23x``, or empty when there is no ratio."""
    return f"{value:.2f}x" if value is not None else ""


def server_rows(outcome) -> dict[str, float | None]:
    """The server-side figures of one run: CPU per process, per 1K output tokens, scheduler steps."""
    tokens = outcome.result.get("total_output_tokens") or 0
    total_cpu = sum(outcome.cpu_s.values())
    rows = {f"CPU s, {p}": outcome.cpu_s.get(p) for p in PROCESSES}
    rows["CPU ms per 1K output tokens (all processes)"] = 1e6 * total_cpu / tokens if tokens else None
    rows["CPU ms per 1K output tokens (http)"] = 1e6 * outcome.cpu_s["http"] / tokens if tokens else None
    rows["output tokens per SSE chunk"] = outcome.derived.get("tokens_per_chunk")
    rows["prefill steps"] = outcome.metrics.get("num_prefill_steps")
    rows["decode steps"] = outcome.metrics.get("num_decode_steps")
    for key, value in sorted(outcome.metrics.items()):
        if key.startswith("prefill_delayer_outcomes"):
            rows["delayer " + key.partition("{")[2].rstrip("}")] = value
    return rows


def summary(scenario, scale: float, settings, outcomes, elapsed_s: float) -> dict:
    """Everything the page and README show, as plain data (written as summary.json)."""
    return {
        "scenario": scenario.name, "title": scenario.title(scale), "hot_paths": list(scenario.hot_paths),
        "scale": scale, "provenance": provenance.record(scenario.fingerprint_excludes),
        "sampling_rate_hz": settings.rate, "profile_duration_s": settings.duration,
        "server_flags": list(settings.server_flags), "elapsed_s": round(elapsed_s, 1),
        "machine": machine.describe(settings.py_spy),
        "placement": describe(settings.placement),
        "too_few_samples": too_few_note([o for o in outcomes if not is_sweep(o)]) or None,
        "runs": [{"name": o.run.name, "flags": list(o.run.flags), "load": asdict(o.run.load),
                  "params": o.run.params, "loadgen": {k: o.result.get(k) for k, _ in LOADGEN_ROWS},
                  "client_bound": o.result.get("client_bound"),
                  "client_bound_reasons": o.result.get("summary", {}).get("client_health", {})
                  .get("client_bound_reasons"),
                  "server": server_rows(o), "cpu_s": o.cpu_s, "metrics": o.metrics,
                  "sweep": is_sweep(o)}
                 for o in outcomes],
        "cost_by_length": {form: {"points": points, "loglog_slope": (loglog_slope(points) or [None])[0]}
                           for form, points in cost_by_length(outcomes).items()},
    }


def _table(header: list[str], rows: list[list[str]], raw_cells: bool = False) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c if raw_cells else escape(c)}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def too_few(outcome) -> bool:
    """Whether a run completed too few requests for its ratios to mean anything."""
    return (outcome.result.get("completed") or 0) < MIN_COMPLETED


def too_few_note(outcomes) -> str:
    """A sentence naming the runs too small to judge, or ""."""
    small = [f"{o.run.name} ({o.result.get('completed') or 0})" for o in outcomes if too_few(o)]
    if not small:
        return ""
    return (f"Too few samples to judge: {', '.join(small)} completed fewer than {MIN_COMPLETED} "
            "requests, so no ratios are printed for them; run a larger --scale for figures.")


def _compare_rows(data: dict, outcomes, labels) -> list[list[str]]:
    rows = []
    judge = [not too_few(outcomes[0]) and not too_few(o) for o in outcomes]
    for key, label in labels:
        values = [data[o.run.name].get(key) for o in outcomes]
        cells = [label, escape(fmt(values[0]))]
        for value, ok in zip(values[1:], judge[1:], strict=True):
            r = fmt_ratio(ratio(value, values[0])) if isinstance(value, int | float) else ""
            r = r if ok else "too few samples"
            cells.append(f'{escape(fmt(value))} <span class="ratio">{r}</span>')
        rows.append(cells)
    return rows


def loadgen_table(outcomes) -> str:
    """Loadgen figures, one column per run, ratios against the first (baseline) run."""
    data = {o.run.name: o.result for o in outcomes}
    rows = _compare_rows(data, outcomes, LOADGEN_ROWS)
    rows.append(["client-bound (loadgen)"] + [escape(str(o.result.get("client_bound"))) for o in outcomes])
    return _table(["metric"] + [o.run.name for o in outcomes], rows, raw_cells=True)


def server_table(outcomes) -> str:
    """Server CPU and scheduler counters, one column per run, ratios against the baseline."""
    data = {o.run.name: server_rows(o) for o in outcomes}
    labels = [(k, k) for k in dict.fromkeys(k for rows in data.values() for k in rows)]
    return _table(["metric"] + [o.run.name for o in outcomes], _compare_rows(data, outcomes, labels),
                  raw_cells=True)


def top_functions(outcomes, process: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows: the functions with the most own time in ``process``, % of samples per run."""
    shares = []
    for o in outcomes:
        times, total = flamegraph.function_times(o.stacks[process])
        shares.append({name: 100 * t.own / total for name, t in times.items()} if total else {})
    best = sorted({n for s in shares for n, share in s.items() if share > 0},
                  key=lambda n: -max(s.get(n, 0.0) for s in shares))
    rows = [[name] + [f"{s.get(name, 0.0):.1f}" for s in shares] for name in best[:TOP_FUNCTIONS]]
    header = ["function (own time, % of samples)"] + [o.run.name for o in outcomes]
    return header, rows


def _functions_html(outcomes) -> str:
    parts = []
    for process in PROCESSES:
        header, rows = top_functions(outcomes, process)
        samples = ", ".join(f"{o.run.name} {sum(o.stacks[process].values())}" for o in outcomes)
        body = "".join("<tr>" + f'<td class="fn">{escape(r[0])}</td>' +
                       "".join(f"<td>{c}</td>" for c in r[1:]) + "</tr>" for r in rows)
        head = "".join(f"<th>{escape(h)}</th>" for h in header)
        parts.append(f"<h3>{process}</h3><p>samples: {escape(samples)}</p>"
                     f'<table class="functions"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')
    return "".join(parts)


def _flamegraphs_html(svgs: dict[tuple[str, str], str], outcomes) -> str:
    parts = []
    for process in PROCESSES:
        parts.append(f"<h3>{process}</h3>")
        for i, o in enumerate(outcomes):
            opened = " open" if i < 2 else ""
            parts.append(f"<details{opened}><summary>{escape(o.run.name)} — {process}</summary>"
                         f"{svgs[(o.run.name, process)]}</details>")
    return "".join(parts)


def sweep_table(data: dict) -> str:
    """The cost-vs-length points and fitted log-log slopes (empty when the scenario has no sweep)."""
    rows = [[form, ", ".join(f"{length}: {fmt(cost)}" for length, cost in entry["points"]),
             fmt(entry["loglog_slope"])] for form, entry in data["cost_by_length"].items()]
    if not rows:
        return ""
    return ("<p>HTTP-process CPU per request at each output length, and the slope of the "
            "log-log fit (1: linear in the output length, 2: quadratic).</p>"
            + _table(["form", "output tokens: CPU ms per request", "log-log slope"], rows))


def page(scenario, data: dict, outcomes, svgs, images: dict[str, str]) -> str:
    """The self-contained index.html (sweep runs appear only in the cost-vs-length part)."""
    runs = "".join(f"<li><code>{escape(r['name'])}</code>: server flags <code>"
                   f"{escape(' '.join(r['flags']) or '(defaults: every hot path optimized)')}</code>"
                   f"</li>" for r in data["runs"] if not r["sweep"])
    outcomes = [o for o in outcomes if not is_sweep(o)]
    load = data["runs"][0]["load"]
    plots_html = "".join(f'<img alt="{name}" src="data:image/png;base64,{png}">'
                         for name, png in images.items())
    machine_rows = [[k, v] for k, v in data["machine"].items()]
    return f"""<!doctype html><html><head><meta charset="utf-8">
<title>{escape(data["title"])} — profiling report</title><style>{CSS}</style></head><body>
<h1>{escape(scenario.name)}: {escape(data["title"])}</h1>
<p>{escape(scenario.description)}</p>
<p>Hot paths: {escape(", ".join(scenario.hot_paths))}. Scale {data["scale"]}; load per run: {escape(json.dumps(load))}.
py-spy at {data["sampling_rate_hz"]} Hz, idle frames off, every server process recorded while the load ran.
Command: <code>python -m reportgen run {escape(scenario.name)} --scale {data["scale"]} --rate {data["sampling_rate_hz"]}</code>.</p>
<ul>{runs}</ul>
<p>Placement: {escape(data.get("placement", ""))}.</p>
<h2>Load (loadgen)</h2><p>Ratios are against the first column. <strong>{escape(too_few_note(outcomes))}</strong></p>
{loadgen_table(outcomes)}
<h2>Server</h2><p>CPU seconds read from /proc for each process over the load; scheduler counters from /metrics.</p>
{server_table(outcomes)}
<h2>Plots</h2>{plots_html}{sweep_table(data)}
<h2>Top functions by own time</h2><p>Own time is where the sample's innermost Python frame was;
time inside C code (uvloop's event loop, zmq, the kernel) counts to the Python frame that called it,
so <code>Runner.run</code> own time is mostly the event loop itself.</p>{_functions_html(outcomes)}
<h2>Flamegraphs</h2><p>Icicle layout (callers above callees), width by samples; blue frames are this
project's code, warm frames the standard library and third-party packages. Hover a frame for its
samples. Speedscope files (gzipped): <code>profiles/</code>; raw py-spy stacks: <code>raw/</code>.</p>
{_flamegraphs_html(svgs, outcomes)}
<h2>Machine</h2>{_table(["", ""], machine_rows)}
</body></html>"""


def readme(scenario, data: dict) -> str:
    """The report's README.md: what ran, the headline table, the files."""
    names = [r["name"] for r in data["runs"]]
    keys = ("output_throughput", "median_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "p99_itl_ms")
    lines = [f"# {scenario.name}: {data['title']}", "", scenario.description, "",
             f"`python -m reportgen run {scenario.name} --scale {data['scale']} --rate "
             f"{data['sampling_rate_hz']}` on {data['machine']['CPU']}, {data['machine']['cores']} "
             f"cores, GPU: {data['machine']['GPU']}; commit {data['machine']['commit']}, code "
             f"fingerprint {data['provenance']['fingerprint']}; "
             f"{data['elapsed_s']:.0f} s in all; {data.get('placement', '')}. Open `index.html` "
             "for the flamegraphs and plots.", "",
             *([f"**{data['too_few_samples']}**", ""] if data.get("too_few_samples") else []),
             "| run | " + " | ".join(keys) + " | tokens per chunk | http CPU s | scheduler CPU s | detokenizer CPU s | prefill steps | client-bound |",
             "|---" * (len(keys) + 7) + "|"]
    for r in (r for r in data["runs"] if not r["sweep"]):
        cells = [fmt(r["loadgen"].get(k)) for k in keys]
        cells.append(fmt(r["server"].get("output tokens per SSE chunk")))
        cells += [fmt(r["cpu_s"].get(p)) for p in PROCESSES]
        cells += [fmt(r["server"].get("prefill steps")), str(r["client_bound"])]
        lines.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    for form, entry in data["cost_by_length"].items():
        points = ", ".join(f"{length}: {fmt(cost)} ms" for length, cost in entry["points"])
        lines.append(f"\nHTTP-process CPU per request, {form}: {points}; log-log slope "
                     f"{fmt(entry['loglog_slope'])}.")
    lines += ["", "Files: `index.html` (self-contained page), `summary.json` (the figures above and "
              "more), `results/<run>.json` (loadgen), `flamegraphs/<run>.<process>.svg`, "
              "`profiles/<run>.<process>.speedscope.json.gz` (gunzip, then open at speedscope.app), "
              "`raw/<run>.<process>.txt.gz` (py-spy raw collapsed stacks), `raw/<run>.server.log`.",
              "", "Runs: " + ", ".join(f"`{n}`" for n in names) + "."]
    return "\n".join(lines) + "\n"


def write_report(scenario, scale: float, settings, outcomes, out_dir: Path, elapsed_s: float) -> None:
    """Write every derived file of the report into ``out_dir``."""
    svgs = {}
    for o in outcomes:
        (out_dir / "raw" / f"{o.run.name}.derived.json").write_text(json.dumps(o.derived))
        if is_sweep(o):
            continue
        for process in PROCESSES:
            stacks = o.stacks[process]
            svg = flamegraph.render_svg(stacks, f"{o.run.name} — {process}")
            svgs[(o.run.name, process)] = svg
            (out_dir / "flamegraphs" / f"{o.run.name}.{process}.svg").write_text(svg)
            profile = flamegraph.speedscope(stacks, f"{scenario.name} {o.run.name} {process}")
            with gzip.open(out_dir / "profiles" / f"{o.run.name}.{process}.speedscope.json.gz", "wt") as f:
                json.dump(profile, f, separators=(",", ":"))
    data = summary(scenario, scale, settings, outcomes, elapsed_s)
    (out_dir / "summary.json").write_text(json.dumps(data, indent=1))
    main = [o for o in outcomes if not is_sweep(o)]
    images = {name: plots.PLOTS[name](outcomes if name == "growth" else main) for name in scenario.plots}
    if "cpu" not in images:
        images["cpu"] = plots.cpu(main)
    (out_dir / "index.html").write_text(page(scenario, data, outcomes, svgs, images))
    (out_dir / "README.md").write_text(readme(scenario, data))
