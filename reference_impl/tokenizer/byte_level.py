"""The embedded byte-level tokenizer: id i < 256 is byte i, then a few special tokens.

It needs no files and no download. Every non-ASCII character spans several tokens, so the
incremental detokenization path is exercised by any multi-byte text.
"""

from __future__ import annotations

from collections.abc import Sequence

from reference_impl.tokenizer.base import IncrementalDecoder, Tokenizer, render_plain_chat
from reference_impl.tokenizer.incremental import Utf8IncrementalDecoder

NUM_BYTE_TOKENS = 256
SPECIAL_TOKENS = ("<|bos|>", "<|eos|>", "<|pad|>", "<|unk|>")


def ids_to_bytes(ids: Sequence[int]) -> bytes:
    """The bytes of the byte tokens among ``ids``; special and unknown ids are skipped."""
    # NOTE: never bytes(ids) directly: for an array('q') that copies its raw int64 memory.
    return bytes([i for i in ids if 0 <= i < NUM_BYTE_TOKENS])


class ByteLevelTokenizer(Tokenizer):
    """UTF-8 bytes as tokens; ``<|bos|>`` = 256, ``<|eos|>`` = 257; vocab of 260."""

    def __init__(self) -> None:
        self.vocab_size = NUM_BYTE_TOKENS + len(SPECIAL_TOKENS)
        self.bos_token_id = self.special_token_id("<|bos|>")
        self.eos_token_id = self.special_token_id("<|eos|>")

    @staticmethod
    def special_token_id(token: str) -> int:
        """The id of one of ``SPECIAL_TOKENS``."""
        return NUM_BYTE_TOKENS + SPECIAL_TOKENS.index(token)

    def encode(self, text: str) -> list[int]:
        """One id per UTF-8 byte (a lone surrogate becomes ``?``); special tokens are never produced."""
        return list(text.encode("utf-8", errors="replace"))

    def decode(self, ids: Sequence[int]) -> str:
        """The UTF-8 text of the byte ids, special ids skipped, bad bytes as U+FFFD."""
        return ids_to_bytes(ids).decode("utf-8", errors="replace")

    def apply_chat_template(self, messages: list[dict]) -> str:
        """The plain chat format of ``render_plain_chat``."""
        return render_plain_chat(messages)

    def incremental_decoder(self) -> IncrementalDecoder:
        """An incremental UTF-8 decoder over the byte ids."""
        return Utf8IncrementalDecoder(ids_to_bytes)
