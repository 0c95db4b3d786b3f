"""The server's own view during a run: its Prometheus `/metrics`, scraped by the parent process.

A thread in the parent (which only waits while the workers run) scrapes every interval, from just
before the workers start until just after they end; one Scraper per `--server-metrics-url`. vLLM
(`vllm:`), SGLang (`sglang:`), TGI (`tgi_`), the reference server (`reference:`) and NVIDIA's
dcgm-exporter (`DCGM_FI_`) are recognised; their names map onto one set of series here. Every
series of every target is kept besides, up to a cap (`all_series.AllSeries`).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

import httpx

from loadgen.measure.all_series import AllSeries
from loadgen.measure.prometheus import Deadline, Metrics, ScrapeError, fetch
from loadgen.plan.config import DEFAULT_MAX_SERIES

#: Server and client figures further apart than this fraction get a note.
AGREEMENT_MARGIN = 0.05
#: A scrape's whole time (connect, head, body): the baseline's, and the others' (the interval
#: within these bounds). A scrape past it is cut and counted as failed.
FIRST_SCRAPE_DEADLINE_S = 5.0
MIN_DEADLINE_S, MAX_DEADLINE_S = 2.0, 5.0
#: How long stop() waits for the thread once its scrape in flight is cut.
THREAD_JOIN_S = 1.0

#: Series name -> the metric names each server uses for it, first match wins.
#: Gauges are summed over label sets (ranks, engines, GPUs), except the AVERAGED ones.
DIALECTS: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm": {
        "running": ("vllm:num_requests_running",),
        "waiting": ("vllm:num_requests_waiting",),
        "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        "preemptions": ("vllm:num_preemptions_total",),
        "generation_tokens": ("vllm:generation_tokens_total",),
        "engine_steps": ("vllm:iteration_tokens_total_count",),
        "prefix_cache_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
        "prefix_cache_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
        "spec_accepted_tokens": ("vllm:spec_decode_num_accepted_tokens_total",),
        "spec_draft_tokens": ("vllm:spec_decode_num_draft_tokens_total",),
    },
    "sglang": {
        "running": ("sglang:num_running_reqs",),
        "waiting": ("sglang:num_queue_reqs",),
        "kv_usage": ("sglang:token_usage",),
        "preemptions": ("sglang:num_retracted_requests_total",),  # a counter (num_retracted_reqs is a gauge)
        "generation_tokens": ("sglang:generation_tokens_total",),
        "cache_hit_rate": ("sglang:cache_hit_rate",),
        "spec_accept_length": ("sglang:spec_accept_length",),
    },
    "tgi": {
        "running": ("tgi_batch_current_size",),
        "waiting": ("tgi_queue_size",),
        "generation_tokens": ("tgi_request_generated_tokens_sum",),
    },
    "dcgm": {
        "gpu_util": ("DCGM_FI_DEV_GPU_UTIL",),
        "memory_used_mib": ("DCGM_FI_DEV_FB_USED",),
        "power_w": ("DCGM_FI_DEV_POWER_USAGE",),
        # NOTE: a counter; the parser names it `_total` when its `# TYPE` line came with it
        "energy_mj": ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"),
    },
    "reference": {
        "running": ("reference:num_running_reqs",),
        "waiting": ("reference:num_waiting_reqs",),
        "kv_usage": ("reference:token_usage",),
        "generation_tokens": ("reference:generation_tokens_total",),
        "prefill_steps": ("reference:num_prefill_steps",),
        "decode_steps": ("reference:num_decode_steps",),
    },
}
#: Histogram name -> the base names (without `_sum`/`_count`) each server uses.
HISTOGRAMS: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm": {"ttft": ("vllm:time_to_first_token_seconds",),
             "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")},
    "sglang": {"ttft": ("sglang:time_to_first_token_seconds",),
               "itl": ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds")},
    "reference": {"ttft": ("reference:time_to_first_token_seconds",),
                  "itl": ("reference:inter_token_latency_seconds",)},
    # NOTE: TGI's is each request's mean time per token, so its mean is the client's mean TPOT's kin
    "tgi": {"itl": ("tgi_request_mean_time_per_token_duration",)},
    "dcgm": {},
}
#: The metric-name prefix that marks each dialect.
PREFIXES = {"vllm": "vllm:", "sglang": "sglang:", "reference": "reference:", "tgi": "tgi_", "dcgm": "DCGM_FI_"}
SERIES = ("running", "waiting", "kv_usage", "preemptions", "generation_tokens", "prefill_steps",
          "decode_steps", "engine_steps", "prefix_cache_hits", "prefix_cache_queries", "spec_accepted_tokens",
          "spec_draft_tokens", "cache_hit_rate", "spec_accept_length", "gpu_util", "memory_used_mib",
          "power_w", "energy_mj")
#: Fractions and per-GPU rates: averaged over label sets, not summed.
AVERAGED = frozenset({"kv_usage", "cache_hit_rate", "spec_accept_length", "gpu_util"})
#: Counters whose change over the run is in `run`.
COUNTERS = ("generation_tokens", "preemptions", "prefill_steps", "decode_steps", "engine_steps",
            "prefix_cache_hits", "prefix_cache_queries", "spec_accepted_tokens", "spec_draft_tokens", "energy_mj")
#: Gauges whose mean (and max) over the run's scrapes is in `run`.
GAUGES = ("cache_hit_rate", "spec_accept_length", "gpu_util", "memory_used_mib", "power_w")


def wanted_names(kind: str) -> frozenset[str]:
    """Every sample name the series and histogram means of `kind` read (buckets are not read)."""
    names = {name for candidates in DIALECTS.get(kind, {}).values() for name in candidates}
    for candidates in HISTOGRAMS.get(kind, {}).values():
        names |= {base + suffix for base in candidates for suffix in ("_sum", "_count")}
    return frozenset(names)


#: The names the baseline scrape keeps: those of every dialect (it finds which one the server speaks).
ALL_NAMES = frozenset().union(*(wanted_names(kind) for kind in DIALECTS))


def dialect(metrics: Metrics) -> str | None:
    """Which server wrote these metrics: the dialect whose prefix most names carry."""
    counts = {d: sum(name.startswith(PREFIXES[d]) for name, _ in metrics.samples) for d in DIALECTS}
    best = max(counts, key=counts.get)
    return best if counts[best] else None


def _names(metrics: Metrics) -> set[str]:
    return {name for name, _ in metrics.samples}


def _first(names: set[str], candidates: tuple[str, ...], suffix: str = "") -> str | None:
    return next((c for c in candidates if c + suffix in names), None)


def read_series(metrics: Metrics, kind: str) -> dict[str, float | None]:
    """One scrape's value of every series (None where the server has no such metric)."""
    names = _names(metrics)
    out: dict[str, float | None] = {}
    for series in SERIES:
        name = _first(names, DIALECTS.get(kind, {}).get(series, ()))
        if name is None:
            out[series] = None
            continue
        values = [v for _, v in metrics.series(name) if not math.isnan(v)]
        if not values:
            out[series] = None
        else:
            out[series] = sum(values) / len(values) if series in AVERAGED else sum(values)
    return out


def read_histograms(metrics: Metrics, kind: str) -> dict[str, tuple[str, float, float] | None]:
    """Each known histogram as (name, sum, count) summed over label sets."""
    names = _names(metrics)
    out = {}
    for hist, candidates in HISTOGRAMS.get(kind, {}).items():
        name = _first(names, candidates, "_count")
        out[hist] = None if name is None else (name, metrics.total(name + "_sum"),
                                               metrics.total(name + "_count"))
    return out


@dataclass
class _Scrape:
    t_ns: int
    metrics: Metrics


class Scraper:
    """Scrapes `url` every `interval_s` in a thread; `stop()` returns the `server_metrics` block.

    Each scrape is bounded (`prometheus.fetch`: bytes, samples, a deadline that cuts its socket),
    so whatever the target does, a scrape ends, the thread goes on, and `stop()` returns."""

    def __init__(self, url: str, interval_s: float = 1.0, headers: dict | None = None,
                 verify: bool = True, max_series: int = DEFAULT_MAX_SERIES) -> None:
        self.url, self.interval_s, self.max_series = url, interval_s, max_series
        self.all_series = AllSeries(max_series)
        self.deadline_s = min(MAX_DEADLINE_S, max(MIN_DEADLINE_S, interval_s))
        # NOTE: no kept-alive connection: each scrape connects, so its deadline holds its socket.
        self.client = httpx.Client(headers=headers or {}, verify=verify,
                                   limits=httpx.Limits(max_keepalive_connections=0))
        self.scrapes: list[tuple[int, dict]] = []
        self.first: _Scrape | None = None
        self.last: _Scrape | None = None
        self.kind: str | None = None
        self.names: frozenset[str] | None = None
        self.status = "not started"
        self.window = "run"  # what the baseline (`first`) leaves in the server's counts (`rebase`)
        self.failures = 0
        self.last_failure: str | None = None
        self.thread_cpu_s = 0.0
        self.is_interrupted = False  # Ctrl-C came during stop()
        self._stop = threading.Event()
        self._lock = threading.Lock()  # NOTE: guards what the thread and stop() both touch
        self._deadline: Deadline | None = None  # the latest scrape's, which stop() cuts
        self._is_closed = False
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        """Scrape once, the baseline: 'ok', or 'unavailable: why' (the run goes on without them)."""
        try:
            first = self._scrape(FIRST_SCRAPE_DEADLINE_S, ALL_NAMES)
        except Exception as exc:  # NOTE: whatever the target sends, the run goes on
            return self._unavailable(_why(exc))
        if not len(first.metrics):
            return self._unavailable(f"{self.url} has no samples")
        self.kind = dialect(first.metrics)
        self.names = wanted_names(self.kind) if self.kind else frozenset()
        self.first = first
        self._keep(first)
        self.status = "ok"
        return self.status

    def _unavailable(self, why: str) -> str:
        self.status = f"unavailable: {why}"
        self.client.close()
        return self.status

    def begin(self) -> None:
        """Scrape every interval in a thread; call it after the workers are forked (a fork copies
        no thread, but it copies any lock that thread holds)."""
        if self.status == "ok":
            self._thread = threading.Thread(target=self._loop, name="loadgen-scraper", daemon=True)
            self._thread.start()

    def rebase(self) -> None:
        """A new baseline once the warm-up is done, so the server's counts over the run leave the
        warm-up out; if this scrape fails (counted) the first baseline stays and `window` says so."""
        if self.status != "ok":
            return
        try:
            scrape = self._scrape(FIRST_SCRAPE_DEADLINE_S, self.names)
        except Exception as exc:  # NOTE: whatever the target sends, the run goes on
            with self._lock:
                self.failures += 1
                self.last_failure = _why(exc)
            self.window = "run and warm-up (the scrape after the warm-up failed)"
            return
        with self._lock:
            self.all_series.reset()
        self._keep(scrape)
        with self._lock:
            self.first = scrape

    def _scrape(self, deadline_s: float, names: frozenset[str], is_final: bool = False) -> _Scrape:
        with self._lock:
            if self._stop.is_set() and not is_final:
                raise _Stopped
            self._deadline = deadline = Deadline(deadline_s)
        return _Scrape(time.perf_counter_ns(), fetch(self.client, self.url, deadline, names, self.max_series))

    def _keep(self, scrape: _Scrape) -> None:
        with self._lock:
            if not self._is_closed:
                self.last = scrape
                self.scrapes.append((scrape.t_ns, read_series(scrape.metrics, self.kind)))
                self.all_series.add(scrape.metrics)

    def _try(self, is_final: bool = False) -> None:
        """One scrape, kept, or counted as failed with its reason (a scrape that stop() cut is
        neither)."""
        try:
            scrape = self._scrape(self.deadline_s, self.names, is_final)
        except Exception as exc:  # NOTE: whatever the target sends, the thread goes on
            with self._lock:
                if is_final or not self._stop.is_set():
                    self.failures += 1
                    self.last_failure = _why(exc)
            return
        self._keep(scrape)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._try()
            self.thread_cpu_s = time.thread_time()

    def latest(self) -> dict | None:
        """The newest scrape's series (for the live view), or None."""
        return self.scrapes[-1][1] if self.scrapes else None

    def stop(self, t0_ns: int, is_last_scrape: bool = True) -> dict:
        """End the thread (its scrape in flight is cut), scrape a last time (unless not
        `is_last_scrape`), and build the block (times in s from `t0_ns`). It returns within
        THREAD_JOIN_S and one deadline whatever the target does; a Ctrl-C here skips what is left
        of it (`is_interrupted`)."""
        try:
            if self._thread is not None:
                self.halt()
                self._thread.join(THREAD_JOIN_S)
                if is_last_scrape:
                    self._try(is_final=True)
        except KeyboardInterrupt:
            self.is_interrupted = True
        finally:
            with self._lock:
                self._is_closed = True
            self.client.close()
        return self.block(t0_ns)

    def halt(self) -> None:
        """Tell the thread to stop and cut its scrape in flight (stop() does this first)."""
        with self._lock:
            self._stop.set()
            if self._deadline is not None:
                self._deadline.cut()

    def block(self, t0_ns: int) -> dict:
        """The `server_metrics` block of the results JSON."""
        out = {"status": self.status, "url": self.url, "dialect": self.kind, "interval_s": self.interval_s,
               "scrapes": len(self.scrapes), "failed_scrapes": self.failures, "window": self.window,
               "scrape_thread_cpu_s": self.thread_cpu_s, "last_failure": self.last_failure}
        if self.status != "ok":
            return out
        scrapes = sorted(self.scrapes, key=lambda scrape: scrape[0])  # NOTE: rebase() runs beside the thread
        series = {"t_s": [(t - t0_ns) / 1e9 for t, _ in scrapes]}
        for name in SERIES:
            values = [s[name] for _, s in scrapes]
            if any(v is not None for v in values):
                series[name] = values
        out["series"] = series
        out["names"] = {name: _first(_names(self.last.metrics), DIALECTS.get(self.kind, {}).get(name, ()))
                        for name in SERIES if name in series}
        run = [s for t, s in scrapes if t >= self.first.t_ns]
        out["run"] = {**_deltas(self.first.metrics, self.last.metrics, self.kind), **_gauge_figures(run)}
        out["all_series"] = self.all_series.block()
        return out


class _Stopped(Exception):
    """The thread's next scrape, refused: stop() has begun."""


def _why(exc: Exception) -> str:
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    if isinstance(exc, ScrapeError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _deltas(before: Metrics, after: Metrics, kind: str) -> dict:
    """The server's own counts over the run: last scrape minus the baseline."""
    a, b = read_series(after, kind), read_series(before, kind)
    out = {}
    for name in COUNTERS:
        if a.get(name) is not None and b.get(name) is not None:
            out[name] = a[name] - b[name]
    out.update(_rates(out))
    ha, hb = read_histograms(after, kind), read_histograms(before, kind)
    for hist in HISTOGRAMS.get(kind, {}):
        if ha.get(hist) and hb.get(hist):
            count = ha[hist][2] - hb[hist][2]
            out[f"{hist}_count"] = count
            out[f"mean_{hist}_ms"] = 1e3 * (ha[hist][1] - hb[hist][1]) / count if count > 0 else None
    return out


def _rates(run: dict) -> dict:
    """Prefix-cache hit rate (hits / queries) and spec-decode acceptance (accepted / draft tokens),
    the energy in J; each where its counters moved."""
    out = {}
    for rate, (num, den) in {"prefix_cache_hit_rate": ("prefix_cache_hits", "prefix_cache_queries"),
                             "spec_acceptance_rate": ("spec_accepted_tokens", "spec_draft_tokens")}.items():
        if run.get(den):
            out[rate] = run[num] / run[den]
    if run.get("energy_mj") is not None:
        out["energy_j"] = run["energy_mj"] / 1e3
    return out


def _gauge_figures(scrapes: list[dict]) -> dict:
    """The mean and max over the run's scrapes of each gauge in GAUGES the target has."""
    out = {}
    for name in GAUGES:
        values = [s[name] for s in scrapes if s.get(name) is not None and not math.isnan(s[name])]
        if values:
            out[f"mean_{name}"], out[f"max_{name}"] = sum(values) / len(values), max(values)
    return out


def server_vs_client(block: dict, summary: dict) -> dict | None:
    """The server's figures next to the client's, each with its ratio, and notes where they differ
    by more than AGREEMENT_MARGIN."""
    run = block.get("run")
    if not run:
        return None
    # NOTE: the servers' ITL histograms count tokens, not events (vLLM coalesces tokens into one
    # event when a stream falls behind), so the client's figure per token is TPOT.
    pairs = (("mean TTFT (ms)", run.get("mean_ttft_ms"), summary.get("mean_ttft_ms")),
             ("mean ITL, server / TPOT, client (ms)", run.get("mean_itl_ms"), summary.get("mean_tpot_ms")),
             ("output tokens", run.get("generation_tokens"), summary.get("total_output_tokens")))
    rows, notes = [], []
    for name, server, client in pairs:
        if server is None or client is None:
            continue
        ratio = server / client if client else None
        rows.append({"name": name, "server": server, "client": client, "ratio": ratio})
        if ratio is not None and abs(ratio - 1) > AGREEMENT_MARGIN:
            notes.append(f"{name}: server {server:,.2f} vs client {client:,.2f} ({ratio:.2f}x), "
                         f"{_reason(name, block.get('window', 'run'))}")
    return {"rows": rows, "margin": AGREEMENT_MARGIN, "notes": notes}


def _reason(name: str, window: str) -> str:
    if name.startswith("mean TTFT"):
        return ("the server times from its arrival, the client from the send (network, HTTP and the "
                "client's own loop are outside the server's figure)")
    if name.startswith("output tokens"):
        also = "other clients' too" if window == "run" else f"window: {window}"
        return f"the server counts every request it served between the scrapes ({also})"
    return ("the server times its outputs from its engine's steps, the client the events it "
            "received (each request's first to last token, over its tokens)")
