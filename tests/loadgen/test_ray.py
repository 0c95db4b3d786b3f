"""Workers as Ray actors (run/ray_pool.py) on real local Ray clusters, against the scripted server."""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'serving-hotpaths[ray]')")
cluster_utils = pytest.importorskip("ray.cluster_utils")

from loadgen.measure.records import RequestRecord  # noqa: E402
from loadgen.plan.config import RayConfig, RunConfig  # noqa: E402
from loadgen.plan.datasets import DatasetConfig  # noqa: E402
from loadgen.run.ray_pool import _shift  # noqa: E402
from loadgen.run.runner import run  # noqa: E402

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
SMALL = DatasetConfig(random_input_len=8, random_output_len=8, random_range_ratio=1.0)
SKEW_NS = 250_000_000


@pytest.fixture(scope="module")
def two_nodes():
    """A Ray cluster of two nodes on this machine, one CPU each (node ids differ)."""
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    session_dir = cluster.head_node.get_session_dir_path()
    yield cluster
    cluster.shutdown()
    shutil.rmtree(session_dir, ignore_errors=True)


def _cfg(server, **kw) -> RunConfig:
    return RunConfig(base_url=server.base_url, model="m", server_metrics=False, **kw)


@pytest.mark.timeout(120)
def test_local_cluster_runs_two_workers_with_exact_counts(start_server):
    server = start_server("--ttft-ms", "5", "--gap-ms", "2", "--num-tokens", "8")
    seen: list[dict] = []
    result = run(_cfg(server, concurrency=8, num_prompts=48, workers=2), SMALL,
                 lambda totals, elapsed, scraper: seen.append(totals), RayConfig("local"))
    s = result.summary
    assert s["completed"] == 48 and s["failed"] == 0 and s["total_output_tokens"] == 48 * 8
    assert sorted(r.index for r in result.records) == list(range(48))
    [host] = s["cluster"]["hosts"]
    assert host["node_id"] and host["ip"] and sorted(host["workers"]) == [0, 1] and host["streams"] == 8
    for clock in host["worker_clocks"]:
        # one machine, one CLOCK_MONOTONIC: the true offset is 0, within the stated uncertainty
        assert 0 < clock["uncertainty_ms"] and abs(clock["offset_ms"]) <= clock["uncertainty_ms"]
    assert [h["node_id"] for h in s["client_health"]["hosts"]] == [host["node_id"]]
    assert s["startup_s"] > 0
    # the live counters were read from the actors while they ran
    assert seen and all(0 <= t["done"] <= 48 and t["errors"] == 0 for t in seen)
    assert not ray.is_initialized()  # the local cluster was shut down


@pytest.mark.timeout(120)
def test_the_token_event_rule_reaches_the_actors(start_server):
    # Every second token has an empty text: the sglang rule leaves those out, in the actors too.
    server = start_server("--ttft-ms", "5", "--gap-ms", "2", "--num-tokens", "8", "--empty-every", "2")
    result = run(_cfg(server, concurrency=2, num_prompts=4, token_event_rule="sglang"), SMALL,
                 lambda totals, elapsed, scraper: None, RayConfig("local"))
    assert result.summary["completed"] == 4 and result.summary["token_event_rule"] == "sglang"
    assert all(len(r.chunk_ns) == 4 and r.num_empty_text_events == 4 for r in result.records)
    assert result.summary["output_tokens_reconciliation"]["usage_minus_client"] == 4 * 4


@pytest.mark.timeout(120)
def test_local_starts_its_own_cluster_even_beside_a_running_one(start_server, two_nodes, monkeypatch):
    # NOTE: ray.init() without an address would join RAY_ADDRESS (or a `ray start` cluster here)
    monkeypatch.setenv("RAY_ADDRESS", two_nodes.address)
    server = start_server("--ttft-ms", "5", "--gap-ms", "2", "--num-tokens", "8")
    s = run(_cfg(server, concurrency=4, num_prompts=16, workers=2), SMALL, ray_cfg=RayConfig("local")).summary
    assert s["completed"] == 16
    own = {node.node_id for node in two_nodes.list_all_nodes()}
    [host] = s["cluster"]["hosts"]
    assert host["node_id"] not in own and sorted(host["workers"]) == [0, 1]


@pytest.mark.timeout(120)
def test_strict_spread_places_one_worker_on_each_node(start_server, two_nodes):
    server = start_server("--ttft-ms", "5", "--gap-ms", "2", "--num-tokens", "8")
    ray_cfg = RayConfig(two_nodes.address, strategy="STRICT_SPREAD")
    s = run(_cfg(server, concurrency=8, num_prompts=32, workers=2), SMALL, ray_cfg=ray_cfg).summary
    assert s["completed"] == 32 and s["failed"] == 0
    hosts = s["cluster"]["hosts"]
    node_ids = {node.node_id for node in two_nodes.list_all_nodes()}
    assert {h["node_id"] for h in hosts} == node_ids and len(node_ids) == 2
    assert sorted(len(h["workers"]) for h in hosts) == [1, 1]
    assert {h["node_id"] for h in s["client_health"]["hosts"]} == node_ids


@pytest.mark.timeout(120)
def test_injected_clock_skew_is_removed_within_the_stated_uncertainty(start_server, two_nodes):
    server = start_server("--ttft-ms", "5", "--gap-ms", "2", "--num-tokens", "8")
    ray_cfg = RayConfig(two_nodes.address, test_clock_skew_ns={1: SKEW_NS})
    cfg = _cfg(server, request_rate=100.0, burstiness=math.inf, num_prompts=32, workers=2)
    result = run(cfg, SMALL, ray_cfg=ray_cfg)
    assert result.summary["completed"] == 32
    clocks = {c["worker"]: c for h in result.summary["cluster"]["hosts"] for c in h["worker_clocks"]}
    # NOTE: Cristian's method bounds the error by RTT/2, the uncertainty it states.
    error_ms = abs(clocks[1]["offset_ms"] - SKEW_NS / 1e6)
    assert error_ms <= clocks[1]["uncertainty_ms"], clocks
    assert abs(clocks[0]["offset_ms"]) <= clocks[0]["uncertainty_ms"], clocks
    # both workers started at the agreed start: in the driver's clock the intended starts of the
    # two workers' requests form one schedule, 10 ms apart (uncorrected, worker 1's would sit 250 ms
    # off it). The start and its offset are the same figure on both sides, so this is exact.
    intended = sorted(r.intended_ns for r in result.records)
    assert {r.worker for r in result.records} == {0, 1}
    assert [round((b - a) / 1e6, 3) for a, b in itertools.pairwise(intended)] == [10.0] * 31
    for r in result.records:  # every stamp moved together: per-request figures are unchanged
        assert r.intended_ns <= r.start_ns <= r.first_token_ns <= r.end_ns, r
        assert r.chunk_ns[0] == r.first_token_ns and r.chunk_ns[-1] <= r.end_ns, r


def test_a_workers_stamps_move_into_the_drivers_clock_together():
    skew = SKEW_NS + 7
    rec = RequestRecord(index=0, worker=1, intended_ns=skew + 1000, start_ns=skew + 1010, end_ns=skew + 1100,
                        first_token_ns=skew + 1020, chunk_ns=[skew + 1020, skew + 1050])
    _shift(rec, skew)
    assert (rec.intended_ns, rec.start_ns, rec.first_token_ns, rec.chunk_ns, rec.end_ns) == (
        1000, 1010, 1020, [1020, 1050], 1100)
    failed = RequestRecord(index=1, worker=1, intended_ns=skew, start_ns=skew, end_ns=skew + 5)
    _shift(failed, skew)
    assert (failed.intended_ns, failed.start_ns, failed.end_ns, failed.first_token_ns, failed.chunk_ns) == (
        0, 0, 5, None, [])


@pytest.mark.timeout(120)
def test_a_lost_worker_ends_the_run_with_its_items_as_worker_lost(start_server, two_nodes):
    server = start_server("--ttft-ms", "5", "--gap-ms", "5", "--num-tokens", "8")
    ray_cfg = RayConfig(two_nodes.address, test_exit_after={0: 3})
    result = run(_cfg(server, concurrency=4, num_prompts=40, workers=2), SMALL, ray_cfg=ray_cfg)
    s = result.summary
    assert s["workers_lost"] == 1 and result.workers_lost == 1
    assert s["completed"] == 20 and s["failed"] == 20
    assert s["errors"]["worker_lost"]["count"] == 20 and "worker 0" in s["errors"]["worker_lost"]["example"]
    assert {r.worker for r in result.records if r.error_class == "worker_lost"} == {0}
    lost = [h for h in s["cluster"]["hosts"] if h["workers_lost"]]
    assert len(lost) == 1 and lost[0]["workers_lost"] == [0]


@pytest.mark.timeout(120)
def test_a_hung_worker_is_given_up_after_timeout_and_grace(start_server, two_nodes):
    server = start_server("--ttft-ms", "5", "--gap-ms", "5", "--num-tokens", "8")
    ray_cfg = RayConfig(two_nodes.address, test_hang_after={1: 3})
    # the process lives and answers Ray, but its loop is stuck: only the stall rule (no counter
    # moved with requests in flight for --timeout 2 s + the grace) ends it
    result = run(_cfg(server, concurrency=4, num_prompts=40, workers=2, timeout_s=2.0), SMALL, ray_cfg=ray_cfg)
    s = result.summary
    assert s["workers_lost"] == 1 and s["completed"] == 20 and s["errors"]["worker_lost"]["count"] == 20
    assert "no progress" in s["errors"]["worker_lost"]["example"]


def _ray_processes(session_dir: str) -> list[str]:
    """Command lines of live processes that belong to this Ray session (its logs or sockets)."""
    out = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if session_dir in cmd:
            out.append(cmd)
    return out


def _tree(root: int) -> set[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(pid))
        except OSError:
            continue
    found, todo = set(), [root]
    while todo:
        found.add(pid := todo.pop())
        todo += children.get(pid, [])
    return found


def _listening(pids: set[int]) -> set[tuple[str, str]]:
    """(local address, process name) of every TCP socket these processes listen on (`ss -ltnp`)."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    found = set()
    for line in out.splitlines():
        for name, pid in re.findall(r'\("([^"]*)",pid=(\d+),', line):
            if int(pid) in pids:
                found.add((line.split()[3], name))
    return found


LOOPBACK = re.compile(r"^(127\.0\.0\.1|\[::ffff:127\.0\.0\.1\]|\[::1\]):\d+$")


@pytest.mark.timeout(240)
def test_local_cluster_listens_on_loopback_only_and_leaves_no_session_folder(start_server):
    server = start_server("--ttft-ms", "5", "--gap-ms", "5")
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadgen", "--base-url", server.base_url, "--model", "m", "--quiet",
         "--no-server-metrics", "--random-input-len", "8", "--random-output-len", "8",
         "--concurrency", "8", "--duration", "6", "--ray-address", "local", "--workers", "2"],
        stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while server.stats()["num_requests"] < 32:
        assert time.monotonic() < deadline and proc.poll() is None, "loadgen sent no requests"
        time.sleep(0.2)
    pids = _tree(proc.pid)  # the driver, Ray's processes and its workers, while the load runs
    listening = _listening(pids)
    session = {arg.split("=", 1)[1] for pid in pids for arg in _cmdline(pid) if arg.startswith("--session-dir=")}
    assert proc.wait(timeout=120) == 0
    names = {name for _, name in listening}
    assert {"gcs_server", "raylet"} <= names, listening  # Ray's servers were seen listening
    assert all(LOOPBACK.match(address) for address, _ in listening), sorted(listening)
    [session_dir] = session
    assert not os.path.exists(session_dir), os.listdir(session_dir)


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except OSError:
        return []


@pytest.mark.timeout(180)
def test_ctrl_c_stops_every_actor_and_keeps_the_results(start_server, popen_ctrl_c, tmp_path):
    server = start_server("--ttft-ms", "5", "--gap-ms", "5")
    out = tmp_path / "partial.json"
    proc = popen_ctrl_c(
        [sys.executable, "-m", "loadgen", "--base-url", server.base_url, "--model", "m", "--quiet",
         "--no-server-metrics", "--random-input-len", "8", "--random-output-len", "8",
         "--concurrency", "16", "--duration", "90", "--ray-address", "local", "--workers", "2",
         "--output", str(out)])
    deadline = time.monotonic() + 120
    while httpx.get(server.base_url + "/stats", timeout=10).json()["num_requests"] < 64:
        assert time.monotonic() < deadline and proc.poll() is None, "loadgen sent no requests"
        time.sleep(0.2)
    # NOTE: the session is read from this run's own processes: `session_latest` may name another
    # run's session when two local clusters start on one machine.
    sessions = {arg.split("=", 1)[1] for pid in _tree(proc.pid) for arg in _cmdline(pid)
                if arg.startswith("--session-dir=")}
    assert len(sessions) == 1, sessions
    [session] = sessions
    assert _ray_processes(session), "no process of the local Ray session found while it runs"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=90) == 130
    data = json.loads(out.read_text())
    assert data["interrupted"] is True and data["completed"] > 0 and data["duration"] < 88
    assert {h["node_id"] for h in data["summary"]["cluster"]["hosts"]}
    # every actor and the local cluster itself are gone, not left running
    deadline = time.monotonic() + 30
    while (left := _ray_processes(session)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, left
    assert not os.path.exists(session)  # and its session folder removed


@pytest.mark.timeout(180)
def test_the_warm_up_stays_out_of_the_servers_window_on_ray_too(start_server):
    # Before: the baseline scrape came before the actors' warm-up: 128 server tokens for the run's 96.
    server = start_server("--ttft-ms", "5", "--gap-ms", "2", "--num-tokens", "8", "--metrics", "vllm")
    cfg = RunConfig(base_url=server.base_url, model="m", concurrency=4, num_prompts=12, warmup=4, workers=2,
                    server_metrics_interval_s=0.2)
    result = run(cfg, SMALL, ray_cfg=RayConfig("local"))
    sm = result.server_metrics
    assert result.summary["completed"] == 12
    assert (sm["run"]["generation_tokens"], sm["run"]["ttft_count"]) == (96, 12)
    assert sm["window"] == "run"


@pytest.mark.timeout(240)
def test_a_local_cluster_run_prints_no_token_auth_warning(start_server):
    server = start_server("--ttft-ms", "5", "--gap-ms", "2", "--num-tokens", "8")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("RAY_AUTH_MODE", None)
    proc = subprocess.run([sys.executable, "-m", "loadgen", "--base-url", server.base_url, "--model", "m",
                           "--concurrency", "4", "--num-prompts", "8", "--random-input-len", "8",
                           "--random-output-len", "8", "--ray-address", "local", "--workers", "2",
                           "--no-server-metrics", "--quiet"], capture_output=True, text=True, env=env, timeout=200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Token authentication" not in proc.stderr and "WARNING" not in proc.stderr, proc.stderr[-3000:]
