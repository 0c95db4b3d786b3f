"""Prometheus metrics of the HTTP process, plus the scheduler's state fetched on scrape."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from reference_impl.messages import SchedulerStats
from reference_impl.server.stream_outputs import ReqState

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                    1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)
_PREFIX = "reference:"


class ServerMetrics:
    """Counters and histograms updated by the serving path; gauges filled on scrape."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(_PREFIX + "num_requests", "Finished HTTP requests.",
                                ["endpoint", "status"], registry=r)
        self.prompt_tokens = Counter(_PREFIX + "prompt_tokens", "Prompt tokens processed.", registry=r)
        self.generation_tokens = Counter(_PREFIX + "generation_tokens", "Tokens generated.", registry=r)
        self.ttft = Histogram(_PREFIX + "time_to_first_token_seconds",
                              "From arrival to the first output of a request.",
                              buckets=_LATENCY_BUCKETS, registry=r)
        self.itl = Histogram(_PREFIX + "inter_token_latency_seconds",
                             "Gap between consecutive outputs of a streaming request, per token.",
                             buckets=_LATENCY_BUCKETS, registry=r)
        self.e2e = Histogram(_PREFIX + "e2e_request_latency_seconds", "From arrival to the last output.",
                             buckets=_LATENCY_BUCKETS, registry=r)
        self.scheduler_up = Gauge(_PREFIX + "scheduler_up", "1 when the scheduler answered this "
                                  "scrape in time; else 0 and its gauges are NaN.", registry=r)
        self.tracked = Gauge(_PREFIX + "num_tracked_reqs", "Sub-requests the HTTP process holds a "
                             "state for (rid_to_state).", registry=r)
        self.running = Gauge(_PREFIX + "num_running_reqs", "Requests in the running batch.", registry=r)
        self.waiting = Gauge(_PREFIX + "num_waiting_reqs", "Requests in the waiting queue.", registry=r)
        self.token_usage = Gauge(_PREFIX + "token_usage", "Fraction of KV tokens held.", registry=r)
        self.prefill_steps = Gauge(_PREFIX + "num_prefill_steps", "Prefill steps run.", registry=r)
        self.decode_steps = Gauge(_PREFIX + "num_decode_steps", "Decode steps run.", registry=r)
        self.transferring = Gauge(_PREFIX + "num_transferring_reqs",
                                  "PD decode node: requests whose KV is in flight.", registry=r)
        self.kv_transfers = Gauge(_PREFIX + "num_kv_transfers",
                                  "PD decode node: KV transfers landed.", registry=r)
        self.delayer = Gauge(_PREFIX + "prefill_delayer_outcomes", "Prefill delayer decisions by reason.",
                             ["reason"], registry=r)

    def on_output(self, state: ReqState, num_tokens: int, now: float) -> None:
        """Called by the tokenizer manager for every output it queues."""
        if not state.first_token_time:
            state.first_token_time = now
            self.ttft.observe(now - state.created)
        elif num_tokens:
            self.itl.observe((now - state.last_time) / num_tokens)
        state.last_time = now
        if num_tokens:
            self.generation_tokens.inc(num_tokens)

    def on_finish(self, endpoint: str, status: int, prompt_tokens: int, created: float, now: float) -> None:
        self.requests.labels(endpoint, str(status)).inc()
        self.prompt_tokens.inc(prompt_tokens)
        if status == 200:
            self.e2e.observe(now - created)

    def render(self, stats: SchedulerStats | None) -> bytes:
        """The Prometheus text exposition, with the scheduler's state when it answered."""
        self.scheduler_up.set(0 if stats is None else 1)
        if stats is None:
            for gauge in (self.running, self.waiting, self.token_usage, self.prefill_steps,
                          self.decode_steps):
                gauge.set(float("nan"))
        else:
            self.running.set(stats.num_running_reqs)
            self.waiting.set(stats.num_waiting_reqs)
            self.token_usage.set(stats.num_used_tokens / max(1, stats.max_total_tokens))
            self.prefill_steps.set(stats.num_prefill_steps)
            self.decode_steps.set(stats.num_decode_steps)
            self.transferring.set(stats.num_transferring_reqs)
            self.kv_transfers.set(stats.num_kv_transfers)
            for reason, count in stats.prefill_delayer_outcomes.items():
                self.delayer.labels(reason or "none").set(count)
        return generate_latest(self.registry)
