"""Per-request records: what each worker measured, merged by the parent without averaging."""

from __future__ import annotations

import msgspec


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
    chunk_ns: list[int] = []
    chunk_tokens: list[float] = []
    input_len: int = 0
    is_exact_input_len: bool = False
    output_len_asked: int = 0
    usage_prompt_tokens: int | None = None
    usage_completion_tokens: int | None = None
    client_output_tokens: int = 0
    chunk_token_source: str = "one per content event"
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
    # Multi-turn sessions (`--dataset multi-turn`): the session's index and this request's turn (0-based).
    session: int | None = None
    turn: int | None = None

    @property
    def ok(self) -> bool:
        return self.error_class is None


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

    @property
    def cpu_share(self) -> float:
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0


class WorkerResult(msgspec.Struct, kw_only=True):
    """What a worker sends back: its records and its health."""

    records: list[RequestRecord]
    health: WorkerHealth
    interrupted: bool = False
