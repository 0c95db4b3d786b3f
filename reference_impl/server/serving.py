"""What chat and completions serving share: checks against the config, sub-requests, usage."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from reference_impl.config import ServerArgs
from reference_impl.hot_paths import HOT_PATHS
from reference_impl.messages import FinishReason, ReqTiming, SamplingParams, TokenizedGenerateReq
from reference_impl.server.metrics import ServerMetrics
from reference_impl.server.protocol import UsageInfo
from reference_impl.server.stream_outputs import ReqOutput
from reference_impl.server.timing import timing_fields
from reference_impl.server.tokenizer_manager import ClientGone, TokenizerManager
from reference_impl.tokenizer import Tokenizer


class BadRequest(Exception):
    """A request the server cannot serve: answered with an OpenAI-style 4xx body."""

    def __init__(self, message: str, param: str | None = None, code: int | str = 400,
                 status: int = 400, type: str = "invalid_request_error"):
        super().__init__(message)
        self.message, self.param, self.code, self.status, self.type = message, param, code, status, type


@dataclass
class SubRequests:
    """One request split into one scheduler request per (prompt, choice)."""

    request_id: str
    created: int
    reqs: list[TokenizedGenerateReq]
    indices: list[int]
    prompt_lens: list[int]          # per choice index
    arrival: float
    gone: ClientGone = field(default_factory=ClientGone)
    # Server timing, when the client asked for it (``timing.ASK_HEADER``): ``timings`` is set.
    received: float = 0.0
    first_output: float = 0.0
    timings: dict[int, tuple[float, ReqTiming]] | None = None
    client_request_id: str | None = None

    def ask_timing(self, received: float, client_request_id: str | None) -> None:
        """Collect this request's server timing; ``received``: when the request came in."""
        self.received, self.client_request_id, self.timings = received, client_request_id, {}

    def timing_fields(self) -> dict:
        """The server timing spans (``timing.timing_fields``)."""
        return timing_fields(self.received, self.first_output, self.timings or {},
                             self.client_request_id)

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens of the request, each distinct prompt counted once."""
        return sum(self.prompt_lens[i] for i, r in zip(self.indices, self.reqs, strict=True)
                   if r.choice_index == 0)

    def usage(self, completion_tokens: int) -> UsageInfo:
        return UsageInfo.of(self.prompt_tokens, completion_tokens)


def finish_fields(reason: FinishReason) -> tuple[str, int | str | None]:
    """OpenAI ``finish_reason`` and SGLang ``matched_stop`` of a finished output."""
    return reason.type, reason.matched


def total_completion_tokens(finals: list[tuple[int, ReqOutput]]) -> int:
    return sum(out.completion_tokens for _, out in finals)


def usage_dict(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


class ServingBase:
    """Shared checks and request building for one endpoint."""

    endpoint = ""
    id_prefix = ""

    def __init__(self, args: ServerArgs, tokenizer_manager: TokenizerManager, tokenizer: Tokenizer,
                 metrics: ServerMetrics):
        self.args = args
        self.tm = tokenizer_manager
        self.tokenizer = tokenizer
        self.metrics = metrics
        self.delta_tracker_cls = HOT_PATHS["H6"].implementation(
            args.stream_delta, incremental=args.incremental_streaming_output)
        self.max_req_kv_tokens: int | None = None  # KV tokens one request may hold; set at start

    @property
    def max_req_len(self) -> int:
        """Most prompt + output tokens of one sub-request: the context or the KV pool, less."""
        kv = self.max_req_kv_tokens
        return self.args.context_length if kv is None else min(self.args.context_length, kv)

    def build(self, request, prompts: list[list[int]]) -> SubRequests:
        """Check ``request`` against the server's limits and split it into sub-requests."""
        self._check_model(request.model)
        if request.n > self.args.max_n:
            raise BadRequest(f"n must be at most {self.args.max_n}, got {request.n}", param="n")
        self._check_sizes(request, prompts)
        request_id = f"{self.id_prefix}{uuid.uuid4().hex}"
        # NOTE: one tuple of distinct ids per request, checked once, shared by every sub-request.
        stop_ids = tuple(dict.fromkeys(request.stop_token_ids or ()))
        self._check_token_ids(stop_ids, "stop_token_ids")
        reqs, indices, prompt_lens = [], [], []
        for p, ids in enumerate(prompts):
            sampling = self._sampling(request, len(ids), stop_ids)
            for c in range(request.n):
                index = p * request.n + c
                reqs.append(TokenizedGenerateReq(f"{request_id}-{index}", ids, sampling,
                                                 request.stream, choice_index=c))
                indices.append(index)
                prompt_lens.append(len(ids))
        return SubRequests(request_id, int(time.time()), reqs, indices, prompt_lens, time.perf_counter())

    async def collect(self, subs: SubRequests) -> list[tuple[int, ReqOutput]]:
        """Every choice's final output, in index order."""
        finals = []
        async for index, out in self.tm.generate(subs.reqs, subs.indices, subs.gone, subs.timings):
            if out.finish_reason is not None:
                finals.append((index, out))
        finals.sort(key=lambda item: item[0])
        self.record(subs)
        return finals

    def record(self, subs: SubRequests, status: int = 200) -> None:
        self.metrics.on_finish(self.endpoint, status, subs.prompt_tokens, subs.arrival, time.perf_counter())

    def _check_sizes(self, request, prompts: list[list[int]]) -> None:
        args = self.args
        if len(prompts) > args.max_prompts_per_request:
            raise BadRequest(f"A request may hold at most {args.max_prompts_per_request} prompts, "
                             f"got {len(prompts)} (--max-prompts-per-request).", param="prompt")
        num_tokens = sum(map(len, prompts)) * request.n
        if num_tokens > args.max_request_prompt_tokens:
            raise BadRequest(f"The prompts times n come to {num_tokens} tokens; the limit is "
                             f"{args.max_request_prompt_tokens} (--max-request-prompt-tokens).",
                             param="prompt" if self.endpoint == "completions" else "messages")
        num_stop_ids = len(request.stop_token_ids or ())
        if num_stop_ids > args.max_stop_token_ids:
            raise BadRequest(f"At most {args.max_stop_token_ids} stop_token_ids, got {num_stop_ids} "
                             f"(--max-stop-token-ids).", param="stop_token_ids")
        stops = request.stop_strs
        if len(stops) > args.max_stop_strings:
            raise BadRequest(f"At most {args.max_stop_strings} stop strings, got {len(stops)} "
                             f"(--max-stop-strings).", param="stop")
        longest = max(map(len, stops), default=0)
        if longest > args.max_stop_str_len:
            raise BadRequest(f"A stop string has {longest} characters; the limit is "
                             f"{args.max_stop_str_len} (--max-stop-str-len).", param="stop")

    def _check_model(self, model: str) -> None:
        if model != self.args.served_model_name:
            raise BadRequest(f"The model '{model}' does not exist; this server serves "
                             f"'{self.args.served_model_name}'.", param="model", code="model_not_found")

    def _sampling(self, request, prompt_len: int, stop_ids: tuple[int, ...]) -> SamplingParams:
        limit = self.max_req_len
        if prompt_len >= limit:
            raise BadRequest(f"The prompt has {prompt_len} tokens; {self._limit_name(limit)} is "
                             f"{limit}.", param="messages" if self.endpoint == "chat" else "prompt")
        max_new = request.max_new_tokens
        if max_new is None:
            max_new = limit - prompt_len  # as vLLM: what is left of the context (or the KV pool)
        elif prompt_len + max_new > limit:
            raise BadRequest(f"max_tokens ({max_new}) plus the prompt ({prompt_len} tokens) exceeds "
                             f"{self._limit_name(limit)} ({limit}).", param="max_tokens")
        return SamplingParams(
            max_new_tokens=max_new, temperature=request.temperature, top_p=request.top_p,
            top_k=request.top_k, seed=request.seed, stop=request.stop_strs,
            stop_token_ids=stop_ids, ignore_eos=request.ignore_eos,
        )

    def _limit_name(self, limit: int) -> str:
        if limit < self.args.context_length:
            return "the KV cache's capacity per request in tokens (--max-total-tokens)"
        return "the context length"

    def _check_token_ids(self, ids, param: str) -> None:
        vocab = self.tokenizer.vocab_size
        if any(not 0 <= i < vocab for i in ids):
            raise BadRequest(f"{param} must be token ids in [0, {vocab})", param=param)
