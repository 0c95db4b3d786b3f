"""One request's text state in the detokenizer: ids in, text deltas out, stop strings held back.

Each step's text comes from the request's incremental decoder (never half a character). Text
that could be the start of a stop string is held back until it is known not to be one, so a
stop string is never sent, not even in part. An Aho-Corasick scan (``StopScanner``) gives the
length to hold back, so a step costs O(new characters) and memory O(total stop length).
"""

from __future__ import annotations

from collections.abc import Sequence

from reference_impl.messages import FinishReason
from reference_impl.tokenizer import IncrementalDecoder
from reference_impl.tokenizer.stop_strings import StopScanner


class DetokenizeStream:
    """Text deltas for one request, given its new ids per step and its finish reason."""

    def __init__(self, decoder: IncrementalDecoder, stop_strs: Sequence[str] = ()):
        stops = tuple(s for s in stop_strs if s)
        self._decoder = decoder
        self._scanner = StopScanner(stops) if stops else None
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
        new_text = self._decoder.feed(new_ids)
        text = self._pending + new_text
        if self._scanner is None:
            return text
        self._scanner.feed(new_text)
        num_held = self._scanner.held_len
        self._pending = text[len(text) - num_held:] if num_held else ""
        return text[:len(text) - num_held]

    def _finish(self, new_ids: Sequence[int], finish: FinishReason) -> str:
        self._finished = True
        matched = finish.matched
        if isinstance(matched, int) and new_ids:
            # NOTE: a matched stop token is the last id and never becomes text.
            new_ids = new_ids[:-1]
        # NOTE: a character cut by max_tokens or EOS never completes: it is dropped, as it was
        # held back mid-stream, so no text ends in U+FFFD.
        text = self._pending + self._decoder.feed(new_ids) + self._decoder.flush().rstrip("\ufffd")
        self._pending = ""
        if isinstance(matched, str) and matched:
            cut = text.find(matched)
            if cut != -1:
                text = text[:cut]
        return text
