"""The main job: a streaming-chat storm against the reference server, legacy vs optimized forms.

Starts the server in each form on 127.0.0.1 (sim engine, embedded tokenizer: no download, no
GPU), pins it (HTTP process on its own core, everything else with the client on the other),
drives it with ``loadgen`` (live progress), stops it, and prints the runs side by side with units,
ratios, the HTTP process's CPU time and whether the client kept up.

    python scripts/storm.py --concurrency 2048
    python scripts/storm.py --regime h100-llama-8b --forms all-legacy all-optimized h1-legacy-only

Regimes: ``pd-decode`` (default) is upstream's H1+H2 setting, a PD-disaggregated decode node whose
model step (``pd-decode-fast``, 24 ms at 2048 sequences) is short enough that the HTTP process
limits throughput in every form; ``pd-decode-h100`` models the decode node as one H100 serving an
8B model (70 ms a step); ``h100-llama-8b`` is one H100 doing prefill and decode for an 8B model.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from reference_impl.placement import PLACEMENT_HELP, Placement, describe
from reference_impl.subprocess_server import ServerProcess, cpu_seconds

REGIMES = {
    "pd-decode": ["--disaggregation-mode", "decode", "--sim-profile", "pd-decode-fast"],
    "pd-decode-h100": ["--disaggregation-mode", "decode", "--sim-profile", "pd-decode-h100"],
    "h100-llama-8b": ["--sim-profile", "h100-llama-8b"],
}
FORMS = {
    "all-legacy": ["--all-legacy"],
    "all-optimized": [],
    "h1-legacy-only": ["--wakeup", "immediate"],
    "h2-legacy-only": ["--sse-encoder", "pydantic"],
}
# (summary key, label, unit, format)
ROWS = (
    ("completed", "requests completed", "", "{:.0f}"),
    ("failed", "requests failed", "", "{:.0f}"),
    ("duration", "duration", "s", "{:.1f}"),
    ("input_tokens_per_prompt", "input tokens per prompt (server count)", "", "{:,.0f}"),
    ("output_throughput", "output throughput", "tok/s", "{:,.0f}"),
    ("median_ttft_ms", "median TTFT", "ms", "{:,.1f}"),
    ("p99_ttft_ms", "p99 TTFT", "ms", "{:,.1f}"),
    ("mean_tpot_ms", "mean TPOT", "ms", "{:,.1f}"),
    ("mean_itl_ms", "mean ITL", "ms", "{:,.1f}"),
    ("p99_itl_ms", "p99 ITL", "ms", "{:,.1f}"),
    ("http_cpu_s", "HTTP process CPU", "s", "{:.1f}"),
    ("http_cpu_us_per_token", "HTTP CPU per output token", "µs", "{:.1f}"),
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=2048)
    parser.add_argument("--num-prompts", type=int, default=None, help="default: the concurrency")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--regime", choices=list(REGIMES), default="pd-decode")
    parser.add_argument("--forms", nargs="+", choices=list(FORMS), default=["all-legacy", "all-optimized"],
                        help="server forms to run, in order; ratios are to the first")
    parser.add_argument("--placement", default="pinned", help=PLACEMENT_HELP)
    parser.add_argument("--workers", default=None,
                        help="loadgen worker processes (default: one per client CPU)")
    parser.add_argument("--out-dir", default="results/storm")
    parser.add_argument("--server-flag", action="append", default=[],
                        help="extra flag for every server, e.g. --server-flag=--sim-profile=zero")
    args = parser.parse_args(argv)
    try:
        args.placement = Placement.parse(args.placement) if len(os.sched_getaffinity(0)) > 1 \
            or args.placement != "pinned" else None
    except ValueError as error:
        parser.error(f"--placement: {error}")
    if args.workers is None:
        args.workers = str(args.placement.num_client_cpus if args.placement else 2)
    return args


def loadgen_cmd(args: argparse.Namespace, url: str, result: Path) -> list[str]:
    return [sys.executable, "-m", "loadgen", "--base-url", url,
            "--concurrency", str(args.concurrency),
            "--num-prompts", str(args.num_prompts or args.concurrency),
            "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
            "--random-range-ratio", "1.0", "--ignore-eos", "--workers", args.workers,
            "--no-server-tokenize", "--output", str(result)]
    # NOTE: --no-server-tokenize keeps loadgen's /tokenize calls out of the HTTP CPU window; the
    # server-counted input length is printed in the summary.


def run_form(name: str, args: argparse.Namespace, out_dir: Path) -> dict:
    """One server start, one loadgen run; loadgen's result plus the HTTP process's CPU time."""
    result = out_dir / f"{name}.json"
    flags = [*REGIMES[args.regime], *FORMS[name], *args.server_flag]
    print(f"\n== {name}: server flags {' '.join(flags) or '(defaults)'}", flush=True)
    with ServerProcess(*flags, log_path=str(out_dir / f"{name}.server.log"),
                       placement=args.placement) as srv:
        srv.warm_up()
        srv.pin()
        preexec = args.placement.client_preexec() if args.placement else None
        http_pid = srv.child_pids()["http"]
        cpu_before, started = cpu_seconds(http_pid), time.monotonic()
        subprocess.run(loadgen_cmd(args, srv.url, result), check=True, preexec_fn=preexec)
        http_cpu_s = cpu_seconds(http_pid) - cpu_before
        print(f"   {time.monotonic() - started:.0f} s; results in {result}", flush=True)
    data = json.loads(result.read_text())
    data["http_cpu_s"] = http_cpu_s
    tokens = data.get("total_output_tokens") or 0
    data["http_cpu_us_per_token"] = http_cpu_s * 1e6 / tokens if tokens else None
    data["input_tokens_per_prompt"] = (data.get("total_input_tokens") or 0) / max(1, data.get("completed") or 0)
    return data


def _cell(value, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def print_summary(names: list[str], runs: list[dict]) -> None:
    """The runs side by side, each value with its ratio to the first run."""
    header = ["metric", "unit", *names]
    rows = []
    for key, label, unit, fmt in ROWS:
        base = runs[0].get(key)
        cells = []
        for k, run in enumerate(runs):
            value = run.get(key)
            ratio = f" ({value / base:.2f}x)" if k and isinstance(value, int | float) and base else ""
            cells.append(_cell(value, fmt) + ratio)
        rows.append([label, unit, *cells])
    rows.append(["client-bound", "", *[("YES" if r.get("client_bound") else "no") for r in runs]])
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(c).ljust(w) if i < 2 else str(c).rjust(w) for i, (c, w) in
                        enumerate(zip(row, widths, strict=True))))


def headline_verdict(names: list[str], runs: list[dict]) -> list[str]:
    """Lines saying whether the figures can be a headline: no run may be client-bound or failing."""
    lines = []
    for name, run in zip(names, runs, strict=True):
        reasons = run.get("summary", {}).get("client_health", {}).get("client_bound_reasons") or []
        if run.get("client_bound"):
            lines.append(f"{name}: client-bound ({'; '.join(reasons)}): loadgen could not keep up, so "
                         "its latencies include client delay and its throughput may be the client's")
        if run.get("failed"):
            lines.append(f"{name}: {run['failed']} requests failed")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"storm: {args.concurrency} streams, {args.input_len} in / {args.output_len} out tokens, "
          f"regime {args.regime}; {describe(args.placement)}; loadgen --workers {args.workers}",
          flush=True)
    runs = [run_form(name, args, out_dir) for name in args.forms]
    print(f"\nstorm summary (ratios to {args.forms[0]}):")
    print_summary(args.forms, runs)
    problems = headline_verdict(args.forms, runs)
    for line in problems:
        print(f"NOT a headline figure: {line}")
    if not problems:
        print("headline: no run was client-bound and no request failed")
    summary = {"regime": args.regime, "placement": describe(args.placement), "workers": args.workers,
               "concurrency": args.concurrency, "input_len": args.input_len,
               "output_len": args.output_len, "headline_ok": not problems, "problems": problems,
               "runs": {name: {key: run.get(key) for key, *_ in ROWS} | {"client_bound": run.get("client_bound")}
                        for name, run in zip(args.forms, runs, strict=True)}}
    summary_path = out_dir / "summary.json"
    summary_path.write_text(json.dumps(summary, indent=2))
    print(f"\nresults: {out_dir}/<form>.json (loadgen), <form>.server.log, summary.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
