"""H2: server-sent-event encoding of chat chunks, in a legacy and an optimized form.

Both encoders write ``data: {json}\\n\\n`` for one chat chunk of one choice. Their outputs differ
in bytes but parse to the same object when a missing key is read as null:

- legacy (``pydantic``) builds the delta, choice and chunk models and calls ``model_dump_json``,
  so every key is present (``"usage": null`` included);
- optimized (``msgspec``) encodes msgspec Structs with one reused encoder; delta and chunk omit
  keys left at their default, the choice keeps all its keys, ``reasoning_content`` is always in
  the delta and ``usage`` only when given.

Rarely sent chunks (the usage-only chunk, errors, completions chunks) go through ``sse_data``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import msgspec
from pydantic import BaseModel

from reference_impl.server.protocol import (
    ChatCompletionResponseStreamChoice,
    ChatCompletionStreamResponse,
    DeltaMessage,
)

SSE_DONE: bytes = b"data: [DONE]\n\n"
_SSE_PREFIX = b"data: "
_SSE_SUFFIX = b"\n\n"
_CHUNK_OBJECT = "chat.completion.chunk"


def sse_data(model: BaseModel) -> bytes:
    """One SSE event holding ``model`` as JSON (all keys, pydantic)."""
    return _SSE_PREFIX + model.model_dump_json().encode() + _SSE_SUFFIX


class ChatChunkEncoder(ABC):
    """Encodes one chat chunk holding one choice as an SSE event."""

    name: ClassVar[str]

    @abstractmethod
    def encode(self, *, chunk_id: str, created: int, model: str, index: int,
               role: str | None = None, content: str | None = None,
               reasoning_content: str | None = None, finish_reason: str | None = None,
               matched_stop: int | str | None = None, logprobs: dict | None = None,
               usage: dict | None = None) -> bytes:
        """``b"data: {...}\\n\\n"`` for one chunk of choice ``index``.

        The first chunk of a choice has ``role="assistant", content=""``; ``usage`` is a
        ``UsageInfo.model_dump()`` and ``logprobs`` a plain dict.
        """


class PydanticChatChunkEncoder(ChatChunkEncoder):
    """Legacy: three pydantic models per chunk, serialised with ``model_dump_json``."""

    name = "pydantic"

    def encode(self, *, chunk_id: str, created: int, model: str, index: int,
               role: str | None = None, content: str | None = None,
               reasoning_content: str | None = None, finish_reason: str | None = None,
               matched_stop: int | str | None = None, logprobs: dict | None = None,
               usage: dict | None = None) -> bytes:
        delta = DeltaMessage(role=role, content=content, reasoning_content=reasoning_content)
        choice = ChatCompletionResponseStreamChoice(
            index=index, delta=delta, logprobs=logprobs, finish_reason=finish_reason,
            matched_stop=matched_stop)
        chunk = ChatCompletionStreamResponse(
            id=chunk_id, created=created, model=model, choices=[choice], usage=usage)
        # Upstream yields this str and the response encodes it: legacy keeps both steps.
        return f"data: {chunk.model_dump_json()}\n\n".encode()


class _StreamDelta(msgspec.Struct, omit_defaults=True):
    # NOTE: no default, so never omitted: the OpenAI SDK exposes reasoning_content only as an
    # extra field, and a client reading it fails when the key is missing.
    reasoning_content: str | None
    role: str | None = None
    content: str | None = None


class _StreamChoice(msgspec.Struct):
    index: int
    delta: _StreamDelta
    logprobs: dict | None = None
    finish_reason: str | None = None
    matched_stop: int | str | None = None


class _StreamChunk(msgspec.Struct, omit_defaults=True):
    id: str
    object: str
    created: int
    model: str
    choices: list[_StreamChoice]
    usage: dict | None = None


class MsgspecChatChunkEncoder(ChatChunkEncoder):
    """Optimized: msgspec Structs and one reused encoder; bytes assembled once."""

    name = "msgspec"

    def __init__(self) -> None:
        # Reused: building an Encoder per chunk would cost more than the encoding itself.
        self._encoder = msgspec.json.Encoder()

    def encode(self, *, chunk_id: str, created: int, model: str, index: int,
               role: str | None = None, content: str | None = None,
               reasoning_content: str | None = None, finish_reason: str | None = None,
               matched_stop: int | str | None = None, logprobs: dict | None = None,
               usage: dict | None = None) -> bytes:
        delta = _StreamDelta(reasoning_content=reasoning_content, role=role, content=content)
        choice = _StreamChoice(index=index, delta=delta, logprobs=logprobs,
                               finish_reason=finish_reason, matched_stop=matched_stop)
        chunk = _StreamChunk(id=chunk_id, object=_CHUNK_OBJECT, created=created, model=model,
                             choices=[choice], usage=usage)
        return _SSE_PREFIX + self._encoder.encode(chunk) + _SSE_SUFFIX
