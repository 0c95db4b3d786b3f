"""Run ``python -m reference_impl`` as a child process: for tests, benchmarks and scripts."""

from __future__ import annotations

import glob
import os
import signal
import socket
import subprocess
import sys
import time

import httpx

from reference_impl.launcher import COMM_PREFIX


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far, from /proc."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """A reference server in its own process group, stopped by its pid."""

    def __init__(self, *flags: str, port: int | None = None, log_path: str | None = None,
                 placement=None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.placement = placement
        self._log = open(log_path, "w") if log_path else None  # noqa: SIM115
        cmd = [sys.executable, "-m", "reference_impl", "--port", str(self.port), *flags]
        # NOTE: every process starts on the non-HTTP CPUs, so torch/OpenMP size their thread pools
        # to those CPUs (pinned only after start, a small torch report ran past 600 s here).
        preexec = placement.client_preexec() if placement else None
        self.proc = subprocess.Popen(cmd, stdout=self._log or subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True, preexec_fn=preexec)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def child_pids(self) -> dict[str, int]:
        """``{"scheduler": pid, "detokenizer": pid, "http": pid}``, read from /proc by name."""
        pids = {}
        for comm in glob.glob("/proc/[0-9]*/comm"):
            pid = int(comm.split("/")[2])
            try:
                name = open(comm).read().strip()
                ppid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == self.proc.pid and name.startswith(COMM_PREFIX):
                pids[name[len(COMM_PREFIX):]] = pid
        return pids

    def warm_up(self, timeout: float = 300.0) -> None:
        """One short streamed chat request, so one-time work (lazy imports) stays out of a measurement."""
        model = httpx.get(self.url + "/v1/models", timeout=30).json()["data"][0]["id"]
        body = {"model": model, "messages": [{"role": "user", "content": "warm up"}],
                "max_tokens": 4, "stream": True}
        response = httpx.post(self.url + "/v1/chat/completions", json=body, timeout=timeout)
        if response.status_code != 200:
            raise RuntimeError(f"warm-up request failed with HTTP {response.status_code}: "
                               f"{response.text[:300]}")

    def pin(self) -> None:
        """Move the HTTP process onto its own CPUs (the server started on the others)."""
        if self.placement is not None:
            self.placement.pin_server(self.child_pids(), self.proc.pid)

    def wait_ready(self, timeout: float = 180.0) -> ServerProcess:
        """Block until ``/health`` answers; raise if the server exits or takes too long."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                output = self.proc.stdout.read() if self.proc.stdout else f"(see {self._log.name})"
                raise RuntimeError(f"server exited with {self.proc.returncode}: {output}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"server on {self.url} not ready after {timeout:.0f} s")

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, then SIGKILL to the group if it lingers; the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self._log:
            self._log.close()
        return self.proc.returncode

    def __enter__(self) -> ServerProcess:
        return self.wait_ready()

    def __exit__(self, *exc) -> None:
        self.stop()


def start_servers(configs: dict[str, list[str]]) -> dict[str, ServerProcess]:
    """Start several servers at once and wait for all of them (stopping all on failure)."""
    servers = {name: ServerProcess(*flags) for name, flags in configs.items()}
    try:
        for server in servers.values():
            server.wait_ready()
    except BaseException:
        for server in servers.values():
            server.stop()
        raise
    return servers
