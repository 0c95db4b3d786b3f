"""Self-benchmark: what loadgen's client costs per streamed event, and how true its stamps are.

`python -m loadgen.selftest.selfbench [--hog] [--aiperf PATH] [--guidellm PATH] [--aiohttp]` starts
the scripted server (loadgen.selftest.testserver, `--truth-stamps`) pinned to one core and runs
loadgen pinned to another, once per `--stamps` source (kernel, loop), at 256 and 2048 streams in
"paced" mode (one token per stream every 20 ms) and "flood" mode (all tokens at once, one write per
token). Each run prints client CPU per event, events per second, and its stamps against the
server's write times of the same requests (the wire truth: TTFT = first write − the send, ITL =
gaps between writes, every event's stamp error, and how often a TTFT bound did not hold), with the
client verdict, its reasons and cause. `--hog` pins a busy loop to the client's core during each
scenario. The peers (AIPerf, guidellm, bare aiohttp) run against the same server in the same run.
`--scenarios burst:256` adds "burst" mode: all of a response's tokens in one write, so the one-core
server is no longer the limit (in flood it writes ~130 k events/s and a fast client waits on it).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time

import httpx
import numpy as np

from loadgen.selftest import testserver
from loadgen.selftest.aiperf_peer import run_aiperf, server_truth

SCENARIOS = (("paced", 256), ("paced", 2048), ("flood", 256))
#: The server stamps an event just before its write; the client's kernel stamp comes a few µs later.
BOUND_SLACK_MS = 0.05


def _server(mode: str, cpu: int) -> tuple[subprocess.Popen, str]:
    gap = "20" if mode == "paced" else "0"
    burst = ["--burst"] if mode == "burst" else []
    return testserver.spawn("--ttft-ms", "20", "--gap-ms", gap, "--cpu", str(cpu), "--truth-stamps", *burst)


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def wire_truth(rows: list[dict], truth: dict[str, list[int]], prefix: str) -> dict:
    """Each measured request against the server's write times of its events (same machine clock).

    True TTFT = first event's write − the request's send (the client's start stamp); true ITL =
    gaps between writes; the stamp error of an event = the client's stamp − its write time."""
    ttft, true_ttft, itl, true_itl, errors = [], [], [], [], []
    violations: list[float] = []
    for row in rows:
        times = truth.get(f"{prefix}{row['index']}")
        if not row["ok"] or not times or len(times) != len(row["chunk_ms"]):
            continue
        t0 = row["clock_t0_ns"]
        start, chunks = t0 + row["start_ms"] * 1e6, [t0 + c * 1e6 for c in row["chunk_ms"]]
        ttft.append((chunks[0] - start) / 1e6)
        true_ttft.append((times[0] - start) / 1e6)
        itl += [(b - a) / 1e6 for a, b in zip(chunks, chunks[1:], strict=False)]
        true_itl += [(b - a) / 1e6 for a, b in zip(times, times[1:], strict=False)]
        errors += [(c - t) / 1e6 for c, t in zip(chunks, times, strict=True)]
        if row.get("ttft_uncertainty_ms") is not None:
            # NOTE: the bound must hold: the stamp lies at most its uncertainty after the write.
            excess = (chunks[0] - times[0]) / 1e6 - row["ttft_uncertainty_ms"]
            if excess > BOUND_SLACK_MS:
                violations.append(excess)
    out = {"matched_requests": len(ttft), "ttft_bound_violations": len(violations),
           "ttft_bound_excess_max_ms": max(violations, default=None)}
    for name, values in (("ttft", ttft), ("true_ttft", true_ttft), ("itl", itl), ("true_itl", true_itl)):
        out[f"median_{name}_ms"], out[f"p99_{name}_ms"] = _pct(values, 50), _pct(values, 99)
    out["stamp_error_p50_ms"], out["stamp_error_p99_ms"] = _pct(errors, 50), _pct(errors, 99)
    out["stamp_error_max_ms"] = max(errors) if errors else None
    return out


def run_loadgen(url: str, streams: int, args, cpu: int, stamps: str = "kernel") -> dict:
    """One pinned loadgen run; returns its figures, and its stamps against the server's write times."""
    tmp = tempfile.mkdtemp()
    prefix = f"sb-{os.path.basename(tmp)}-"  # NOTE: the server keeps every run's ids: each run its own
    out, records = os.path.join(tmp, "r.json"), os.path.join(tmp, "records.jsonl")
    cmd = ["taskset", "-c", str(cpu), sys.executable, "-m", "loadgen", "--base-url", url,
           "--concurrency", str(streams), "--duration", str(args.duration), "--workers", "1",
           "--random-input-len", "16", "--random-output-len", str(args.output_len),
           "--random-range-ratio", "1.0", "--warmup", str(streams), "--transport", args.transport,
           "--stamps", stamps, "--request-id-prefix", prefix, "--quiet", "--output", out,
           "--records", records, "--no-server-metrics"]
    subprocess.run(cmd, check=True, timeout=args.duration + 300)
    with open(out) as f:
        data = json.load(f)
    with open(records) as f:
        rows = [json.loads(line) for line in f]
    w = data["summary"]["client_health"]["workers"][0]
    events = data["total_output_tokens_client"]
    # NOTE: the whole run's cost: reading in the measured window, then parsing after it.
    return {"stamps": data["summary"]["client_health"]["stamp_source"],
            "cpu_us_per_event": (w["cpu_s"] + w.get("parse_cpu_s", 0.0)) * 1e6 / max(events, 1),
            "read_cpu_us_per_event": w["cpu_s"] * 1e6 / max(events, 1),
            "parse_cpu_us_per_event": w.get("parse_cpu_s", 0.0) * 1e6 / max(events, 1),
            "events_per_s": events / w["wall_s"], "cpu_share": w["cpu_share"],
            "sys_cpu_us_per_event": w["sys_cpu_s"] * 1e6 / max(events, 1), "sleeps_per_s": w["sleeps_per_s"],
            "reported_median_ttft_ms": data["median_ttft_ms"], "reported_mean_itl_ms": data["mean_itl_ms"],
            "coalesced_share": data["summary"]["client_health"].get("coalesced_share"),
            "client_bound": data["client_bound"], "reasons": data["summary"]["client_health"]["client_bound_reasons"],
            "cause": data["summary"]["client_health"].get("client_bound_cause"),
            "failed": data["failed"], **wire_truth(rows, httpx.get(url + "/truth", timeout=60).json(), prefix)}


def run_aiohttp(url: str, streams: int, args, cpu: int) -> dict:
    """The bare aiohttp client (loadgen/selftest/aiohttp_peer.py) pinned to the client core, if aiohttp is installed."""
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        return {"skipped": "aiohttp is not installed (pip install aiohttp, or the project's [bench] extra)"}
    cmd = ["taskset", "-c", str(cpu), sys.executable, "-m", "loadgen.selftest.aiohttp_peer", url, str(streams),
           str(args.duration), str(args.output_len)]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True,
                                    timeout=args.duration + 300).stdout.splitlines()[-1])
    return {"cpu_us_per_event": out["cpu_s"] * 1e6 / max(out["events"], 1),
            "events_per_s": out["events"] / out["wall_s"],
            "sys_cpu_us_per_event": out["sys_cpu_s"] * 1e6 / max(out["events"], 1),
            "sleeps_per_s": out["num_sleeps"] / out["wall_s"], **out}


def _tree_cpu(root: int, seen: dict[int, float]) -> float:
    """CPU seconds (user + system) of `root` and all its descendants, from /proc.

    `seen` keeps each pid's last value, so processes that exited since the previous sample still
    count with what they had used by then (their final slice after that sample is lost)."""
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry)] = int(fields[1])
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    tree, frontier = {root}, [root]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent.items() if pp == p and c not in tree]
        tree.update(kids)
        frontier.extend(kids)
    for pid in tree:
        if pid in cpu:
            seen[pid] = max(seen.get(pid, 0.0), cpu[pid])
    return sum(seen.values())


def _at(samples: list[tuple[float, float, float]], t: float, i: int) -> float:
    """Linear interpolation of column i of (time, cpu_s, tokens) samples at time t."""
    for a, b in zip(samples, samples[1:], strict=False):
        if a[0] <= t <= b[0]:
            w = (t - a[0]) / (b[0] - a[0]) if b[0] > a[0] else 0.0
            return a[i] + w * (b[i] - a[i])
    return samples[0][i] if t < samples[0][0] else samples[-1][i]


def run_guidellm(path: str, url: str, streams: int, args, cpu: int) -> dict:
    """guidellm 0.8.1 against the same server, pinned to the client core, bounded in time and requests.

    Client CPU comes from /proc of the guidellm process tree (main process and its worker
    processes), sampled every 0.25 s together with the server's token counter, so CPU per event is
    taken over guidellm's own measured window (its JSON `start_time`..`end_time`) and excludes its
    start-up (imports, dataset loading); the whole-process figure is given too. The prompts come
    from a JSONL file (16 words, `output_tokens_count`), so no Hugging Face tokenizer is needed."""
    if not url.startswith("http://127.0.0.1:"):
        raise ValueError(f"guidellm peer only runs against 127.0.0.1, not {url}")
    tmp = tempfile.mkdtemp(prefix="selfbench-guidellm-")
    data_path, out = os.path.join(tmp, "data.jsonl"), os.path.join(tmp, "benchmarks.json")
    max_requests = streams * 16
    words = " ".join(["hello"] * 15)
    with open(data_path, "w") as f:
        for i in range(max_requests):
            f.write(json.dumps({"prompt": f"{words} {i}", "prompt_tokens_count": 16,
                                "output_tokens_count": args.output_len}) + "\n")
    cmd = ["taskset", "-c", str(cpu), path, "run",
           "--backend", f"kind=openai_http,target={url},model=scripted-model,validate_backend=false,"
                        f"max_tokens={args.output_len}",
           "--profile", f"kind=concurrent,streams={streams}",
           "--constraint", f"kind=max_duration,seconds={args.duration:g}",
           "--constraint", f"kind=max_requests,count={max_requests}",
           "--data", f"kind=json_file,path={data_path}",
           "--output", f"kind=json,path={out}", "--disable-console"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    before = server_truth(url)
    with open(os.path.join(tmp, "guidellm.log"), "w+") as log:
        return _drive_guidellm(cmd, tmp, env, log, url, out, before, args)


def _drive_guidellm(cmd, tmp, env, log, url, out, before, args) -> dict:
    seen: dict[int, float] = {}
    t_start, cpu_start = time.time(), _children_cpu()
    proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    samples: list[tuple[float, float, float]] = []
    deadline = t_start + args.duration + 300
    while proc.poll() is None:
        if time.time() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return {"error": f"guidellm did not stop within {args.duration + 300:.0f} s; killed"}
        samples.append((time.time(), _tree_cpu(proc.pid, seen),
                        httpx.get(url + "/stats").json()["num_tokens_sent"]))
        time.sleep(0.25)
    wall = time.time() - t_start
    total_cpu = _children_cpu() - cpu_start  # the whole tree, reaped: includes start-up
    after = server_truth(url)
    log.seek(0)
    if proc.returncode != 0 or not os.path.exists(out):
        return {"error": f"exit {proc.returncode}: " + log.read()[-400:].replace("\n", " | ")}
    with open(out) as f:
        bench = json.load(f)["benchmarks"][0]
    m, t0, t1 = bench["metrics"], bench["start_time"], bench["end_time"]
    win_cpu = _at(samples, t1, 1) - _at(samples, t0, 1)
    win_events = _at(samples, t1, 2) - _at(samples, t0, 2)
    sent = after["tokens"] - before["tokens"]
    ttfts = sorted(after["ttft_ms"][len(before["ttft_ms"]):])
    gaps = after["gaps"] - before["gaps"]
    ttft, itl, totals = m["time_to_first_token_ms"]["successful"], m["inter_token_latency_ms"]["successful"], m["request_totals"]
    return {"cpu_us_per_event": win_cpu * 1e6 / max(win_events, 1), "events_per_s": win_events / max(t1 - t0, 1e-9),
            "median_ttft_ms": ttft["median"], "mean_itl_ms": itl["mean"],
            "true_median_ttft_ms": ttfts[len(ttfts) // 2] if ttfts else None,
            "true_mean_gap_ms": (after["gap_sum_ms"] - before["gap_sum_ms"]) / gaps if gaps else None,
            "requests": totals["total"], "successful": totals["successful"], "failed": totals["errored"],
            "incomplete": totals["incomplete"], "window_s": t1 - t0,
            "reported_output_tok_per_s": m["output_tokens_per_second"]["successful"]["mean"],
            "process_cpu_s": total_cpu, "process_wall_s": wall,
            "process_cpu_us_per_event": total_cpu * 1e6 / max(sent, 1), "events_total": sent}


def _hog(cpu: int) -> subprocess.Popen:
    """A busy loop pinned to `cpu`: another process that wants the client's core all the time."""
    return subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", "while 1: pass"])


def _scenario(mode: str, streams: int, args) -> None:
    proc, url = _server(mode, args.server_cpu)
    hog = _hog(args.client_cpu) if args.hog else None
    label = {"hog": bool(hog)}
    try:
        time.sleep(0.3)
        for stamps in args.stamps.split(","):
            row = run_loadgen(url, streams, args, args.client_cpu, stamps)
            print(json.dumps({"client": f"loadgen/{args.transport}", "mode": mode, "streams": streams,
                              **label, **row}), flush=True)
        if args.aiohttp:
            peer = run_aiohttp(url, streams, args, args.client_cpu)
            print(json.dumps({"client": "aiohttp (bare)", "mode": mode, "streams": streams, **label, **peer}),
                  flush=True)
        if args.aiperf is not None:
            peer = run_aiperf(args.aiperf, url, streams, args.duration, args.output_len, args.client_cpu)
            print(json.dumps({"client": "aiperf", "mode": mode, "streams": streams, **label, **peer}), flush=True)
        if args.guidellm is None:
            print(f"guidellm: skipped ({mode}, {streams}): no --guidellm path given", flush=True)
        elif not os.path.exists(args.guidellm):
            print(f"guidellm: skipped: {args.guidellm} does not exist", flush=True)
        else:
            peer = run_guidellm(args.guidellm, url, streams, args, args.client_cpu)
            print(json.dumps({"client": "guidellm", "mode": mode, "streams": streams, **label, **peer}), flush=True)
    finally:
        for p in (hog, proc):
            if p is not None:
                p.terminate()
                p.wait(timeout=10)


def main(argv: list[str] | None = None) -> None:
    """Run every scenario and print one line per client and scenario."""
    p = argparse.ArgumentParser(prog="python -m loadgen.selftest.selfbench")
    p.add_argument("--duration", type=float, default=8.0)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--transport", default="lean")
    p.add_argument("--stamps", default="kernel,loop",
                   help="loadgen runs per scenario, one per stamp source (kernel, loop or both)")
    p.add_argument("--hog", action="store_true",
                   help="run a busy loop pinned to the client's core during each scenario")
    p.add_argument("--guidellm", default=None, help="path to a guidellm executable (peer)")
    p.add_argument("--aiohttp", action="store_true", help="also run a bare aiohttp client (peer)")
    p.add_argument("--aiperf", default=None, help="path to an aiperf 0.13.0 executable (peer)")
    p.add_argument("--scenarios", default=None,
                   help="MODE:STREAMS list, modes paced, flood, burst; e.g. flood:256,paced:2048 (default: "
                        "paced:256,paced:2048,flood:256)")
    p.add_argument("--client-cpu", type=int, default=0)
    p.add_argument("--server-cpu", type=int, default=1)
    args = p.parse_args(argv)
    scenarios = SCENARIOS if args.scenarios is None else [
        (m, int(n)) for m, n in (x.split(":") for x in args.scenarios.split(","))]
    for mode, streams in scenarios:
        _scenario(mode, streams, args)


if __name__ == "__main__":
    main()
