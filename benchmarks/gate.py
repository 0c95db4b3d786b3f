"""The CI guard's decisions (``scripts/asv_ci.sh``): which benchmarks a log flags, and the verdict.

    python -m benchmarks.gate flagged LOG            # the benchmarks LOG flags as slower, as a regex
    python -m benchmarks.gate verdict REV counts=STATUS wall=STATUS [--log counts=LOG ...]
    python -m benchmarks.gate ratio LOG [--match RE] # the largest ratio in LOG's table, and its benchmark
    python -m benchmarks.gate exact RESULTS_DIR BASE HEAD [--match RE]  # exact ratios, stored results

Two gates: ``counts`` (instruction counts, ``asv continuous --factor 1.015``) and ``wall`` (wall
time, ``--factor 1.2`` with re-runs). A gate fires when its ``asv continuous`` exits non-zero.
A commit can accept a deliberate slowdown with a line in its message::

    asv-accept: counts          (or: wall, or: counts, wall) followed by the reason

The accepted gate still runs and prints its table; its firing is then logged as accepted and
does not fail the step. A line naming an unknown gate is an error, so a typo never passes.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

GATES = ("counts", "wall")
_ACCEPT = re.compile(r"^\s*asv-accept:\s*(.*)$", re.IGNORECASE | re.MULTILINE)


def accepted_gates(message: str) -> set[str]:
    """The gates a commit message accepts a slowdown from (``asv-accept: counts, wall <reason>``)."""
    accepted = set()
    for match in _ACCEPT.finditer(message):
        names = []
        for word in re.split(r"[\s,:;]+", match.group(1).strip().lower()):
            if word not in (*GATES, "both"):
                break
            names += GATES if word == "both" else [word]
        if not names:
            raise ValueError(f"asv-accept names no gate (choose from {', '.join(GATES)}, both): "
                             f"{match.group(0).strip()!r}")
        accepted.update(names)
    return accepted


def flagged(log: str) -> list[str]:
    """Benchmarks an ``asv continuous --split`` log lists as slower ("+") or newly failing ("!")."""
    names = []
    for line in log.splitlines():
        cells = line.split("|")
        if len(cells) > 5 and cells[1].strip() in ("+", "!"):
            names.append(cells[5].strip())
    return names


def max_ratio(log: str, match: str | None = None) -> tuple[float, str] | None:
    """The largest after/before ratio in an ``asv continuous``/``asv compare --split`` table, and
    its benchmark; only benchmarks whose name ``match`` (a regex) matches, when given."""
    best = None
    for line in log.splitlines():
        cells = line.split("|")
        if len(cells) > 5 and (match is None or re.search(match, cells[5].strip())):
            try:
                ratio = float(cells[4].strip().lstrip("~"))
            except ValueError:
                continue
            if best is None or ratio > best[0]:
                best = (ratio, cells[5].strip())
    return best


def exact_ratios(results_dir: str, base: str, head: str, match: str) -> dict[str, float]:
    """HEAD/BASE for every result whose name matches ``match``, from asv's stored results
    (``asv compare`` rounds to two decimals, too coarse for instruction counts)."""
    import glob
    import itertools
    import json

    def load(rev: str) -> dict[str, float]:
        path, = glob.glob(f"{results_dir}/{rev[:8]}-*.json")
        data = json.load(open(path))
        values = {}
        for name, row in data["results"].items():
            entry = dict(zip(data["result_columns"], row, strict=False))
            if not re.search(match, name) or entry.get("result") is None:
                continue
            combos = itertools.product(*entry["params"]) if entry.get("params") else [()]
            for combo, value in zip(combos, entry["result"], strict=False):
                if isinstance(value, int | float) and value > 0 and value != float("inf"):
                    values[f"{name}({', '.join(combo)})"] = value
        return values

    before, after = load(base), load(head)
    return {name: after[name] / before[name] for name in before.keys() & after.keys() if before[name]}


def verdict(statuses: dict[str, int], accepted: set[str], logs: dict[str, str] | None = None) -> tuple[list[str], int]:
    """One line per gate (pass / FIRED / FIRED, accepted) and the step's exit status."""
    lines, status = [], 0
    for gate, code in statuses.items():
        if code == 0:
            lines.append(f"asv gate {gate}: pass")
            continue
        names = flagged((logs or {}).get(gate, ""))
        what = f" ({len(names)} flagged: {', '.join(names)})" if names else f" (exit {code})"
        if "NonDeterministic" in (logs or {}).get(gate, ""):
            what += " instruction counts were not reproducible (see the log)"
        if gate in accepted:
            lines.append(f"asv gate {gate}: FIRED, accepted by the commit message (asv-accept){what}")
        else:
            lines.append(f"asv gate {gate}: FIRED{what}")
            status = 1
    return lines, status


def _message(rev: str) -> str:
    return subprocess.run(["git", "log", "-1", "--format=%B", rev], capture_output=True, text=True,
                          check=True).stdout


def _pairs(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name not in GATES:
            raise SystemExit(f"expected GATE=VALUE with GATE one of {', '.join(GATES)}, got {item!r}")
        out[name] = value
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_flagged = sub.add_parser("flagged", help="the benchmarks a log flags, as one exact regex")
    p_flagged.add_argument("log")
    p_ratio = sub.add_parser("ratio", help="the largest ratio in a log's table, and its benchmark")
    p_ratio.add_argument("log")
    p_ratio.add_argument("--match", help="only benchmarks whose name matches this regex")
    p_exact = sub.add_parser("exact", help="the largest and smallest exact ratio from stored results")
    p_exact.add_argument("results_dir")
    p_exact.add_argument("base")
    p_exact.add_argument("head")
    p_exact.add_argument("--match", default=".")
    p_verdict = sub.add_parser("verdict", help="one line per gate and the exit status")
    p_verdict.add_argument("rev", help="the commit whose message may accept a gate")
    p_verdict.add_argument("statuses", nargs="+", help="GATE=EXIT_STATUS")
    p_verdict.add_argument("--log", action="append", default=[], help="GATE=LOG_FILE")
    args = parser.parse_args(argv)
    if args.command == "flagged":
        with open(args.log) as f:
            print("|".join("^" + re.escape(name) + "$" for name in flagged(f.read())))
        return 0
    if args.command == "ratio":
        with open(args.log) as f:
            best = max_ratio(f.read(), args.match)
        print("n/a" if best is None else f"{best[0]:.3f} {best[1]}")
        return 0
    if args.command == "exact":
        ratios = exact_ratios(args.results_dir, args.base, args.head, args.match)
        if not ratios:
            print("n/a")
            return 0
        high, low = max(ratios, key=ratios.get), min(ratios, key=ratios.get)
        print(f"{ratios[high]:.4f} {high}; lowest {ratios[low]:.4f}")
        return 0
    try:
        accepted = accepted_gates(_message(args.rev))
    except ValueError as exc:
        print(f"asv: {exc}", file=sys.stderr)
        return 2
    logs = {}
    for gate, path in _pairs(args.log).items():
        with open(path) as f:
            logs[gate] = f.read()
    lines, status = verdict({g: int(s) for g, s in _pairs(args.statuses).items()}, accepted, logs)
    print("\n".join(lines))
    return status


if __name__ == "__main__":
    sys.exit(main())
