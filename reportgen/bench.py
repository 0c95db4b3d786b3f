"""``python -m reportgen bench``: the benchmark figures behind the reproduction table's H3 and H5 rows.

- ``h5_regime``: ``python -m benchmarks.h5_regime`` on the virtual clock (deterministic), in
  upstream's regime (DP attention, 4 lockstep ranks, sim profile gb200-moe-dp) and on one rank
  of the h100-llama-8b profile, for contrast;
- ``h3_growth``: ``python -m benchmarks.h3_growth``, one default-mode chat request through the
  serving layer at 2K / 8K / 32K output tokens, legacy / upstream / optimized (CPU time: noisy,
  but the fitted exponent is robust).

Writes ``reports/bench/summary.json`` and ``reports/bench/README.md``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from harness import provenance
from reportgen import output

ROOT = Path(__file__).resolve().parent.parent
H5_SETTINGS = {
    "dp-attention": ["--dp-size", "4", "--sim-profile", "gb200-moe-dp"],
    "one-rank-h100": ["--dp-size", "1", "--sim-profile", "h100-llama-8b"],
}


def _json_lines(module: str, args: list[str]) -> list[dict]:
    cmd = [sys.executable, "-m", module, *args]
    print(f"== {' '.join(cmd[1:])}", flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def collect() -> dict:
    """Run every benchmark; the summary dict."""
    started = time.time()
    h5 = {name: {"command": f"python -m benchmarks.h5_regime {' '.join(args)}",
                 "rows": _json_lines("benchmarks.h5_regime", args)}
          for name, args in H5_SETTINGS.items()}
    h3 = {"command": "python -m benchmarks.h3_growth", "rows": _json_lines("benchmarks.h3_growth", [])}
    return {"scenario": "bench", "provenance": provenance.record((provenance.TORCH_ENGINE,)),
            "h5_regime": h5, "h3_growth": h3, "elapsed_s": round(time.time() - started, 1)}


def readme(data: dict) -> str:
    """A README with each benchmark's rows as a table."""
    lines = ["# Benchmark figures behind the reproduction table", "", __doc__.split("\n\n")[1], ""]
    for name, entry in data["h5_regime"].items():
        lines += [f"## H5, {name}: `{entry['command']}`", "",
                  "| range ratio | concurrency | delayer | output tok/s | prefill steps | p99 decode gap (ms) |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['range_ratio']} | {r['concurrency']} | {r['delayer']} | {r['output_tok_s']:,.1f} | "
                  f"{r['prefill_steps']:.0f} | {r['p99_decode_gap_ms']:.1f} |" for r in entry["rows"]]
        lines.append("")
    lines += [f"## H3+H6 growth: `{data['h3_growth']['command']}`", "",
              "| form | output tokens | seconds per request |", "|---|---|---|"]
    lines += [f"| {r['form']} | {r['num_tokens']:,} | {r['seconds']:.4f} |"
              for r in data["h3_growth"]["rows"] if "num_tokens" in r]
    lines += ["", "Fitted exponents over all sizes (1: linear, 2: quadratic; in brackets between the "
              "two largest sizes): " + ", ".join(
                  f"{r['form']} {r['exponent']:.2f} [{r.get('exponent_largest_two', float('nan')):.2f}]"
                  for r in data["h3_growth"]["rows"] if "exponent" in r) + ".", ""]
    return "\n".join(lines)


def write(out_dir: Path) -> Path:
    """Run the benchmarks and write their report to ``out_dir`` (checked first; see ``save``)."""
    output.check(out_dir, "bench")
    return save(collect(), out_dir)


def save(data: dict, out_dir: Path) -> Path:
    """``summary.json`` and ``README.md`` of ``data``, built aside and moved to ``out_dir`` whole
    (``output.staging``), never written through a link found there."""
    with output.staging(out_dir, "bench") as tmp:
        (tmp / "summary.json").write_text(json.dumps(data, indent=1))
        (tmp / "README.md").write_text(readme(data))
    return out_dir
