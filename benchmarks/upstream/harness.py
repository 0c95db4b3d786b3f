"""Before/after per hot path: each release measured in a child process, rows joined by case."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Sequence

from benchmarks.upstream import releases


def measure_release(version: str, hot_paths: Sequence[str], python: str | None = None,
                    timeout: float = 1800) -> list[dict]:
    """Rows of ``hot_paths`` measured on release ``version`` (its tree from the cache)."""
    src = releases.ensure_source(version)
    python = python or str(releases.ensure_venv())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(releases.ROOT)]),
           "PYTHONHASHSEED": "0", "SGLANG_UPSTREAM_RELEASE": version}
    done = subprocess.run([python, "-m", "benchmarks.upstream.child", *hot_paths], env=env,
                          cwd=releases.ROOT, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0 or not done.stdout.strip():
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise releases.ReleaseError(f"sglang=={version}: the child failed ({done.returncode}): {tail}")
    document = json.loads(done.stdout.strip().splitlines()[-1])
    if not document["sglang_file"].startswith(str(src)):
        raise releases.ReleaseError(f"sglang=={version}: imported {document['sglang_file']}, not {src}")
    return [{**row, "release": version} for row in document["rows"]]


def compare(hot_paths: Sequence[str], release_list: Sequence[str] | None = None,
            python: str | None = None) -> dict:
    """Every case of ``hot_paths`` on each release (default: each hot path's own pair).

    Returns ``{"cases": [...], "errors": [...], "seconds": ...}``; a case holds its figure per
    release in order, and ``before``/``after`` are the first and last of them. ``python``: the
    interpreter of the children (default: the cached venv's).
    """
    start = time.monotonic()
    plan: dict[str, list[str]] = {}
    for hot_path in hot_paths:
        for version in release_list or releases.PAIRS[hot_path]:
            plan.setdefault(version, []).append(hot_path)
    rows = [row for version, paths in plan.items() for row in measure_release(version, paths, python)]
    return {"cases": _join(rows, hot_paths, release_list), "seconds": time.monotonic() - start,
            "errors": [r for r in rows if "error" in r]}


def _join(rows: list[dict], hot_paths: Sequence[str], release_list) -> list[dict]:
    cases: dict[str, dict] = {}
    for row in rows:
        if "error" in row:
            continue
        case = cases.setdefault(row["case"], {"hot_path": row["hot_path"], "case": row["case"],
                                              "unit": row["unit"], "releases": {}, "functions": {}})
        case["releases"][row["release"]] = row["value"]
        case["functions"][row["release"]] = row["function"]
    for case in cases.values():
        order = list(release_list or releases.PAIRS[case["hot_path"]])
        present = [v for v in order if v in case["releases"]]
        case["before"], case["after"] = present[0], present[-1]
        before, after = case["releases"][present[0]], case["releases"][present[-1]]
        case["ratio"] = after / before if before else None
    return sorted(cases.values(), key=lambda c: (hot_paths.index(c["hot_path"]), c["case"]))


def format_table(result: dict) -> str:
    """The before/after table, one line per case, with the release names."""
    lines = [f"{'hot path':<8} {'case':<22} {'release before -> after':<28} {'before':>10} "
             f"{'after':>10} {'unit':<4} {'ratio':>6}  function (after)"]
    for c in result["cases"]:
        before, after = c["releases"][c["before"]], c["releases"][c["after"]]
        lines.append(f"{c['hot_path']:<8} {c['case']:<22} {c['before'] + ' -> ' + c['after']:<28} "
                     f"{before:>10.3f} {after:>10.3f} {c['unit']:<4} "
                     f"{'n/a' if c['ratio'] is None else format(c['ratio'], '.3f'):>6}  "
                     f"{c['functions'][c['after']]}")
    lines += [f"error: {e['hot_path']} on {e['release']}: {e['error']}" for e in result["errors"]]
    lines.append(f"({result['seconds']:.0f} s; indicative figures: best of a few short rounds)")
    return "\n".join(lines)
