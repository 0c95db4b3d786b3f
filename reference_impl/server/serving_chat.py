"""``/v1/chat/completions``: prompt building, streamed chunks (H2 encoder, H6 deltas), full responses."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from reference_impl.hot_paths import HOT_PATHS
from reference_impl.server.protocol import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatCompletionResponseChoice,
    ChatCompletionStreamResponse,
    ChatMessage,
)
from reference_impl.server.serving import (
    ServingBase,
    SubRequests,
    finish_fields,
    total_completion_tokens,
    usage_dict,
)
from reference_impl.server.sse import SSE_DONE, sse_data
from reference_impl.server.timing import sse_comment


class ServingChat(ServingBase):
    """Chat completions, streamed or not."""

    endpoint = "chat"
    id_prefix = "chatcmpl-"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._encoder = HOT_PATHS["H2"].create(self.args.sse_encoder)

    def prepare(self, request: ChatCompletionRequest) -> SubRequests:
        messages = [{"role": m.role, "content": m.text} for m in request.messages]
        prompt_ids = self.tokenizer.encode(self.tokenizer.apply_chat_template(messages))
        return self.build(request, [prompt_ids])

    async def stream(self, request: ChatCompletionRequest, subs: SubRequests) -> AsyncIterator[bytes]:
        """SSE chunks: per choice a role chunk, content chunks, one finish chunk; then [DONE]."""
        encode = self._encoder.encode
        tracker = self.delta_tracker_cls()
        head = {"chunk_id": subs.request_id, "created": subs.created, "model": request.model}
        continuous = request.continuous_usage_stats
        completion_tokens = 0
        async for index, out in self.tm.generate(subs.reqs, subs.indices, subs.gone, subs.timings):
            usage = usage_dict(out.prompt_tokens, out.completion_tokens) if continuous else None
            if tracker.is_first(index):
                subs.first_output = subs.first_output or time.perf_counter()
                yield encode(**head, index=index, role="assistant", content="", usage=usage)
            delta = tracker.delta(index, out.text, out.text_start)
            if delta:
                yield encode(**head, index=index, content=delta, usage=usage)
            if out.finish_reason is not None:
                completion_tokens += out.completion_tokens
                reason, matched = finish_fields(out.finish_reason)
                yield encode(**head, index=index, finish_reason=reason, matched_stop=matched, usage=usage)
        if request.include_usage:
            yield sse_data(ChatCompletionStreamResponse(
                id=subs.request_id, created=subs.created, model=request.model, choices=[],
                usage=subs.usage(completion_tokens)))
        if subs.timings is not None:
            yield sse_comment(subs.timing_fields())
        yield SSE_DONE
        self.record(subs)

    async def complete(self, request: ChatCompletionRequest, subs: SubRequests) -> ChatCompletionResponse:
        """The whole response once every choice has finished."""
        finals = await self.collect(subs)
        choices = []
        for index, out in finals:
            reason, matched = finish_fields(out.finish_reason)
            choices.append(ChatCompletionResponseChoice(
                index=index, message=ChatMessage(content=out.text), finish_reason=reason,
                matched_stop=matched))
        return ChatCompletionResponse(id=subs.request_id, created=subs.created, model=request.model,
                                      choices=choices, usage=subs.usage(total_completion_tokens(finals)))

