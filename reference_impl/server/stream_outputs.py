"""H3: what the tokenizer manager queues for a waiting stream at each step, in four forms.

- ``CopyOutputs`` (legacy, ``copy``): a copy of all output ids so far and the whole text so
  far, every step: O(n) per step, O(n²) per request.
- ``FullTextOutputs`` (``reference-full``, upstream sglang#22567 exactly): intermediate outputs
  hold a reference to the live id list and ``text=None``; the consumer, after draining, fills in
  the whole text so far once per wake-up (still an O(n) string per wake-up).
- ``TailOutputs`` (optimized default, ``reference``; one step past upstream): as above, but the
  consumer gets only the text added since its previous wake-up, with ``text_start`` saying where
  it begins in the whole text. The H6 offset tracker needs nothing more, so a request is O(n).
- ``IncrementalOutputs`` (``--incremental-streaming-output``): only the new ids and text; the
  registry gives it for every form in that mode (``HOT_PATHS["H3"].create(form, incremental=True)``).

Every form keeps the request's text as upstream does since sglang#22548: the text built so far
plus the chunks that arrived since, appended once; never a re-join of every chunk per wake-up.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod

from reference_impl.messages import FinishReason


class ReqOutput:
    """One queued output of one request.

    ``text`` is the request's text from character ``text_start`` on (0: the whole text so far;
    in incremental mode: the new text).
    """

    __slots__ = ("text", "text_start", "output_ids", "finish_reason", "prompt_tokens",
                 "completion_tokens")

    def __init__(self, text: str | None, output_ids: list[int], finish_reason: FinishReason | None,
                 prompt_tokens: int, completion_tokens: int, text_start: int = 0):
        self.text = text
        self.text_start = text_start
        self.output_ids = output_ids
        self.finish_reason = finish_reason
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens


_REQ_OUTPUT_BYTES = sys.getsizeof(ReqOutput(None, [], None, 0, 0))


class ReqState:
    """The tokenizer manager's state of one request (one choice).

    ``num_queued_bytes`` estimates what the outputs in ``out_list`` hold (see ``queued_bytes``);
    ``is_waiting``: its consumer waits on ``event`` (False while it is away, e.g. writing to its
    client); ``gone`` is the request's ``ClientGone``, set by the tokenizer manager.
    """

    __slots__ = ("rid", "index", "out_list", "num_queued_bytes", "is_waiting", "gone", "event",
                 "finished", "text_chunks", "_text", "_num_joined", "num_taken_chunks",
                 "num_taken_chars", "output_ids", "created", "first_token_time", "last_time",
                 "timing")

    def __init__(self, rid: str, index: int, event, created: float):
        self.rid = rid
        self.index = index
        self.out_list: list[ReqOutput] = []
        self.num_queued_bytes = 0
        self.is_waiting = True
        self.gone = None
        self.event = event
        self.finished = False
        self.text_chunks: list[str] = []
        self._text = ""
        self._num_joined = 0
        self.num_taken_chunks = 0
        self.num_taken_chars = 0
        self.output_ids: list[int] = []
        self.created = created
        self.first_token_time = 0.0
        self.last_time = 0.0
        self.timing = None  # the scheduler's ReqTiming, with the final output

    def get_text(self) -> str:
        """The whole text so far: the text built before plus only the chunks that came since."""
        if self._num_joined != len(self.text_chunks):
            self._text += "".join(self.text_chunks[self._num_joined:])
            self._num_joined = len(self.text_chunks)
        return self._text

    def take_tail(self) -> tuple[str, int]:
        """The text added since the previous ``take_tail`` and where it starts in the whole text."""
        start = self.num_taken_chars
        tail = "".join(self.text_chunks[self.num_taken_chunks:])
        self.num_taken_chunks = len(self.text_chunks)
        self.num_taken_chars = start + len(tail)
        return tail, start


def queued_bytes(state: ReqState, out: ReqOutput) -> int:
    """Bytes ``out`` holds of its own while queued, in O(1): its text and its id list unless that
    is the state's live list (the reference forms), plus the object (the ids' ints are shared)."""
    ids_bytes = 0 if out.output_ids is state.output_ids else sys.getsizeof(out.output_ids)
    text_bytes = 0 if out.text is None else sys.getsizeof(out.text)
    return _REQ_OUTPUT_BYTES + ids_bytes + text_bytes


class StreamOutputs(ABC):
    """H3's interface: what one step queues for a request, and what its consumer takes."""

    @abstractmethod
    def build(self, state: ReqState, text: str, ids: list[int], finish: FinishReason | None,
              prompt_tokens: int, completion_tokens: int) -> ReqOutput:
        """The output queued for this step (``text`` and ``ids`` are the step's new ones)."""

    @abstractmethod
    def take(self, state: ReqState, outs: list[ReqOutput]) -> ReqOutput:
        """The one output a woken consumer gets from what queued up since its last wake-up."""


class CopyOutputs(StreamOutputs):
    """Legacy: copy the ids and the whole text at every step; the consumer keeps the newest."""

    def build(self, state: ReqState, text: str, ids: list[int], finish: FinishReason | None,
              prompt_tokens: int, completion_tokens: int) -> ReqOutput:
        return ReqOutput(state.get_text(), state.output_ids.copy(), finish,
                         prompt_tokens, completion_tokens)

    def take(self, state: ReqState, outs: list[ReqOutput]) -> ReqOutput:
        return outs[-1]


class FullTextOutputs(StreamOutputs):
    """Upstream #22567: no per-step copy; the whole text is built once per consumer wake-up."""

    def build(self, state: ReqState, text: str, ids: list[int], finish: FinishReason | None,
              prompt_tokens: int, completion_tokens: int) -> ReqOutput:
        if finish is not None:
            return ReqOutput(state.get_text(), state.output_ids.copy(), finish,
                             prompt_tokens, completion_tokens)
        # NOTE: output_ids is the live list; a consumer that keeps it across an await must copy.
        return ReqOutput(None, state.output_ids, None, prompt_tokens, completion_tokens)

    def take(self, state: ReqState, outs: list[ReqOutput]) -> ReqOutput:
        out = outs[-1]
        if out.text is None:
            out.text = state.get_text()
        return out


class TailOutputs(FullTextOutputs):
    """Optimized: as upstream, but the consumer gets only the text added since its last wake-up."""

    def take(self, state: ReqState, outs: list[ReqOutput]) -> ReqOutput:
        out = outs[-1]
        if out.text is None:
            out.text, out.text_start = state.take_tail()
        return out


class IncrementalOutputs(StreamOutputs):
    """Incremental mode (any H3 form): each output holds only what is new; the consumer merges."""

    def build(self, state: ReqState, text: str, ids: list[int], finish: FinishReason | None,
              prompt_tokens: int, completion_tokens: int) -> ReqOutput:
        return ReqOutput(text, ids, finish, prompt_tokens, completion_tokens)

    def take(self, state: ReqState, outs: list[ReqOutput]) -> ReqOutput:
        if len(outs) == 1:
            return outs[0]
        last = outs[-1]
        ids = [i for o in outs for i in o.output_ids]
        return ReqOutput("".join(o.text for o in outs), ids, last.finish_reason,
                         last.prompt_tokens, last.completion_tokens)
