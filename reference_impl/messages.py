"""Every message that crosses a process boundary, as a typed msgspec Struct.

HTTP process --TokenizedGenerateReq/AbortReq/GetStatsReq--> scheduler
scheduler --BatchTokenIDOutput/SchedulerStats--> detokenizer
detokenizer --BatchStrOutput/SchedulerStats--> HTTP process
"""

from __future__ import annotations

import msgspec


class SamplingParams(msgspec.Struct, frozen=True, omit_defaults=True):
    """Per-request sampling and stopping parameters."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False


class TokenizedGenerateReq(msgspec.Struct, tag=True):
    """One choice of one request, tokenized, on its way to the scheduler."""

    rid: str
    input_ids: list[int]
    sampling: SamplingParams
    stream: bool
    choice_index: int = 0


class AbortReq(msgspec.Struct, tag=True):
    """Stop a request now and free what it holds."""

    rid: str


class GetStatsReq(msgspec.Struct, tag=True):
    """Ask the scheduler for a ``SchedulerStats`` snapshot."""

    request_id: int


class FinishReason(msgspec.Struct, frozen=True):
    """Why a request ended: "stop" (EOS, stop token or string), "length" or "abort"."""

    type: str
    matched: int | str | None = None


class ReqTiming(msgspec.Struct, frozen=True, array_like=True):
    """Where one request's time went in the scheduler, stamped once each (``time.perf_counter``,
    CLOCK_MONOTONIC on Linux, so the HTTP process can subtract its own stamps).

    ``prefill_start``/``prefill_end``: its first prefill step began and its last prefill step's
    output came (on a PD decode node: preallocation and the prebuilt pass, with
    ``prefill_steps`` 0); ``finished``: its last output.
    """

    prefill_start: float
    prefill_end: float
    finished: float
    prefill_steps: int


class BatchTokenIDOutput(msgspec.Struct, tag=True, omit_defaults=True):
    """One engine step's new token ids for every request that produced output.

    ``stop_strs`` is non-empty only on a request's first output, so the detokenizer learns
    what to hold back. ``timings``: per request that finished this step, its ``ReqTiming``
    (None when none finished: nothing is sent per token).
    """

    rids: list[str]
    new_token_ids: list[list[int]]
    finish_reasons: list[FinishReason | None]
    prompt_tokens: list[int]
    completion_tokens: list[int]
    stop_strs: list[list[str]]
    timings: dict[str, ReqTiming] | None = None


class BatchStrOutput(msgspec.Struct, tag=True, omit_defaults=True):
    """``BatchTokenIDOutput`` turned into text: each entry holds only the new text and ids."""

    rids: list[str]
    texts: list[str]
    new_token_ids: list[list[int]]
    finish_reasons: list[FinishReason | None]
    prompt_tokens: list[int]
    completion_tokens: list[int]
    timings: dict[str, ReqTiming] | None = None


class SchedulerStats(msgspec.Struct, tag=True):
    """The scheduler's state, answered to ``GetStatsReq`` (via the detokenizer)."""

    request_id: int
    num_running_reqs: int
    num_waiting_reqs: int
    num_used_tokens: int
    max_total_tokens: int
    num_prefill_steps: int
    num_decode_steps: int
    num_generated_tokens: int
    prefill_delayer_outcomes: dict[str, int]
    num_transferring_reqs: int = 0
    num_kv_transfers: int = 0


ToScheduler = TokenizedGenerateReq | AbortReq | GetStatsReq
ToDetokenizer = BatchTokenIDOutput | SchedulerStats
ToTokenizerManager = BatchStrOutput | SchedulerStats
