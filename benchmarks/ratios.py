"""Optimized/legacy ratio table from one asv results file (the figures in benchmarks/README.md).

    python -m benchmarks.ratios .asv/results/<machine>/<commit>-<env>.json

Every benchmark with a ``form`` parameter gets one row per other-parameter combination: the
legacy and optimized results and optimized/legacy (below 1: the optimized form is cheaper).
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", help="an asv results JSON file")
    args = parser.parse_args(argv)
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
