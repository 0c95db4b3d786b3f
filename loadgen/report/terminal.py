"""The terminal result: a fixed-width headline block first (the figures a perf engineer reads, laid
out as `vllm bench serve` prints its result block), then the details table.

Numbers have one format everywhere (`results.fmt`): integers with thousands separators, floats
with fixed decimals, booleans true/false; the details' labels never wrap at 100 columns."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from loadgen.measure.metrics import pct_key
from loadgen.measure.targets import figure_lines
from loadgen.report import peers
from loadgen.report.results import KIND_KEYS, TABLE_ROWS, fmt
from loadgen.run.runner import RunResult

#: TABLE_ROWS keys the headline block shows, in its order; the others go to the details.
HEADLINE_KEYS = ("completed", "failed", "duration", "total_input_tokens", "total_output_tokens",
                 "request_throughput", "total_embedding_inputs", "embedding_input_throughput",
                 "output_throughput", "max_output_tokens_per_s", "total_throughput",
                 "concurrency", "max_concurrent_requests", "request_goodput")
#: Rows shown only when the run has them.
OPTIONAL_KEYS = ("request_goodput", "total_output_tokens_retokenized", "total_embedding_inputs",
                 "embedding_input_throughput", "total_images", *KIND_KEYS)
#: Headline rows left out where the run streams no tokens (embeddings: `token_latencies` says so).
OUTPUT_KEYS = ("total_output_tokens", "output_throughput", "max_output_tokens_per_s")
MIN_WIDTH = 64
LATENCIES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL per chunk"), ("itl_per_token", "ITL per token"),
             ("e2e_latency", "E2E latency"))
#: Shown only when the run has them (it streamed reasoning or tool calls): README "Reasoning and tool calls".
KIND_LATENCIES = (("ttfo", "TTFO (answer)"), ("reasoning_duration", "Reasoning"), ("ttf_tool_call", "TTF tool call"))
#: The TTFT split's parts as the table names them. `client_network` is the part the server does
#: not time: the client's send and read, the wire and kernels, the server's HTTP head parse.
TTFT_PART_LABELS = {"client_network": "outside server timing", "queue": "server queue",
                    "prefill": "server prefill", "decode": "server decode", "server_other": "server other"}
CANCELLED_LABEL = "Cancelled requests (by the client, not failed)"
TOKENS_NOTE = "Each row is defined in loadgen/README.md, \"Metrics\" and \"Client health\"."


def print_table(result: RunResult, console: Console | None = None) -> None:
    """The headline block, then the details: tokens, TTFT split, errors, client health, server."""
    console = console or Console()
    console.print(Text("\n".join(headline(result))), soft_wrap=True)
    console.print(details(result))


def headline(result: RunResult) -> list[str]:
    """The headline block's lines, all of one width."""
    s = result.summary
    spec = {key: (label, fmt_spec) for key, label, fmt_spec in TABLE_ROWS}
    rows = []
    for key in HEADLINE_KEYS:
        if (key in OPTIONAL_KEYS and s.get(key) is None) or (s.get("token_latencies") and key in OUTPUT_KEYS):
            continue
        label = spec[key][0]
        if key == "total_output_tokens" and s.get("output_tokens_source") == "client":
            label = "Total output tokens (client count: no usage)"
        rows.append((label, fmt(s.get(key), spec[key][1])))
        if key == "failed" and (s.get("cancelled") or result.cfg.request_cancellation_rate):
            rows.append((CANCELLED_LABEL, fmt(s.get("cancelled"), "{:,.0f}")))
    rows.append(("Client-bound", _verdict_word(s["client_bound"])))
    grid = _latency_grid(s, result.cfg.percentiles)
    width = max(MIN_WIDTH, *(len(line) for line in grid), *(len(a) + len(b) + 3 for a, b in rows))
    title = " loadgen result" + (" (INTERRUPTED: partial) " if result.interrupted else " ")
    return [title.center(width, "="),
            *(f"{label}:".ljust(width - len(value)) + value for label, value in rows),
            " Latency (ms) ".center(width, "-"), *(line.ljust(width) for line in grid), "=" * width]


def _verdict_word(client_bound: bool | None) -> str:
    if client_bound is None:
        return "not judged"
    return "YES (see details)" if client_bound else "no"


def _latency_grid(s: dict, percentiles) -> list[str]:
    """One line per latency, one column per statistic: mean, then the percentiles (p50 is the
    median, shown once)."""
    stats = [("mean", "mean")] + ([] if 50.0 in percentiles else [("p50", "median")])
    stats += [(pct_key(p), pct_key(p)) for p in sorted(percentiles)]
    names = [(name, label) for name, label in LATENCIES
             if name != "itl_per_token" or _per_token_differs(s, percentiles)]
    names += [(name, label) for name, label in KIND_LATENCIES if s.get(f"mean_{name}_ms") is not None]
    if s.get("token_latencies"):
        names = [(name, label) for name, label in names if name == "e2e_latency"]
    cells = [[label] + [fmt(s.get(f"{key}_{name}_ms")) for _, key in stats] for name, label in names]
    header = [""] + [head for head, _ in stats]
    widths = [max(len(row[i]) for row in (header, *cells)) for i in range(len(header))]
    lines = [row[0].ljust(widths[0]) + "".join(c.rjust(w + 2) for c, w in zip(row[1:], widths[1:], strict=True))
             for row in (header, *cells)]
    return lines + _no_token_latencies(s)


def _no_token_latencies(s: dict) -> list[str]:
    """issue 32: where token latencies do not apply, one line that says so (not rows of zeros)."""
    return [f"TTFT, TPOT, ITL: {s['token_latencies']}"] if s.get("token_latencies") else []


def _per_token_differs(s: dict, percentiles) -> bool:
    """Whether ITL per token differs from ITL per chunk anywhere in the summary."""
    stats = ("mean", "median", "max", *(pct_key(p) for p in percentiles))
    return any(s.get(f"{stat}_itl_per_token_ms") != s.get(f"{stat}_itl_ms") for stat in stats)


def details(result: RunResult) -> Table:
    """Everything the headline leaves out, one labelled row each."""
    s, cfg = result.summary, result.cfg
    table = Table(title=" details ", show_header=False, caption=TOKENS_NOTE, caption_justify="left",
                  title_justify="left", box=None, padding=(0, 1, 0, 0))
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")
    table.add_row("Input tokens as built", fmt(s.get("total_input_tokens_dataset"), "{:,.0f}"))
    table.add_row("  input lengths from", result.dataset_info.get("input_lengths", "-"))
    for key, label, spec in TABLE_ROWS:
        if key in HEADLINE_KEYS or (key in OPTIONAL_KEYS and s.get(key) is None):
            continue
        table.add_row(label, fmt(s.get(key), spec))
        if key == "output_tokens_usage_minus_client":
            _reconciliation_rows(table, s.get("output_tokens_reconciliation"))
        elif key == "output_tokens_per_event_source":
            table.add_row("  token events", peers.token_events({**s, "token_event_rule": cfg.token_event_rule}))
    if "ttft_split" in s:
        _ttft_split_rows(table, s["ttft_split"])
    for row in s.get("per_turn") or []:
        table.add_row(f"turn {row['turn']}", f"{row['count']:,} ok" + (f", {row['failed']:,} failed" if row["failed"] else "")
                      + f"  TTFT (ms) mean {fmt(row['mean_ttft_ms'])}  p50 {fmt(row['p50_ttft_ms'])}  "
                      f"p99 {fmt(row['p99_ttft_ms'])}  input tokens mean {fmt(row['mean_input_tokens'])}")
    _knob_rows(table, s, result.dataset_info)
    _group_rows(table, s)
    for cls, info in s["errors"].items():
        table.add_row(f"error {cls}", f"{info['count']:,}  e.g. {info['example']}")
    _client_rows(table, s)
    _steady_rows(table, (result.timeline or {}).get("steady_state"))
    _server_rows(table, result.server_metrics, s.get("server_vs_client"))
    _target_rows(table, result.server_metrics, s)
    return table


def _knob_rows(table: Table, s: dict, info: dict) -> None:
    """issue 32: the prefix cache (asked, planned, measured), the cache-bust salt, the rate per stage."""
    cache = s.get("prefix_cache")
    if "planned_hit_rate" in info or cache is not None:
        planned = (f"planned {fmt(info.get('planned_hit_rate'), '{:.3f}')} (shared with an earlier prompt)  "
                   if "planned_hit_rate" in info else "")
        measured = ("measured: no cached_tokens in the server's usage" if cache is None else
                    f"measured {fmt(cache['measured_hit_rate'], '{:.3f}')} ({cache['cached_tokens']:,} of "
                    f"{cache['prompt_tokens']:,} prompt tokens cached, server usage)")
        table.add_row("prefix-cache hit rate", planned + measured)
    if info.get("cache_bust") is not None:
        table.add_row("cache bust", f"tag from salt {info['cache_bust']}")
    for row in s.get("rate_stages") or []:
        table.add_row(f"stage {row['stage']}", f"{fmt(row['rate'])} req/s for {fmt(row['duration_s'])} s: planned "
                      f"{row['planned']:,}, sent {row['sent']:,} ({fmt(row['achieved_rate'])} req/s), "
                      f"{row['completed']:,} ok")


def _group_rows(table: Table, s: dict) -> None:
    """Several --base-url, a --model mix: each one's requests and latencies (measure/breakdown.py)."""
    for key, label in (("per_url", "url"), ("per_model", "model")):
        for row in s.get(key) or []:
            outcome = f"{row['completed']:,} ok" + "".join(f", {row[k]:,} {k}" for k in ("failed", "cancelled")
                                                          if row[k])
            table.add_row(f"{label} {row[label]}", f"(weight {row['weight']:g}) {outcome}  "
                          f"{fmt(row['request_throughput'])} req/s  {fmt(row['output_throughput'])} tok/s  "
                          f"TTFT (ms) p50 {fmt(row['p50_ttft_ms'])} p99 {fmt(row['p99_ttft_ms'])}  "
                          f"E2E (ms) p50 {fmt(row['p50_e2e_latency_ms'])} p99 {fmt(row['p99_e2e_latency_ms'])}")


def _target_rows(table: Table, server: dict, s: dict) -> None:
    """Every scraped target's mapped figures, series kept and cap, and energy per output token."""
    for label, text in figure_lines(server, s):
        table.add_row(label, text)


def _reconciliation_rows(table: Table, rec: dict | None) -> None:
    """Under 'usage minus client count': its causes, each with its count (measure/token_counts.py)."""
    if rec is None:
        return
    empty = rec["empty_text_events"]
    fate = "dropped by the rule: their tokens are missed" if rec["empty_text_events_dropped"] \
        else "counted as token events"
    table.add_row("    empty-text events", f"{empty:,} ({fate})" if empty else "0")
    source = rec["several_token_events_from"]
    if source:
        several = f"{rec['several_token_extra']:,} tokens past one per event (from {source})"
    elif rec["usage_minus_client"] == 0:
        several = "none missing (one token per event counted, as many as the usage)"
    else:
        several = "unknown (one token per event counted; --continuous-usage or --tokenizer tell)"
    table.add_row("    events with several tokens", several)
    table.add_row("    lost or never sent", f"{rec['lost_or_unsent']:,}")


def _ttft_split_rows(table: Table, split: dict) -> None:
    """Each part of TTFT, with the server's own timing (mean, p50, p99 in ms)."""
    table.add_row("TTFT split (ms)", f"{split['requests']:,} requests with server timing")
    for part in split["mean_ms"]:
        if part == "decode" and not split["mean_ms"][part]:
            continue  # streamed: TTFT holds no decode
        table.add_row(f"  {TTFT_PART_LABELS.get(part, part)}",
                      "  ".join(f"{stat} {fmt(split[f'{stat}_ms'][part])}" for stat in ("mean", "p50", "p99")))


def _client_rows(table: Table, s: dict) -> None:
    """The client's health: workers, hosts, send lag, stamps, the verdict and its reasons."""
    health = s["client_health"]
    for w in health["workers"]:
        steady = w.get("loop_lag_steady_p99_ms")
        wait = "" if w.get("run_wait_share") is None else f"  waited for a CPU {w['run_wait_share']:.0%}"
        table.add_row(f"worker {w['worker']}", f"cpu {w['cpu_share']:.0%}{wait}  loop lag p99 "
                      f"{fmt(w['loop_lag_p99_ms'])} ms" + ("" if steady is None else f" (steady {fmt(steady)})")
                      + f"  cpu/event {fmt(w['cpu_us_per_event'])} µs (read "
                      f"{fmt(w.get('read_cpu_us_per_event'))} + parse {fmt(w.get('parse_cpu_us_per_event'))})")
    for h in (s.get("cluster") or {}).get("hosts", []):
        table.add_row(f"host {h['hostname']}", f"{h['ip']}  node {h['node_id'][:12]}  workers {h['workers']}  "
                      f"streams {h['streams']}  clock {h['offset_ms']:+.3f} ± {h['uncertainty_ms']:.3f} ms"
                      + (f"  [bold red]lost {h['workers_lost']}[/]" if h["workers_lost"] else ""))
    table.add_row("send lag (ms)", f"mean {fmt(health['mean_send_lag_ms'])}  p50 {fmt(s.get('median_send_lag_ms'))}  "
                  f"p99 {fmt(health['p99_send_lag_ms'])}  max {fmt(health['max_send_lag_ms'])}")
    _stamp_rows(table, health)
    if s["client_bound"] is None:
        verdict = "not judged (no request succeeded)"
    elif s["client_bound"]:
        verdict = "[bold red]YES[/]: " + "; ".join(health["client_bound_reasons"])
        if health.get("client_bound_cause"):
            verdict += f" [bold]cause[/]: {health['client_bound_cause']}"
    else:
        verdict = None  # the headline's "no" says it all
    if verdict is not None:
        table.add_row("client-bound", verdict)
    for note in health.get("client_health_notes", []):
        table.add_row("  note", note)


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
        line += (f"; client delay (loop - kernel) p50 {fmt(delay['p50_ms'])}  p99 {fmt(delay['p99_ms'])}  "
                 f"max {fmt(delay['max_ms'])} ms over {delay['reads']:,} reads")
    table.add_row("stamps", line)
    if health.get("coalesced_share") is not None:
        table.add_row("  exactness", f"{health['coalesced_share']:.1%} of events shared a read with later bytes "
                      f"({health['uncertain_event_share']:.1%} possibly > 2 ms late); TTFT exact for "
                      f"{fmt(health['ttft_exact_share'], '{:.1%}')} (uncertainty p99 "
                      f"{fmt(health['ttft_uncertainty_p99_ms'])} ms)")
    if (refill := health.get("refill")) is not None:
        table.add_row("  refill lag (ms)", f"p50 {fmt(refill['refill_lag_p50_ms'])}  p99 "
                      f"{fmt(refill['refill_lag_p99_ms'])}  (slots empty {refill['idle_share']:.1%} of the time)")


def _steady_rows(table: Table, steady: dict | None) -> None:
    if steady is None:
        table.add_row("steady state", "none found (the rule: timeline.steady_state in the JSON)")
        return
    table.add_row("steady state", f"{steady['start_s']:,.0f}-{steady['end_s']:,.0f} s, "
                  f"{steady['mean_in_flight']:,.0f} in flight, {steady['output_throughput']:,.0f} output tok/s, "
                  f"{steady['request_throughput']:,.2f} req/s")
    for name in ("ttft", "itl", "tpot"):
        if d := steady.get(f"{name}_ms"):
            table.add_row(f"  {name.upper()} (ms)", "  ".join(f"{stat} {fmt(d[stat])}"
                                                            for stat in ("mean", "p50", "p90", "p99")))


def _server_rows(table: Table, server: dict, versus: dict | None) -> None:
    """The server's own view: its scrapes (failed ones counted, with the last reason), its window,
    its counts over the run, and server vs client."""
    status = (server or {}).get("status", "off")
    if status != "ok":
        table.add_row("server metrics", status)
        return
    failed = server.get("failed_scrapes") or 0
    line = f"{server['dialect']}, {server['scrapes']:,} scrapes"
    if failed:
        line += f", [bold red]{failed:,} failed[/] (last: {server.get('last_failure')})"
    table.add_row("server metrics", line)
    if server.get("window", "run") != "run":
        table.add_row("  window", server["window"])
    run = server.get("run", {})
    counts = "  ".join(f"{k.replace('_', ' ')} {v:,.0f}" for k, v in run.items()
                       if k in ("preemptions", "prefill_steps", "decode_steps", "engine_steps"))
    if counts:
        table.add_row("  over the run", counts)
    for row in (versus or {}).get("rows", []):
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.3f}x"
        spec = "{:,.0f}" if row["name"] == "output tokens" else "{:,.2f}"
        table.add_row("  server vs client", f"{row['name']}: {fmt(float(row['server']), spec)} vs "
                      f"{fmt(float(row['client']), spec)} ({ratio})")
    for note in (versus or {}).get("notes", []):
        table.add_row("  note", note)
