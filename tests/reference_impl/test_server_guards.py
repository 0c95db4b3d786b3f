"""Server guards end to end: idle and half-request sockets closed, /health follows the scheduler,
a client leaving a non-streamed request is a 499 (not a 500)."""

from __future__ import annotations

import os
import signal
import socket
import time

import httpx
import pytest

from tests.reference_impl.conftest import MODEL, ServerProcess, metric

READ_TIMEOUT_S = 2


def _closed_within(sock: socket.socket, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_idle_and_half_request_sockets_are_closed_after_the_read_timeout(tmp_path):
    log = tmp_path / "server.log"
    with ServerProcess("--sim-profile", "zero", "--timeout-request-read", str(READ_TIMEOUT_S),
                       log_path=str(log)) as srv:
        idle = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(5)]
        half = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(5)]
        cut = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(3)]
        for sock in half:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Len")
        for sock in cut:  # whole headers, then only part of the body
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{")
        try:
            assert all(_closed_within(s, READ_TIMEOUT_S + 20) for s in idle + half + cut)
        finally:
            for sock in idle + half + cut:
                sock.close()
        assert httpx.get(srv.url + "/v1/models", timeout=30).status_code == 200
        metrics = httpx.get(srv.url + "/metrics", timeout=30).text
        assert metric(metrics, 'num_requests_total{endpoint="chat",status="499"}') == len(cut)
        assert metric(metrics, 'num_requests_total{endpoint="chat",status="500"}') == 0
    assert "Traceback" not in log.read_text()


def test_health_is_503_while_the_scheduler_hangs_and_200_after():
    with ServerProcess("--sim-profile", "zero", "--health-check-timeout", "1") as srv:
        scheduler = srv.child_pids()["scheduler"]
        os.kill(scheduler, signal.SIGSTOP)
        try:
            assert httpx.get(srv.url + "/health", timeout=30).status_code == 503
            metrics = httpx.get(srv.url + "/metrics", timeout=30).text
            assert metric(metrics, "scheduler_up") == 0
        finally:
            os.kill(scheduler, signal.SIGCONT)
        assert httpx.get(srv.url + "/health", timeout=30).status_code == 200
        assert metric(httpx.get(srv.url + "/metrics", timeout=30).text, "scheduler_up") == 1


def test_client_leaving_a_non_streamed_request_is_a_499_and_frees_it():
    # NOTE: the default profile sleeps >= 6 ms per decode step, so 120,000 tokens take over
    # 12 minutes of wall time on any machine: the client always leaves first.
    with ServerProcess(log_path=os.devnull) as srv:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 120_000, "ignore_eos": True}
        with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes its connection
            httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=1.5)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            text = httpx.get(srv.url + "/metrics", timeout=30).text
            if metric(text, 'num_requests_total{endpoint="chat",status="499"}') == 1:
                break
            time.sleep(0.2)
        assert metric(text, 'num_requests_total{endpoint="chat",status="499"}') == 1
        assert metric(text, 'num_requests_total{endpoint="chat",status="500"}') == 0
        assert metric(text, "num_tracked_reqs") == 0
        assert metric(text, "num_running_reqs") == 0
