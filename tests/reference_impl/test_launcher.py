"""The launcher: a dead child ends the server non-zero, naming it; SIGTERM leaves no orphans."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.reference_impl.conftest import ServerProcess


def _children(pid: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def _server_children(srv: ServerProcess) -> list[int]:
    kids = [k for k in _children(srv.proc.pid) if "multiprocessing" in _cmdline(k)]
    kids = [k for k in kids if "resource_tracker" not in _cmdline(k)]
    assert sorted(srv.child_pids().values()) == sorted(kids)
    return kids


def _wait_gone(pids: list[int], timeout: float = 15.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def test_sigterm_stops_every_process():
    srv = ServerProcess("--sim-profile", "zero").wait_ready()
    kids = _server_children(srv)
    assert len(kids) == 3
    assert srv.stop() == 0
    assert _wait_gone(kids) == []


def test_ready_line_names_each_form_in_words_and_a_clean_sigterm_logs_no_warning(tmp_path):
    log = tmp_path / "server.log"
    srv = ServerProcess("--sim-profile", "zero", "--all-legacy", log_path=str(log)).wait_ready()
    assert srv.stop() == 0
    [ready] = [line for line in log.read_text().splitlines() if "ready on" in line]
    assert ready == (f"reference_impl ready on http://127.0.0.1:{srv.port} with forms H1 legacy, H2 legacy, "
                     "H3 legacy, H4 legacy, H5 off (no --enable-prefill-delayer), H6 legacy"), ready
    assert "WARNING" not in log.read_text(), log.read_text()


@pytest.mark.parametrize("victim", ["scheduler", "detokenizer"])
def test_dead_child_ends_server_with_its_name(victim):
    srv = ServerProcess("--sim-profile", "zero").wait_ready()
    try:
        kids = _server_children(srv)
        os.kill(srv.child_pids()[victim], signal.SIGKILL)
        output, _ = srv.proc.communicate(timeout=30)
        assert srv.proc.returncode != 0
        assert f"the {victim} process" in output
        assert _wait_gone(kids) == []
    finally:
        srv.stop()


def test_killed_launcher_takes_children_with_it():
    srv = ServerProcess("--sim-profile", "zero").wait_ready()
    kids = _server_children(srv)
    os.kill(srv.proc.pid, signal.SIGKILL)
    srv.proc.wait(10)
    assert _wait_gone(kids) == []


def test_help_documents_hot_path_flags():
    out = subprocess.run([sys.executable, "-m", "reference_impl", "--help"], capture_output=True, text=True,
                         check=True).stdout
    for flag in ("--batch-notify-size", "--incremental-streaming-output", "--enable-prefill-delayer",
                 "--prefill-delayer-max-delay-passes", "--prefill-delayer-token-usage-low-watermark",
                 "--prefill-delayer-queue-min-ratio", "--prefill-delayer-max-delay-ms",
                 "--max-running-requests", "--all-legacy", "sglang#22658", "sglang#22567",
                 "sglang#25098", "sglang#23189", "sglang#22606"):
        assert flag in out, flag


def _run_server(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reference_impl", *flags], capture_output=True,
                          text=True, timeout=180)


def test_port_in_use_prints_one_clear_line():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = _run_server("--port", str(port))
    assert result.returncode != 0
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    assert f"127.0.0.1:{port}" in lines[0] and "in use" in lines[0]


def test_torch_on_cuda_without_a_gpu_prints_one_clear_line():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    result = _run_server("--engine", "torch", "--device", "cuda", "--port", "0")
    assert result.returncode != 0
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    assert "scheduler process failed to start" in lines[0] and "CUDA" in lines[0]
    assert "Traceback" not in result.stderr
