"""Hostile clients for experiments and tests: slow streaming readers that reset, and the settle wait.

Each slow client asks for a long stream with a small receive buffer, reads a little, and stops
reading; ``reset`` then drops its connection with an RST (SO_LINGER 0). ``wait_settled`` polls
``/metrics`` until the server holds no request anywhere.
"""

from __future__ import annotations

import json
import socket
import struct
import time

from loadgen.measure.prometheus import Metrics, scrape

LONG_STREAM = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 120_000,
               "ignore_eos": True, "stream": True}


def slow_client(port: int, model: str, **fields) -> socket.socket:
    """A long streaming chat request (``fields`` added to its body) sent on a socket with a 4 KB
    receive buffer; the caller reads as little as it likes."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(60)
    sock.connect(("127.0.0.1", port))
    data = json.dumps({"model": model, **LONG_STREAM, **fields}).encode()
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
    return sock


def reset(sock: socket.socket) -> None:
    """Close with an RST, as a client that vanished."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def is_idle(metrics: Metrics) -> bool:
    """No running, waiting or tracked request on the reference server."""
    return all(metrics.value("reference:" + name) == 0
               for name in ("num_running_reqs", "num_waiting_reqs", "num_tracked_reqs"))


def wait_settled(url: str, timeout: float = 30.0) -> tuple[Metrics, float]:
    """``/metrics`` once the server is idle (or ``timeout`` passed), and the seconds waited."""
    start = time.monotonic()
    while True:
        metrics = scrape(url)
        waited = time.monotonic() - start
        if is_idle(metrics) or waited > timeout:
            return metrics, waited
        time.sleep(0.05)
