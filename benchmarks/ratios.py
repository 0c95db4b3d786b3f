"""Optimized/legacy ratio tables (the figures in benchmarks/README.md).

    python -m benchmarks.ratios .asv/results/<machine>/<commit>-<env>.json
    python -m benchmarks.ratios --measure [--only REGEX]

From a results file: every benchmark with a ``form`` parameter gets one row per other-parameter
combination: the legacy and optimized results and optimized/legacy (below 1: the optimized
form is cheaper). ``--measure`` runs every instruction-count case (``benchmarks/instructions``)
once under callgrind and once natively in this process, and prints the ratio in instructions
next to the ratio in wall time, for the same workload.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import math


def _value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def form_ratios(results: dict) -> list[tuple[str, str, float, float, float]]:
    """(benchmark, other params, legacy, optimized, optimized/legacy) for each measured pair."""
    columns = results["result_columns"]
    rows = []
    for name, row in sorted(results["results"].items()):
        entry = dict(zip(columns, row, strict=False))
        params = [[_value(v) for v in axis] for axis in entry.get("params") or []]
        if not params or "legacy" not in params[0]:
            continue
        values = dict(zip(itertools.product(*params), entry["result"], strict=True))
        for rest in itertools.product(*params[1:]):
            legacy, optimized = values.get(("legacy", *rest)), values.get(("optimized", *rest))
            if _measured(legacy) and _measured(optimized):
                rows.append((name, ", ".join(map(str, rest)), legacy, optimized, optimized / legacy))
    return rows


def _measured(value) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def _fmt(value: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


def instruction_and_wall_ratios(only: str | None = None) -> list[tuple[str, dict, dict]]:
    """(case, {form: instructions per call}, {form: seconds per call}) for every case."""
    from benchmarks.common import best_time
    from benchmarks.instructions import CASES, FORMS, measure

    counts = measure(only)
    rows = []
    for case in CASES:
        if f"{case.name}/legacy" not in counts:
            continue
        instr, wall = {}, {}
        for form in FORMS:
            instr[form] = counts[f"{case.name}/{form}"]["per_call"]
            if instr[form] is None:
                continue
            workload = case.build(form)
            wall[form] = best_time(workload.run, repeat=5, min_time=0.02)
            close = getattr(workload, "close", None)
            if close is not None:
                close()
        rows.append((case.name, instr, wall))
    return rows


def _print_measured(rows) -> None:
    print("| case | legacy instr | optimized instr | ratio (instr) | legacy time | optimized time | ratio (time) |")
    print("|---|---|---|---|---|---|---|")
    for name, instr, wall in rows:
        if None in instr.values() or len(wall) < 2:
            print(f"| {name} | n/a | n/a | n/a | n/a | n/a | n/a |")
            continue
        print(f"| {name} | {instr['legacy']:,.0f} | {instr['optimized']:,.0f} | "
              f"{instr['optimized'] / instr['legacy']:.3f} | {_fmt(wall['legacy'])} | "
              f"{_fmt(wall['optimized'])} | {wall['optimized'] / wall['legacy']:.3f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="?", help="an asv results JSON file")
    parser.add_argument("--measure", action="store_true",
                        help="count instructions and time every instruction-count case now")
    parser.add_argument("--only", help="with --measure: a regex over case names")
    args = parser.parse_args(argv)
    if args.measure:
        _print_measured(instruction_and_wall_ratios(args.only))
        return
    if not args.results:
        parser.error("give a results file or --measure")
    with open(args.results) as f:
        rows = form_ratios(json.load(f))
    print("| benchmark | params | legacy | optimized | optimized/legacy |")
    print("|---|---|---|---|---|")
    for name, rest, legacy, optimized, ratio in rows:
        timed = ".time_" in name
        fmt = _fmt if timed else "{:.3g}".format
        print(f"| {name} | {rest} | {fmt(legacy)} | {fmt(optimized)} | {ratio:.3f} |")


if __name__ == "__main__":
    main()
