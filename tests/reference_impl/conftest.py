"""Real reference servers on 127.0.0.1 for end-to-end tests, started and stopped by pid."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
MODEL = "reference-sim"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """``python -m reference_impl`` in a subprocess (its own process group)."""

    def __init__(self, *flags: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(os.devnull, "w")  # noqa: SIM115
        cmd = [sys.executable, "-m", "reference_impl", "--port", str(self.port), *flags]
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True)

    def wait_ready(self, timeout: float = 120.0) -> ServerProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.proc.stdout.read()}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"server on {self.url} not ready after {timeout} s")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode


def start_servers(configs: dict[str, list[str]]) -> dict[str, ServerProcess]:
    """Start several servers at once and wait for all of them."""
    servers = {name: ServerProcess(*flags) for name, flags in configs.items()}
    try:
        for server in servers.values():
            server.wait_ready()
    except BaseException:
        for server in servers.values():
            server.stop()
        raise
    return servers


@pytest.fixture(scope="session")
def server():
    """One optimized server with a fast latency profile, shared by tests that only need one."""
    srv = ServerProcess("--sim-profile", "zero").wait_ready()
    yield srv
    srv.stop()


def sse_events(response: httpx.Response) -> list[str]:
    """The ``data:`` payloads of an SSE response, in order."""
    events = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            events.append(line[len("data: "):])
        elif line:
            raise AssertionError(f"unexpected SSE line {line!r}")
    return events


def stream_chunks(url: str, path: str, body: dict) -> tuple[list[dict], str]:
    """POST a streaming request; the parsed chunks and the last event (should be [DONE])."""
    with httpx.stream("POST", url + path, json={**body, "stream": True}, timeout=60) as response:
        assert response.status_code == 200, response.read()
        events = sse_events(response)
    return [json.loads(e) for e in events[:-1]], events[-1]
