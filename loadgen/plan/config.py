"""Run configuration: one frozen dataclass, validated once, shared by the parent and the workers."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

DEFAULT_PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)
BACKENDS = ("openai-chat", "openai-completions", "openai-embeddings", "openai-responses")
DATASETS = ("random", "random-ids", "sharegpt", "shared-prefix", "custom", "burstgpt", "mooncake", "multi-turn")
#: Datasets with arrival times: replayed at them unless --request-rate (or a ramp) is given.
TRACE_DATASETS = ("mooncake", "burstgpt")
# vLLM's and SGLang's names for the two OpenAI-compatible backends loadgen speaks.
BACKEND_ALIASES = {"vllm": "openai-completions", "openai": "openai-completions",
                   "sglang-oai": "openai-completions", "vllm-chat": "openai-chat",
                   "sglang-oai-chat": "openai-chat", "openai-chat": "openai-chat",
                   "openai-completions": "openai-completions",
                   # issue 32: APIs (vLLM's name for /v1/embeddings; /v1/responses, streamed)
                   "openai-embeddings": "openai-embeddings", "openai-responses": "openai-responses"}
#: Request paths per backend (`--endpoint` overrides).
ENDPOINTS = {"openai-chat": "/v1/chat/completions", "openai-completions": "/v1/completions",
             "openai-embeddings": "/v1/embeddings", "openai-responses": "/v1/responses"}
#: Synthetic image encodings (`--image-format`).
IMAGE_FORMATS = ("png", "jpeg")
TRANSPORTS = ("lean", "httpx")
#: Where event times come from: the kernel's receive stamps (lean transport, where the OS gives
#: them; else loop stamps) or the event loop's clock when it gets to the read.
STAMP_SOURCES = ("kernel", "loop")
# What an SSE event whose text is empty holds (run/sse.py tells them apart): a text field (a token
# that decoded to no text), a role or finish_reason with an empty text (an announcement), or no text
# field at all (a finish chunk's `delta: {}`). A non-empty text is a token event under every rule.
TEXT, EMPTY_TEXT, ANNOUNCEMENT, NO_TEXT = range(4)
#: Which SSE events are token events (TTFT, ITL), per rule: whether an event of each kind (by
#: index) is one. loadgen's own, `vllm bench serve`'s and SGLang bench_serving's (loadgen/README.md,
#: "Token events").
TOKEN_EVENT_RULES = {"loadgen": (True, True, False, False), "vllm": (True, True, True, True),
                     "sglang": (True, False, False, False)}
# NOTE: a worker above these marks was the bottleneck, not the server (see README, "Client health").
CLIENT_BOUND_CPU_SHARE = 0.90
CLIENT_BOUND_LOOP_LAG_MS = 20.0
CLIENT_BOUND_SEND_LAG_MS = 20.0
# With kernel stamps (see README, "Client health"): a stamp may be this late before it counts as
# uncertain; TTFT is judged against max(this, CLIENT_BOUND_STAMP_SHARE x median TTFT) at p99.
CLIENT_BOUND_STAMP_MS = 2.0
CLIENT_BOUND_STAMP_SHARE = 0.05
CLIENT_BOUND_UNCERTAIN_EVENTS = 0.01  # share of events whose stamps may be > CLIENT_BOUND_STAMP_MS late
CLIENT_BOUND_IDLE_SHARE = 0.05  # share of a slot's time it stood empty because the client refilled it late
MACHINE_BUSY_WAIT_SHARE = 0.10  # a worker that waited this share of its time for a CPU: the machine is busy
STREAMS_PER_AUTO_WORKER = 512
#: --server-metrics-interval: scrapes more often than this cost the client's CPU, rarer ones see
#: too little of a run; past 1 h the interval would overflow the thread's wait.
SERVER_METRICS_INTERVAL_RANGE_S = (0.05, 3600.0)
#: --request-rate-stages: the most requests the stages may expect (sum of rate x seconds) without
#: --num-prompts; past it the arrival times alone would take gigabytes before the first request.
MAX_STAGE_REQUESTS = 10_000_000
#: Series kept per scraped target (`--server-metrics-max-series`), the rest counted.
DEFAULT_MAX_SERIES = 2000


@dataclass(frozen=True)
class SLO:
    """Goodput thresholds in milliseconds; None means no bound."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    @property
    def is_set(self) -> bool:
        return any(v is not None for v in (self.ttft_ms, self.tpot_ms, self.e2e_ms))


@dataclass(frozen=True)
class RunConfig:
    """Everything one load run needs; validated in __post_init__."""

    base_url: str = "http://127.0.0.1:30000"
    model: str | None = None
    backend: str = "openai-chat"
    stream: bool = True
    concurrency: int | None = None
    request_rate: float = math.inf
    burstiness: float = 1.0
    num_prompts: int | None = None
    duration_s: float | None = None
    warmup: int = 0
    workers: int = 1
    timeout_s: float = 600.0
    ignore_eos: bool = False
    min_tokens: bool = False
    include_usage: bool = True
    extra_body: dict = field(default_factory=dict)
    headers: dict = field(default_factory=dict)
    transport: str = "lean"
    stamps: str = "kernel"
    max_response_bytes: int = 64 << 20
    max_response_header_bytes: int = 64 << 10
    max_error_rate: float | None = None
    seed: int = 1
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES
    slo: SLO = field(default_factory=SLO)
    strict: bool = False
    endpoint_path: str | None = None
    sampling: dict = field(default_factory=dict)
    request_id_prefix: str | None = None
    server_timing: bool = True
    insecure: bool = False
    ca_cert: str | None = None
    ramp_up_s: float = 0.0
    ramp_up_strategy: str | None = None
    ramp_up_start_rps: float | None = None
    ramp_up_end_rps: float | None = None
    continuous_usage: bool = False
    server_metrics: bool = True
    server_metrics_interval_s: float = 1.0
    # issue 32: server metrics from any server (several targets, every series up to a cap)
    server_metrics_urls: tuple[str, ...] = ()
    server_metrics_max_series: int = DEFAULT_MAX_SERIES
    timeline_interval_s: float = 1.0
    live: bool = False  # workers publish approximate TTFTs for the live panel
    replay_trace: bool = False  # send each request at its dataset timestamp (Prompt.arrival_s)
    trace_speedup: float = 1.0  # replay offsets are the trace's times / this
    itl_sketch: bool = False  # ITL percentiles from a mergeable 1% sketch (measure/sketch.py)
    token_event_rule: str = "loadgen"  # which events are token events (TOKEN_EVENT_RULES)
    # issue 32: APIs (embeddings inputs per request; synthetic images per chat request)
    embedding_batch_size: int = 1
    image_batch_size: int = 0
    image_width: int = 512
    image_height: int = 512
    image_format: str = "png"
    # issue 32: plan-side knobs. (rate, seconds) stages in order (--request-rate-stages); () for none.
    rate_stages: tuple[tuple[float, float], ...] = ()
    # issue 32: run-side knobs (cancellation, several URLs, model mix, prefill-concurrency cap)
    request_cancellation_rate: float = 0.0  # percent of requests the client cancels (seeded choice)
    request_cancellation_delay_s: float = 0.0  # ... this long after their send began
    #: (URL, weight) per --base-url when several are given; () means `base_url` alone.
    base_urls: tuple[tuple[str, float], ...] = ()
    #: (model, weight) per --model when several are given (LoRA adapters are models); () means `model` alone.
    models: tuple[tuple[str, float], ...] = ()
    prefill_concurrency: int | None = None  # requests in flight before their first token, at most

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}")
        if self.transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}")
        if self.stamps not in STAMP_SOURCES:
            raise ValueError(f"stamps must be one of {STAMP_SOURCES}")
        if self.token_event_rule not in TOKEN_EVENT_RULES:
            raise ValueError(f"token_event_rule must be one of {tuple(TOKEN_EVENT_RULES)}")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if self.request_rate <= 0:
            raise ValueError("request_rate must be > 0")
        if self.concurrency is None and not self.is_rate_mode and (self.num_prompts is None
                                                                   or self.duration_s is not None):
            # NOTE: --num-prompts N alone sends all N at once (vllm bench serve's --request-rate inf);
            # --duration alone would open streams without end.
            raise ValueError("give --concurrency, --request-rate or both (--num-prompts N alone "
                             "sends all N at once)")
        if self.num_prompts is None and self.duration_s is None and not (self.replay_trace or self.rate_stages):
            raise ValueError("give --num-prompts or --duration")
        if self.trace_speedup <= 0 or math.isinf(self.trace_speedup):
            raise ValueError("--trace-speedup must be > 0 and finite")
        if self.replay_trace and (not math.isinf(self.request_rate) or self.ramp_up_strategy is not None):
            raise ValueError("trace replay sends at the trace's times: --request-rate and ramps do not apply")
        if self.burstiness <= 0:
            raise ValueError("burstiness must be > 0")
        if self.workers < 1 or self.warmup < 0 or self.timeout_s <= 0:
            raise ValueError("workers >= 1, warmup >= 0 and timeout > 0 required")
        if self.max_response_bytes < 1 or self.max_response_header_bytes < 1:
            raise ValueError("max_response_bytes and max_response_header_bytes must be >= 1")
        if self.max_error_rate is not None and not 0.0 <= self.max_error_rate <= 1.0:
            raise ValueError("max_error_rate must be in [0, 1]")
        if any(not 0 < p <= 100 for p in self.percentiles):
            raise ValueError("percentiles must be in (0, 100]")
        if self.endpoint_path is not None and not self.endpoint_path.startswith("/"):
            raise ValueError("endpoint must be a path starting with '/'")
        if self.ramp_up_s < 0 or (self.ramp_up_s and self.concurrency is None):
            raise ValueError("--ramp-up needs --concurrency")
        low, high = SERVER_METRICS_INTERVAL_RANGE_S
        if not low <= self.server_metrics_interval_s <= high:
            raise ValueError(f"--server-metrics-interval must be in [{low:g}, {high:g}] s")
        if self.server_metrics_max_series < 1:
            raise ValueError("--server-metrics-max-series must be >= 1")
        if self.timeline_interval_s <= 0:
            raise ValueError("--timeline-interval must be > 0")
        self._check_rate_ramp()
        self._check_api_inputs()
        self._check_rate_stages()
        self._check_run_side_knobs()

    def _check_api_inputs(self) -> None:
        """issue 32: what embeddings, Responses and image inputs can be combined with."""
        if self.embedding_batch_size < 1 or self.image_batch_size < 0:
            raise ValueError("--random-batch-size must be >= 1 and --image-batch-size >= 0")
        if self.embedding_batch_size > 1 and self.backend != "openai-embeddings":
            raise ValueError("--random-batch-size applies to --backend openai-embeddings")
        if self.image_batch_size and self.backend != "openai-chat":
            raise ValueError("--image-batch-size sends images as chat image_url parts: it needs --backend openai-chat")
        if not (1 <= self.image_width <= 8192 and 1 <= self.image_height <= 8192):
            raise ValueError("--image-width-mean and --image-height-mean must be in [1, 8192] pixels")
        if self.image_format not in IMAGE_FORMATS:
            raise ValueError(f"--image-format must be one of {IMAGE_FORMATS}")
        if self.backend == "openai-embeddings" and self.stream:
            raise ValueError("--backend openai-embeddings is not streamed (the answer is one JSON object)")
        if self.backend == "openai-responses" and not self.stream:
            raise ValueError("--backend openai-responses is read as a stream: --no-stream is not supported")

    @property
    def is_embeddings(self) -> bool:
        """Whether requests are embeddings: one latency each, no tokens streamed (no TTFT, ITL, TPOT)."""
        return self.backend == "openai-embeddings"

    @property
    def drops_empty_text(self) -> bool:
        """Whether the token-event rule leaves out events whose token decoded to no text."""
        return not TOKEN_EVENT_RULES[self.token_event_rule][EMPTY_TEXT]

    @property
    def metrics_urls(self) -> tuple[str, ...]:
        """Where Prometheus metrics are scraped: each --server-metrics-url, else BASE/metrics."""
        return self.server_metrics_urls or (self.base_url.rstrip("/") + "/metrics",)

    def _check_run_side_knobs(self) -> None:
        if not 0.0 <= self.request_cancellation_rate <= 100.0:
            raise ValueError("--request-cancellation-rate is a percent in [0, 100]")
        if not 0.0 <= self.request_cancellation_delay_s < math.inf:
            raise ValueError("--request-cancellation-delay must be >= 0 and finite")
        if self.prefill_concurrency is not None and self.prefill_concurrency < self.workers:
            raise ValueError(f"--prefill-concurrency must be >= the number of workers ({self.workers}): "
                             "each worker holds its share")
        for what, pairs in (("--base-url", self.base_urls), ("--model", self.models)):
            if any(not 0 < w < math.inf for _, w in pairs):
                raise ValueError(f"{what} weights must be > 0 and finite")
        if self.base_urls and self.base_urls[0][0] != self.base_url:
            raise ValueError("base_url must be the first of base_urls")

    @property
    def targets(self) -> tuple[tuple[str, float], ...]:
        """(URL, weight) of each server sent to: the --base-url list, else `base_url` alone."""
        return self.base_urls or ((self.base_url, 1.0),)

    def worker_prefill_concurrency(self, worker: int) -> int | None:
        """This worker's share of --prefill-concurrency (shares differ by at most one)."""
        return _share(self.prefill_concurrency, self.workers, worker)

    def _check_rate_ramp(self) -> None:
        if self.ramp_up_strategy is None:
            if self.ramp_up_start_rps is not None or self.ramp_up_end_rps is not None:
                raise ValueError("--ramp-up-start-rps/--ramp-up-end-rps need --ramp-up-strategy")
            return
        if self.ramp_up_strategy not in ("linear", "exponential"):
            raise ValueError("--ramp-up-strategy is linear or exponential")
        if self.ramp_up_start_rps is None or self.ramp_up_end_rps is None:
            raise ValueError("--ramp-up-strategy needs --ramp-up-start-rps and --ramp-up-end-rps")
        if not math.isinf(self.request_rate) or self.num_prompts is None:
            raise ValueError("--ramp-up-strategy replaces --request-rate and needs --num-prompts (as vLLM)")
        if self.ramp_up_start_rps <= 0 or self.ramp_up_end_rps <= 0:
            raise ValueError("--ramp-up-start-rps and --ramp-up-end-rps must be > 0")

    def _check_rate_stages(self) -> None:
        if not self.rate_stages:
            return
        if any(not (0 < r < math.inf and 0 < s < math.inf) for r, s in self.rate_stages):
            raise ValueError("--request-rate-stages: each rate and duration must be > 0 and finite")
        if not math.isinf(self.request_rate) or self.ramp_up_strategy is not None or self.replay_trace:
            raise ValueError("--request-rate-stages replaces --request-rate, --ramp-up-strategy and trace times")
        if self.duration_s is not None:
            raise ValueError("--request-rate-stages sets the duration (the stages' sum): drop --duration")
        expected = sum(r * s for r, s in self.rate_stages)
        if self.num_prompts is None and expected > MAX_STAGE_REQUESTS:
            raise ValueError(f"--request-rate-stages expects {expected:,.0f} requests, more than "
                             f"{MAX_STAGE_REQUESTS:,}: shorten the stages or cap them with --num-prompts")

    @property
    def effective_transport(self) -> str:
        """The transport used (both speak http:// and https://)."""
        return self.transport

    @property
    def tls_verify(self):
        """httpx's `verify`: False with --insecure, an SSL context with --ca-cert, else True."""
        if self.insecure:
            return False
        if self.ca_cert is not None:
            import ssl

            return ssl.create_default_context(cafile=self.ca_cert)
        return True

    @property
    def is_rate_mode(self) -> bool:
        """Requests have intended send times (a rate, a ramp, rate stages or a replayed trace): latencies
        start there."""
        return (not math.isinf(self.request_rate) or self.ramp_up_strategy is not None or self.replay_trace
                or bool(self.rate_stages))

    @property
    def endpoint(self) -> str:
        if self.endpoint_path is not None:
            return self.endpoint_path
        return ENDPOINTS[self.backend]

    def too_many_failed(self, failed: int, total: int) -> bool:
        """Whether `failed` of `total` requests pass --max-error-rate (default: every one failed)."""
        if total <= 0:
            return False
        return failed == total if self.max_error_rate is None else failed / total > self.max_error_rate

    def worker_concurrency(self, worker: int) -> int | None:
        """This worker's share of the concurrency limit (shares differ by at most one)."""
        return _share(self.concurrency, self.workers, worker)


def _share(total: int | None, workers: int, worker: int) -> int | None:
    """A worker's share of a limit split over `workers` (shares differ by at most one)."""
    if total is None:
        return None
    base, extra = divmod(total, workers)
    return base + (1 if worker < extra else 0)


#: Whose meaning --random-range-ratio and the length/seed defaults follow (`--flags-from`).
CONVENTIONS = ("sglang", "vllm")


@dataclass(frozen=True)
class DatasetConfig:
    """Which dataset and its parameters (flag names follow SGLang's bench_serving)."""

    name: str = "random"
    num_prompts: int = 1000
    random_input_len: int = 1024
    random_output_len: int = 1024
    random_range_ratio: float = 0.0
    dataset_path: str | None = None
    sharegpt_output_len: int | None = None
    shared_prefix_groups: int = 8
    shared_prefix_len: int = 512
    tokenizer_path: str | None = None
    use_server_tokenize: bool = True
    #: random-ids draws from [0, vocab_size): the target's vocabulary (no default: a guessed one sent
    #: ids the reference server refuses); the runner sets it from --tokenizer, --vocab-size or the server.
    vocab_size: int | None = None
    seed: int = 1
    convention: str = "sglang"
    random_prefix_len: int = 0
    custom_output_len: int | None = None
    disable_shuffle: bool = False
    block_size: int = 512  # tokens per mooncake hash id
    trace_timestamps: bool = False  # keep the trace's order and times (replay)
    multi_turn_num_turns: int | None = None  # None: 3 synthetic turns, every human turn of a file
    multi_turn_user_len: int = 128
    multi_turn_think_time_s: float = 0.0
    #: A session's conversation (user turns and answers, UTF-8 bytes) past which no turn is sent.
    multi_turn_max_context_bytes: int = 8 << 20
    # issue 32: plan-side knobs. The share of each prompt's tokens taken from one seeded text that
    # every prompt starts with (--prefix-cache-hit-rate); the cache-bust salt (--cache-bust): None
    # off, "" a fresh one per run (loadgen/plan/prefix_cache.py).
    prefix_cache_hit_rate: float = 0.0
    cache_bust: str | None = None

    def __post_init__(self) -> None:
        if self.convention not in CONVENTIONS:
            raise ValueError(f"convention must be one of {CONVENTIONS}")
        top = 1.0 if self.convention == "sglang" else math.nextafter(1.0, 0.0)
        if not 0.0 <= self.random_range_ratio <= top:
            raise ValueError(f"random_range_ratio must be in [0, 1{']' if top == 1.0 else ')'} "
                             f"({self.convention} convention)")
        if self.name in ("sharegpt", "custom", "burstgpt", "mooncake") and not self.dataset_path:
            raise ValueError(f"--dataset {self.name} needs --dataset-path")
        if self.vocab_size is not None and self.vocab_size < 1:
            raise ValueError("vocab_size must be >= 1")
        if self.random_prefix_len < 0 or (self.custom_output_len is not None and self.custom_output_len < 1):
            raise ValueError("random_prefix_len must be >= 0 and custom_output_len >= 1")
        if (self.num_prompts is not None and self.num_prompts < 1) or self.random_input_len < 1 \
                or self.random_output_len < 1:
            raise ValueError("num_prompts and random lengths must be >= 1")
        turns_bad = self.multi_turn_num_turns is not None and self.multi_turn_num_turns < 1
        if self.block_size < 1 or turns_bad or self.multi_turn_user_len < 1:
            raise ValueError("block_size, multi_turn_num_turns and multi_turn_user_len must be >= 1")
        if self.multi_turn_think_time_s < 0 or self.multi_turn_max_context_bytes < 1:
            raise ValueError("multi_turn_think_time_s must be >= 0 and multi_turn_max_context_bytes >= 1")
        self._check_prefix_cache()

    def _check_prefix_cache(self) -> None:
        if not 0.0 <= self.prefix_cache_hit_rate <= 1.0:
            raise ValueError("--prefix-cache-hit-rate must be in [0, 1]")
        if self.prefix_cache_hit_rate and (self.name != "random" or self.random_prefix_len):
            raise ValueError("--prefix-cache-hit-rate builds loadgen's --dataset random prompts (without "
                             "--random-prefix-len, another shared prefix)")
        if self.cache_bust is not None and self.name in ("random-ids", "multi-turn"):
            raise ValueError(f"--cache-bust puts a text tag before text prompts: not for --dataset {self.name}")


RAY_STRATEGIES = ("SPREAD", "STRICT_SPREAD", "PACK")


@dataclass(frozen=True)
class RayConfig:
    """Where the workers run when they are Ray actors (`--ray-address`); validated in __post_init__.

    `address`: `auto` (a running cluster), `local` (start one here, shut it down after), `ray://…`
    (Ray Client) or a GCS `host:port`. `is_auto_workers`: one worker per CPU of every alive node.
    The `test_*` fields are test hooks, not flags (worker -> value): a clock skew (ns) injected
    into a worker's process, a worker whose process exits, or whose event loop hangs (the process
    still answering Ray calls), after that many finished requests."""

    address: str = "local"
    strategy: str = "SPREAD"
    is_auto_workers: bool = False
    test_clock_skew_ns: dict[int, int] = field(default_factory=dict)
    test_exit_after: dict[int, int] = field(default_factory=dict)
    test_hang_after: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.address:
            raise ValueError("--ray-address must not be empty")
        if self.strategy not in RAY_STRATEGIES:
            raise ValueError(f"--ray-strategy must be one of {RAY_STRATEGIES}")


def auto_workers(concurrency: int | None) -> int:
    """One worker per STREAMS_PER_AUTO_WORKER streams, at most one per usable core."""
    cores = len(os.sched_getaffinity(0))
    want = math.ceil((concurrency or 1) / STREAMS_PER_AUTO_WORKER)
    return max(1, min(cores, want))
