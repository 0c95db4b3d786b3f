"""What running the workers as Ray actors costs against forked workers: interleaved runs.

    python scripts/ray_overhead.py [--workers 2 --concurrency 256 --num-prompts 2048 --pairs 3]

Starts the scripted server (`loadgen.selftest.testserver`, paced: TTFT 20 ms, 20 ms between
tokens, 64 tokens), then runs `python -m loadgen` against it alternately with forked workers
("fork") and with `--ray-address local` ("ray", a Ray cluster started and stopped by each run),
the order rotating from pair to pair. Each row: throughput and latency percentiles, `connect_s`
(ray.init: starting the local cluster), start-up (`summary.startup_s`: from creating the pool to
the workers' agreed start, warm-up included), the whole process's wall time and
the workers' own CPU per content event (read + parse, summed over the workers, over their events).
Then the medians per arm and ray / fork.

    python scripts/ray_overhead.py --two-nodes [--concurrency 512 --num-prompts 4096]

instead starts a two-node Ray cluster on this machine (`ray.cluster_utils.Cluster`, one CPU per
node, so the nodes have separate resources and node ids) and runs loadgen once against it with
`--ray-strategy STRICT_SPREAD`, one worker per node; it prints the run and its `cluster` block.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loadgen.selftest.testserver import spawn  # noqa: E402

ARMS = {"fork": (), "ray": ("--ray-address", "local")}
COLUMNS = ("output_throughput", "request_throughput", "median_ttft_ms", "p99_ttft_ms", "median_itl_ms",
           "p99_itl_ms", "median_e2e_latency_ms", "p99_e2e_latency_ms", "connect_s", "startup_s",
           "cpu_us_per_event", "wall_s")


def one_run(url: str, arm: str, args: argparse.Namespace, out: Path, flags: tuple[str, ...] = ()) -> dict:
    """One `python -m loadgen` run in `arm`; the figures of the table."""
    cmd = [sys.executable, "-m", "loadgen", "--base-url", url, "--model", "scripted", "--quiet",
           "--workers", str(args.workers), "--concurrency", str(args.concurrency),
           "--num-prompts", str(args.num_prompts), "--random-input-len", "16",
           "--random-output-len", str(args.num_tokens), "--no-server-metrics", "--no-server-tokenize",
           "--output", str(out), *(flags or ARMS[arm])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    began = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    wall = time.perf_counter() - began
    if proc.returncode not in (0, 3):
        raise RuntimeError(f"loadgen ({arm}) exited {proc.returncode}: {proc.stderr[-1500:]}")
    s = json.loads(out.read_text())["summary"]
    workers = s["client_health"]["workers"]
    events = sum(w["num_events"] for w in workers)
    cpu = sum(w["cpu_s"] + w["parse_cpu_s"] for w in workers)
    row = {"arm": arm, "wall_s": wall, "cpu_us_per_event": cpu * 1e6 / events if events else None,
           "connect_s": (s.get("cluster") or {}).get("connect_s", 0.0),
           "completed": s["completed"], "client_bound": s["client_bound"], "cluster": s.get("cluster")}
    return row | {k: s.get(k) for k in COLUMNS if k not in row}


def two_nodes(url: str, args: argparse.Namespace, out: Path) -> None:
    """One run over a two-node cluster on this machine, one worker per node (STRICT_SPREAD)."""
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        row = one_run(url, "2 nodes", args, out, ("--ray-address", cluster.address, "--ray-strategy",
                                                   "STRICT_SPREAD"))
    finally:
        cluster.shutdown()
    print(" | ".join(["arm", "done", *COLUMNS]))
    print(" | ".join([row["arm"], str(row["completed"])] + [_fmt(row[k]) for k in COLUMNS]))
    print("client_bound:", row["client_bound"])
    print(json.dumps(row["cluster"], indent=1))


def print_table(rows: list[dict]) -> None:
    """Every run, then the medians per arm and their ratio."""
    head = ["arm", "done", *COLUMNS]
    print(" | ".join(head))
    for r in rows:
        print(" | ".join([r["arm"], str(r["completed"])] + [_fmt(r[k]) for k in COLUMNS]))
    med = {arm: {k: statistics.median(r[k] for r in rows if r["arm"] == arm) for k in COLUMNS} for arm in ARMS}
    print()
    for arm in ARMS:
        print(" | ".join([f"median {arm}", ""] + [_fmt(med[arm][k]) for k in COLUMNS]))
    print(" | ".join(["ray / fork", ""] + [_fmt(med["ray"][k] / med["fork"][k]) if med["fork"][k] else "-"
                                           for k in COLUMNS]))


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.4g}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--num-prompts", type=int, default=2048)
    p.add_argument("--num-tokens", type=int, default=64)
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--two-nodes", action="store_true", help="one run over a two-node cluster instead")
    args = p.parse_args()
    proc, url = spawn("--ttft-ms", "20", "--gap-ms", "20", "--num-tokens", str(args.num_tokens))
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            if args.two_nodes:
                two_nodes(url, args, Path(tmp) / "two-nodes.json")
                return 0
            for pair in range(args.pairs):
                order = list(ARMS) if pair % 2 == 0 else list(ARMS)[::-1]
                for arm in order:
                    rows.append(one_run(url, arm, args, Path(tmp) / f"{pair}-{arm}.json"))
                    print(f"pair {pair} {arm}: {rows[-1]['output_throughput']:.0f} tok/s", file=sys.stderr)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
