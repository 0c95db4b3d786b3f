"""What server scraping and the timeline cost loadgen: CPU per event with and without, interleaved.

    python scripts/loadgen_overhead.py [--concurrency 2048 --num-prompts 4096 --pairs 3]

Starts the reference server (default form) with all its processes pinned to the last core, then
runs loadgen pinned to the other cores (so the client has its cores to itself and is not flagged
client-bound), alternating `--no-server-metrics` ("without") and the
default ("with": scraping every second), `--pairs` times. Each run's CPU is the whole loadgen
process tree's (parent and workers, from the rusage of the reaped child), divided by the content
events the workers read. The timeline and CDFs are computed after the run in both arms; their cost
is the parent's `timeline.cpu_s`, and the scraping thread's own CPU is `scrape_thread_cpu_s`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import Load, run_loadgen  # noqa: E402
from reference_impl.placement import pin  # noqa: E402
from reference_impl.subprocess_server import ServerProcess  # noqa: E402

ARMS = {"without": ("--no-server-metrics",), "with": ()}


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(url: str, load: Load, arm: str, client_cpus: set[int], out: Path) -> dict:
    """One loadgen run in `arm`; its tree CPU per event and what the parent spent on the extras."""
    before = _children_cpu_s()
    result = run_loadgen(url, load, out, workers=str(len(client_cpus)),
                         flags=("--no-server-tokenize", *ARMS[arm]),
                         preexec_fn=lambda: os.sched_setaffinity(0, client_cpus))
    tree_cpu_s = _children_cpu_s() - before
    health = result["summary"]["client_health"]
    events = sum(w["num_events"] for w in health["workers"])
    server = result.get("server_metrics", {})
    return {"arm": arm, "events": events, "tree_cpu_s": tree_cpu_s,
            "tree_cpu_us_per_event": tree_cpu_s * 1e6 / events if events else None,
            "timeline_cpu_s": result.get("timeline", {}).get("cpu_s"),
            "scrape_thread_cpu_s": server.get("scrape_thread_cpu_s"), "scrapes": server.get("scrapes", 0),
            "output_throughput": result["output_throughput"], "client_bound": result["client_bound"],
            "client_bound_reasons": health["client_bound_reasons"]}


def summarize(rows: list[dict]) -> dict:
    """Medians per arm and the overhead of `with` over `without` in tree CPU per event."""
    med = {arm: statistics.median(r["tree_cpu_us_per_event"] for r in rows if r["arm"] == arm) for arm in ARMS}
    timeline = [r["timeline_cpu_s"] / r["tree_cpu_s"] for r in rows if r["timeline_cpu_s"] is not None]
    return {"median_tree_cpu_us_per_event": med,
            "scraping_overhead": med["with"] / med["without"] - 1,
            "timeline_share_of_tree_cpu_median": statistics.median(timeline) if timeline else None,
            "any_client_bound": any(r["client_bound"] for r in rows)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", type=int, default=2048)
    p.add_argument("--num-prompts", type=int, default=4096)
    p.add_argument("--input-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--output", type=Path, default=None, help="write every run and the summary as JSON")
    args = p.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    server_cpus, client_cpus = {cpus[-1]}, set(cpus[:-1])
    load = Load(args.concurrency, args.num_prompts, args.input_len, args.output_len)
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(log_path=f"{tmp}/server.log")
        try:
            server.wait_ready()
            server.warm_up()
            for pid in (server.proc.pid, *server.child_pids().values()):
                pin(pid, server_cpus)
            rows = []
            for k in range(args.pairs):
                for arm in (("without", "with") if k % 2 == 0 else ("with", "without")):
                    rows.append(one_run(server.url, load, arm, client_cpus, Path(tmp) / f"{arm}{k}.json"))
                    print(json.dumps(rows[-1]), flush=True)
        finally:
            server.stop()
    summary = summarize(rows)
    print(json.dumps(summary, indent=2))
    if args.output:
        args.output.write_text(json.dumps({"runs": rows, "summary": summary, "args": vars(args)}, indent=2,
                                          default=str))


if __name__ == "__main__":
    main()
