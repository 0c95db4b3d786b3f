"""H3: what the tokenizer manager queues for a waiting stream at each step, in three forms.

- ``CopyOutputs`` (legacy, non-incremental): a copy of all output ids so far and the whole
  text joined again, every step: O(n) per step, O(n²) per request.
- ``ReferenceOutputs`` (optimized, non-incremental): intermediate outputs hold a reference to
  the live id list and ``text=None``; the consumer builds the text once, after draining.
- ``IncrementalOutputs`` (``--incremental-streaming-output``): only the new ids and text.
"""

from __future__ import annotations

from reference_impl.messages import FinishReason


class ReqOutput:
    """One queued output of one request."""

    __slots__ = ("text", "output_ids", "finish_reason", "prompt_tokens", "completion_tokens")

    def __init__(self, text: str | None, output_ids: list[int], finish_reason: FinishReason | None,
                 prompt_tokens: int, completion_tokens: int):
        self.text = text
        self.output_ids = output_ids
        self.finish_reason = finish_reason
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens


class ReqState:
    """The tokenizer manager's state of one request (one choice)."""

    __slots__ = ("rid", "index", "out_list", "event", "finished", "text_chunks", "_text",
                 "_text_num_chunks", "output_ids", "created", "first_token_time", "last_time")

    def __init__(self, rid: str, index: int, event, created: float):
        self.rid = rid
        self.index = index
        self.out_list: list[ReqOutput] = []
        self.event = event
        self.finished = False
        self.text_chunks: list[str] = []
        self._text = ""
        self._text_num_chunks = 0
        self.output_ids: list[int] = []
        self.created = created
        self.first_token_time = 0.0
        self.last_time = 0.0

    def get_text(self) -> str:
        """The whole text so far, joined lazily and cached until new chunks arrive."""
        if self._text_num_chunks != len(self.text_chunks):
            self._text = "".join(self.text_chunks)
            self._text_num_chunks = len(self.text_chunks)
        return self._text


class CopyOutputs:
    """Legacy: copy ids and join the text at every step; the consumer keeps the newest."""

    def build(self, state: ReqState, text: str, ids: list[int], finish: FinishReason | None,
              prompt_tokens: int, completion_tokens: int) -> ReqOutput:
        return ReqOutput("".join(state.text_chunks), state.output_ids.copy(), finish,
                         prompt_tokens, completion_tokens)

    def take(self, state: ReqState, outs: list[ReqOutput]) -> ReqOutput:
        return outs[-1]


class ReferenceOutputs:
    """Optimized: no per-step copy; the text is built once per consumer wake-up."""

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


class IncrementalOutputs:
    """Each output holds only what is new; the consumer merges what queued up."""

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


def make_stream_outputs(form: str, incremental: bool):
    """The output builder for ``--stream-output`` and ``--incremental-streaming-output``."""
    if incremental:
        return IncrementalOutputs()
    return {"copy": CopyOutputs, "reference": ReferenceOutputs}[form]()
