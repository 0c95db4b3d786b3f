"""Incremental decoders: one request's output ids to text, step by step, never half a character."""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence

from reference_impl.tokenizer.base import IncrementalDecoder

_REPLACEMENT = "\ufffd"


class Utf8IncrementalDecoder(IncrementalDecoder):
    """For byte tokens: an incremental UTF-8 decoder over the bytes the ids stand for."""

    def __init__(self, ids_to_bytes: Callable[[Sequence[int]], bytes]):
        self._ids_to_bytes = ids_to_bytes
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, ids: Sequence[int]) -> str:
        """Return the characters completed by these ids' bytes."""
        return self._utf8.decode(self._ids_to_bytes(ids))

    def flush(self) -> str:
        """Return U+FFFD for an unfinished character at the end, else an empty string."""
        return self._utf8.decode(b"", final=True)


class OffsetIncrementalDecoder(IncrementalDecoder):
    """For any tokenizer with a ``decode``: the prefix/read offsets method.

    ``decode(ids[prefix:])`` is compared with ``decode(ids[prefix:read])``; the difference is
    emitted once it no longer ends in U+FFFD (a character still missing bytes). The token
    before ``read`` stays as context, so tokenizers that drop a leading space or merge
    bytes across tokens decode the same as in one shot.
    """

    def __init__(self, decode: Callable[[list[int]], str]):
        self._decode = decode
        self._ids: list[int] = []
        self._read_offset = 0

    @property
    def window_len(self) -> int:
        """Ids kept for context and for unfinished characters; stays small however long the output."""
        return len(self._ids)

    def feed(self, ids: Sequence[int]) -> str:
        """Return the new complete text; hold it back while it ends in U+FFFD."""
        self._ids.extend(ids)
        prefix_text, new_text = self._decode_window()
        if len(new_text) <= len(prefix_text) or new_text.endswith(_REPLACEMENT):
            return ""
        self._advance()
        return new_text[len(prefix_text):]

    def flush(self) -> str:
        """Return the held-back text, U+FFFD included."""
        prefix_text, new_text = self._decode_window()
        self._advance()
        return new_text[len(prefix_text):]

    def _decode_window(self) -> tuple[str, str]:
        return self._decode(self._ids[:self._read_offset]), self._decode(self._ids)

    def _advance(self) -> None:
        # NOTE: the window always starts at the prefix offset: ids before it are never decoded
        # again, so dropping them keeps every feed O(window), not O(output length).
        del self._ids[:self._read_offset]
        self._read_offset = len(self._ids)
