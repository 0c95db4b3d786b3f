"""AIPerf 0.13.0 as a peer of the selfbench: its reported TTFT and ITL next to the scripted server's truth.

`run_aiperf` runs `aiperf profile` pinned to one core against the scripted server
(loadgen.selftest.testserver) and returns AIPerf's own figures with the server's truth for the same
requests. `python -m loadgen.selftest.aiperf_peer --aiperf /tmp/aiperf-venv/bin/aiperf --streams 256
--duration 6` starts its own scripted server (true TTFT 20 ms, one token every 20 ms, pinned to core
1), runs one scenario with AIPerf on core 0 and prints one JSON line.

AIPerf needs a Hugging Face tokenizer to build its synthetic prompts; it gets the embedded byte-level
one shipped with the reference server (reference_impl/tokenizer/embedded), a local path, so nothing
is downloaded. HF_HUB_OFFLINE is removed from its environment: with it set, AIPerf 0.13.0 refuses a
local tokenizer path.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import tempfile
import time

import httpx

from loadgen.selftest import testserver
from reference_impl.tokenizer import EMBEDDED_DIR

REQUESTS_PER_STREAM = 16  # the request bound: concurrency x this, as the guidellm peer
GRACE_S = 30.0  # AIPerf's default, spelled out: in-flight requests may finish this long after the duration
START_STOP_S = 300.0  # start-up (imports, dataset) and shutdown allowed on a busy machine


def run_aiperf(path: str, url: str, streams: int, duration_s: float, output_len: int, cpu: int) -> dict:
    """AIPerf 0.13.0 against the scripted server at `url`, pinned to core `cpu`, bounded in time and requests.

    `aiperf profile` keeps `streams` streaming chat requests in flight (`--concurrency`) for
    `duration_s` seconds or `streams` x 16 requests, whichever ends first, then waits up to 30 s for
    those in flight; its whole process group is killed if it has not exited `duration_s` + 330 s
    after the start. Each request asks for `output_len` tokens (16-token synthetic prompts, no
    spread); token counts come from the server's usage (`--use-server-token-count`), as the
    byte-level tokenizer would count each scripted " tok" as 4 tokens. It has no warm-up phase, so
    AIPerf's requests and the server's truth (GET /stats before and after, every request the server
    saw in between) are the same set, except requests AIPerf cancelled at the end of its grace
    period. One record worker (`--workers-max 1`), as it is pinned to one core; no server metrics,
    no GPU telemetry, no console UI.

    Returns AIPerf's JSON figures (`profile_export_aiperf.json`): median/p99 TTFT and ITL and mean
    ITL (ms; AIPerf's ITL is per request, (latency - TTFT) / (tokens - 1)), request counts, its
    measured window, the mean number of requests in flight and the median delay from a request's
    scheduling to its sending (AIPerf's `effective_concurrency` and `credit_to_start_latency`: far
    below `streams` and far above 0 when the client is the bottleneck); the server's truth (median/p99 TTFT, mean gap between tokens, requests,
    tokens); and the whole process tree's CPU and wall time, start-up included. On failure, one
    `error` line with the tail of AIPerf's log."""
    if not url.startswith("http://127.0.0.1:"):
        raise ValueError(f"aiperf peer only runs against 127.0.0.1, not {url}")
    tmp = tempfile.mkdtemp(prefix="selfbench-aiperf-")
    cmd = ["taskset", "-c", str(cpu), path, "profile", "--model", testserver.MODEL_NAME, "--url", url,
           "--endpoint-type", "chat", "--streaming", "--tokenizer", str(EMBEDDED_DIR),
           "--concurrency", str(streams), "--request-count", str(streams * REQUESTS_PER_STREAM),
           "--benchmark-duration", f"{duration_s:g}", "--benchmark-grace-period", f"{GRACE_S:g}",
           "--synthetic-input-tokens-mean", "16", "--synthetic-input-tokens-stddev", "0",
           "--output-tokens-mean", str(output_len), "--output-tokens-stddev", "0",
           "--use-server-token-count", "--workers-max", "1", "--ui-type", "none",
           "--no-server-metrics", "--no-gpu-telemetry", "--artifact-dir", os.path.join(tmp, "artifacts")]
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    before = server_truth(url)
    with open(os.path.join(tmp, "aiperf.log"), "w+") as log:
        ran = _drive(cmd, tmp, env, log, duration_s + GRACE_S + START_STOP_S)
        log.seek(0)
        tail = log.read()[-400:].replace("\n", " | ")
    after = server_truth(url)
    out = os.path.join(tmp, "artifacts", "profile_export_aiperf.json")
    if ran["returncode"] != 0 or not os.path.exists(out):
        return {"error": f"exit {ran['returncode']}: {tail}", **ran}
    with open(out) as f:
        return {**_reported(json.load(f)), **_truth_between(before, after), **ran}


def _drive(cmd: list[str], cwd: str, env: dict, log, limit_s: float) -> dict:
    """Run `cmd` in its own session; kill the group after `limit_s`. Exit code, CPU and wall time."""
    t0 = time.monotonic()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        proc.wait(timeout=limit_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    # NOTE: AIPerf's service processes are reaped by its main process, so their CPU counts here too.
    return {"returncode": proc.returncode, "process_wall_s": time.monotonic() - t0,
            "process_cpu_s": r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime}


def _reported(export: dict) -> dict:
    """AIPerf's figures from its `profile_export_aiperf.json`."""
    ttft, itl = export["time_to_first_token"], export["inter_token_latency"]
    completed = int(export["completed_request_count"]["avg"])
    successful = int(export.get("request_count", {}).get("avg", 0))
    return {"median_ttft_ms": ttft["p50"], "p99_ttft_ms": ttft["p99"],
            "median_itl_ms": itl["p50"], "p99_itl_ms": itl["p99"], "mean_itl_ms": itl["avg"],
            "requests": completed, "successful": successful, "failed": completed - successful,
            "was_cancelled": export["was_cancelled"], "window_s": export["benchmark_duration"]["avg"],
            "reported_output_tok_per_s": export["output_token_throughput"]["avg"],
            # NOTE: AIPerf's own signs of a client falling behind: requests truly in flight, and how
            # long a request waited between being scheduled and being sent.
            "mean_in_flight": export.get("effective_concurrency", {}).get("avg"),
            "median_credit_to_start_ms": export.get("credit_to_start_latency", {}).get("p50")}


def server_truth(url: str) -> dict:
    """The scripted server's cumulative truth (GET /stats): TTFTs (ms), gaps, their sum (ms), tokens, requests."""
    s = httpx.get(url + "/stats", timeout=30).json()
    gaps = s["num_tokens_sent"] - len(s["ttft_ms"])
    return {"ttft_ms": s["ttft_ms"], "gaps": gaps, "gap_sum_ms": (s["mean_gap_ms"] or 0.0) * gaps,
            "tokens": s["num_tokens_sent"], "requests": s["num_requests"]}


def _truth_between(before: dict, after: dict) -> dict:
    """The server's truth for the requests it saw between two `server_truth` readings."""
    ttfts = after["ttft_ms"][len(before["ttft_ms"]):]
    gaps = after["gaps"] - before["gaps"]
    return {"true_median_ttft_ms": statistics.median(ttfts) if ttfts else None,
            # NOTE: "inclusive" is numpy's default (linear) percentile, the one AIPerf reports.
            "true_p99_ttft_ms": statistics.quantiles(ttfts, n=100, method="inclusive")[98] if len(ttfts) > 1 else None,
            "true_mean_gap_ms": (after["gap_sum_ms"] - before["gap_sum_ms"]) / gaps if gaps else None,
            "true_requests": after["requests"] - before["requests"], "true_tokens": after["tokens"] - before["tokens"]}


def main(argv: list[str] | None = None) -> None:
    """One paced scenario against a freshly spawned scripted server; prints one JSON line."""
    p = argparse.ArgumentParser(prog="python -m loadgen.selftest.aiperf_peer")
    p.add_argument("--aiperf", required=True, help="path to an aiperf 0.13.0 executable")
    p.add_argument("--streams", type=int, default=256)
    p.add_argument("--duration", type=float, default=6.0)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--client-cpu", type=int, default=0)
    p.add_argument("--server-cpu", type=int, default=1)
    args = p.parse_args(argv)
    proc, url = testserver.spawn("--ttft-ms", "20", "--gap-ms", "20", "--cpu", str(args.server_cpu))
    try:
        row = run_aiperf(args.aiperf, url, args.streams, args.duration, args.output_len, args.client_cpu)
        print(json.dumps({"client": "aiperf", "mode": "paced", "streams": args.streams, **row}), flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
