"""Fixtures: a scripted server in its own process, stopped after the test."""

from __future__ import annotations

import pytest

from loadgen.selftest.testserver import spawn


class ServerProcess:
    """A `python -m loadgen.selftest.testserver` subprocess bound to 127.0.0.1."""

    def __init__(self, *flags: str) -> None:
        self.proc, self.base_url = spawn(*flags)
        self.port = int(self.base_url.rsplit(":", 1)[1])

    def stats(self) -> dict:
        import httpx

        return httpx.get(self.base_url + "/stats", timeout=10).json()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture
def start_server():
    """Factory: start_server('--ttft-ms', '30', ...) -> ServerProcess; all stopped at teardown."""
    servers: list[ServerProcess] = []

    def start(*flags: str) -> ServerProcess:
        servers.append(ServerProcess(*flags))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()
