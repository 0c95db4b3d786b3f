"""The tokenizer interface every part of the stack uses, and the plain chat format.

Two implementations sit behind it: an embedded byte-level tokenizer (no files, no download)
and a wrapper over a local Hugging Face ``tokenizer.json``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence


class IncrementalDecoder(ABC):
    """Turns one request's output ids into text step by step, never half a character."""

    @abstractmethod
    def feed(self, ids: Sequence[int]) -> str:
        """Return the new complete text these ids add (possibly empty)."""

    @abstractmethod
    def flush(self) -> str:
        """Return whatever text is still held back (U+FFFD for a truly broken tail)."""


class Tokenizer(ABC):
    """Text to ids and back; special tokens are never added by ``encode`` nor shown by ``decode``."""

    vocab_size: int
    eos_token_id: int
    bos_token_id: int | None

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Return the ids of ``text``, without adding special tokens."""

    @abstractmethod
    def decode(self, ids: Sequence[int]) -> str:
        """Return the text of ``ids``, skipping special tokens; bad bytes become U+FFFD."""

    @abstractmethod
    def apply_chat_template(self, messages: list[dict]) -> str:
        """Render chat messages (``{"role", "content"}``) as a prompt ending in the assistant turn."""

    @abstractmethod
    def incremental_decoder(self) -> IncrementalDecoder:
        """Return a fresh incremental decoder for one request's output."""


def message_text(content: object) -> str:
    """The text of an OpenAI message content: a string, None, or a list of text parts (joined
    with newlines, as the chat endpoint and vLLM do)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(part.get("text", "") for part in content if part.get("type") == "text")


def render_plain_chat(messages: list[dict]) -> str:
    """``<|role|>\\ncontent\\n`` per message, then ``<|assistant|>\\n``: plain, deterministic text."""
    turns = [f"<|{m['role']}|>\n{message_text(m.get('content'))}\n" for m in messages]
    return "".join(turns) + "<|assistant|>\n"
