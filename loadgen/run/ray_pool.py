"""Workers as Ray actors across a cluster's hosts (`--ray-address`): the same pool interface as the
forked `_Pool` (`totals`, `poll`, `is_done`, `stop`, `terminate`, `results`, `start_ns`).

Each worker is one long-lived actor process running the same `_Worker` uvloop code and transport
as a forked worker; a threaded actor (`max_concurrency`) lets the driver read its live counters,
send the start and the stop while `run` is busy. Actors are placed with a placement group of one
CPU per worker (`--ray-strategy`, SPREAD by default).

One clock: every host stamps with its own perf_counter_ns. Before the run the driver estimates each
worker's offset to its own clock by Cristian's method (the round trip with the smallest RTT:
offset = worker clock - (driver send + RTT/2), uncertainty = RTT/2), picks the start in its own
clock and each worker converts it to its own. The records that come back are moved to the driver's
clock (offset subtracted from every stamp: differences, hence TTFT/ITL/E2E, are unchanged).

A worker whose actor or node is lost mid-run is reported, and the items of its plan become failed
records of class `worker_lost`; the run ends with the others' results.

This module imports ray at its top: the runner imports it only when `--ray-address` is given.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import logging
import os
import shutil
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import msgspec
import ray
from ray._private import ray_constants
from ray.exceptions import GetTimeoutError, RayError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

import loadgen
from loadgen.measure.records import RequestRecord, WorkerResult
from loadgen.plan.config import RayConfig, RunConfig
from loadgen.run.clock import SKEW_ENV, now_ns
from loadgen.run.pool import STOP_GRACE_S, SetupError, live_totals
from loadgen.run.worker import BARRIER_TIMEOUT_S, NUM_COUNTERS, LiveCount, WorkerPlan, _Worker

CLOCK_ROUNDS = 16
MIN_START_DELAY_NS = 100_000_000
PLACEMENT_TIMEOUT_S = 60.0
CALL_TIMEOUT_S = 60.0
LIVE_TIMEOUT_S = 0.1
ACTOR_THREADS = 4  # run, wait_ready, and the driver's short calls (clock, live, start, stop)
WORKER_LOST = "worker_lost"
_CLUSTERS_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
TOKEN_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


class _Gate:
    """The actor's stand-in for the fork pool's barrier and shared start: `wait` says "warm" and
    blocks until the driver's start arrives; `value` is then the start in this worker's clock."""

    def __init__(self) -> None:
        self.ready, self.go, self.value = threading.Event(), threading.Event(), 0

    def wait(self, timeout: float) -> None:
        self.ready.set()
        if not self.go.wait(timeout):
            raise threading.BrokenBarrierError("no start from the driver")


class WorkerActor:
    """One worker process on some node of the cluster (used through `ray.remote`)."""

    def __init__(self, cfg: RunConfig, plan: WorkerPlan, fail_after: tuple[int, str] | None = None) -> None:
        self.cfg, self.plan, self.fail_after = cfg, plan, fail_after
        # NOTE: _Worker writes its slots at plan.worker * NUM_COUNTERS; the array is sized for that.
        self.counters = array.array("q", bytes(8 * NUM_COUNTERS * (plan.worker + 1)))
        self.base = plan.worker * NUM_COUNTERS
        self.stop_event, self.gate = threading.Event(), _Gate()

    def info(self) -> dict:
        """Where this worker runs."""
        return {"node_id": ray.get_runtime_context().get_node_id(), "ip": ray.util.get_node_ip_address(),
                "hostname": socket.gethostname(), "pid": os.getpid()}

    def clock(self) -> int:
        """This worker's clock, for the driver's offset estimate."""
        return now_ns()

    def run(self) -> bytes:
        """Run the plan on uvloop (blocks until done); the WorkerResult, msgpack-encoded."""
        import uvloop

        if self.fail_after is not None:
            threading.Thread(target=self._fail_after, args=self.fail_after, daemon=True).start()
        worker = _Worker(self.cfg, self.plan, self.counters, self.stop_event)

        async def main() -> WorkerResult:
            self.loop = asyncio.get_running_loop()
            return await worker.run(self.gate, self.gate)

        return msgspec.msgpack.encode(uvloop.run(main()))

    def wait_ready(self) -> bool:
        """Block until the warm-up is done and the worker waits for its start."""
        return self.gate.ready.wait(BARRIER_TIMEOUT_S)

    def start(self, driver_start_ns: int, offset_ns: int) -> None:
        """Start at `driver_start_ns` of the driver's clock, converted to this worker's."""
        self.gate.value = driver_start_ns + offset_ns
        self.gate.go.set()

    def live(self) -> list[int]:
        """This worker's live counters (the `LiveCount` slots and its TTFT ring)."""
        return self.counters[self.base:self.base + NUM_COUNTERS].tolist()

    def stop(self) -> None:
        """Ctrl-C: cancel what is in flight and return what finished."""
        self.stop_event.set()

    def _fail_after(self, num_done: int, how: str) -> None:
        # NOTE: test hook only (RayConfig.test_exit_after / test_hang_after): a worker process lost
        # mid-run, or one whose event loop hangs while the process still answers Ray calls.
        while self.counters[self.base + LiveCount.DONE] < num_done:
            time.sleep(0.005)
        if how == "hang":
            self.loop.call_soon_threadsafe(time.sleep, 3600)
            return
        os._exit(1)


def _package_path() -> str:
    """PYTHONPATH for the actors: the folder holding the driver's `loadgen` (a worktree or an
    install) ahead of the node's own PYTHONPATH (Ray expands `${PYTHONPATH}` on the node); a host
    without that folder imports its installed loadgen."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(loadgen.__file__)))
    return f"{root}{os.pathsep}${{PYTHONPATH}}"


class RayCluster:
    """The driver's connection to a Ray cluster for one run; `close` leaves it (and stops a
    `local` one, listening on 127.0.0.1 only, and removes its session folder)."""

    def __init__(self, rcfg: RayConfig, num_workers: int) -> None:
        began = time.perf_counter()
        self.rcfg = rcfg
        self.is_owner = not ray.is_initialized()
        self.session_dir: str | None = None  # a `local` cluster's, removed by close()
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        kwargs = {"log_to_driver": False, "logging_level": logging.WARNING, "namespace": "loadgen",
                  "runtime_env": {"env_vars": {"PYTHONPATH": _package_path()}}}
        kwargs["address"] = rcfg.address
        is_local = rcfg.address == "local" and self.is_owner
        if is_local:
            # NOTE: "local" starts a new instance even when RAY_ADDRESS or a `ray start` cluster on
            # this machine would otherwise be joined (and refuse num_cpus).
            kwargs.update(num_cpus=max(len(os.sched_getaffinity(0)), num_workers), include_dashboard=False)
        try:
            if self.is_owner:
                with _loopback_only(is_local), _without_token_auth_notice(is_local):
                    context = ray.init(**kwargs)
                if is_local:
                    self.session_dir = context.address_info["session_dir"]
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise SetupError(f"cannot join the Ray cluster at {rcfg.address!r}: {exc}") from None
        self.connect_s = time.perf_counter() - began  # ray.init: a `local` cluster's start

    @property
    def num_cpus(self) -> int:
        """Usable CPUs on every alive node (the default worker count with Ray)."""
        return max(1, int(sum(n["Resources"].get("CPU", 0) for n in ray.nodes() if n["Alive"])))

    def pool(self, cfg: RunConfig, plans: list[WorkerPlan]) -> RayPool:
        """Place and start the workers."""
        pool = RayPool(cfg, plans, self.rcfg)
        pool.connect_s = self.connect_s
        return pool

    def close(self) -> None:
        if self.is_owner:
            ray.shutdown()
        if self.session_dir is not None:
            _remove_session(self.session_dir)


@contextlib.contextmanager
def _loopback_only(is_local: bool):
    """While a `local` cluster starts: its node address is 127.0.0.1, so that the GCS, the raylet,
    the workers' gRPC servers, the runtime-env agent and the autoscaler's metrics server listen on
    127.0.0.1 only (Ray's own choice where clusters are off, as on macOS and Windows)."""
    if not is_local:
        yield
        return
    # NOTE: Ray reads RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER once, at import, into ENABLE_RAY_CLUSTER:
    # the module constant serves this driver, the variable the processes Ray starts.
    saved = ray_constants.ENABLE_RAY_CLUSTER, os.environ.get(_CLUSTERS_ENV)
    ray_constants.ENABLE_RAY_CLUSTER, os.environ[_CLUSTERS_ENV] = False, "0"
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved[0]
        if saved[1] is None:
            os.environ.pop(_CLUSTERS_ENV, None)
        else:
            os.environ[_CLUSTERS_ENV] = saved[1]


@contextlib.contextmanager
def _without_token_auth_notice(is_local: bool):
    """While a `local` cluster starts: without Ray's warning that it turned token authentication on
    (its default for a new cluster; the auth stays on), noise for a throwaway loopback cluster."""
    if not is_local:
        yield
        return
    log = logging.getLogger(TOKEN_AUTH_LOGGER)
    notice = lambda record: not record.getMessage().startswith("Token authentication is enabled")  # noqa: E731
    log.addFilter(notice)
    try:
        yield
    finally:
        log.removeFilter(notice)


def _remove_session(session_dir: str) -> None:
    """Remove a stopped local cluster's session folder (logs, sockets: about 200 KB a run) and the
    `session_latest` link when it still points there; one line if that fails."""
    latest = os.path.join(os.path.dirname(session_dir), "session_latest")
    if os.path.islink(latest) and os.path.realpath(latest) == os.path.realpath(session_dir):
        with contextlib.suppress(OSError):
            os.unlink(latest)
    shutil.rmtree(session_dir, ignore_errors=True)
    if os.path.exists(session_dir):
        print(f"loadgen: could not remove the local Ray session folder {session_dir}", file=sys.stderr)


class RayPool:
    """The worker actors, their clock offsets, their live counters and their results."""

    def __init__(self, cfg: RunConfig, plans: list[WorkerPlan], rcfg: RayConfig) -> None:
        created_ns = now_ns()
        self.cfg, self.plans, self.rcfg = cfg, plans, rcfg
        self.pg = placement_group([{"CPU": 1}] * len(plans), strategy=rcfg.strategy)
        ready, _ = ray.wait([self.pg.ready()], timeout=PLACEMENT_TIMEOUT_S)
        if not ready:
            remove_placement_group(self.pg)
            raise SetupError(f"Ray could not place {len(plans)} workers of 1 CPU each with "
                             f"{rcfg.strategy} within {PLACEMENT_TIMEOUT_S:g} s (alive nodes: "
                             f"{_alive_cpus()}); lower --workers or change --ray-strategy")
        self.actors = [self._actor(plan, i) for i, plan in enumerate(plans)]
        try:
            self.infos = ray.get([a.info.remote() for a in self.actors], timeout=CALL_TIMEOUT_S)
            with ThreadPoolExecutor(max_workers=min(8, len(plans))) as ex:
                self.clocks = list(ex.map(estimate_offset, self.actors))
        except BaseException as exc:  # NOTE: Ctrl-C or a failed start: leave nothing behind
            self.close()
            if isinstance(exc, RayError):
                raise SetupError(f"the Ray workers did not start: {type(exc).__name__}: {exc}") from None
            raise
        self.refs = [a.run.remote() for a in self.actors]
        self.ready_refs = [a.wait_ready.remote() for a in self.actors]
        self.results: dict[int, WorkerResult | None] = {}
        self.lost_records: list[RequestRecord] = []
        self.lost: dict[int, str] = {}
        self.live_cache = [[0] * NUM_COUNTERS for _ in plans]
        self.start_ns = SimpleNamespace(value=0)
        self.on_warm = None  # called once every worker is warm, before the start (runner.py)
        self.startup_s: float | None = None
        self.connect_s: float | None = None
        self.created_ns = created_ns
        self.alive_ns = [now_ns()] * len(plans)
        self.live_refs: dict = {}

    def _actor(self, plan: WorkerPlan, bundle: int):
        env = {"PYTHONPATH": _package_path()}
        if (skew := self.rcfg.test_clock_skew_ns.get(plan.worker)) is not None:
            env[SKEW_ENV] = str(skew)
        return _REMOTE.options(
            num_cpus=1, max_concurrency=ACTOR_THREADS, runtime_env={"env_vars": env},
            scheduling_strategy=PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=bundle),
        ).remote(self.cfg, plan, _fail_hook(self.rcfg, plan.worker))

    def _try_start(self) -> None:
        """Once every worker is warm (or gone), send the start: now + a delay that covers the calls."""
        ready, _ = ray.wait(self.ready_refs, num_returns=len(self.ready_refs), timeout=0)
        if len(ready) < len(self.ready_refs):
            return
        if self.on_warm is not None:
            self.on_warm()
        max_rtt = max(2 * unc for _, unc in self.clocks)
        start = now_ns() + max(MIN_START_DELAY_NS, 4 * max_rtt)
        for i, actor in enumerate(self.actors):
            if i not in self.results:
                actor.start.remote(start, self.clocks[i][0])
        self.start_ns.value = start
        self.startup_s = (start - self.created_ns) / 1e9

    def poll(self, timeout: float) -> None:
        """Collect any finished (or lost) worker's result (waits at most `timeout`)."""
        if not self.start_ns.value:
            self._try_start()
        pending = [self.refs[i] for i in range(len(self.refs)) if i not in self.results]
        ready, _ = ray.wait(pending, num_returns=1, timeout=timeout)
        if ready:
            ready, _ = ray.wait(pending, num_returns=len(pending), timeout=0)
        for ref in ready:
            self._collect(self.refs.index(ref))
        self._read_live()
        # NOTE: every request ends within --timeout, so a worker with requests in flight moves its
        # counters at least that often; one that neither moves nor answers idle for --timeout plus
        # a grace (a hung process, a partitioned node) is given up, never waited for.
        stalled_ns = (self.cfg.timeout_s + STOP_GRACE_S) * 1e9
        for i in range(len(self.actors)):
            if i not in self.results and now_ns() - self.alive_ns[i] > stalled_ns:
                ray.kill(self.actors[i])
                self._lose(i, f"no progress for --timeout + {STOP_GRACE_S:g} s")

    def _collect(self, i: int) -> None:
        try:
            result = msgspec.msgpack.decode(ray.get(self.refs[i], timeout=CALL_TIMEOUT_S), type=WorkerResult)
        except RayError as exc:
            self._lose(i, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            return
        off, info = self.clocks[i][0], self.infos[i]
        for rec in result.records:
            _shift(rec, off)
        result.health.host, result.health.node_id = f"{info['hostname']} ({info['ip']})", info["node_id"]
        self.results[i] = result

    def _lose(self, i: int, why: str) -> None:
        """Worker i is gone: its plan's items become failed `worker_lost` records."""
        info, at = self.infos[i], now_ns()
        msg = f"worker {self.plans[i].worker} on {info['hostname']} ({info['ip']}) lost: {why}"
        print(f"loadgen: {msg}", file=sys.stderr)
        self.lost[i] = why
        self.results[i] = None
        self.lost_records += [
            RequestRecord(index=it.index, worker=self.plans[i].worker, intended_ns=at, start_ns=at, end_ns=at,
                          error_class=WORKER_LOST, error_message=msg, input_len=it.input_len,
                          is_exact_input_len=it.is_exact_input_len, output_len_asked=it.output_len)
            for it in self.plans[i].items]

    def _read_live(self) -> None:
        """Read the running workers' live counters (a slow one keeps its last values); a worker
        shows it is alive when its counters moved or it answered with nothing in flight."""
        # NOTE: one call in flight per worker, kept across polls, so a far host's slow answers
        # still count (a new call only once the last one answered).
        for i in range(len(self.actors)):
            if i not in self.results and i not in self.live_refs.values():
                self.live_refs[self.actors[i].live.remote()] = i
        ready, _ = ray.wait(list(self.live_refs), num_returns=len(self.live_refs), timeout=LIVE_TIMEOUT_S)
        for ref in ready:
            i = self.live_refs.pop(ref)
            try:
                live = ray.get(ref)
            except RayError:
                continue  # NOTE: a lost worker is reported by poll(), which reads its run() result
            if live != self.live_cache[i] or live[LiveCount.IN_FLIGHT] == 0:
                self.alive_ns[i] = now_ns()
            self.live_cache[i] = live

    def totals(self) -> dict:
        """The live counters summed over the workers, as last read by `poll`."""
        return live_totals([v for c in self.live_cache for v in c])

    @property
    def is_done(self) -> bool:
        return len(self.results) == len(self.actors)

    def stop(self) -> None:
        """Ask every running worker to stop (Ctrl-C); `terminate` kills those still running."""
        for i, actor in enumerate(self.actors):
            if i not in self.results:
                actor.stop.remote()

    def terminate(self) -> None:
        for i, actor in enumerate(self.actors):
            if i not in self.results:
                ray.kill(actor)
                self._lose(i, "killed: no result within the grace period")

    def close(self) -> None:
        """Kill the actors and free their placement group."""
        for actor in self.actors:
            ray.kill(actor)
        remove_placement_group(self.pg)

    def cluster_summary(self) -> dict:
        """The `summary.cluster` block: each host's node id, address, clock offset, workers, streams."""
        hosts: dict[str, dict] = {}
        for i, (plan, info, (off, unc)) in enumerate(zip(self.plans, self.infos, self.clocks, strict=True)):
            h = hosts.setdefault(info["node_id"], {
                "node_id": info["node_id"], "ip": info["ip"], "hostname": info["hostname"],
                "offset_ms": None, "uncertainty_ms": None, "workers": [], "streams": 0, "requests": 0,
                "worker_clocks": [], "workers_lost": []})
            h["workers"].append(plan.worker)
            h["streams"] += self.cfg.worker_concurrency(plan.worker) or 0
            h["requests"] += len(plan.items)
            h["worker_clocks"].append({"worker": plan.worker, "offset_ms": off / 1e6, "uncertainty_ms": unc / 1e6})
            if i in self.lost:
                h["workers_lost"].append(plan.worker)
            if h["uncertainty_ms"] is None or unc / 1e6 < h["uncertainty_ms"]:
                h["offset_ms"], h["uncertainty_ms"] = off / 1e6, unc / 1e6
        return {"address": self.rcfg.address, "strategy": self.rcfg.strategy, "num_hosts": len(hosts),
                "connect_s": self.connect_s, "startup_s": self.startup_s,
                "clock": "offset = worker perf_counter_ns - driver's, by the round trip with the least "
                         f"RTT of {CLOCK_ROUNDS} (uncertainty = RTT/2); stamps moved to the driver's clock",
                "hosts": list(hosts.values())}


def estimate_offset(actor, rounds: int = CLOCK_ROUNDS) -> tuple[int, int]:
    """(offset, uncertainty) in ns of the actor's clock to ours, by Cristian's method: of several
    round trips, the one with the smallest RTT; offset = theirs - (our send + RTT/2), error <= RTT/2."""
    best: tuple[int, int] | None = None
    for _ in range(rounds):
        sent = now_ns()
        theirs = ray.get(actor.clock.remote(), timeout=CALL_TIMEOUT_S)
        rtt = now_ns() - sent
        if best is None or rtt < best[0]:
            best = (rtt, theirs - (sent + rtt // 2))
    assert best is not None
    return best[1], (best[0] + 1) // 2


def _fail_hook(rcfg: RayConfig, worker: int) -> tuple[int, str] | None:
    if worker in rcfg.test_exit_after:
        return rcfg.test_exit_after[worker], "exit"
    if worker in rcfg.test_hang_after:
        return rcfg.test_hang_after[worker], "hang"
    return None


def _shift(rec: RequestRecord, off: int) -> None:
    """Move a record's stamps from its worker's clock to the driver's."""
    rec.intended_ns -= off
    rec.start_ns -= off
    rec.end_ns -= off
    if rec.first_token_ns is not None:
        rec.first_token_ns -= off
    if rec.chunk_ns:
        rec.chunk_ns = [t - off for t in rec.chunk_ns]


def _alive_cpus() -> str:
    try:
        nodes = [n for n in ray.nodes() if n["Alive"]]
    except (RayError, GetTimeoutError):
        return "unknown"
    return ", ".join(f"{n['NodeManagerAddress']} {n['Resources'].get('CPU', 0):g} CPU" for n in nodes)


_REMOTE = ray.remote(WorkerActor)
