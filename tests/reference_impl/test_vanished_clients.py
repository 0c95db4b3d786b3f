"""Slow streaming clients that reset their connections stop costing the HTTP process anything.

Real server, real sockets: each client asks for a long stream with a small receive buffer, reads
a little, and later resets (SO_LINGER 0, then close). Within a bounded time every stream must
have ended (aborted, counted as 499, or finished), the scheduler must be idle and the HTTP
process must hold no request state; then its CPU time (from /proc) must be flat and a fresh
request must be served. The bounds are generous: before the fix the HTTP process kept a core
busy for minutes, its dead streams were never counted, and fresh requests timed out.
"""

from __future__ import annotations

import time

import httpx
import pytest

from harness.probes import LONG_STREAM, reset, slow_client, wait_settled
from reference_impl.subprocess_server import cpu_seconds
from tests.reference_impl.conftest import MODEL, ServerProcess

NUM_CLIENTS = 20
HOLD_S = 8.0          # clients stay connected, unread, while the server runs ahead
MAX_SETTLE_S = 5.0    # reset → every stream ended and the scheduler idle (measured: 0.15-0.35 s)
SETTLE_S = 1.0        # once settled: the bounded output queues drain, then the window opens
CPU_WINDOW_S = 4.0
MAX_WINDOW_CPU_S = 0.25
BODY = {"model": MODEL, **LONG_STREAM}
CONFIGS = {
    "batched": [],
    "immediate": ["--wakeup", "immediate"],
    "incremental": ["--incremental-streaming-output"],
}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_reset_slow_streams_stop_costing_cpu(config):
    with ServerProcess("--sim-profile", "zero", *CONFIGS[config]) as srv:
        http_pid = srv.child_pids()["http"]
        socks = [slow_client(srv.port, MODEL) for _ in range(NUM_CLIENTS)]
        for sock in socks:
            assert sock.recv(500)  # read a little, then nothing
        time.sleep(HOLD_S)
        for sock in socks:
            reset(sock)
        metrics, settle_s = wait_settled(srv.url)
        assert settle_s <= MAX_SETTLE_S, f"streams ended {settle_s:.1f} s after the resets"
        assert metrics.value("reference:num_running_reqs") == 0
        assert metrics.value("reference:num_tracked_reqs") == 0
        ended = sum(metrics.value("reference:num_requests_total", endpoint="chat", status=s)
                    for s in ("200", "499"))
        assert ended == NUM_CLIENTS, metrics.samples  # every stream ended: finished or aborted
        time.sleep(SETTLE_S)
        start = cpu_seconds(http_pid)
        time.sleep(CPU_WINDOW_S)
        window_cpu = cpu_seconds(http_pid) - start
        assert window_cpu <= MAX_WINDOW_CPU_S, f"HTTP process used {window_cpu:.2f} s of CPU"
        fresh = httpx.post(srv.url + "/v1/chat/completions",
                           json={**BODY, "max_tokens": 4, "stream": False}, timeout=10)
        assert fresh.status_code == 200
        assert fresh.json()["usage"]["completion_tokens"] == 4
