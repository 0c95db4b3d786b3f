"""The hardening figures: what hostile input, vanished clients and bad flags cost, measured end to end.

    python scripts/hardening_figures.py            # server and loadgen, about 3 min
    python scripts/hardening_figures.py server     # or only one side

Each line is one figure from real processes on 127.0.0.1: reference servers (`--sim-profile zero`)
and loadgen's scripted server. The tests in tests/reference_impl/ (test_vanished_clients.py,
test_server_guards.py) and tests/loadgen/ (test_transport.py, test_cli_errors.py) assert the
same behaviour with generous bounds; this script prints the figures themselves. Not run in CI.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from harness import Load, run_loadgen
from harness.probes import reset, slow_client, wait_settled
from loadgen.measure.prometheus import parse, scrape
from loadgen.selftest import testserver
from reference_impl.subprocess_server import ServerProcess, cpu_seconds, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODEL = "reference-sim"
NUM_CLIENTS = 20
HOLD_S = 8.0
VANISHED_CONFIGS = {"batched": [], "immediate": ["--wakeup", "immediate"],
                    "incremental": ["--incremental-streaming-output"]}
CHAT = [{"role": "user", "content": "hi"}]
SMALL = ["--random-input-len", "8", "--random-output-len", "6", "--random-range-ratio", "1.0"]


def rss_mb(pid: int, key: str = "VmRSS") -> float:
    """A /proc/PID/status memory figure in MB (VmRSS now, VmHWM the peak)."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith(key))


def vanished_clients() -> None:
    """Item 1: slow streams reset by their clients; time to settle, HTTP CPU after, a fresh request."""
    for config, flags in VANISHED_CONFIGS.items():
        with ServerProcess("--sim-profile", "zero", *flags) as srv:
            pid = srv.child_pids()["http"]
            socks = [slow_client(srv.port, MODEL) for _ in range(NUM_CLIENTS)]
            for sock in socks:
                sock.recv(500)
            time.sleep(HOLD_S)
            for sock in socks:
                reset(sock)
            _, settle_s = wait_settled(srv.url)
            c0 = cpu_seconds(pid)
            time.sleep(2)
            t0 = time.perf_counter()
            fresh = httpx.post(srv.url + "/v1/chat/completions", timeout=30,
                               json={"model": MODEL, "messages": CHAT, "max_tokens": 4})
            print(f"1 vanished clients ({config}): settled {settle_s:.2f} s after {NUM_CLIENTS} resets; HTTP CPU "
                  f"in the next 2 s {cpu_seconds(pid) - c0:.2f} s; fresh 4-token request {fresh.status_code} "
                  f"in {(time.perf_counter() - t0) * 1e3:.0f} ms", flush=True)


def long_stop_strings() -> None:
    """Item 2: a 60 KB stop string, refused by default; with the cap lifted, its memory and time."""
    stop = ["x" * 61440]
    with ServerProcess("--sim-profile", "zero") as srv:
        r = httpx.post(srv.url + "/v1/completions", timeout=60,
                       json={"model": MODEL, "prompt": "hi", "max_tokens": 8, "stop": stop})
        print(f"2 60 KB stop string: {r.status_code} {r.json()['error']['message'][:80]}", flush=True)
    with ServerProcess("--sim-profile", "zero", "--max-stop-str-len", "70000") as srv:
        detok = srv.child_pids()["detokenizer"]
        before = rss_mb(detok)
        body = {"model": MODEL, "prompt": "hi", "max_tokens": 64, "ignore_eos": True}
        t0 = time.perf_counter()
        r = httpx.post(srv.url + "/v1/completions", json={**body, "stop": stop}, timeout=60)
        with_stop = time.perf_counter() - t0
        t0 = time.perf_counter()
        httpx.post(srv.url + "/v1/completions", json=body, timeout=60)
        plain = time.perf_counter() - t0
        print(f"2 60 KB stop string, cap lifted (--max-stop-str-len 70000): {r.status_code} in "
              f"{with_stop * 1e3:.0f} ms (plain request {plain * 1e3:.0f} ms); detokenizer RSS {before:.0f} -> "
              f"{rss_mb(detok):.0f} MB, peak {rss_mb(detok, 'VmHWM'):.0f} MB", flush=True)


def bad_requests(srv: ServerProcess) -> None:
    """Items 3-5: out-of-range integers, huge bodies, labels, a non-streaming disconnect."""
    url = srv.url
    for field in ("seed", "top_k"):
        codes = [httpx.post(url + "/v1/chat/completions", timeout=30, json={
            "model": MODEL, "messages": CHAT, "max_tokens": 4, field: 2**70, "stream": stream}).status_code
            for stream in (False, True)]
        print(f"3 {field}=2**70: non-streamed {codes[0]}, streamed {codes[1]}")
    tracked = scrape(url).value("reference:num_tracked_reqs")
    print(f"3 request states left behind: {tracked:.0f}")
    http = srv.child_pids()["http"]
    big = b'{"model":"%s","prompt":"%s","max_tokens":4}' % (MODEL.encode(), b"a" * (50 << 20))
    t0 = time.perf_counter()
    r = httpx.post(url + "/v1/completions", content=big, headers={"content-type": "application/json"}, timeout=60)
    print(f"4 50 MB body: {r.status_code} in {(time.perf_counter() - t0) * 1e3:.0f} ms; HTTP process RSS peak "
          f"{rss_mb(http, 'VmHWM'):.0f} MB")
    r = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": ["a"] * 65, "max_tokens": 4}, timeout=30)
    print(f"4 65 prompts in one request: {r.status_code}")
    httpx.post(url + "/v1/chat/completions", json={"model": MODEL, "messages": []}, timeout=30)
    metrics = scrape(url)
    chat, completions = (metrics.value("reference:num_requests_total", endpoint=e, status="400")
                         for e in ("chat", "completions"))
    print(f"5 400s by endpoint: chat {chat:.0f} (the four above and one with no messages), completions "
          f"{completions:.0f} (the 65 prompts)")
    sock = socket.create_connection(("127.0.0.1", srv.port))
    body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 5000, "ignore_eos": True}).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    time.sleep(0.05)
    sock.close()
    time.sleep(1.5)
    metrics = scrape(url)
    gone = {s: metrics.value("reference:num_requests_total", endpoint="completions", status=s)
            for s in ("499", "500")}
    print(f"5 non-streamed request, client gone: 499 x {gone['499']:.0f}, 500 x {gone['500']:.0f}", flush=True)


def idle_sockets_and_hung_scheduler() -> None:
    """Items 6 and 5: idle and half-sent sockets closed; /health and /metrics with the scheduler stopped."""
    with ServerProcess("--sim-profile", "zero", "--timeout-request-read", "2") as srv:
        socks = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(40)]
        for sock in socks[1::2]:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{")
        time.sleep(4)
        closed = 0
        for sock in socks:
            sock.settimeout(0.5)
            try:
                closed += sock.recv(10) == b""
            except OSError:
                closed += 1
        print(f"6 idle or half-sent sockets closed 4 s later (--timeout-request-read 2): {closed}/40")
        scheduler = srv.child_pids()["scheduler"]
        os.kill(scheduler, signal.SIGSTOP)
        try:
            t0 = time.perf_counter()
            health = httpx.get(srv.url + "/health", timeout=30).status_code
            t1 = time.perf_counter()
            metrics = httpx.get(srv.url + "/metrics", timeout=30)
            t2 = time.perf_counter()
        finally:
            os.kill(scheduler, signal.SIGCONT)
        up = parse(metrics.text).value("reference:scheduler_up")
        print(f"5 scheduler stopped: /health {health} in {t1 - t0:.1f} s, /metrics {metrics.status_code} in "
              f"{t2 - t1:.1f} s with scheduler_up {up:.0f}; after SIGCONT /health "
              f"{httpx.get(srv.url + '/health', timeout=30).status_code}", flush=True)


def start_up_errors() -> None:
    """Item 7: a port in use and a missing GPU print one line, no traceback."""
    with ServerProcess("--sim-profile", "zero") as srv:
        cases = {"port in use": ["--port", str(srv.port)], "--device cuda, no GPU": ["--engine", "torch", "--device", "cuda"]}
        for label, flags in cases.items():
            p = subprocess.run([sys.executable, "-m", "reference_impl", *flags], capture_output=True, text=True,
                               timeout=120, cwd=ROOT)
            lines = p.stderr.strip().splitlines()
            print(f"7 {label}: exit {p.returncode}, {len(lines)} stderr line(s): {lines[-1][:120] if lines else ''}")


def loadgen(*flags: str) -> tuple[subprocess.CompletedProcess, dict | None, float]:
    """One loadgen run: the process, its saved JSON (if any) and its peak RSS in MB."""
    out = os.path.join(tempfile.mkdtemp(), "r.json")
    p = subprocess.run(["/usr/bin/time", "-f", "%M", sys.executable, "-m", "loadgen", "--quiet", "--output", out,
                        *flags], capture_output=True, text=True, timeout=300, cwd=ROOT)
    peak_mb = int(p.stderr.strip().splitlines()[-1]) / 1024
    data = json.load(open(out)) if os.path.exists(out) else None
    return p, data, peak_mb


def loadgen_figures() -> None:
    """Items 8-12: awkward valid streams, endless streams, exit codes, prompt lengths."""
    for fault in ("split_crlf", "close_delimited"):
        proc, url = testserver.spawn("--ttft-ms", "3", "--gap-ms", "3", "--num-tokens", "6", "--faults", fault,
                                     cwd=ROOT)
        try:
            for transport in ("lean", "httpx"):
                p, d, _ = loadgen("--base-url", url, "--num-prompts", "40", "--concurrency", "8",
                                  "--transport", transport, *SMALL)
                print(f"8/9 {fault}, {transport}: exit {p.returncode}, {d['completed']}/40 completed, "
                      f"errors {sum(e['count'] for e in d['summary']['errors'].values())}", flush=True)
        finally:
            proc.terminate()
    proc, url = testserver.spawn("--ttft-ms", "1", "--faults", "endless,ok", cwd=ROOT)
    try:
        t0 = time.perf_counter()
        p, d, peak = loadgen("--base-url", url, "--num-prompts", "4", "--concurrency", "2", "--timeout", "120", *SMALL)
        errors = {k: v["count"] for k, v in d["summary"]["errors"].items()}
        print(f"10 endless streams: {errors}, exit {p.returncode} after {time.perf_counter() - t0:.1f} s, "
              f"loadgen peak RSS {peak:.0f} MB", flush=True)
    finally:
        proc.terminate()
    dead = f"http://127.0.0.1:{free_port()}"
    few = ["--num-prompts", "4", "--concurrency", "2"]
    cases = {"dead port, --model": ["--base-url", dead, "--model", "m", *few],
             "dead port": ["--base-url", dead, *few],
             "--base-url notaurl": ["--base-url", "notaurl", *few],
             "--concurrency -3": ["--base-url", dead, "--concurrency", "-3"],
             "--output in a missing directory": ["--base-url", dead, *few, "--output", "/nonexistent/dir/r.json"]}
    for label, flags in cases.items():
        p = subprocess.run([sys.executable, "-m", "loadgen", "--quiet", *flags], capture_output=True, text=True,
                           timeout=120, cwd=ROOT)
        lines = p.stderr.strip().splitlines()
        print(f"11 {label}: exit {p.returncode}, {len(lines)} stderr line(s), traceback {'Traceback' in p.stderr}: "
              f"{lines[-1][:110] if lines else ''}", flush=True)
    with ServerProcess("--sim-profile", "zero") as srv, tempfile.TemporaryDirectory() as tmp:
        for backend in ("openai-completions", "openai-chat"):
            d = run_loadgen(srv.url, Load(32, 32, 128, 16), Path(tmp) / f"{backend}.json",
                            flags=("--backend", backend))
            print(f"12 {backend}, 128 tokens asked: lengths via {d['dataset'].get('input_lengths')!r}, server counted "
                  f"{d['total_input_tokens'] / d['completed']:.1f} prompt tokens per request", flush=True)


def main() -> None:
    """Print the figures of the sides named on the command line (default: both)."""
    sides = sys.argv[1:] or ["server", "loadgen"]
    if "server" in sides:
        vanished_clients()
        long_stop_strings()
        with ServerProcess("--sim-profile", "zero") as srv:
            bad_requests(srv)
        idle_sockets_and_hung_scheduler()
        start_up_errors()
    if "loadgen" in sides:
        loadgen_figures()


if __name__ == "__main__":
    main()
