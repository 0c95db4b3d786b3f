"""``python -m reportgen run SCENARIO [--scale S] [--rate HZ] [--out-dir DIR] ...``, ``list``,
``table``, ``bench``. Full-scale reports go to ``reports/<scenario>/``; see ``reportgen.output``."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from reference_impl.placement import PLACEMENT_HELP, Placement
from reportgen import output
from reportgen.reproduction import (
    REPORTS_DIR,
    SummaryError,
    load_summaries,
    table,
    terminal_table,
    update_readme,
)
from reportgen.runner import ReportError, run_scenario
from reportgen.scenarios import SCENARIOS, SMALLEST_SCALE
from reportgen.upstream import SCENARIO as UPSTREAM

MAX_RATE_HZ = 10_000


def _number(kind, low: float, high: float | None = None, what: str = ""):
    """An argparse type: ``kind`` within [low, high]."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if not (low <= value <= (high if high is not None else value)) or value != value:
            bound = f"in [{low:g}, {high:g}]" if high is not None else f">= {low:g}"
            raise argparse.ArgumentTypeError(f"{what or 'value'} must be {bound}, got {text}")
        return value
    return parse


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m reportgen", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the scenarios")
    bench = sub.add_parser("bench", help="run the H3/H5 benchmarks behind the table (reports/bench/)")
    bench.add_argument("--out-dir", type=Path, default=REPORTS_DIR / "bench")
    tab = sub.add_parser("table", help="print the reproduction table from the reports' summary.json")
    tab.add_argument("--reports-dir", type=Path, default=REPORTS_DIR)
    tab.add_argument("--update-readme", action="store_true",
                     help="also write the table into <reports-dir>/README.md between its markers")
    tab.add_argument("--markdown", action="store_true",
                     help="print the markdown table (rows of up to 2,500 characters), not the "
                          "terminal view (one wrapped block per claim)")
    run = sub.add_parser("run", help="run one scenario and write its report")
    run.add_argument("scenario", choices=sorted([*SCENARIOS, UPSTREAM]),
                     help=f"a scenario, or {UPSTREAM!r}: upstream sglang releases per hot path "
                          "(downloads them once into .cache/upstream; --scale and the server "
                          "flags do not apply)")
    run.add_argument("--scale", type=_number(float, SMALLEST_SCALE, 1.0, "--scale"), default=1.0,
                     help=f"shrink streams, prompts and lengths ({SMALLEST_SCALE} .. 1.0); below 1 "
                          f"the report goes to {output.SCRATCH_DIR.relative_to(output.ROOT)}/ by default")
    run.add_argument("--rate", type=_number(int, 1, MAX_RATE_HZ, "--rate"), default=100,
                     help="py-spy sampling rate (Hz)")
    run.add_argument("--duration", type=_number(float, 1.0, None, "--duration"), default=None,
                     help="py-spy recording duration (s); default: the whole load")
    run.add_argument("--out-dir", type=Path, default=None,
                     help="default: reports/<scenario> at scale 1; must be new, empty or a "
                          "previous report of the same scenario")
    run.add_argument("--py-spy", default=None, help="py-spy executable (default: the one on PATH)")
    run.add_argument("--server-flag", action="append", default=[],
                     help="extra flag for every server, e.g. --server-flag=--max-n=4")
    run.add_argument("--placement", default="pinned", help=PLACEMENT_HELP)
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, every flag checked before anything runs."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            args.placement = (Placement.parse(args.placement)
                              if args.placement != "pinned" or Placement.default() else None)
            args.out_dir = args.out_dir or output.default_dir(args.scenario, args.scale)
            output.check(args.out_dir, args.scenario, args.scale)
        elif args.command == "bench":
            output.check(args.out_dir, "bench")
        elif args.command == "table" and not args.reports_dir.is_dir():
            parser.error(f"--reports-dir {args.reports_dir}: no such directory")
    except output.OutputError as error:
        parser.error(f"--out-dir: {error}")
    except ValueError as error:
        parser.error(f"--placement: {error}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point; exit status 0 on success, 1 with a message on a report error, 2 on bad flags."""
    args = parse_args(argv)
    if args.command == "list":
        for name, scenario in SCENARIOS.items():
            print(f"{name:20s} {scenario.title()} ({', '.join(scenario.hot_paths)})")
        return 0
    if args.command == "bench":
        from reportgen.bench import write

        print(f"written to {write(args.out_dir)}")
        return 0
    if args.command == "table":
        try:
            summaries = load_summaries(args.reports_dir)
            text = table(summaries)
            width = min(shutil.get_terminal_size().columns, 100)
            print(text if args.markdown else terminal_table(summaries, width), end="")
            if args.update_readme and update_readme(args.reports_dir / "README.md", text):
                print(f"updated {args.reports_dir / 'README.md'}", file=sys.stderr)
        except SummaryError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        return 0
    if args.scenario == UPSTREAM:
        from benchmarks.upstream.releases import ReleaseError
        from reportgen.upstream import write as write_upstream

        try:
            print(f"written to {write_upstream(args.out_dir)}")
        except ReleaseError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        return 0
    try:
        out = run_scenario(SCENARIOS[args.scenario], args.scale, args.out_dir, args.rate,
                           args.duration, args.py_spy, tuple(args.server_flag), args.placement)
    except (ReportError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"report written to {out}/index.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
