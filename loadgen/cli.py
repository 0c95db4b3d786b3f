"""Command line: `loadgen [run flags]` runs a load; `loadgen compare A.json B.json ...` compares runs;
`loadgen report A.json ... --output report.html` draws them on one HTML page; `loadgen sweep
--concurrency 1,8,64 [run flags]` runs a sweep with an SLO search.

The flags are parsed in loadgen/flags.py and resolved by loadgen/api.py, which this module calls
as a library user would; here are only what a terminal adds: notes, the live panel, tables, exit codes.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from rich.console import Console
from rich.live import Live
from rich.text import Text

from loadgen import api
from loadgen import argtypes as at
from loadgen.flags import (
    available_memory_bytes,
    convention_note,
    images_note,
    memory_note,
    prompts_note,
)
from loadgen.measure.workload import command_line
from loadgen.plan.config import RunConfig
from loadgen.report.compare import check_bounds, compare, differences, print_differences
from loadgen.report.live import LivePanel
from loadgen.report.noise import CONFIDENCE
from loadgen.report.results import write_json
from loadgen.report.runfile import load_files
from loadgen.report.sweep_tables import print_sweep_table
from loadgen.report.terminal import print_table
from loadgen.sweep.driver import exit_code


def _exit_code(cfg: RunConfig, result) -> int:
    s = result.summary
    total = s["completed"] + s["failed"]
    if result.interrupted:
        return 130
    if result.workers_lost:
        return 5
    if cfg.too_many_failed(s["failed"], total):
        limit = "every request failed" if cfg.max_error_rate is None else f"above --max-error-rate {cfg.max_error_rate:g}"
        print(f"loadgen: {s['failed']} of {total} requests failed ({limit})", file=sys.stderr)
        return 4
    return 3 if cfg.strict and s["client_bound"] else 0


def _run(argv: list[str]) -> int:
    plan = api.plan_run(argv=argv)
    cfg, dcfg, quiet = plan.config, plan.dataset, plan.args.quiet
    for note in (convention_note(dcfg), prompts_note(dcfg)):
        if note is not None and not quiet:
            print(note, file=sys.stderr)
    for note in (memory_note(cfg, dcfg, available := available_memory_bytes()), images_note(cfg, available)):
        if note is not None:
            print(note, file=sys.stderr)
    console = Console(stderr=True)
    try:
        if quiet or not console.is_terminal:
            result = api.run(plan)
        else:
            plan = dataclasses.replace(plan, config=dataclasses.replace(cfg, live=True))
            with Live(Text("starting..."), console=console, refresh_per_second=4) as live:
                result = api.run(plan, LivePanel(plan.config, live.update))
    except api.SetupError as exc:
        print(f"loadgen: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # NOTE: once the load runs, Ctrl-C ends it and the results are kept
        print("loadgen: interrupted (Ctrl-C) before the results were ready; nothing was written", file=sys.stderr)
        return 130
    if not quiet:
        print_table(result)
    paths = api.save(plan, result, api.result_json(plan, result, command_line(argv)))
    if "save-result" in paths and not quiet:
        print(f"results saved to {paths['save-result']}", file=sys.stderr)
    return _exit_code(cfg, result)


def _compare(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="loadgen compare",
                                description="Saved runs side by side, with ratios to the first: loadgen's "
                                "--output files, vllm bench serve --save-result files, SGLang bench_serving "
                                "--output-file files.")
    p.add_argument("paths", nargs="+", metavar="RUN.json")
    p.add_argument("--fail-on", type=at.bound, action="append", default=[], metavar="METRIC=+N%",
                   help="a baseline gate: exit 1 when a run's METRIC (a results JSON key) moved past N%% "
                   "of the first run's: +N%% a rise (latency), -N%% a fall (throughput); repeatable")
    # issue 32: compare with noise (bootstrap intervals from the per-request records)
    p.add_argument("--records", action="append", default=None, metavar="RECORDS.jsonl",
                   help="a run's --records file, once per run in order (default: the file each run's "
                   "flags name, if it is there)")
    p.add_argument("--seed", type=int, default=0, help="the bootstrap's seed (default 0)")
    p.add_argument("--confidence", type=at.float_between(0.5, 0.9999), default=CONFIDENCE,
                   help="the intervals' joint confidence over the headline metrics (default 0.95)")
    p.add_argument("--output", type=at.writable_path, default=None, metavar="PATH",
                   help="write the differences and their intervals as JSON")
    p.add_argument("--significant-only", action="store_true",
                   help="--fail-on fails only where the difference's 95%% interval leaves out 0")
    p.epilog = "exit codes: 0 done (every --fail-on bound held); 1 a --fail-on bound was passed; 2 bad input."
    args = p.parse_args(argv)
    if args.fail_on and len(args.paths) < 2:
        p.error("--fail-on needs the baseline and at least one run")
    try:
        compare(args.paths)
        noise: dict = {}
        if len(args.paths) > 1 or args.records:
            noise, notes = differences(args.paths, args.records, args.seed, args.confidence)
            print_differences(noise, notes, os.path.basename(args.paths[0]))
            if args.output:
                write_json(args.output, {"base": args.paths[0], "seed": args.seed, "confidence": args.confidence,
                                         "differences": noise, "notes": notes})
        checks = check_bounds(args.paths, args.fail_on, noise if args.significant_only else None)
    except ValueError as exc:
        print(f"loadgen compare: {exc}", file=sys.stderr)
        return 2
    for line, _ in checks:
        print(f"loadgen compare: {line}")
    return 1 if any(failed for _, failed in checks) else 0


def _report(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="loadgen report",
                                description="One self-contained HTML page of saved runs (loadgen's --output "
                                "files, vllm bench serve --save-result files, SGLang bench_serving --output-file "
                                "files): summary, client health, flags, machine, and plots over time.")
    p.add_argument("paths", nargs="+", metavar="RUN.json")
    p.add_argument("--output", type=at.writable_path, required=True, metavar="PATH",
                   help="the HTML file to write")
    p.add_argument("--label", action="append", default=None,
                   help="a run's name, once per run in order (a JSON Lines file holds one per line; default: its "
      "label, else the file name)")
    args = p.parse_args(argv)
    try:
        names, runs = load_files(args.paths)
    except ValueError as exc:
        print(f"loadgen report: {exc}", file=sys.stderr)
        return 2
    if args.label is not None and len(args.label) != len(runs):
        held = f" holding {len(runs)} runs" if len(runs) != len(args.paths) else ""
        p.error(f"--label given {len(args.label)} times for {len(args.paths)} files{held}")
    try:  # NOTE: matplotlib only when asked for: the base install has none
        from loadgen.report.html import default_label, render
        from loadgen.report.sweep_html import render_sweeps
    except ImportError as exc:
        p.error(f"the page's plots need matplotlib ({exc}): pip install 'serving-hotpaths[plot]'")

    labels = args.label or [default_label(run, name) for run, name in zip(runs, names, strict=True)]
    page = render_sweeps(runs, labels) if runs[0].get("kind") == "sweep" else render(runs, labels)
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(page)
    print(args.output)
    return 0


def _sweep(argv: list[str]) -> int:
    plan = api.plan_sweep(argv=argv)
    log = (lambda line: None) if plan.args.quiet else None
    try:
        data = api.sweep(plan, log)
    except api.SetupError as exc:
        print(f"loadgen sweep: {exc}", file=sys.stderr)
        return 1
    if not plan.args.quiet:
        print_sweep_table(data)
    if plan.args.output:
        write_json(plan.args.output, data)
    if (stop := data["stopped"]) is not None:
        print(f"loadgen sweep: stopped at {data['variable']}={stop['value']:g}: {stop['reason']}; "
              f"{len(data['points'])} finished point(s) kept; not run: {stop['not_run']}", file=sys.stderr)
    return exit_code(data)


def main(argv: list[str] | None = None) -> int:
    """Console entry point (`loadgen`)."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv and argv[0] == "sweep":
            return _sweep(argv[1:])
        if argv and argv[0] == "compare":
            return _compare(argv[1:])
        if argv and argv[0] == "report":
            return _report(argv[1:])
        return _run(argv)
    except api.UsageError as exc:
        argparse.ArgumentParser.error(exc.parser, str(exc))  # NOTE: usage, the message, exit 2


if __name__ == "__main__":
    sys.exit(main())
