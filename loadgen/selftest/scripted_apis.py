"""The scripted server's issue-32 APIs: `/v1/embeddings` (a whole answer `ttft_ms` after the
request) and a streamed `/v1/responses` (timed as chat is, in the Responses API's events). Each
route takes the server (`testserver.ScriptedServer`), the connection (its handler) and the body;
they are not typed here, as `Stream`'s are not, so that this module does not import `testserver`."""

from __future__ import annotations

import asyncio
import time

import msgspec

from loadgen.selftest.scripted_stream import MODEL_NAME, SSE_HEAD, Stream, chunked, json_response

#: The requests whose headers and body `/last_request` keeps.
GENERATION_PATHS = (b"/v1/chat/completions", b"/v1/completions", b"/v1/embeddings", b"/v1/responses")
EMBEDDING_DIM = 8


class _EmbeddingsRequest(msgspec.Struct):
    input: str | list  # a text, texts, token ids, or lists of token ids


class _ResponsesRequest(msgspec.Struct):
    input: str | list | None = None
    max_output_tokens: int | None = None
    stream: bool = False


def _embed(server, conn, body: bytes) -> None:
    """One vector per input and usage.prompt_tokens (a text counts its UTF-8 bytes, as /tokenize),
    `ttft_ms` after the request; the truth keeps each latency as TTFT."""
    arrived = time.perf_counter_ns()
    inputs = msgspec.json.decode(body, type=_EmbeddingsRequest).input
    if isinstance(inputs, str) or (inputs and isinstance(inputs[0], int)):
        inputs = [inputs]
    tokens = sum(len(x.encode()) if isinstance(x, str) else len(x) for x in inputs)
    fault = server.script.faults[server.truth.num_requests % len(server.script.faults)]
    server.truth.num_requests += 1
    if fault == "hang":
        return
    if fault == "http_500":
        conn.write(json_response("500 Internal Server Error", {"error": {"message": "scripted failure"}}))
        return

    async def later() -> None:
        await asyncio.sleep(server.script.ttft_ms / 1e3)
        data = [{"object": "embedding", "index": i, "embedding": [0.5] * EMBEDDING_DIM} for i in range(len(inputs))]
        truth = server.truth
        truth.ttft_ns.append(time.perf_counter_ns() - arrived)
        truth.num_inputs += len(inputs)
        truth.num_prompt_tokens += tokens
        conn.write(json_response("200 OK", {"object": "list", "data": data, "model": MODEL_NAME,
                                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}))

    asyncio.get_running_loop().create_task(later())


def _respond(server, conn, body: bytes) -> None:
    """A streamed Responses answer: `response.created` with the head, one `response.output_text.delta`
    per token as chat's tokens are timed, then `response.completed` with usage (no [DONE])."""
    arrived = time.perf_counter_ns()
    req = msgspec.json.decode(body, type=_ResponsesRequest)
    fault = server.script.faults[server.truth.num_requests % len(server.script.faults)]
    server.truth.num_requests += 1
    n = server.script.num_tokens or req.max_output_tokens or 16
    prompt_tokens = len(req.input.encode()) if isinstance(req.input, str) else server.script.prompt_tokens
    if fault == "hang":
        return
    if fault == "http_500" or not req.stream:
        conn.write(json_response("500 Internal Server Error", {"error": {"message": "scripted failure"}}))
        return
    stream = _ResponsesStream(server, conn, False, n, True, fault, arrived, prompt_tokens)
    server.truth.open_streams += 1
    server.truth.awaiting_first(+1)
    conn.write(SSE_HEAD + chunked(_response_event("response.created", {"response": {"status": "in_progress"}})))
    server._admit(stream)


def _response_event(kind: str, fields: dict) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (kind.encode(), msgspec.json.encode({"type": kind, **fields}))


class _ResponsesStream(Stream):
    """A `Stream` whose tokens are `response.output_text.delta` events and whose end is
    `response.completed` with the usage (input_tokens, output_tokens)."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.payload = _response_event("response.output_text.delta", {"output_index": 0, "delta": " tok"})
        self.empty_payload = self.payload.replace(b'" tok"', b'""')

    def _finish(self, head: bytes = b"") -> None:
        self.server.truth.open_streams -= 1
        self._release()
        usage = {"input_tokens": self.prompt_tokens, "output_tokens": self.n,
                 "total_tokens": self.prompt_tokens + self.n}
        out = [head, _response_event("response.completed", {"response": {"status": "completed", "usage": usage}})]
        if self.conn.asks_timing:
            out.append(self._timing_comment())
        self._send(b"".join(out), is_last=True)


API_ROUTES = {b"/v1/embeddings": _embed, b"/v1/responses": _respond}

