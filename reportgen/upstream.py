"""``python -m reportgen run upstream``: upstream sglang's own functions beside the reference forms.

Per case (``benchmarks.upstream.cases``): the figure on the release before the change and on
the release after it, and the reference legacy and optimized forms on the same workload
(``benchmarks.upstream.reference``), measured in the same run. A case whose upstream ratio
(after / before) and reference ratio (optimized / legacy) differ by more than 25% is marked a
fidelity finding; the findings' mechanisms are written in benchmarks/README.md.

Writes ``reports/upstream/summary.json`` and ``reports/upstream/README.md``.
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
from pathlib import Path

from harness import provenance
from reportgen import output
from reportgen.reproduction import short_figure

SCENARIO = "upstream"
FIDELITY_BOUND = 0.25
"""One ratio more than 1 + bound times the other (either way) is a fidelity finding."""


def _wheels(versions: set[str]) -> dict[str, str]:
    from benchmarks.upstream import releases

    out = {}
    for version in sorted(versions):
        for wheel in sorted((releases.CACHE / "wheels").glob(f"sglang-{version}-*.whl")):
            out[wheel.name] = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return out


def entry(case: dict, reference: dict) -> dict:
    """One case of the summary: upstream before/after, the reference forms, both ratios."""
    before, after = case["releases"][case["before"]], case["releases"][case["after"]]
    ref = reference.get(case["case"])
    if ref is None:  # a figure of upstream's code alone (H5: decisions that differ from the reference)
        return {"hot_path": case["hot_path"], "case": case["case"], "unit": case["unit"],
                "release_before": case["before"], "release_after": case["after"],
                "upstream_before": before, "upstream_after": after, "upstream_ratio": None,
                "function_before": case["functions"][case["before"]],
                "function_after": case["functions"][case["after"]], "reference_legacy": None,
                "reference_optimized": None, "reference_ratio": None, "fidelity_finding": after != 0}
    # NOTE: where the reference has a form of upstream's own change beside its default optimized
    # one (H3), the comparison is with that form; the default optimized figure stays in the entry.
    compared = ref.get("upstream_form", ref["optimized"])
    upstream_ratio, reference_ratio = after / before, compared / ref["legacy"]
    return {"hot_path": case["hot_path"], "case": case["case"], "unit": case["unit"],
            "release_before": case["before"], "release_after": case["after"],
            "upstream_before": before, "upstream_after": after, "upstream_ratio": upstream_ratio,
            "function_before": case["functions"][case["before"]],
            "function_after": case["functions"][case["after"]],
            "reference_legacy": ref["legacy"], "reference_optimized": ref["optimized"],
            "reference_ratio": reference_ratio,
            "reference_upstream_form": ref.get("upstream_form"),
            "fidelity_finding": max(upstream_ratio / reference_ratio,
                                    reference_ratio / upstream_ratio) > 1 + FIDELITY_BOUND}


def collect(hot_paths: list[str] | None = None) -> dict:
    """Measure every case on its release pair and the reference forms; the summary dict."""
    from benchmarks.upstream import harness
    from benchmarks.upstream.cases import HOT_PATHS
    from benchmarks.upstream.reference import reference_rows

    started = time.time()
    result = harness.compare(hot_paths or list(HOT_PATHS))
    reference = reference_rows({c["case"] for c in result["cases"]})
    versions = {v for c in result["cases"] for v in c["releases"]}
    return {"scenario": SCENARIO, "provenance": {**provenance.record((provenance.TORCH_ENGINE,)),
                                                 "sglang_wheels": _wheels(versions)},
            "command": "python -m reportgen run upstream",
            "machine": {"node": platform.node(), "cpu": platform.processor() or platform.machine(),
                        "note": "shared, other work running: figures are indicative"},
            "cases": [entry(c, reference) for c in result["cases"]],
            "errors": result["errors"], "elapsed_s": round(time.time() - started, 1)}


def readme(data: dict) -> str:
    """The summary as a table, one line per case."""
    lines = ["# Upstream sglang releases measured per hot path", "", __doc__.split("\n\n")[1], "",
             f"Command: `{data['command']}` ({data['elapsed_s']:.0f} s) on {data['machine']['node']} "
             f"({data['machine']['cpu']}): {data['machine']['note']}.", "",
             "| hot path | case | upstream release before → after | upstream figure | ratio | "
             "reference legacy → optimized | ratio | fidelity finding |", "|---|---|---|---|---|---|---|---|"]
    for c in data["cases"]:
        if c["reference_ratio"] is None:
            lines.append(f"| {c['hot_path']} | {c['case']} | {c['release_before']} → {c['release_after']} | "
                         f"{short_figure(c['upstream_before'])} → {short_figure(c['upstream_after'])} {c['unit']} | | "
                         f"(no reference figure) | | {'yes' if c['fidelity_finding'] else 'no'} |")
            continue
        lines.append(
            f"| {c['hot_path']} | {c['case']} | {c['release_before']} → {c['release_after']} | "
            f"{short_figure(c['upstream_before'])} → {short_figure(c['upstream_after'])} {c['unit']} | "
            f"{c['upstream_ratio']:.2f} | {short_figure(c['reference_legacy'])} → "
            f"{short_figure(c['reference_optimized'])} {c['unit']} | {c['reference_ratio']:.2f} | "
            f"{'yes' if c['fidelity_finding'] else 'no'} |")
    lines += [f"- error: {e['hot_path']} on {e['release']}: {e['error']}" for e in data["errors"]]
    return "\n".join(lines) + "\n"


def write(out_dir: Path, hot_paths: list[str] | None = None) -> Path:
    """Measure and write the report to ``out_dir`` (checked first, built aside, moved whole)."""
    output.check(out_dir, SCENARIO)
    data = collect(hot_paths)
    with output.staging(out_dir, SCENARIO) as tmp:
        (tmp / "summary.json").write_text(json.dumps(data, indent=1))
        (tmp / "README.md").write_text(readme(data))
    return out_dir
