"""How late loadgen sends a replayed trace: send lag (actual send − trace time) at 200 req/s.

    python scripts/replay_lag.py [--rate 200 --seconds 10 --runs 3 --arrivals constant|poisson]

Writes a synthetic mooncake trace (`--rate` × `--seconds` lines, 64-token prompts sharing hash-id
blocks of 16 tokens, 16 tokens out), starts the scripted server (TTFT 20 ms, 5 ms gaps, 16 tokens)
pinned with `taskset` to `--server-cpu`, and replays the trace with loadgen pinned to
`--client-cpu`, `--runs` times. Prints each run's send lag p50/p99/max (the summary's
`median_send_lag_ms`, `p99_send_lag_ms`, `max_send_lag_ms`: each request's actual send start minus
its intended time, the trace's timestamp) and the client-bound verdict, then the medians. The goal:
p99 under 5 ms at 200 req/s.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loadgen.selftest.testserver import spawn  # noqa: E402

BLOCK = 16


def write_trace(path: Path, rate: float, seconds: float, arrivals: str, seed: int = 0) -> int:
    """A mooncake trace at `rate` req/s for `seconds`; returns its number of lines."""
    rng = random.Random(seed)
    num, t_ms = int(rate * seconds), 0.0
    with open(path, "w", encoding="utf-8") as f:
        for i in range(num):
            # NOTE: four prompt families: each shares its first 2 of 4 blocks with its family
            ids = [i % 4, 100 + i % 4, 1000 + 2 * i, 1001 + 2 * i]
            f.write(json.dumps({"timestamp": round(t_ms, 3), "input_length": 4 * BLOCK, "output_length": 16,
                                "hash_ids": ids}) + "\n")
            t_ms += 1e3 / rate if arrivals == "constant" else rng.expovariate(rate) * 1e3
    return num


def one_run(url: str, trace: Path, cpu: int, out: Path) -> dict:
    """One replay pinned to `cpu`; its send-lag figures."""
    cmd = ["taskset", "-c", str(cpu), sys.executable, "-m", "loadgen", "--base-url", url, "--dataset", "mooncake",
           "--dataset-path", str(trace), "--block-size", str(BLOCK), "--no-server-tokenize", "--no-server-metrics",
           "--workers", "1", "--quiet", "--output", str(out)]
    subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    s = json.loads(out.read_text())["summary"]
    return {"completed": s["completed"], "failed": s["failed"], "p50_ms": s["median_send_lag_ms"],
            "p99_ms": s["p99_send_lag_ms"], "max_ms": s["max_send_lag_ms"],
            "loop_lag_p99_ms": max(w["loop_lag_p99_ms"] for w in s["client_health"]["workers"]),
            "cpu_share": max(w["cpu_share"] for w in s["client_health"]["workers"]),
            "client_bound": s["client_bound"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--arrivals", choices=("constant", "poisson"), default="constant")
    p.add_argument("--server-cpu", type=int, default=1)
    p.add_argument("--client-cpu", type=int, default=0)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.jsonl"
        num = write_trace(trace, args.rate, args.seconds, args.arrivals)
        proc, url = spawn("--ttft-ms", "20", "--gap-ms", "5", "--num-tokens", "16", "--cpu", str(args.server_cpu),
                          cwd=str(ROOT))
        try:
            rows = [one_run(url, trace, args.client_cpu, Path(tmp) / f"run{i}.json") for i in range(args.runs)]
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    print(f"trace: {num} requests, {args.rate:g} req/s {args.arrivals}, {args.seconds:g} s; server on cpu "
          f"{args.server_cpu}, client on cpu {args.client_cpu}")
    for i, r in enumerate(rows):
        print(f"run {i}: " + "  ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()))
    print("median send lag ms: " + "  ".join(f"{k} {statistics.median(r[k] for r in rows):.3f}"
                                           for k in ("p50_ms", "p99_ms", "max_ms")))


if __name__ == "__main__":
    main()
