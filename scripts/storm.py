"""The main job: a streaming-chat storm against the reference server, legacy vs optimized forms.

Runs each form through the experiment harness (``harness.run_under_load``): the server on
127.0.0.1 (sim engine, embedded tokenizer: no download, no GPU), pinned (HTTP process on its own
core, everything else with the client on the other), driven by ``loadgen``, then stopped. Prints
the runs side by side with units, ratios, the HTTP process's CPU time, output tokens per SSE
chunk and whether the client kept up.

    python scripts/storm.py --concurrency 2048
    python scripts/storm.py --ipc-recv yield no-yield --forms all-legacy all-optimized H1-legacy-only

Regimes: ``pd-decode`` (default) is upstream's H1+H2 setting, a PD-disaggregated decode node whose
model step (``pd-decode-fast``, 24 ms at 2048 sequences) is short enough that the HTTP process
limits throughput in every form; ``pd-decode-h100`` models the decode node as one H100 serving an
8B model (70 ms a step); ``h100-llama-8b`` is one H100 doing prefill and decode for an 8B model.
IPC receive paths (``--ipc-recv``): ``yield`` is upstream's default (pickle IPC), ``no-yield``
upstream with ``SGLANG_USE_PICKLE_IPC=0``; they give H1 opposite results (see README).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from harness import Load, RunError, RunResult, by_name, provenance, run_under_load
from harness.forms import FORM_NAMES, IPC_RECV, REGIMES, STORM_FORMS
from reference_impl.placement import PLACEMENT_HELP, Placement, describe

# (label, unit, format, value of a RunResult)
ROWS = (
    ("requests completed", "", "{:.0f}", lambda r: r.loadgen.get("completed")),
    ("requests failed", "", "{:.0f}", lambda r: r.loadgen.get("failed")),
    ("duration", "s", "{:.1f}", lambda r: r.loadgen.get("duration")),
    ("input tokens per prompt (server count)", "", "{:,.0f}",
     lambda r: (r.loadgen.get("total_input_tokens") or 0) / max(1, r.loadgen.get("completed") or 0)),
    ("output throughput", "tok/s", "{:,.0f}", lambda r: r.loadgen.get("output_throughput")),
    ("median TTFT", "ms", "{:,.1f}", lambda r: r.loadgen.get("median_ttft_ms")),
    ("p99 TTFT", "ms", "{:,.1f}", lambda r: r.loadgen.get("p99_ttft_ms")),
    ("mean TPOT", "ms", "{:,.1f}", lambda r: r.loadgen.get("mean_tpot_ms")),
    ("mean ITL", "ms", "{:,.1f}", lambda r: r.loadgen.get("mean_itl_ms")),
    ("p99 ITL", "ms", "{:,.1f}", lambda r: r.loadgen.get("p99_itl_ms")),
    ("output tokens per SSE chunk", "", "{:.2f}", lambda r: r.tokens_per_chunk),
    ("HTTP process CPU", "s", "{:.1f}", lambda r: r.cpu_s["http"]),
    ("HTTP CPU per output token", "µs", "{:.1f}", lambda r: r.http_cpu_us_per_token),
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=2048)
    parser.add_argument("--num-prompts", type=int, default=None, help="default: the concurrency")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--regime", choices=list(REGIMES), default="pd-decode")
    parser.add_argument("--forms", nargs="+", choices=FORM_NAMES, default=["all-legacy", "all-optimized"],
                        help=f"server forms to run, in order; ratios are to the first (the report's "
                             f"storm runs {', '.join(STORM_FORMS)})")
    parser.add_argument("--ipc-recv", nargs="+", choices=IPC_RECV, default=["yield"],
                        help="HTTP receive path(s); every form runs under each")
    parser.add_argument("--placement", default="pinned", help=PLACEMENT_HELP)
    parser.add_argument("--out-dir", type=Path, default=Path("results/storm"))
    parser.add_argument("--server-flag", action="append", default=[],
                        help="extra flag for every server, e.g. --server-flag=--sim-profile=zero")
    args = parser.parse_args(argv)
    try:
        args.load = Load(args.concurrency, args.num_prompts or args.concurrency, args.input_len,
                         args.output_len)
        args.placement = Placement.parse(args.placement) if len(os.sched_getaffinity(0)) > 1 \
            or args.placement != "pinned" else None
    except ValueError as error:
        parser.error(str(error))
    if args.out_dir.exists() and (not args.out_dir.is_dir() or
                                  (any(args.out_dir.iterdir()) and not (args.out_dir / "summary.json").exists())):
        parser.error(f"--out-dir {args.out_dir}: not a directory of earlier storm results")
    return args


def _cell(value, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def print_summary(runs: list[RunResult]) -> None:
    """The runs side by side, each value with its ratio to the first run."""
    header = ["metric", "unit", *(r.form.name for r in runs)]
    rows = []
    for label, unit, fmt, get in ROWS:
        values = [get(r) for r in runs]
        cells = [_cell(v, fmt) + (f" ({v / values[0]:.2f}x)" if k and v is not None and values[0] else "")
                 for k, v in enumerate(values)]
        rows.append([label, unit, *cells])
    rows.append(["client-bound", "", *[("YES" if r.loadgen.get("client_bound") else "no") for r in runs]])
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(c).ljust(w) if i < 2 else str(c).rjust(w) for i, (c, w) in
                        enumerate(zip(row, widths, strict=True))))


def headline_verdict(runs: list[RunResult]) -> list[str]:
    """Lines saying whether the figures can be a headline: no run may be client-bound or failing.
    A client-bound run is named with its reasons and their cause (loadgen's client verdict)."""
    lines = []
    for run in runs:
        health = run.loadgen.get("summary", {}).get("client_health", {})
        if run.loadgen.get("client_bound"):
            cause = health.get("client_bound_cause")
            lines.append(f"{run.form.name}: client-bound ({'; '.join(health.get('client_bound_reasons') or [])})"
                         + (f"; cause: {cause}" if cause else ""))
        if run.loadgen.get("failed"):
            lines.append(f"{run.form.name}: {run.loadgen['failed']} requests failed")
    return lines


def stamp_lines(runs: list[RunResult]) -> list[str]:
    """Per run: where loadgen's latencies came from, how exact, and how they agree with the server's."""
    lines = []
    for run in runs:
        summary = run.loadgen.get("summary", {})
        health = summary.get("client_health", {})
        delay = health.get("client_delay") or {}
        text = f"{run.form.name}: stamps {health.get('stamp_source', '?')}"
        if delay:
            text += (f", client delay p50 {delay['p50_ms']:.1f} / p99 {delay['p99_ms']:.1f} ms, TTFT exact for "
                     f"{health.get('ttft_exact_share') or 0:.1%}, events coalesced "
                     f"{health.get('coalesced_share') or 0:.1%}")
        for row in (summary.get("server_vs_client") or {}).get("rows", []):
            if row.get("ratio") is not None:
                text += f"; {row['name']} server/client {row['ratio']:.3f}"
        lines.append(text)
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(f"storm: {args.concurrency} streams, {args.input_len} in / {args.output_len} out tokens, "
          f"regime {args.regime}, IPC receive {' and '.join(args.ipc_recv)}; {describe(args.placement)}",
          flush=True)
    forms = [by_name(name).under(recv) for recv in args.ipc_recv for name in args.forms]
    runs = []
    for form in forms:
        flags = (*REGIMES[args.regime], *form.flags, *args.server_flag)
        print(f"\n== {form.name}: server flags {' '.join(flags)}", flush=True)
        try:
            runs.append(run_under_load(form, args.load, args.out_dir, placement=args.placement,
                                       server_flags=(*REGIMES[args.regime], *args.server_flag),
                                       quiet=False))
        except RunError as error:
            print(f"storm: {error}", file=sys.stderr)
            return 1
    print(f"\nstorm summary (ratios to {forms[0].name}):")
    print_summary(runs)
    for line in stamp_lines(runs):
        print(line)
    problems = headline_verdict(runs)
    for line in problems:
        print(f"NOT a headline figure: {line}")
    if not problems:
        print("headline: no run was client-bound and no request failed")
    summary = {"regime": args.regime, "placement": describe(args.placement),
               "provenance": provenance.record((provenance.TORCH_ENGINE,)),
               "concurrency": args.concurrency, "input_len": args.input_len,
               "output_len": args.output_len, "headline_ok": not problems, "problems": problems,
               "runs": {r.form.name: {label: get(r) for label, _, _, get in ROWS}
                        | {"client_bound": r.loadgen.get("client_bound")} for r in runs}}
    (args.out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"\nresults: {args.out_dir}/<form>.json (loadgen), <form>.server.log, summary.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
