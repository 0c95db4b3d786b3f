"""One request's text state in the detokenizer: ids in, text deltas out, stop strings held back.

Each step's text comes from the request's incremental decoder (never half a character). Text
that could be the start of a stop string is held back until it is known not to be one, so a
stop string is never sent, not even in part; only that short tail is kept, so a step costs
O(max stop length), whatever the output length.
"""

from __future__ import annotations

from collections.abc import Sequence

from reference_impl.messages import FinishReason
from reference_impl.tokenizer import IncrementalDecoder


class DetokenizeStream:
    """Text deltas for one request, given its new ids per step and its finish reason."""

    def __init__(self, decoder: IncrementalDecoder, stop_strs: Sequence[str] = ()):
        stops = [s for s in stop_strs if s]
        self._decoder = decoder
        self._stop_prefixes = frozenset(s[:k] for s in stops for k in range(1, len(s) + 1))
        self._stop_first_chars = frozenset(s[0] for s in stops)
        self._max_stop_len = max(map(len, stops), default=0)
        self._pending = ""
        self._finished = False

    @property
    def pending_text(self) -> str:
        """Text decoded but held back, as a possible start of a stop string."""
        return self._pending

    def step(self, new_ids: Sequence[int], finish: FinishReason | None) -> str:
        """The text delta to send now for ``new_ids``; the last one when ``finish`` is set."""
        if self._finished:
            raise RuntimeError("step() after the request finished")
        if finish is not None:
            return self._finish(new_ids, finish)
        text = self._pending + self._decoder.feed(new_ids)
        num_held = self._held_len(text)
        self._pending = text[len(text) - num_held:] if num_held else ""
        return text[:len(text) - num_held]

    def _finish(self, new_ids: Sequence[int], finish: FinishReason) -> str:
        self._finished = True
        matched = finish.matched
        if isinstance(matched, int) and new_ids:
            # NOTE: a matched stop token is the last id and never becomes text.
            new_ids = new_ids[:-1]
        text = self._pending + self._decoder.feed(new_ids) + self._decoder.flush()
        self._pending = ""
        if isinstance(matched, str) and matched:
            cut = text.find(matched)
            if cut != -1:
                text = text[:cut]
        return text

    def _held_len(self, text: str) -> int:
        """Length of the longest suffix of ``text`` that is a prefix of some stop string."""
        first_chars = self._stop_first_chars
        prefixes = self._stop_prefixes
        for k in range(min(len(text), self._max_stop_len), 0, -1):
            if text[-k] in first_chars and text[-k:] in prefixes:
                return k
        return 0
