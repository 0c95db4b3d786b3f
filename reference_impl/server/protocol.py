"""The OpenAI API as served here: pydantic v2 models of requests, responses and stream chunks.

Requests ignore unknown fields, as upstream does, and reject what no server configuration could
accept (``n < 1``, ``max_tokens <= 0``, an empty prompt, ...). Checks that need the server's
configuration (``n`` over the limit, unknown model, prompt too long) belong to the server.
"""

from __future__ import annotations

import time
from typing import Annotated, Literal

import msgspec
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

# NOTE: every integer that reaches another process is bounded to a signed 64-bit value here, so
# one out of range is a 400, never an overflow when the request is packed for the scheduler.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
FLOAT32_TINY = 2.0**-126  # the smallest positive normal float32
Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
TokenId = Annotated[int, Field(ge=0, le=INT64_MAX)]
PromptInput = str | list[TokenId] | list[list[TokenId]] | list[str]


class _Request(BaseModel):
    # NOTE: strict, as the OpenAI API: "stream": "true", "n": true or "max_tokens": "5" are 400s
    # (a JSON integer still passes for a float field).
    model_config = ConfigDict(extra="ignore", strict=True)


class StreamOptions(_Request):
    """``stream_options``: a final usage chunk, or usage on every chunk."""

    include_usage: bool = False
    continuous_usage_stats: bool = False


class _SamplingRequest(_Request):
    """Fields shared by chat and completions requests (SGLang extensions marked as such)."""

    model: str
    max_tokens: int | None = Field(default=None, gt=0, le=INT64_MAX)
    n: int = Field(default=1, ge=1, le=INT64_MAX)
    temperature: float = Field(default=1.0, ge=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    top_k: int = Field(default=-1, ge=-1, le=INT64_MAX)  # extension
    seed: Int64 | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[TokenId] | None = None  # extension
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False  # extension
    min_tokens: int = Field(default=0, ge=0, le=INT64_MAX)  # extension, accepted and ignored

    @field_validator("top_p")
    @classmethod
    def _top_p_survives_float32(cls, top_p: float) -> float:
        # NOTE: the engines hold top_p in float32, where below FLOAT32_TINY it may become 0.0 and
        # keep no token at all. Every top_p in (0, FLOAT32_TINY] keeps only the most likely token,
        # so the clamp changes no output; a normal (not subnormal) float survives flush-to-zero.
        return max(top_p, FLOAT32_TINY)

    @field_validator("stop")
    @classmethod
    def _no_empty_stop(cls, stop: str | list[str] | None) -> str | list[str] | None:
        strs = [stop] if isinstance(stop, str) else stop or []
        if any(s == "" for s in strs):
            raise ValueError("stop strings must not be empty")
        return stop

    @property
    def stop_strs(self) -> tuple[str, ...]:
        """``stop`` as a tuple, whichever form the client sent."""
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    @property
    def include_usage(self) -> bool:
        """Whether a final usage chunk was asked for."""
        return self.stream_options is not None and self.stream_options.include_usage

    @property
    def continuous_usage_stats(self) -> bool:
        """Whether every chunk should carry usage so far."""
        return self.stream_options is not None and self.stream_options.continuous_usage_stats


class ChatCompletionMessageContentTextPart(_Request):
    """One part of a multi-part message content; only text is served here."""

    type: Literal["text"]
    text: str


class ChatCompletionMessageParam(_Request):
    """One message of a chat request."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ChatCompletionMessageContentTextPart]

    @property
    def text(self) -> str:
        """The content as one string; text parts are joined with newlines (as vLLM does)."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(part.text for part in self.content)


class ChatCompletionRequest(_SamplingRequest):
    """``POST /v1/chat/completions``."""

    messages: list[ChatCompletionMessageParam] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, gt=0, le=INT64_MAX)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)

    @property
    def max_new_tokens(self) -> int | None:
        """``max_completion_tokens`` wins over the deprecated ``max_tokens``; None: server default."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionRequest(_SamplingRequest):
    """``POST /v1/completions``; a list of strings or of id lists is a batch of prompts."""

    prompt: PromptInput
    max_tokens: int | None = Field(default=16, gt=0, le=INT64_MAX)
    echo: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=INT64_MAX)
    suffix: str | None = None  # accepted and ignored

    @field_validator("prompt")
    @classmethod
    def _no_empty_prompt(cls, prompt: PromptInput) -> PromptInput:
        prompts = _split_prompts(prompt)
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("prompt must not be empty")
        return prompt

    @property
    def prompts(self) -> list[str | list[int]]:
        """The batch of prompts: one text or one id list per prompt."""
        return _split_prompts(self.prompt)

    @property
    def max_new_tokens(self) -> int | None:
        """Same name as on chat requests, for the serving layer."""
        return self.max_tokens


def _split_prompts(prompt: PromptInput) -> list[str | list[int]]:
    if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)):
        return [prompt]
    return list(prompt) if prompt else [prompt]


class TokenizeRequest(_Request):
    """``POST /tokenize`` (vLLM's shape): a ``prompt`` as completions sees it, or chat ``messages``.

    ``add_special_tokens`` and ``add_generation_prompt`` are accepted for compatibility: this
    server never adds special tokens to a prompt and always ends a chat prompt with the
    assistant turn, so ``tokens`` are exactly what the completions or chat endpoint would use.
    """

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatCompletionMessageParam] | None = Field(default=None, min_length=1)
    add_special_tokens: bool = True
    add_generation_prompt: bool = True

    @model_validator(mode="after")
    def _prompt_or_messages(self) -> TokenizeRequest:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of 'prompt' or 'messages'")
        return self


class TokenizeResponse(BaseModel):
    """The ids of a prompt, their number, and the context length."""

    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeRequest(_Request):
    """``POST /detokenize``: token ids back to text."""

    model: str | None = None
    tokens: list[TokenId]


class DetokenizeResponse(BaseModel):
    """The text of the given ids."""

    prompt: str


class UsageInfo(BaseModel):
    """Token counts of one request (all choices together)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    @classmethod
    def of(cls, prompt_tokens: int, completion_tokens: int) -> UsageInfo:
        """Usage with ``total_tokens`` filled in."""
        return cls(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                   total_tokens=prompt_tokens + completion_tokens)


def _now() -> int:
    return int(time.time())


class ChatMessage(BaseModel):
    """The assistant's message in a non-streamed chat response."""

    role: str = "assistant"
    content: str | None = None
    reasoning_content: str | None = None


class ChatCompletionResponseChoice(BaseModel):
    """One choice of a non-streamed chat response."""

    index: int
    message: ChatMessage
    logprobs: dict | None = None
    finish_reason: str | None = None
    matched_stop: int | str | None = None


class ChatCompletionResponse(BaseModel):
    """A non-streamed chat response."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=_now)
    model: str
    choices: list[ChatCompletionResponseChoice]
    usage: UsageInfo


class CompletionResponseChoice(BaseModel):
    """One choice of a non-streamed completions response."""

    index: int
    text: str
    logprobs: dict | None = None
    finish_reason: str | None = None
    matched_stop: int | str | None = None


class CompletionResponse(BaseModel):
    """A non-streamed completions response."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=_now)
    model: str
    choices: list[CompletionResponseChoice]
    usage: UsageInfo


class DeltaMessage(BaseModel):
    """What one chat chunk adds to a choice's message."""

    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None


class ChatCompletionResponseStreamChoice(BaseModel):
    """One choice of a chat chunk."""

    index: int
    delta: DeltaMessage
    logprobs: dict | None = None
    finish_reason: str | None = None
    matched_stop: int | str | None = None


class ChatCompletionStreamResponse(BaseModel):
    """One chat chunk (``choices=[]`` with ``usage`` for the final usage chunk)."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int = Field(default_factory=_now)
    model: str
    choices: list[ChatCompletionResponseStreamChoice]
    usage: UsageInfo | None = None


class CompletionResponseStreamChoice(BaseModel):
    """One choice of a completions chunk."""

    index: int
    text: str
    logprobs: dict | None = None
    finish_reason: str | None = None
    matched_stop: int | str | None = None


class CompletionStreamResponse(BaseModel):
    """One completions chunk (``choices=[]`` with ``usage`` for the final usage chunk)."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=_now)
    model: str
    choices: list[CompletionResponseStreamChoice]
    usage: UsageInfo | None = None


class ModelCard(BaseModel):
    """One entry of ``GET /v1/models``."""

    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=_now)
    owned_by: str = "sglang"
    root: str | None = None
    max_model_len: int | None = None


class ModelList(BaseModel):
    """``GET /v1/models``."""

    object: Literal["list"] = "list"
    data: list[ModelCard] = Field(default_factory=list)


class ErrorInfo(BaseModel):
    """The ``error`` object of an OpenAI error body."""

    message: str
    type: str
    param: str | None = None
    code: int | str | None = None


class ErrorResponse(BaseModel):
    """An OpenAI error body: ``{"error": {"message", "type", "param", "code"}}``."""

    error: ErrorInfo


class _MessageShape(msgspec.Struct):
    content: str | list[msgspec.Raw] | None = None


class _ChatShape(msgspec.Struct):
    messages: list[msgspec.Raw] = []


_CHAT_SHAPE = msgspec.json.Decoder(_ChatShape)
_MESSAGE_SHAPE = msgspec.json.Decoder(_MessageShape)


def count_content_parts(body: bytes, limit: int) -> int:
    """Messages plus their content parts in a chat-shaped JSON body, counted up to just past
    ``limit`` (0 when the body has no such shape: validation then says what is wrong).

    NOTE: pydantic validates every part before any length check (1.7 s of event loop for
    367,000 empty parts); this count skims the body in msgspec (about 25 ms for as many).
    """
    try:
        messages = _CHAT_SHAPE.decode(body).messages
    except msgspec.DecodeError:
        return 0
    count = len(messages)
    for raw in messages:
        if count > limit:
            break
        try:
            content = _MESSAGE_SHAPE.decode(raw).content
        except msgspec.DecodeError:
            continue
        if isinstance(content, list):
            count += len(content)
    return count


def error_body(message: str, *, type: str = "invalid_request_error", param: str | None = None,
               code: int | str | None = 400) -> dict:
    """The JSON body of an error response."""
    return ErrorResponse(error=ErrorInfo(message=message, type=type, param=param, code=code)).model_dump()


def validation_error_body(exc) -> dict:
    """A 400 error body for a request that failed validation (a pydantic ``ValidationError`` or
    FastAPI's ``RequestValidationError``); ``param`` is the first bad field."""
    errors = exc.errors(include_url=False) if isinstance(exc, ValidationError) else exc.errors()
    locs = [_loc(e.get("loc", ())) for e in errors]
    message = "; ".join(f"{loc or 'body'}: {e.get('msg')}" for loc, e in zip(locs, errors, strict=True))
    param = next((loc.split(".", 1)[0] for loc in locs if loc), None)
    return error_body(message or "invalid request", param=param)


def _loc(loc: tuple[int | str, ...]) -> str:
    """The dotted path of an error's location; FastAPI's leading ``body`` is dropped."""
    return ".".join(str(part) for part in loc if part != "body")
