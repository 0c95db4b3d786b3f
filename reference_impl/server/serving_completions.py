"""``/v1/completions``: prompts as text or ids, echo, streamed chunks (H6 deltas), full responses."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from reference_impl.server.protocol import (
    CompletionRequest,
    CompletionResponse,
    CompletionResponseChoice,
    CompletionResponseStreamChoice,
    CompletionStreamResponse,
    UsageInfo,
)
from reference_impl.server.serving import (
    ServingBase,
    SubRequests,
    finish_fields,
    total_completion_tokens,
)
from reference_impl.server.sse import SSE_DONE, sse_data
from reference_impl.server.timing import sse_comment


class ServingCompletions(ServingBase):
    """Text completions, streamed or not; a list of prompts is a batch."""

    endpoint = "completions"
    id_prefix = "cmpl-"

    def prepare(self, request: CompletionRequest) -> SubRequests:
        prompts = []
        for prompt in request.prompts:
            if isinstance(prompt, str):
                prompts.append(self.tokenizer.encode(prompt))
            else:
                self._check_token_ids(prompt, "prompt")
                prompts.append(list(prompt))
        return self.build(request, prompts)

    def echo_texts(self, request: CompletionRequest) -> list[str]:
        """Per prompt, the text echoed before its choices' output."""
        if not request.echo:
            return [""] * len(request.prompts)
        return [p if isinstance(p, str) else self.tokenizer.decode(p) for p in request.prompts]

    async def stream(self, request: CompletionRequest, subs: SubRequests) -> AsyncIterator[bytes]:
        """SSE chunks: content chunks (the echo on each choice's first), one finish chunk each."""
        tracker = self.delta_tracker_cls()
        echoes = self.echo_texts(request)
        continuous = request.continuous_usage_stats
        completion_tokens = 0
        async for index, out in self.tm.generate(subs.reqs, subs.indices, subs.gone, subs.timings):
            usage = UsageInfo.of(out.prompt_tokens, out.completion_tokens) if continuous else None
            first = tracker.is_first(index)
            # NOTE: the tracker sees generated text only; the echo never moves its offset.
            delta = tracker.delta(index, out.text, out.text_start)
            if first:
                delta = echoes[index // request.n] + delta
                subs.first_output = subs.first_output or time.perf_counter()
            if delta:
                yield self._chunk(request, subs, index, delta, usage=usage)
            if out.finish_reason is not None:
                completion_tokens += out.completion_tokens
                reason, matched = finish_fields(out.finish_reason)
                yield self._chunk(request, subs, index, "", reason, matched, usage)
        if request.include_usage:
            yield sse_data(CompletionStreamResponse(
                id=subs.request_id, created=subs.created, model=request.model, choices=[],
                usage=subs.usage(completion_tokens)))
        if subs.timings is not None:
            yield sse_comment(subs.timing_fields())
        yield SSE_DONE
        self.record(subs)

    async def complete(self, request: CompletionRequest, subs: SubRequests) -> CompletionResponse:
        """The whole response once every choice has finished."""
        finals = await self.collect(subs)
        echoes = self.echo_texts(request)
        choices = []
        for index, out in finals:
            reason, matched = finish_fields(out.finish_reason)
            choices.append(CompletionResponseChoice(
                index=index, text=echoes[index // request.n] + out.text, finish_reason=reason,
                matched_stop=matched))
        return CompletionResponse(id=subs.request_id, created=subs.created, model=request.model,
                                  choices=choices, usage=subs.usage(total_completion_tokens(finals)))

    def _chunk(self, request, subs: SubRequests, index: int, text: str, finish_reason=None,
               matched_stop=None, usage=None) -> bytes:
        choice = CompletionResponseStreamChoice(index=index, text=text, finish_reason=finish_reason,
                                                matched_stop=matched_stop)
        return sse_data(CompletionStreamResponse(id=subs.request_id, created=subs.created,
                                                 model=request.model, choices=[choice], usage=usage))
