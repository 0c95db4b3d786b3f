"""The client verdict: can this run's latencies be trusted as the server's, and if not, why.

With kernel receive stamps (the lean transport on Linux) a late event loop no longer moves a
latency, so the verdict asks what still can: were stamps exact (a read that held several events
stamps them all at its last byte), did the client drain its sockets (a full receive queue stalls
the server's writes), did it refill concurrency slots or send rate-mode requests on time, and did
the realtime clock step. With loop stamps it keeps the loop-lag rule. Either way it names the
cause with figures: the machine was busy (the worker waited for a CPU held by other processes,
from schedstat), the worker saturated its core, or its loop fell behind. See loadgen/README.md,
"Client health".
"""

from __future__ import annotations

import numpy as np

from loadgen.measure.records import RequestRecord, WorkerHealth
from loadgen.measure.sketch import LogHistogram
from loadgen.plan.config import (
    CLIENT_BOUND_CPU_SHARE,
    CLIENT_BOUND_IDLE_SHARE,
    CLIENT_BOUND_LOOP_LAG_MS,
    CLIENT_BOUND_SEND_LAG_MS,
    CLIENT_BOUND_STAMP_MS,
    CLIENT_BOUND_STAMP_SHARE,
    CLIENT_BOUND_UNCERTAIN_EVENTS,
    MACHINE_BUSY_WAIT_SHARE,
    RunConfig,
)

STARTUP_GRACE_S = 1.0
MIN_STEADY_LAG_SAMPLES = 20


def steady_lags(h: WorkerHealth) -> tuple[np.ndarray | None, float | None]:
    """Loop-lag samples after the start-up burst, and when that burst ended (seconds from the start).

    The burst lasts until the worker first had all its streams in flight (after `--ramp-up`, if
    any), plus STARTUP_GRACE_S. (None, ...) when there is no such moment or too little after it."""
    if h.full_at_s is None or len(h.lag_at_s) != len(h.loop_lag_ms):
        return None, None
    cut = h.full_at_s + STARTUP_GRACE_S
    steady = np.asarray(h.loop_lag_ms)[np.asarray(h.lag_at_s) > cut]
    return (steady if steady.size >= MIN_STEADY_LAG_SAMPLES else None), cut


def _name(h: WorkerHealth) -> str:
    return f"worker {h.worker}" + (f" on {h.host}" if h.host else "")


def _run_wait(h: WorkerHealth) -> dict:
    """Time the worker was runnable but waited for a CPU: its share of the wall time, p99 per tick."""
    waits = np.asarray(h.run_wait_ms or [0.0])
    share = float(waits.sum()) / (h.wall_s * 1e3) if h.wall_s > 0 and h.run_wait_ms else None
    return {"run_wait_share": share, "run_wait_p99_ms": float(np.percentile(waits, 99)) if h.run_wait_ms else None,
            "involuntary_switches": h.num_involuntary_switches}


def _worker_health(h: WorkerHealth, reasons: list[str], notes: list[str], is_kernel: bool) -> dict:
    lag = np.asarray(h.loop_lag_ms or [0.0])
    steady, cut = steady_lags(h)
    num_reasons, name = len(reasons), _name(h)
    w = {"worker": h.worker, "cpu_s": h.cpu_s, "wall_s": h.wall_s, "cpu_share": h.cpu_share,
         "stamp_source": h.stamp_source,
         "loop_lag_p50_ms": float(np.median(lag)), "loop_lag_p99_ms": float(np.percentile(lag, 99)),
         "loop_lag_max_ms": float(lag.max()),
         "loop_lag_steady_p99_ms": None if steady is None else float(np.percentile(steady, 99)),
         "startup_burst_s": cut, "num_events": h.num_events, "parse_cpu_s": h.parse_cpu_s,
         "read_cpu_us_per_event": (h.cpu_s * 1e6 / h.num_events) if h.num_events else None,
         "parse_cpu_us_per_event": (h.parse_cpu_s * 1e6 / h.num_events) if h.num_events else None,
         "cpu_us_per_event": ((h.cpu_s + h.parse_cpu_s) * 1e6 / h.num_events) if h.num_events else None,
         "sys_cpu_s": h.sys_cpu_s, "sleeps_per_s": h.num_sleeps / h.wall_s if h.wall_s > 0 else 0.0,
         **_run_wait(h)}
    p99, steady_p99 = w["loop_lag_p99_ms"], w["loop_lag_steady_p99_ms"]
    if is_kernel:
        # NOTE: with kernel stamps a busy core or a late loop is a cause, not a reason by itself:
        # what it does to the figures is judged from the stamps, the queues and the refills.
        if h.cpu_share >= CLIENT_BOUND_CPU_SHARE:
            notes.append(f"{name} used {h.cpu_share:.0%} of a core (event-loop lag p99 {p99:.1f} ms); "
                         "its latencies come from kernel stamps")
    else:
        if h.cpu_share >= CLIENT_BOUND_CPU_SHARE:
            reasons.append(f"{name} used {h.cpu_share:.0%} of a core")
        if p99 >= CLIENT_BOUND_LOOP_LAG_MS and steady_p99 is not None and steady_p99 < CLIENT_BOUND_LOOP_LAG_MS:
            notes.append(f"{name} event-loop lag p99 {p99:.1f} ms came from the start-up burst of "
                         f"{h.limit} streams (first {cut:.1f} s); steady state p99 {steady_p99:.1f} ms "
                         "(--ramp-up spreads the start)")
        elif p99 >= CLIENT_BOUND_LOOP_LAG_MS:
            where = "" if steady_p99 is None else f" (steady state after {cut:.1f} s: {steady_p99:.1f} ms)"
            reasons.append(f"{name} event-loop lag p99 {p99:.1f} ms{where}")
    w["client_bound"] = len(reasons) > num_reasons
    if h.node_id:
        w.update(host=h.host, node_id=h.node_id, streams=h.limit)
    return w


def _host_health(health: list[WorkerHealth], workers: list[dict]) -> list[dict]:
    """Per host (Ray node): its workers, its streams, and whether any of its workers was client-bound."""
    hosts: dict[str, dict] = {}
    for h, w in zip(health, workers, strict=True):
        e = hosts.setdefault(h.node_id, {"host": h.host, "node_id": h.node_id, "workers": [], "streams": 0,
                                         "client_bound": False})
        e["workers"].append(h.worker)
        e["streams"] += h.limit
        e["client_bound"] = e["client_bound"] or w["client_bound"]
    return list(hosts.values())


def stamp_source(health: list[WorkerHealth]) -> str:
    """"kernel" when every worker read with kernel stamps, "loop" when none did, else "mixed"."""
    sources = {h.stamp_source for h in health}
    return sources.pop() if len(sources) == 1 else "mixed"


def _client_delay(health: list[WorkerHealth]) -> dict | None:
    """Per read, loop stamp − kernel stamp, over all workers (a log sketch: percentiles within 1%)."""
    parts = [LogHistogram.from_dict(h.client_delay) for h in health if h.client_delay]
    if not parts or not sum(p.size for p in parts):
        return None
    sketch = parts[0]
    for p in parts[1:]:
        sketch.merge(p)
    p50, p99 = sketch.percentile([50, 99])
    return {"reads": sketch.size, "mean_ms": sketch.mean(), "p50_ms": float(p50), "p99_ms": float(p99),
            "max_ms": sketch.max}


def _stamps(health: list[WorkerHealth], ok: list[RequestRecord], median_ttft_ms: float | None) -> dict:
    """How exact the stamps were: coalescing, TTFT uncertainty, client delay, the clock."""
    events = sum(len(r.chunk_ns) for r in ok)
    ttft_u = np.asarray([r.ttft_uncertainty_ns for r in ok if r.ttft_uncertainty_ns is not None], dtype=np.float64) / 1e6
    tolerance = max(CLIENT_BOUND_STAMP_MS, CLIENT_BOUND_STAMP_SHARE * (median_ttft_ms or 0.0))
    return {
        "coalesced_share": sum(r.num_coalesced_events for r in ok) / events if events else None,
        "uncertain_event_share": sum(r.num_uncertain_events for r in ok) / events if events else None,
        "ttft_exact_share": float((ttft_u == 0).mean()) if ttft_u.size else None,
        "ttft_uncertainty_p99_ms": float(np.percentile(ttft_u, 99)) if ttft_u.size else None,
        "ttft_uncertainty_max_ms": float(ttft_u.max()) if ttft_u.size else None,
        "ttft_tolerance_ms": tolerance,
        "client_delay": _client_delay(health),
        "clock_steps": sum(h.num_clock_steps for h in health),
        "max_clock_step_ms": max((h.max_clock_step_ms for h in health), default=0.0),
        "stamps_after_read": sum(h.num_stamp_after_read for h in health),
        "unstamped_reads": sum(h.num_unstamped_reads for h in health),
    }


def _drain(health: list[WorkerHealth]) -> dict:
    return {"full_reads": sum(h.num_full_reads for h in health),
            "window_full_reads": sum(h.num_window_full for h in health),
            "max_queued_bytes": max((h.max_queued_bytes for h in health), default=0)}


def _refill(ok: list[RequestRecord]) -> dict | None:
    """Concurrency mode: how long freed slots waited for the client's next request."""
    pairs = [(r.start_ns - r.slot_freed_ns, r.end_ns - r.start_ns) for r in ok if r.slot_freed_ns is not None]
    if not pairs:
        return None
    lags = np.maximum(np.asarray([p[0] for p in pairs], dtype=np.float64), 0.0) / 1e6
    busy = sum(p[1] for p in pairs) / 1e6
    return {"refill_lag_p50_ms": float(np.median(lags)), "refill_lag_p99_ms": float(np.percentile(lags, 99)),
            "idle_share": float(lags.sum() / (lags.sum() + busy)) if busy > 0 else 0.0}


def _kernel_reasons(stamps: dict, drain: dict, refill: dict | None, reasons: list[str]) -> None:
    u99, tol = stamps["ttft_uncertainty_p99_ms"], stamps["ttft_tolerance_ms"]
    if u99 is not None and u99 > tol:
        reasons.append(f"TTFT stamps uncertain: p99 {u99:.1f} ms past the {tol:.1f} ms tolerance "
                       f"({1 - stamps['ttft_exact_share']:.1%} of first tokens shared a read with later bytes)")
    if (share := stamps["uncertain_event_share"]) is not None and share > CLIENT_BOUND_UNCERTAIN_EVENTS:
        reasons.append(f"{share:.1%} of events may be stamped more than {CLIENT_BOUND_STAMP_MS:g} ms late (each "
                       "shared a read with later bytes): ITL percentiles are not the server's")
    if drain["window_full_reads"]:
        reasons.append(f"reading fell behind: {drain['window_full_reads']} reads found the receive queue at half "
                       f"its buffer or more (max {drain['max_queued_bytes'] / 1024:,.0f} KiB queued): the "
                       "server's writes may have stalled")
    if refill is not None and refill["idle_share"] > CLIENT_BOUND_IDLE_SHARE:
        reasons.append(f"slots stood empty {refill['idle_share']:.1%} of the time waiting for the client's next "
                       f"request (refill lag p99 {refill['refill_lag_p99_ms']:.1f} ms): the server saw less than "
                       "the asked concurrency")
    if stamps["clock_steps"]:
        reasons.append(f"the realtime clock stepped {stamps['clock_steps']} time(s) (max "
                       f"{stamps['max_clock_step_ms']:.1f} ms): kernel stamps near a step are off by up to that")


def _cause(health: list[WorkerHealth], workers: list[dict]) -> str:
    """Why a client falls behind, with figures: a busy machine, a saturated worker, or a late loop."""
    busy = [(h, w) for h, w in zip(health, workers, strict=True)
            if (w["run_wait_share"] or 0.0) >= MACHINE_BUSY_WAIT_SHARE]
    if busy:
        return "; ".join(f"the machine is busy: {_name(h)} waited for a CPU held by other processes "
                         f"{w['run_wait_share']:.0%} of the time (p99 {w['run_wait_p99_ms']:.1f} ms per "
                         f"50 ms tick, {w['involuntary_switches']:,} preemptions) while using "
                         f"{w['cpu_share']:.0%} of a core" for h, w in busy)
    saturated = [(h, w) for h, w in zip(health, workers, strict=True) if w["cpu_share"] >= CLIENT_BOUND_CPU_SHARE]
    if saturated:
        return "; ".join(f"{_name(h)} saturated its core ({w['cpu_share']:.0%}, "
                         f"{w['cpu_us_per_event'] or 0:.1f} µs per event): add workers (--workers) or cores"
                         for h, w in saturated)
    lag = max(workers, key=lambda w: w["loop_lag_p99_ms"], default=None)
    if lag is None:
        return "unknown"
    return (f"worker {lag['worker']}'s event loop fell behind (lag p99 {lag['loop_lag_p99_ms']:.1f} ms) "
            f"at {lag['cpu_share']:.0%} of a core and no measured wait for a CPU")


def _busy_note(health: list[WorkerHealth], workers: list[dict], is_kernel: bool, is_bound: bool) -> str | None:
    cause = _cause(health, workers)
    if not cause.startswith("the machine is busy"):
        return None
    if is_kernel and not is_bound:
        return cause + "; latencies use kernel stamps and are unaffected"
    return cause


def client_health(cfg: RunConfig, health: list[WorkerHealth], send_lag_ms: list[float],
                  num_ok: int = 1, ok: list[RequestRecord] | None = None,
                  median_ttft_ms: float | None = None) -> dict:
    """Per-worker CPU, loop lag and CPU wait, the stamps' figures, send and refill lag, and the
    client-bound verdict with its reasons and its cause.

    Loop lag that only the start-up burst of connections caused is a note, not a reason: the
    verdict is about the steady state. With no successful request the verdict is None ("not
    judged"): a worker spinning through instant failures says nothing about a working server."""
    reasons: list[str] = []
    notes: list[str] = []
    source = stamp_source(health) if health else "loop"
    is_kernel = source == "kernel"
    workers = [_worker_health(h, reasons, notes, is_kernel) for h in health]
    ok = ok or []
    stamps, drain = _stamps(health, ok, median_ttft_ms), _drain(health)
    refill = None if cfg.is_rate_mode else _refill(ok)
    if is_kernel:
        _kernel_reasons(stamps, drain, refill, reasons)
    lag = np.asarray(send_lag_ms or [0.0])
    send_p99 = float(np.percentile(lag, 99))
    if cfg.is_rate_mode and send_p99 >= CLIENT_BOUND_SEND_LAG_MS:
        reasons.append(f"send lag p99 {send_p99:.1f} ms")
    verdict: bool | None = bool(reasons)
    cause = _cause(health, workers) if reasons else None
    if (note := _busy_note(health, workers, is_kernel, bool(reasons))) is not None and not reasons:
        notes.append(note)
    if num_ok == 0:
        verdict, reasons, cause = None, ["not judged: no request succeeded"], None
    out = {"client_bound": verdict, "client_bound_reasons": reasons, "client_bound_cause": cause,
           "client_health_notes": notes, "stamp_source": source, **stamps, "drain": drain, "refill": refill,
           "workers": workers}
    if any(h.node_id for h in health):
        out["hosts"] = _host_health(health, workers)  # NOTE: client-bound when any host is
    return out | {"mean_send_lag_ms": float(lag.mean()), "p99_send_lag_ms": send_p99,
                  "max_send_lag_ms": float(lag.max())}
