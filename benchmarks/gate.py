"""The CI guard's decisions (``scripts/asv_ci.sh``): which benchmarks a log flags, and the verdict.

    python -m benchmarks.gate flagged LOG            # the benchmarks LOG flags as slower, as a regex
    python -m benchmarks.gate verdict BASE HEAD counts=STATUS wall=STATUS [--log counts=LOG ...]
                                      [--results DIR] [--summary FILE]
    python -m benchmarks.gate ratio LOG [--match RE] # the largest ratio in LOG's table, and its benchmark
    python -m benchmarks.gate exact RESULTS_DIR BASE HEAD [--match RE]  # exact ratios, stored results

Two gates: ``counts`` (instruction counts, ``asv continuous --factor 1.015``) and ``wall`` (wall
time, ``--factor 1.2`` with re-runs). A gate fires when its ``asv continuous`` exits non-zero.
A commit in BASE..HEAD accepts a deliberate slowdown with a trailer of its message::

    asv-accept: GATE PATTERN +N%: REASON      e.g.  asv-accept: counts h2- +5%: the check buys safety

GATE is ``counts`` or ``wall`` (one per line); PATTERN a regex (no spaces) searched in the
benchmark's name as the gate's table prints it; N the most it may be slower, in percent. A fired
gate passes only if every benchmark it flagged is named by a tag of that gate within its bound.
Only trailers count (the message's last paragraph, as ``git interpret-trailers`` reads it), so a
tag quoted in a body (a squash merge's list of commits) accepts nothing. A trailer that breaks the
syntax is an error (exit 2), so a typo never passes. ``verdict --summary FILE`` also appends a
Markdown summary to FILE (a CI's ``$GITHUB_STEP_SUMMARY``): per gate its verdict, the benchmarks
that moved with their ratios, and the tags that accepted. This file only uses the standard library:
``scripts/asv_ci.sh`` runs it as it is at BASE, from a temporary folder.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass

GATES = ("counts", "wall")
MAX_BOUND_PCT = 1000.0
SYNTAX = "asv-accept: GATE PATTERN +N%: REASON (GATE: counts or wall; PATTERN: a regex, no spaces)"
_TAG = re.compile(r"(\S+)[ \t]+(\S+)[ \t]+\+(\d+(?:\.\d+)?)%:[ \t]*(\S.*)")
_TAG_LINE = re.compile(r"^\s*asv-accept\s*:", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class Accept:
    """One ``asv-accept`` trailer: ``gate``'s benchmarks whose name ``pattern`` finds may be slower
    by up to ``bound_pct`` percent, as commit ``commit`` says."""

    gate: str
    pattern: str
    bound_pct: float
    reason: str
    commit: str = ""

    def covers(self, gate: str, name: str) -> bool:
        return gate == self.gate and re.search(self.pattern, name) is not None


def parse_accept(value: str, commit: str = "") -> Accept:
    """One tag's value (what follows ``asv-accept:``), checked strictly; ValueError says why."""
    where = f"asv-accept in {commit[:8]}" if commit else "asv-accept"
    match = _TAG.fullmatch(value.strip())
    if match is None:
        raise ValueError(f"{where}: {value.strip()!r} does not read as {SYNTAX}")
    gate, pattern, bound, reason = match.groups()
    if gate not in GATES:
        raise ValueError(f"{where}: {gate!r} is not a gate (choose from {', '.join(GATES)}; one per line)")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{where}: pattern {pattern!r} is not a regular expression: {exc}") from None
    if not 0 < float(bound) <= MAX_BOUND_PCT:
        raise ValueError(f"{where}: bound +{bound}% must be above 0 and at most +{MAX_BOUND_PCT:g}%")
    return Accept(gate, pattern, float(bound), reason.strip(), commit)


def commit_accepts(commit: str, trailers: list[str], body: str) -> tuple[list[Accept], list[str]]:
    """One commit's tags (its ``asv-accept`` trailer values) and notes on tag lines it ignored."""
    accepts = [parse_accept(value, commit) for value in trailers]
    ignored = len(_TAG_LINE.findall(body)) - len(trailers)
    notes = [f"asv: {ignored} asv-accept line(s) in {commit[:8]} ignored: not trailers of its message "
             "(quoted or in the body)"] if ignored > 0 else []
    return accepts, notes


def range_accepts(base: str, head: str) -> tuple[list[Accept], list[str]]:
    """The tags of every commit in ``base..head`` (merges and their branches included), and notes."""
    out = subprocess.run(["git", "log", "-z", "--format=%H%x1f%(trailers:key=asv-accept,valueonly,unfold)"
                          "%x1f%B", f"{base}..{head}"], capture_output=True, text=True, check=True).stdout
    accepts, notes = [], []
    for entry in filter(None, out.split("\0")):
        commit, trailers, body = entry.split("\x1f", 2)
        found, ignored = commit_accepts(commit, [t for t in trailers.splitlines() if t.strip()], body)
        accepts += found
        notes += ignored
    return accepts, notes


def allowed_ratio(accepts: list[Accept], gate: str, name: str) -> float | None:
    """The largest after/before ratio the tags allow ``name`` of ``gate``, None if none names it:
    per commit its largest matching bound, compounded over the commits (each accepts its step)."""
    by_commit: dict[str, float] = {}
    for acc in accepts:
        if acc.covers(gate, name):
            by_commit[acc.commit] = max(by_commit.get(acc.commit, 0.0), acc.bound_pct)
    if not by_commit:
        return None
    ratio = 1.0
    for pct in by_commit.values():
        ratio *= 1 + pct / 100
    return ratio


def _rows(log: str):
    """(change mark, ratio cell, benchmark) of each row of an ``asv continuous --split`` table."""
    for cells in _table(log):
        yield cells[0], cells[3], cells[4]


def _table(log: str):
    """The cells (change, before, after, ratio, benchmark) of each row of an asv table."""
    for line in log.splitlines():
        cells = line.split("|")
        row = [cell.strip() for cell in cells[1:6]]
        if len(cells) > 5 and not all(set(cell) <= {"-"} and cell for cell in row):
            yield row


def moved(log: str) -> list[list[str]]:
    """The rows of a log's tables that asv marks as moved: slower (+), faster (-), failed (!)."""
    return [cells for cells in _table(log) if cells[0] in ("+", "-", "!")]


def summary(base: str, head: str, verdict_lines: list[str], logs: dict[str, str],
            accepts: list[Accept]) -> str:
    """The Markdown summary of a guard run: per gate its verdict, the benchmarks that moved (before,
    after, ratio) and the tags that accepted a slowdown of that gate."""
    out = [f"## asv guard: `{base[:8]}..{head[:8]}`", ""]
    for line in verdict_lines:
        gate, _, said = line.removeprefix("asv gate ").partition(": ")
        out += [f"### {gate}: {'✅' if said == 'pass' or 'accepted' in said else '❌'} {said.split(' (')[0]}", ""]
        rows = moved(logs.get(gate, ""))
        if rows:
            out += ["| change | before | after | ratio | benchmark |", "|---|---|---|---|---|"]
            out += ["| " + " | ".join(_md(c) for c in cells) + " |" for cells in rows]
        else:
            out.append("No benchmark moved." if gate in logs else "No log.")
        if said.startswith("FIRED ("):
            out += ["", f"Verdict: {_md(said)}"]
        tags = [a for a in accepts if a.gate == gate]
        out += ["", "Accepted by: " + "; ".join(f"`{a.commit[:8]}` {_md(a.pattern)} +{a.bound_pct:g}%: "
                                                 f"{_md(a.reason)}" for a in tags)] if tags else []
        out.append("")
    return "\n".join(out)


def _md(text: str) -> str:
    """A table cell: pipes escaped."""
    return text.replace("|", "\\|")


def flagged(log: str) -> list[str]:
    """Benchmarks an ``asv continuous --split`` log lists as slower ("+") or newly failing ("!")."""
    return list(flagged_ratios(log))


def flagged_ratios(log: str) -> dict[str, float | None]:
    """Each flagged benchmark and its ratio as the table prints it (None: it failed at HEAD)."""
    out = {}
    for change, ratio, name in _rows(log):
        if change in ("+", "!"):
            try:
                out[name] = float(ratio.lstrip("~"))
            except ValueError:
                out[name] = None
    return out


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


def verdict(statuses: dict[str, int], accepts: list[Accept], logs: dict[str, str] | None = None,
            exact: dict[str, float] | None = None) -> tuple[list[str], int]:
    """One line per gate (pass / FIRED / FIRED, accepted) and the step's exit status. A fired gate
    is accepted only when every benchmark it flagged is within a tag's bound; its ratio is the
    exact one from ``exact`` (asv's stored results), else the table's rounded up (+0.005)."""
    lines, status = [], 0
    for gate, code in statuses.items():
        if code == 0:
            lines.append(f"asv gate {gate}: pass")
            continue
        log = (logs or {}).get(gate, "")
        judged = [_judge(gate, name, ratio, accepts, exact or {}) for name, ratio in flagged_ratios(log).items()]
        what = f" ({len(judged)} flagged: {'; '.join(text for text, _ in judged)})" if judged else f" (exit {code})"
        if "NonDeterministic" in log:
            what += " instruction counts were not reproducible (see the log)"
        if judged and all(ok for _, ok in judged):
            lines.append(f"asv gate {gate}: FIRED, accepted by asv-accept{what}")
        else:
            lines.append(f"asv gate {gate}: FIRED{what}")
            status = 1
    return lines, status


def _judge(gate: str, name: str, table_ratio: float | None, accepts: list[Accept],
           exact: dict[str, float]) -> tuple[str, bool]:
    """One flagged benchmark: its text in the verdict line, and whether a tag covers it."""
    ratio = exact.get(name, None if table_ratio is None else table_ratio + 0.005)
    if ratio is None:
        return f"{name} failed at HEAD", False
    shown = f"{name} {ratio:.4f}" if name in exact else f"{name} < {ratio:.3f} (table)"
    allowed = allowed_ratio(accepts, gate, name)
    if allowed is None:
        return f"{shown}, no asv-accept names it", False
    bound = f"+{(allowed - 1) * 100:.4g}%"
    if ratio > allowed:
        return f"{shown}, past {bound}", False
    commits = sorted({acc.commit[:8] for acc in accepts if acc.covers(gate, name)})
    return f"{shown} within {bound} ({', '.join(commits)})", True


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
    p_verdict.add_argument("base", help="the commit before the change")
    p_verdict.add_argument("head", help="the commit under test: BASE..HEAD's trailers may accept")
    p_verdict.add_argument("statuses", nargs="+", help="GATE=EXIT_STATUS")
    p_verdict.add_argument("--log", action="append", default=[], help="GATE=LOG_FILE")
    p_verdict.add_argument("--results", help="asv's results folder for the machine (exact ratios)")
    p_verdict.add_argument("--summary", help="append the Markdown summary to this file")
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
    return _verdict_command(args)


def _verdict_command(args: argparse.Namespace) -> int:
    try:
        accepts, notes = range_accepts(args.base, args.head)
    except ValueError as exc:
        print(f"asv: {exc}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as exc:
        print(f"asv: git log {args.base}..{args.head} failed: {exc.stderr.strip()}", file=sys.stderr)
        return 2
    for acc in accepts:
        print(f"asv: asv-accept in {acc.commit[:8]}: {acc.gate} {acc.pattern} +{acc.bound_pct:g}%: {acc.reason}")
    for note in notes:
        print(note)
    logs = {}
    for gate, path in _pairs(args.log).items():
        with open(path) as f:
            logs[gate] = f.read()
    exact = _stored_ratios(args.results, args.base, args.head) if args.results else {}
    lines, status = verdict({g: int(s) for g, s in _pairs(args.statuses).items()}, accepts, logs, exact)
    print("\n".join(lines))
    if args.summary:
        with open(args.summary, "a", encoding="utf-8") as f:
            f.write(summary(args.base, args.head, lines, logs, accepts) + "\n")
        print(f"asv: Markdown summary appended to {args.summary}")
    return status


def _stored_ratios(results_dir: str, base: str, head: str) -> dict[str, float]:
    """Exact ratios from asv's stored results; none when they are missing or ambiguous."""
    try:
        return exact_ratios(results_dir, base, head, ".")
    except (OSError, ValueError, KeyError, TypeError):
        return {}

if __name__ == "__main__":
    sys.exit(main())
