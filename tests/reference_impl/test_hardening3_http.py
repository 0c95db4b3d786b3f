"""Hardening round 3 (issue 23), HTTP framing: each test failed on the code before its fix."""

from __future__ import annotations

import json
import re
import socket
import threading
import time

import httpx
import pytest

from reference_impl.subprocess_server import ServerProcess
from tests.reference_impl.conftest import MODEL

LINE = b"X-Pad: " + b"a" * 8000 + b"\r\n"


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmRSS"))


def _status_line(sock: socket.socket) -> bytes:
    sock.settimeout(20)
    try:
        return sock.recv(200).split(b"\r\n")[0]
    except OSError:
        return b""


def _send_endless_head(port: int, max_bytes: int, out: list) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n")
        try:
            for _ in range(max_bytes // len(LINE)):
                sock.sendall(LINE)
        except OSError:
            pass
        out.append(_status_line(sock))


def test_endless_request_heads_get_431_and_memory_stays_flat():
    with ServerProcess("--sim-profile", "zero") as srv:
        srv.wait_ready()
        http = srv.child_pids()["http"]
        before = _rss_mb(http)
        statuses: list[bytes] = []
        threads = [threading.Thread(target=_send_endless_head, args=(srv.port, 8 * 2**20, statuses))
                   for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # NOTE: before the cap httptools buffered all 160 MiB (+160 MB RSS) and answered nothing.
        assert statuses == [b"HTTP/1.1 431 Request Header Fields Too Large"] * 20
        assert _rss_mb(http) - before < 64
        headers = {"x-pad": "a" * 60_000}  # under the 64 KiB default
        assert httpx.get(srv.url + "/health", headers=headers, timeout=30).status_code == 200
        big_body = {"tokens": [65] * 300_000}  # a body past 64 KiB is not a head
        assert httpx.post(srv.url + "/detokenize", json=big_body, timeout=60).status_code == 200


def _open_unread_stream(port: int) -> socket.socket:
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                       "max_tokens": 120_000, "ignore_eos": True, "stream": True}).encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    return sock


def _metric(text: str, sample: str) -> float:
    match = re.search(rf"^reference:{re.escape(sample)} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


@pytest.mark.parametrize("form", ["reference", "reference-full"])
def test_a_client_that_stops_reading_is_cut_off_as_499(form):
    with ServerProcess("--sim-profile", "zero", "--stream-output", form,
                       "--timeout-response-write", "1") as srv:
        srv.wait_ready()
        srv.warm_up()
        http = srv.child_pids()["http"]
        before = _rss_mb(http)
        socks = [_open_unread_stream(srv.port) for _ in range(5)]
        try:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                metrics = httpx.get(srv.url + "/metrics", timeout=30).text
                if _metric(metrics, 'num_requests_total{endpoint="chat",status="499"}') >= 5:
                    break
                assert _rss_mb(http) - before < 1000, "stopped early: memory kept growing"
                time.sleep(0.5)
        finally:
            for sock in socks:
                sock.close()
        assert _metric(metrics, 'num_requests_total{endpoint="chat",status="499"}') == 5
        assert _metric(metrics, "num_tracked_reqs") == 0
        assert _rss_mb(http) - before < 300
