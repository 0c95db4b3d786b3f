"""``python -m reports run SCENARIO [--scale S] [--rate HZ] [--out-dir DIR] ...``, ``list``, ``table``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reference_impl.placement import PLACEMENT_HELP, Placement
from reports.reproduction import REPORTS_DIR, load_summaries, table
from reports.runner import ReportError, run_scenario
from reports.scenarios import SCENARIOS, SMALLEST_SCALE


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: ``run`` one scenario or ``list`` them."""
    parser = argparse.ArgumentParser(prog="python -m reports", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the scenarios")
    bench = sub.add_parser("bench", help="run the H3/H5 benchmarks behind the table (reports/bench/)")
    bench.add_argument("--out-dir", default=str(REPORTS_DIR / "bench"))
    tab = sub.add_parser("table", help="print the reproduction table from the reports' summary.json")
    tab.add_argument("--reports-dir", default=str(REPORTS_DIR))
    run = sub.add_parser("run", help="run one scenario and write its report")
    run.add_argument("scenario", choices=sorted(SCENARIOS))
    run.add_argument("--scale", type=float, default=1.0,
                     help=f"shrink streams, prompts and lengths ({SMALLEST_SCALE} .. 1.0)")
    run.add_argument("--rate", type=int, default=100, help="py-spy sampling rate (Hz)")
    run.add_argument("--duration", type=float, default=None,
                     help="py-spy recording duration (s); default: the whole load")
    run.add_argument("--out-dir", default=None, help="default: reports/<scenario>")
    run.add_argument("--py-spy", default=None, help="py-spy executable (default: the one on PATH)")
    run.add_argument("--server-flag", action="append", default=[],
                     help="extra flag for every server, e.g. --server-flag=--max-n=4")
    run.add_argument("--placement", default="pinned", help=PLACEMENT_HELP)
    args = parser.parse_args(argv)
    if args.command == "run":
        try:
            args.placement = (Placement.parse(args.placement)
                              if args.placement != "pinned" or Placement.default() else None)
        except ValueError as error:
            parser.error(f"--placement: {error}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point; exit status 0 on success, 1 with a message on a report error."""
    args = parse_args(argv)
    if args.command == "list":
        for name, scenario in SCENARIOS.items():
            print(f"{name:20s} {scenario.title()} ({', '.join(scenario.hot_paths)})")
        return 0
    if args.command == "bench":
        from reports.bench import write

        print(f"written to {write(Path(args.out_dir))}")
        return 0
    if args.command == "table":
        print(table(load_summaries(Path(args.reports_dir))), end="")
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
