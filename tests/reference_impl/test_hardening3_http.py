"""Hardening round 3 (issue 23), HTTP framing: each test failed on the code before its fix."""

from __future__ import annotations

import socket
import threading

import httpx

from reference_impl.subprocess_server import ServerProcess

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
