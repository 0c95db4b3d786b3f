"""Issue 23 item 10, small items, on real processes started with ``--port 0``: the printed port,
junk IPC frames, the IPC dir after ``kill -9``, ``--api-key``, a tiny ``top_p``, fd exhaustion.
Each test failed on the code before its fix."""

from __future__ import annotations

import os
import re
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import msgspec
import openai
import pytest
import zmq

from tests.reference_impl.conftest import MODEL, metric

READY = re.compile(r"reference_impl ready on http://([^:\s]+):(\d+) ")
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


class Launched:
    """``python -m reference_impl --port 0 ...`` in its own session, output to a log file."""

    def __init__(self, tmp_path: Path, *flags: str, preexec=None):
        self.log_path = tmp_path / "server.log"
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "reference_impl", "--port", "0", "--sim-profile", "zero",
                 "--log-level", "info", *flags],
                stdout=log, stderr=subprocess.STDOUT, preexec_fn=preexec, start_new_session=True)
        self.port = self._wait_ready()
        self.url = f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text()

    def _wait_ready(self, timeout: float = 180.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = READY.search(self.log())
            if match:
                return int(match.group(2))
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            time.sleep(0.2)
        self.stop()
        raise AssertionError(f"no ready line after {timeout:.0f} s:\n{self.log()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@pytest.fixture
def launch(tmp_path):
    servers: list[Launched] = []

    def start(*flags: str, preexec=None) -> Launched:
        servers.append(Launched(tmp_path, *flags, preexec=preexec))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def test_port_0_prints_the_port_it_listens_on(launch):
    srv = launch()
    assert srv.port != 0
    assert httpx.get(srv.url + "/health", timeout=30).status_code == 200
    assert httpx.post(srv.url + "/v1/chat/completions", json=CHAT, timeout=60).status_code == 200
    assert f"Uvicorn running on http://127.0.0.1:{srv.port}" in srv.log()


def _children(launcher_pid: int) -> list[int]:
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == launcher_pid:
                pids.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return pids


def _ipc_dir(launcher_pid: int) -> Path:
    """The directory of the server's IPC sockets, from the unix sockets its children hold."""
    inodes = set()
    for pid in _children(launcher_pid):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) == 8 and fields[6] in inodes and fields[7].endswith("/scheduler_in"):
            return Path(fields[7]).parent
    raise AssertionError("no scheduler_in socket found")


JUNK = [b"", b"\xff\xfe not msgpack", b"\x91" * 10_000, b"\x81\xa4type\xa4Nope",
        msgspec.msgpack.encode({"type": "TokenizedGenerateReq", "rid": 5})]


def test_junk_frames_on_every_ipc_inbox_are_dropped_and_logged(launch):
    srv = launch()
    ipc_dir = _ipc_dir(srv.proc.pid)
    ctx = zmq.Context()
    try:
        for name in ("scheduler_in", "detokenizer_in", "tokenizer_manager_in"):
            sock = ctx.socket(zmq.PUSH)
            sock.setsockopt(zmq.LINGER, 5000)
            sock.connect(f"ipc://{ipc_dir / name}")
            for frame in JUNK:
                sock.send(frame)
            sock.close()  # lingers until every frame is handed over
    finally:
        ctx.term()
    for _ in range(3):
        response = httpx.post(srv.url + "/v1/chat/completions", json=CHAT, timeout=60)
        assert response.status_code == 200, response.text
    assert srv.proc.poll() is None
    for name in ("scheduler_in", "detokenizer_in", "tokenizer_manager_in"):
        assert re.search(rf"dropped a frame of \d+ bytes on {name} .*; 4 dropped so far", srv.log())


def test_kill_9_of_the_launcher_leaves_no_ipc_dir(launch):
    srv = launch()
    ipc_dir = _ipc_dir(srv.proc.pid)
    children = _children(srv.proc.pid)
    assert ipc_dir.is_dir() and len(children) >= 3
    os.kill(srv.proc.pid, signal.SIGKILL)
    srv.proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (ipc_dir.exists() or not all(map(_is_gone, children))):
        time.sleep(0.1)
    assert not ipc_dir.exists(), sorted(os.listdir(ipc_dir))
    assert all(map(_is_gone, children))


def _is_gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def test_api_key_guards_v1_as_vllm_does(launch):
    srv = launch("--api-key", "sekrit-key")
    good = openai.OpenAI(base_url=srv.url + "/v1", api_key="sekrit-key", max_retries=0, timeout=60)
    reply = good.chat.completions.create(model=MODEL, messages=CHAT["messages"], max_tokens=4)
    assert reply.choices[0].finish_reason == "length"
    chunks = list(good.chat.completions.create(model=MODEL, messages=CHAT["messages"],
                                               max_tokens=4, stream=True))
    assert chunks[-1].choices[0].finish_reason == "length"
    assert [m.id for m in good.models.list()] == [MODEL]
    bad = openai.OpenAI(base_url=srv.url + "/v1", api_key="wrong", max_retries=0, timeout=60)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model=MODEL, messages=CHAT["messages"], max_tokens=4)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    bare = httpx.post(srv.url + "/v1/completions", json={"model": MODEL, "prompt": "hi"}, timeout=60)
    assert bare.status_code == 401
    assert bare.json()["error"]["code"] == "invalid_api_key"
    for path in ("/health", "/metrics"):  # open, as in vLLM
        assert httpx.get(srv.url + path, timeout=60).status_code == 200
    assert httpx.options(srv.url + "/v1/models", timeout=60).status_code == 204
    metrics = httpx.get(srv.url + "/metrics", timeout=60).text
    assert metric(metrics, 'num_requests_total{endpoint="chat",status="401"}') == 1
    assert "no authentication" not in srv.log()


@pytest.mark.parametrize("source", ["--api-key-file", "VLLM_API_KEY"])
def test_an_api_key_from_a_file_or_vllms_variable_is_not_in_ps(launch, tmp_path, monkeypatch, source):
    key = "sekrit-k3y-" + source.strip("-")
    if source == "VLLM_API_KEY":
        monkeypatch.setenv("VLLM_API_KEY", key)
        srv = launch()
    else:
        (tmp_path / "key").write_text(key + "\n")
        srv = launch("--api-key-file", str(tmp_path / "key"))
    # every process of the server (its own session): the launcher and its three children
    ps = subprocess.run(["ps", "-o", "args=", "-s", str(srv.proc.pid)], capture_output=True, text=True,
                        check=True).stdout.splitlines()
    assert len(ps) >= 4 and not [line for line in ps if key in line], ps
    ok = httpx.get(srv.url + "/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=60)
    assert ok.status_code == 200
    assert httpx.get(srv.url + "/v1/models", timeout=60).status_code == 401


@pytest.mark.parametrize("flags, warned", [((), True), (("--api-key", "k"), False)])
def test_a_non_loopback_host_without_api_key_is_warned_about(flags, warned):
    # NOTE: 192.0.2.1 (TEST-NET-1) is no address of this machine: the server fails to bind it
    # after the warning, so nothing ever listens beyond 127.0.0.1.
    done = subprocess.run([sys.executable, "-m", "reference_impl", "--host", "192.0.2.1",
                           "--port", "30999", *flags], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert ("warning: --host 192.0.2.1 is not a loopback address and the server has no "
            "authentication" in done.stderr) is warned, done.stderr


def test_a_top_p_below_float32_keeps_the_most_likely_token(launch):
    srv = launch("--engine", "torch", "--device", "cpu", "--max-total-tokens", "4096",
                 "--context-length", "512")
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=300)
    model = client.models.list().data[0].id
    messages = [{"role": "user", "content": "Grüße aus 東京"}]

    def content(**sampling) -> str:
        reply = client.chat.completions.create(model=model, messages=messages, max_tokens=24,
                                               **sampling)
        return reply.choices[0].message.content

    greedy = content(temperature=0)
    for seed in (1, 2, 3):  # 1e-300 was 0.0 in float32: no token kept, the last candidate drawn
        assert content(temperature=1.0, top_p=1e-300, seed=seed) == greedy


def _limit_open_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (MAX_FDS, MAX_FDS))


MAX_FDS = 128  # the server's three processes each take about 35 files of their own
FD_WARNING = "open connections have used up nearly all 128 open files"


def _open_connections(port: int, count: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(count)]


def _wait_for_log(srv: Launched, text: str, count: int) -> None:
    deadline = time.monotonic() + 60
    while srv.log().count(text) < count and time.monotonic() < deadline:
        time.sleep(0.2)
    assert srv.log().count(text) == count, srv.log()[-2000:]


def _wait_until_serving(srv: Launched) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.post(srv.url + "/v1/chat/completions", json=CHAT, timeout=30).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise AssertionError("the server did not serve again after the connections closed")


def test_running_out_of_open_files_is_logged_once_per_burst(launch):
    srv = launch(preexec=_limit_open_files)
    for burst in (1, 2):
        socks = _open_connections(srv.port, 2 * MAX_FDS)
        _wait_for_log(srv, FD_WARNING, burst)
        for sock in socks:
            sock.close()
        _wait_until_serving(srv)
    _wait_for_log(srv, FD_WARNING, 2)
    assert srv.proc.poll() is None
