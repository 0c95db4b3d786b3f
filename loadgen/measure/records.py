"""Per-request records: what each worker measured, merged by the parent without averaging."""

from __future__ import annotations

import msgspec

#: `RequestRecord.chunk_token_source`: how each token event's tokens were counted.
SOURCE_USAGE_DELTAS = "usage deltas"
SOURCE_PER_EVENT = "one per content event"
#: `RequestRecord.error_class` of a request the client cancelled on purpose (--request-cancellation-rate):
#: neither ok nor failed.
CANCELLED = "cancelled"


class RequestRecord(msgspec.Struct, kw_only=True):
    """One request's measurements. Times are perf_counter_ns (CLOCK_MONOTONIC, shared by processes)."""

    index: int
    worker: int
    intended_ns: int
    start_ns: int
    end_ns: int
    error_class: str | None = None
    error_message: str | None = None
    first_token_ns: int | None = None
    # With kernel stamps: how far the first content event's stamp may lie after its arrival (0: exact,
    # it ended its read); None with loop stamps or no content.
    ttft_uncertainty_ns: int | None = None
    num_coalesced_events: int = 0  # content events that shared their read with later bytes
    num_uncertain_events: int = 0  # of those, stamps that may lie > 2 ms after arrival (kernel stamps)
    num_empty_text_events: int = 0  # events whose token decoded to no text (token events or not: the rule says)
    slot_freed_ns: int | None = None  # concurrency mode: when the slot this request took was freed
    chunk_ns: list[int] = []
    chunk_tokens: list[float] = []
    input_len: int = 0
    is_exact_input_len: bool = False
    output_len_asked: int = 0
    usage_prompt_tokens: int | None = None
    usage_completion_tokens: int | None = None
    usage_cached_tokens: int | None = None  # issue 32: usage.prompt_tokens_details.cached_tokens
    client_output_tokens: int = 0
    chunk_token_source: str = SOURCE_PER_EVENT
    retokenized_output_tokens: int | None = None
    output_chars: int = 0
    # The server's own timing, where it sent one (the reference server's `: server-timing` SSE
    # comment or `Server-Timing` header); None when absent. See loadgen/README.md.
    server_arrival_to_queue_ms: float | None = None
    server_queue_ms: float | None = None
    server_prefill_ms: float | None = None
    server_prefill_steps: int | None = None
    server_first_output_ms: float | None = None
    server_decode_ms: float | None = None
    # Reasoning and tool calls (loadgen/README.md, "Reasoning and tool calls"): the stamps of the first
    # answer (content) token event, of the first and last reasoning events and of the first tool-call
    # event (None: none); without reasoning or tool-call fields the first answer is the first token
    # event with text.
    first_answer_ns: int | None = None
    first_reasoning_ns: int | None = None
    last_reasoning_ns: int | None = None
    first_tool_call_ns: int | None = None
    num_reasoning_events: int = 0
    reasoning_event_tokens: int = 0  # the reasoning events' tokens, counted as output tokens are
    num_tool_call_events: int = 0
    usage_reasoning_tokens: int | None = None  # usage.completion_tokens_details.reasoning_tokens
    # Multi-turn sessions (`--dataset multi-turn`): the session's index and this request's turn (0-based).
    session: int | None = None
    turn: int | None = None
    # issue 32: APIs: the request body's bytes (images included); embeddings: the vectors answered.
    request_bytes: int = 0
    num_embeddings: int = 0
    # issue 32: which --base-url (index into RunConfig.targets) and which --model of a mix it went to.
    url_index: int = 0
    model_index: int = 0

    @property
    def ok(self) -> bool:
        return self.error_class is None

    @property
    def is_cancelled(self) -> bool:
        """Cancelled by the client on purpose (--request-cancellation-rate): not a failure."""
        return self.error_class == CANCELLED

    @property
    def is_failed(self) -> bool:
        return self.error_class is not None and self.error_class != CANCELLED


class WorkerHealth(msgspec.Struct, kw_only=True):
    """One worker's view of its own health over the measured window."""

    worker: int
    cpu_s: float
    wall_s: float
    loop_lag_ms: list[float]
    num_events: int = 0  # content events parsed (tokens as streamed), the per-event figures' divisor
    parse_cpu_s: float = 0.0
    sys_cpu_s: float = 0.0  # the kernel's part of cpu_s (socket reads and writes, TCP on loopback)
    num_sleeps: int = 0  # voluntary context switches: times the loop waited for the network
    lag_at_s: list[float] = []
    full_at_s: float | None = None
    limit: int = 0
    host: str = ""  # with Ray: the worker's hostname (IP) and node id; empty for forked workers
    node_id: str = ""
    # Where latencies come from and how the client read (loadgen/README.md, "Client health").
    stamp_source: str = "loop"  # "kernel", "loop" or "mixed" (some connections without kernel stamps)
    client_delay: dict | None = None  # per read, loop stamp - kernel stamp: a LogHistogram.to_dict()
    num_unstamped_reads: int = 0  # reads on a kernel-stamped connection that came without a stamp
    num_stamp_after_read: int = 0  # kernel stamps later than their read (the realtime clock moved)
    num_clock_steps: int = 0
    max_clock_step_ms: float = 0.0
    num_full_reads: int = 0  # reads that filled their buffer (more may have been queued)
    max_queued_bytes: int = 0
    num_window_full: int = 0  # full reads with the queue at half the receive buffer or more
    run_wait_ms: list[float] = []  # per health tick: time runnable but waiting for a CPU (schedstat)
    num_involuntary_switches: int = 0  # preempted by other processes (getrusage ru_nivcsw)

    @property
    def cpu_share(self) -> float:
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0


class WorkerResult(msgspec.Struct, kw_only=True):
    """What a worker sends back: its records and its health."""

    records: list[RequestRecord]
    health: WorkerHealth
    interrupted: bool = False
