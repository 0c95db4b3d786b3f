"""Output: the results JSON, the per-request JSONL, the final table, and `compare` of several runs."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time

from rich.console import Console
from rich.table import Table

from loadgen import __version__
from loadgen.measure.machine import machine
from loadgen.measure.metrics import input_tokens, origin_ns, output_tokens, pct_key
from loadgen.measure.records import RequestRecord
from loadgen.report import peers
from loadgen.report.runfile import load_files
from loadgen.report.workload import workload
from loadgen.run.runner import RunResult

TABLE_ROWS = (
    ("completed", "Successful requests", "{:.0f}"),
    ("failed", "Failed requests", "{:.0f}"),
    ("duration", "Benchmark duration (s)", "{:.2f}"),
    ("total_input_tokens", "Total input tokens", "{:.0f}"),
    ("total_output_tokens", "Total output tokens (server usage)", "{:.0f}"),
    ("total_output_tokens_client", "Total output tokens (client count)", "{:.0f}"),
    ("output_tokens_per_event_source", "  client count per event from", "{}"),
    ("total_output_tokens_retokenized", "Total output tokens (retokenized text)", "{:.0f}"),
    ("output_tokens_usage_minus_client", "  usage minus client count", "{:.0f}"),
    ("request_throughput", "Request throughput (req/s)", "{:.2f}"),
    ("input_throughput", "Input token throughput (tok/s)", "{:.2f}"),
    ("output_throughput", "Output token throughput (tok/s)", "{:.2f}"),
    ("total_throughput", "Total token throughput (tok/s)", "{:.2f}"),
    ("max_output_tokens_per_s", "Peak output throughput (tok/s, 1 s)", "{:.0f}"),
    ("concurrency", "Mean requests in flight", "{:.2f}"),
    ("max_concurrent_requests", "Peak requests in flight", "{:.0f}"),
    ("request_goodput", "Request goodput (req/s)", "{:.2f}"),
)
TOKENS_NOTE = (
    "Output tokens: 'server usage' is the completion_tokens the server reported (it also counts "
    "tokens it did not send as text, e.g. EOS or a matched stop string); 'client count' is what "
    "loadgen received, counted per token event as the server emitted it: the growth of the usage the "
    "server streams in every chunk (--continuous-usage), else one per token event. Which events are "
    "token events is the rule shown (--token-events). The rows under 'usage minus client count' name "
    "its causes with counts: empty-text events (tokens that decoded to no text; a rule that drops "
    "them misses their tokens), events carrying several tokens (from the streamed usage, or the "
    "retokenized text past the events), and the rest: events lost, or tokens never sent. "
    "'retokenized' (with --tokenizer) re-encodes the received text and is shown only on the side. "
    "Throughput uses usage when the server gives it. 'ITL per token' is shown only where it differs "
    "from ITL per chunk (some event carried several tokens)."
)

#: `compare`'s rows before the latency statistics the runs hold (peers.latency_keys).
COMPARE_KEYS = (
    "completed", "failed", "duration", "total_input_tokens", "total_output_tokens", "request_throughput",
    "input_throughput", "output_throughput", "total_throughput", "max_output_tokens_per_s", "concurrency",
    "max_concurrent_requests", "request_goodput",
)


def _jsonable(value):
    """`value` as strict JSON can hold it: +-inf as "inf" / "-inf", NaN as None (JSON has
    neither, and strict readers refuse Python's `Infinity` / `NaN`)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if dataclasses.is_dataclass(value):
        return {k: _jsonable(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def environment() -> dict:
    """Where the run happened: python, platform, cores, loadgen version."""
    here = machine(None)
    return {"python": sys.version.split()[0], "platform": here["platform"], "cpu_count": here["cpu_count"],
            "usable_cores": here["usable_cores"], "loadgen_version": __version__}


def _vllm_keys(summary: dict) -> dict:
    """vLLM's spellings of the keys loadgen names differently (`total_token_throughput`, `*_e2el_ms`)."""
    out = {"total_token_throughput": summary.get("total_throughput")}
    for key, value in summary.items():
        if "_e2e_latency_ms" in key:
            out[key.replace("_e2e_latency_ms", "_e2el_ms")] = value
    return out


def _detailed(result: RunResult) -> dict:
    """vLLM's --save-detailed lists, one entry per request (times in seconds, as vLLM writes them)."""
    recs = result.records
    t0 = min((r.intended_ns for r in recs), default=0)
    ttft = lambda r: None if r.first_token_ns is None else (r.first_token_ns - origin_ns(result.cfg, r)) / 1e9  # noqa: E731
    return {"input_lens": [input_tokens(r) for r in recs],
            "output_lens": [output_tokens(r) if r.ok else 0 for r in recs],
            "ttfts": [ttft(r) for r in recs],
            "itls": [[(b - a) / 1e9 for a, b in zip(r.chunk_ns, r.chunk_ns[1:], strict=False)] for r in recs],
            "start_times": [(r.start_ns - t0) / 1e9 for r in recs],
            "errors": [r.error_message or "" for r in recs]}


def result_dict(result: RunResult, dataset: dict, detailed: bool = False, metadata: dict | None = None,
                label: str | None = None, command: str | None = None) -> dict:
    """The `--output` JSON: SGLang-style flat keys and vLLM's where they differ, plus the workload
    (`command`: the command line that ran it, None from the library), config, environment and the
    summary; `detailed` adds vLLM's per-request lists."""
    cfg = result.cfg
    flat = {
        "backend": cfg.backend, "model_id": result.model, "base_url": cfg.base_url,
        "dataset_name": dataset.get("name"), "request_rate": _jsonable(cfg.request_rate),
        "max_concurrency": cfg.concurrency, "burstiness": _jsonable(cfg.burstiness),
        "loadgen_version": __version__, "interrupted": result.interrupted, "transport": cfg.effective_transport,
        "client_bound": result.summary["client_bound"],
    }
    flat.update({k: v for k, v in result.summary.items() if not isinstance(v, dict)})
    flat.update(_vllm_keys(result.summary))
    flat.update({"num_prompts": len(result.records), "label": label, "date": time.strftime("%Y%m%d-%H%M%S"),
                 "tokenizer_id": dataset.get("tokenizer_path")})
    flat.update(metadata or {})
    if detailed:
        flat.update(_detailed(result))
    flat["workload"] = _jsonable(workload(result, dataset, command))
    flat["config"] = _jsonable(cfg)
    flat["dataset"] = dataset
    flat["environment"] = environment()
    flat["summary"] = _jsonable(result.summary)
    flat["timeline"] = _jsonable(result.timeline)
    flat["cdf"] = result.cdf
    flat["server_metrics"] = _jsonable(result.server_metrics)
    return flat


def write_json(path: str, data: dict) -> None:
    """Write the results JSON."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(_jsonable(data), f, indent=2)


def save_result(data: dict, result_dir: str | None, filename: str | None, append: bool) -> str:
    """vLLM's --save-result: `result_dir/filename` (a vLLM-style name by default); returns the path."""
    if filename is None:
        conc = f"-concurrency{data['max_concurrency']}" if data.get("max_concurrency") else ""
        model = os.path.basename(str(data.get("model_id") or "model").rstrip("/"))
        filename = f"{data.get('label') or data['backend']}-{data['request_rate']}qps{conc}-{model}-{data['date']}.json"
    path = os.path.join(result_dir or ".", filename)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a" if append else "w", encoding="utf-8") as f:
        if append and f.tell() > 0:
            f.write("\n")
        json.dump(_jsonable(data), f)
    return path


SERVER_TIMING_FIELDS = tuple(name for name in RequestRecord.__struct_fields__ if name.startswith("server_"))


def write_records(path: str, result: RunResult) -> None:
    """One JSON line per request; times in ms from the run's first intended start (`clock_t0_ns`
    on the perf_counter_ns clock, so rows line up with other processes' stamps on this machine).

    `ttft_ms` and `e2e_latency_ms` start where the summary's do (see `origin_ns`)."""
    t0 = min((r.intended_ns for r in result.records), default=0)
    ms = lambda ns: None if ns is None else (ns - t0) / 1e6  # noqa: E731
    with open(path, "w", encoding="utf-8") as f:
        for r in result.records:
            row = {
                "index": r.index, "worker": r.worker, "ok": r.ok, "error_class": r.error_class,
                "error_message": r.error_message, "intended_ms": ms(r.intended_ns),
                "start_ms": ms(r.start_ns), "first_token_ms": ms(r.first_token_ns), "end_ms": ms(r.end_ns),
                "ttft_ms": None if r.first_token_ns is None else (r.first_token_ns - origin_ns(result.cfg, r)) / 1e6,
                "e2e_latency_ms": (r.end_ns - origin_ns(result.cfg, r)) / 1e6,
                "input_tokens": input_tokens(r), "output_tokens": output_tokens(r),
                "usage_prompt_tokens": r.usage_prompt_tokens,
                "usage_completion_tokens": r.usage_completion_tokens,
                "client_output_tokens": r.client_output_tokens, "num_empty_text_events": r.num_empty_text_events,
                "chunk_ms": [ms(t) for t in r.chunk_ns], "session": r.session, "turn": r.turn,
                "ttft_uncertainty_ms": None if r.ttft_uncertainty_ns is None else r.ttft_uncertainty_ns / 1e6,
                "num_coalesced_events": r.num_coalesced_events, "clock_t0_ns": t0,
                **{name: getattr(r, name) for name in SERVER_TIMING_FIELDS},
            }
            f.write(json.dumps(_jsonable(row)) + "\n")


def fmt(value, spec: str = "{:.2f}") -> str:
    """A table cell: '-' for None, numbers through `spec`, anything else as str."""
    if value is None:
        return "-"
    return spec.format(value) if isinstance(value, int | float) else str(value)


def print_table(result: RunResult, console: Console | None = None) -> None:
    """The final table: throughput, latency distributions, errors, client health."""
    console = console or Console()
    s, cfg = result.summary, result.cfg
    title = "loadgen result" + (" (INTERRUPTED: partial)" if result.interrupted else "")
    table = Table(title=title, show_header=False, caption=TOKENS_NOTE, caption_justify="left")
    for key, label, spec in TABLE_ROWS:
        if key == "total_output_tokens" and s.get("output_tokens_source") == "client":
            label = "Total output tokens (client count: no usage)"
        table.add_row(label, fmt(s.get(key), spec))
        if key == "total_input_tokens":
            table.add_row("  as built by the dataset", fmt(s.get("total_input_tokens_dataset"), spec))
            table.add_row("  input lengths from", result.dataset_info.get("input_lengths", "-"))
        elif key == "output_tokens_usage_minus_client":
            _reconciliation_rows(table, s.get("output_tokens_reconciliation"))
        elif key == "output_tokens_per_event_source":
            table.add_row("  token events", peers.token_events({**s, "token_event_rule": cfg.token_event_rule}))
    for name, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL per chunk"),
                        ("itl_per_token", "ITL per token"), ("e2e_latency", "E2E latency")):
        if name == "itl_per_token" and not _per_token_differs(s, cfg.percentiles):
            continue
        cells = [f"mean {fmt(s[f'mean_{name}_ms'])}", f"median {fmt(s[f'median_{name}_ms'])}"]
        cells += [f"{pct_key(p)} {fmt(s[f'{pct_key(p)}_{name}_ms'])}" for p in cfg.percentiles]
        table.add_row(f"{label} (ms)", "  ".join(cells))
        if name == "ttft" and "ttft_split" in s:
            _add_ttft_split(table, s["ttft_split"])
    for row in s.get("per_turn") or []:
        table.add_row(f"turn {row['turn']}", f"{row['count']} ok" + (f", {row['failed']} failed" if row["failed"] else "")
                      + f"  TTFT (ms) mean {fmt(row['mean_ttft_ms'])}  p50 {fmt(row['p50_ttft_ms'])}  "
                      f"p99 {fmt(row['p99_ttft_ms'])}  input tokens mean {fmt(row['mean_input_tokens'], '{:.1f}')}")
    for cls, info in s["errors"].items():
        table.add_row(f"error {cls}", f"{info['count']}  e.g. {info['example']}")
    health = s["client_health"]
    for w in health["workers"]:
        steady = w.get("loop_lag_steady_p99_ms")
        wait = "" if w.get("run_wait_share") is None else f"  waited for a CPU {w['run_wait_share']:.0%}"
        table.add_row(f"worker {w['worker']}", f"cpu {w['cpu_share']:.0%}{wait}  loop lag p99 "
                      f"{w['loop_lag_p99_ms']:.1f} ms" + ("" if steady is None else f" (steady {steady:.1f})")
                      + f"  cpu/event {fmt(w['cpu_us_per_event'], '{:.1f}')} µs (read "
                      f"{fmt(w.get('read_cpu_us_per_event'), '{:.1f}')} + parse "
                      f"{fmt(w.get('parse_cpu_us_per_event'), '{:.1f}')})")
    for h in (s.get("cluster") or {}).get("hosts", []):
        table.add_row(f"host {h['hostname']} ({h['ip']})",
                      f"node {h['node_id'][:12]}  workers {h['workers']}  streams {h['streams']}  clock "
                      f"{h['offset_ms']:+.3f} ± {h['uncertainty_ms']:.3f} ms"
                      + (f"  [bold red]lost {h['workers_lost']}[/]" if h["workers_lost"] else ""))
    table.add_row("send lag (ms)", f"mean {health['mean_send_lag_ms']:.2f}  median {fmt(s.get('median_send_lag_ms'))}  "
                  f"p99 {health['p99_send_lag_ms']:.2f}  max {health['max_send_lag_ms']:.2f}")
    _stamp_rows(table, health)
    if s["client_bound"] is None:
        verdict = "not judged (no request succeeded)"
    elif s["client_bound"]:
        verdict = "[bold red]YES[/]: " + "; ".join(health["client_bound_reasons"])
        if health.get("client_bound_cause"):
            verdict += f" [bold]cause[/]: {health['client_bound_cause']}"
    else:
        verdict = "no"
    table.add_row("client-bound", verdict)
    for note in health.get("client_health_notes", []):
        table.add_row("  note", note)
    _steady_rows(table, (result.timeline or {}).get("steady_state"))
    _server_rows(table, result.server_metrics, s.get("server_vs_client"))
    console.print(table)


def _reconciliation_rows(table: Table, rec: dict | None) -> None:
    """Under 'usage minus client count': its causes, each with its count (measure/token_counts.py)."""
    if rec is None:
        return
    empty = rec["empty_text_events"]
    fate = "dropped by the rule: their tokens are missed" if rec["empty_text_events_dropped"] \
        else "counted as token events"
    table.add_row("    empty-text events", f"{empty:,} ({fate})" if empty else "0")
    source = rec["several_token_events_from"]
    table.add_row("    events carrying several tokens",
                  f"{rec['several_token_extra']:,} tokens past one per event (from {source})" if source
                  else "unknown (one token per event counted; --continuous-usage or --tokenizer tell)")
    table.add_row("    lost or never sent", f"{rec['lost_or_unsent']:,}")


def _per_token_differs(s: dict, percentiles) -> bool:
    """Whether ITL per token differs from ITL per chunk anywhere in the summary."""
    stats = ("mean", "median", "max", *(pct_key(p) for p in percentiles))
    return any(s.get(f"{stat}_itl_per_token_ms") != s.get(f"{stat}_itl_ms") for stat in stats)


def _stamp_rows(table: Table, health: dict) -> None:
    """Where latencies come from, and how exact they were (see loadgen/README.md, "Client health")."""
    source = health.get("stamp_source", "loop")
    if source == "loop":
        table.add_row("stamps", "loop: event times are when the event loop got to each read "
                      "(they include the client's own delay)")
        return
    delay = health.get("client_delay") or {}
    line = f"{source}: kernel receive stamps"
    if delay:
        line += (f"; client delay (loop - kernel) median {delay['p50_ms']:.2f}  p99 {delay['p99_ms']:.2f}  "
                 f"max {delay['max_ms']:.2f} ms over {delay['reads']:,} reads")
    table.add_row("stamps", line)
    if health.get("coalesced_share") is not None:
        table.add_row("  exactness", f"{health['coalesced_share']:.1%} of events shared a read with later bytes "
                      f"({health['uncertain_event_share']:.1%} possibly > 2 ms late); TTFT exact for "
                      f"{fmt(health['ttft_exact_share'], '{:.1%}')} (uncertainty p99 "
                      f"{fmt(health['ttft_uncertainty_p99_ms'])} ms)")
    if (refill := health.get("refill")) is not None:
        table.add_row("  refill lag (ms)", f"median {refill['refill_lag_p50_ms']:.2f}  p99 "
                      f"{refill['refill_lag_p99_ms']:.2f}  (slots empty {refill['idle_share']:.1%} of the time)")


def _steady_rows(table: Table, steady: dict | None) -> None:
    if steady is None:
        table.add_row("steady state", "none found (see timeline.steady_state in the JSON for the rule)")
        return
    table.add_row("steady state", f"{steady['start_s']:.0f}-{steady['end_s']:.0f} s, "
                  f"{steady['mean_in_flight']:,.0f} in flight, {steady['output_throughput']:,.0f} output tok/s, "
                  f"{steady['request_throughput']:,.2f} req/s")
    for name in ("ttft", "itl", "tpot"):
        d = steady.get(f"{name}_ms")
        if d:
            table.add_row(f"  {name.upper()} (ms)", f"mean {d['mean']:.2f}  median {d['p50']:.2f}  "
                          f"p90 {d['p90']:.2f}  p99 {d['p99']:.2f}")


def _server_rows(table: Table, server: dict, versus: dict | None) -> None:
    status = (server or {}).get("status", "off")
    if status != "ok":
        table.add_row("server metrics", status)
        return
    run = server.get("run", {})
    counts = "  ".join(f"{k.replace('_', ' ')} {v:,.0f}" for k, v in run.items()
                       if k in ("preemptions", "prefill_steps", "decode_steps", "engine_steps"))
    table.add_row("server metrics", f"{server['dialect']}, {server['scrapes']} scrapes"
                  + (f"; over the run: {counts}" if counts else ""))
    for row in (versus or {}).get("rows", []):
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.3f}x"
        table.add_row(f"  server vs client {row['name']}", f"{row['server']:,.2f} vs {row['client']:,.2f} ({ratio})")
    for note in (versus or {}).get("notes", []):
        table.add_row("  note", note)


def _add_ttft_split(table: Table, split: dict) -> None:
    """A few rows: each part of TTFT, with the server's own timing (mean, p50, p99 in ms)."""
    table.add_row("  TTFT split (ms)", f"{split['requests']} requests with server timing")
    for part in split["mean_ms"]:
        if part == "decode" and not split["mean_ms"][part]:
            continue  # streamed: TTFT holds no decode
        table.add_row(f"    {part.replace('_', ' ')}",
                      "  ".join(f"{stat} {fmt(split[f'{stat}_ms'][part])}" for stat in ("mean", "p50", "p99")))


def compare(paths: list[str], console: Console | None = None) -> Table:
    """Print the runs in `paths` side by side, each with its ratio to the first: who made each file,
    a note on each cell whose tool defines the row otherwise (or lacks it), and each peer file's
    fields that reach no row."""
    names, runs = load_files(paths, plots=False)
    if runs[0].get("kind") == "sweep":
        from loadgen.report.sweep_tables import compare_sweeps  # NOTE: it imports this module

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
    text = str(v) if isinstance(v, bool) else fmt(v)
    if run is not base and isinstance(v, int | float) and not isinstance(v, bool) and b:
        text += f" ({v / b:.2f}x)"
    return text + notes.ref(peers.note_for(run, key))
