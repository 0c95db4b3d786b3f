"""H6: per-choice stream delta trackers, in a legacy and an optimized form.

A tracker lives for one streamed response and is keyed by choice index. In the default
(non-incremental) output mode each output holds the cumulative generated text of its choice and
the tracker returns the part not streamed yet:

- legacy (``concat``) keeps the streamed text as a string: ``delta = text[len(buffer):]``, then
  ``buffer = buffer + delta`` (O(n) per chunk, O(n^2) per response);
- optimized (``offset``) keeps an integer: ``delta = text[offset:]``, ``offset = len(text)``.

An output may hold only the end of the cumulative text, from character ``start`` on (H3's
optimized form hands over only what is new): the trackers index relative to ``start``, so the
offset form then costs O(new text) per chunk.

With incremental streaming output each output already is the delta and is returned as is; the
registry maps each form to its ``Incremental*`` class for that mode
(``HOT_PATHS["H6"].implementation(form, incremental=True)``).

Echo is not the tracker's business: the serving layer prepends the prompt to the first chunk's
delta and gives the tracker only generated text. Feeding it the echoed text is the upstream
review bug (the offset then counts ``len(prompt)`` characters too many and every later delta
loses that many characters).

When a stop string is trimmed, the final text can be shorter than what was streamed: its delta
is ``""`` in every form.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar


class DeltaTracker(ABC):
    """Turns each choice's outputs into the text to stream next."""

    form: ClassVar[str]

    @abstractmethod
    def is_first(self, index: int) -> bool:
        """Whether choice ``index`` has not produced a delta yet."""

    @abstractmethod
    def delta(self, index: int, text: str, start: int = 0) -> str:
        """The new text of choice ``index`` given its output ``text``; records the progress.

        ``text`` is the choice's cumulative text from character ``start`` on.
        """


class ConcatDeltaTracker(DeltaTracker):
    """Legacy: the streamed text so far, as a string per choice."""

    form = "concat"

    def __init__(self) -> None:
        self._buffers: dict[int, str] = {}

    def is_first(self, index: int) -> bool:
        # NOTE: membership, not truthiness: the first text of a choice may be empty.
        return index not in self._buffers

    def delta(self, index: int, text: str, start: int = 0) -> str:
        buffer = self._buffers.get(index, "")
        delta = text[_relative(len(buffer), start):]
        self._buffers[index] = buffer + delta
        return delta


class OffsetDeltaTracker(DeltaTracker):
    """Optimized: the length of the generated text so far, as an int per choice."""

    form = "offset"

    def __init__(self) -> None:
        self._offsets: dict[int, int] = {}

    def is_first(self, index: int) -> bool:
        # NOTE: membership, not truthiness: an offset of 0 is falsy.
        return index not in self._offsets

    def delta(self, index: int, text: str, start: int = 0) -> str:
        delta = text[_relative(self._offsets.get(index, 0), start):]
        self._offsets[index] = start + len(text)
        return delta


class IncrementalConcatDeltaTracker(ConcatDeltaTracker):
    """Legacy in incremental mode: the text is the delta, yet the buffer still grows, as upstream."""

    def delta(self, index: int, text: str, start: int = 0) -> str:
        self._buffers[index] = self._buffers.get(index, "") + text
        return text


class IncrementalOffsetDeltaTracker(OffsetDeltaTracker):
    """Optimized in incremental mode: the text is the delta; only the choice is recorded."""

    def delta(self, index: int, text: str, start: int = 0) -> str:
        self._offsets[index] = len(text)
        return text


def _relative(streamed: int, start: int) -> int:
    """Where the unstreamed part begins inside a text that starts at character ``start``."""
    if start > streamed:
        raise ValueError(f"output starts at character {start}, past the {streamed} streamed")
    return streamed - start
