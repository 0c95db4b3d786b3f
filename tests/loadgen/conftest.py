"""Fixtures: a scripted server in its own process, stopped after the test; headless Chromium."""

from __future__ import annotations

import functools
import json
import signal
import subprocess
from collections.abc import Callable

import pytest

from loadgen.selftest.testserver import spawn
from tests.chromium import chromium_runner


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


@pytest.fixture
def start_hostile_metrics():
    """Factory: start_hostile_metrics('--metrics', 'drip', ...) -> (process, base URL), a
    `loadgen.selftest.hostile_metrics` subprocess killed at teardown."""
    from loadgen.selftest.hostile_metrics import spawn

    procs = []

    def start(*flags: str):
        proc, url = spawn(*flags)
        procs.append(proc)
        return proc, url

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)
        proc.stdout.close()


def _terminal_sigint() -> None:
    # NOTE: a shell's background jobs (CI scripts started with `&`) run with SIGINT ignored and a
    # child inherits that, so Python would never raise KeyboardInterrupt: restore it as in a terminal.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def popen_ctrl_c() -> Callable[..., subprocess.Popen]:
    """`subprocess.Popen` whose child takes Ctrl-C (SIGINT) as it would in a terminal."""
    return functools.partial(subprocess.Popen, preexec_fn=_terminal_sigint)


@pytest.fixture
def certificate(tmp_path):
    """A self-signed certificate for 127.0.0.1: (cert.pem, key.pem) paths."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return str(cert), str(key)


def _refuse(name: str):
    raise ValueError(f"{name} is not JSON")


@pytest.fixture
def strict_json():
    """json.loads as strict readers do: NaN, Infinity and -Infinity are errors."""
    return lambda text: json.loads(text, parse_constant=_refuse)


@pytest.fixture(scope="session")
def chromium() -> Callable[..., subprocess.CompletedProcess]:
    """chromium(profile_dir, *args): headless Chromium run to its end; a skip when it is missing."""
    return chromium_runner()
