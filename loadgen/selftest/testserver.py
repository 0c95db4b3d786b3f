"""A scripted, near-free OpenAI-compatible streaming server with known TTFT, gaps and token counts.

Used by the tests and by `python -m loadgen.selftest.selfbench`. It speaks just enough HTTP/1.1 (httptools)
for `/v1/models`, `/v1/chat/completions`, `/v1/completions`, `/tokenize`, `/detokenize` and
`/stats`, `/v1/embeddings` and a streamed `/v1/responses` (and `/last_request`: the headers and body of the latest completion request; with `--truth-stamps`,
`/truth`: each content event's write time (perf_counter_ns) per `x-request-id`; with
`--log-requests`, `/requests`: every completion request's body and the answer text it got, each
answer's tokens being " a<N>" for the N-th request, so a test can follow multi-turn sessions;
with `--spread F` each stream's TTFT and gaps are times a seeded factor from [1, 1 + F]). With
`--certfile/--keyfile` it serves https. Every content chunk is one token (" tok"); the first token is written `ttft_ms` after the request arrives, then one token
every `gap_ms` ("paced"), or all at once when `gap_ms` is 0 ("flood": one write per token, as
servers write SSE events; with `burst`, one write for all of a request's tokens). `faults` cycles over the
requests: "ok", "http_500", "reset" (drop the connection mid-stream), "malformed" (a broken SSE
event), "hang" (never answers: the client's timeout fires), and three valid but awkward forms:
"split_crlf" (CRLF line ends, each `\r` and its `\n` in different writes), "close_delimited" (no
Content-Length or chunking: the body ends when the server closes), "endless" (64 KB events until
the client gives up); `loadgen/selftest/hostile.py` adds hostile ones (endless headers, 1xx heads, odd SSE).
`/tokenize` and `/detokenize` follow vLLM's shapes with a byte-level tokenizer (one token per UTF-8 byte, id = the byte). `/stats` returns the true per-request
TTFT and mean gap measured at the moment of writing. With `--metrics vllm|sglang` it serves
`/metrics` with known series (SCRIPTED_*); a streamed request carrying `x-server-timing` gets the
reference server's `: server-timing` comment with SCRIPTED_TIMING's spans and its true TTFT as
first_output_ms. With `--capacity K` at most K streams are served at once and the others wait in a
FIFO queue before their TTFT clock starts (a known knee for `loadgen sweep`). With `--empty-every K`
every K-th token event carries an empty text (`content: ""` or `text: ""`: a token that decoded to no
text, as vLLM sends some), still a token in the truth (`/stats`, `/truth`, usage). A chat stream's
role-only chunk goes out with the response head, or with `--role-chunk` in the first token's write,
just before it (vLLM's order). With `--reasoning-tokens K` a chat stream's first K token events are
reasoning deltas (`--reasoning-field reasoning_content` or `reasoning`) and its usage carries
`completion_tokens_details.reasoning_tokens`; with `--tool-calls` the events after them are
`tool_calls` deltas (the function's name, then one argument fragment per event), not content.
Binds to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field

import httptools
import msgspec

from loadgen.selftest import hostile

MODEL_NAME = "scripted-model"
FAULTS = frozenset({"ok", "http_500", "reset", "malformed", "hang", "split_crlf", "close_delimited",
                    "endless"}) | hostile.FAULTS
_ROLE_CHUNK = b'data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
_CHAT_TOKEN = b'data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":" tok","reasoning_content":null},"finish_reason":null}]}\n\n'
_TEXT_TOKEN = b'data: {"id":"c","object":"text_completion","model":"m","choices":[{"index":0,"text":" tok","finish_reason":null}]}\n\n'
_DONE = b"data: [DONE]\n\n"
_SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
_CLOSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
_BIG_EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"' + b"x" * 65536 + b'"}}]}\n\n'
MAX_MODEL_LEN = 32768
REASONING_FIELDS = ("reasoning_content", "reasoning")
#: The function a `--tool-calls` stream calls; its first tool-call event carries this name.
TOOL_NAME = "get_weather"
#: The scripted per-request timing (a streamed request with `x-server-timing`): these spans, and
#: first_output_ms = the true TTFT as written.
SCRIPTED_TIMING = {"arrival_to_queue_ms": 0.5, "queue_ms": 2.0, "prefill_ms": 3.0, "prefill_steps": 1}
#: The scripted /metrics: running = streams open now, tokens and TTFT/ITL sums = the truth so far,
#: and these constants.
SCRIPTED_WAITING, SCRIPTED_KV_USAGE, SCRIPTED_PREEMPTIONS = 3, 0.25, 7
METRIC_NAMES = {
    "vllm": ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
             "vllm:num_preemptions_total", "vllm:generation_tokens_total",
             "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds"),
    "sglang": ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage",
               "sglang:num_retracted_requests_total", "sglang:generation_tokens_total",
               "sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds"),
}


@dataclass(frozen=True)
class ServerScript:
    """What the server does: first-token delay, gap between tokens, tokens per request, faults."""

    ttft_ms: float = 20.0
    gap_ms: float = 20.0
    num_tokens: int | None = None
    prompt_tokens: int = 8
    faults: tuple[str, ...] = ("ok",)
    has_tokenize: bool = True
    burst: bool = False
    metrics: str | None = None  # serve /metrics with vLLM's ("vllm") or SGLang's ("sglang") names
    log_requests: bool = False  # keep every completion body and its answer; tokens " a<N>" (N-th request)
    capacity: int | None = None  # streams served at once; the rest wait in FIFO order (a known knee)
    truth_stamps: bool = False  # keep each content event's write time per x-request-id (GET /truth)
    empty_every: int | None = None  # every K-th token event has an empty text (still a token)
    role_chunk: bool = False  # chat: the role chunk goes out with the first token, not with the head
    reasoning_tokens: int = 0  # chat: the first K token events are reasoning deltas
    reasoning_field: str = "reasoning_content"  # or "reasoning" (newer vLLM, OpenRouter)
    tool_calls: bool = False  # chat: the events after the reasoning are tool-call deltas
    prefix_cache: bool = False  # a prefix cache (_PrefixCache); usage counts prompt bytes and cached_tokens
    spread: float = 0.0  # each stream's TTFT and gaps times a seeded factor drawn from [1, 1 + spread]

    def __post_init__(self) -> None:
        bad = set(self.faults) - FAULTS
        if bad:
            raise ValueError(f"unknown faults {sorted(bad)}")
        if self.ttft_ms < 0 or self.gap_ms < 0 or self.spread < 0:
            raise ValueError("ttft_ms, gap_ms and spread must be >= 0")
        if self.metrics not in (None, *METRIC_NAMES):
            raise ValueError(f"metrics must be one of {sorted(METRIC_NAMES)}")
        if self.capacity is not None and self.capacity < 1:
            raise ValueError("capacity must be >= 1")
        if self.empty_every is not None and self.empty_every < 1:
            raise ValueError("empty_every must be >= 1")
        if self.reasoning_tokens < 0 or self.reasoning_field not in REASONING_FIELDS:
            raise ValueError(f"reasoning_tokens must be >= 0, reasoning_field one of {REASONING_FIELDS}")

    def is_empty(self, i: int) -> bool:
        """Whether token event `i` (0-based) carries an empty text."""
        return self.empty_every is not None and (i + 1) % self.empty_every == 0

    def answer(self, token: str, n: int) -> str:
        """The text of `n` tokens as sent."""
        return "".join(["" if self.is_empty(i) else token for i in range(n)])


@dataclass
class _Truth:
    ttft_ns: list[int] = field(default_factory=list)
    gap_ns_sum: int = 0
    num_gaps: int = 0
    num_requests: int = 0
    open_streams: int = 0
    num_empty: int = 0  # token events sent with an empty text
    # issue 32: APIs: request bodies received (bytes, image_url parts) and embeddings inputs answered
    num_body_bytes: int = 0
    num_images: int = 0
    num_inputs: int = 0
    num_prompt_tokens: int = 0
    # issue 32 (--prefill-concurrency): streams admitted whose first token is not yet written, and the most at once
    num_awaiting_first: int = 0
    max_awaiting_first: int = 0

    def awaiting_first(self, change: int) -> None:
        """A stream begins (+1) or writes its first token (-1)."""
        self.num_awaiting_first += change
        self.max_awaiting_first = max(self.max_awaiting_first, self.num_awaiting_first)


class _Request(msgspec.Struct):
    prompt: str | list[int] | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stream: bool = False
    stream_options: dict | None = None
    messages: list | None = None


class _Tokenize(msgspec.Struct):
    prompt: str


class _Detokenize(msgspec.Struct):
    tokens: list[int]


class _Handler(asyncio.Protocol):
    def __init__(self, server: ScriptedServer) -> None:
        self._server = server
        self._parser = httptools.HttpRequestParser(self)
        self._url = b""
        self._body: list[bytes] = []
        self._headers: dict[str, str] = {}
        self.asks_timing = False
        self.request_id: str | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.abort()

    def connection_lost(self, exc) -> None:
        self.transport = None

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode().lower()] = value.decode(errors="replace")

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        url, body = self._url, b"".join(self._body)
        self._url, self._body = b"", []
        path = url.split(b"?")[0]
        if path in GENERATION_PATHS:
            self._server.last_request = {"headers": self._headers, "body": msgspec.json.decode(body)}
        self.asks_timing = "x-server-timing" in self._headers
        self.request_id = self._headers.get("x-request-id")
        self._headers = {}
        self._server._route(self, path, body)

    def write(self, data: bytes) -> bool:
        if self.transport is None or self.transport.is_closing():
            return False
        self.transport.write(data)
        return True


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _json_response(status: str, payload: object) -> bytes:
    body = msgspec.json.encode(payload)
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode() + body


class ScriptedServer:
    """The scripted server; `start()` inside a running loop, `close()` to stop."""

    def __init__(self, script: ServerScript, port: int = 0, ssl_context=None) -> None:
        self.script = script
        self.port = port
        self.ssl_context = ssl_context
        self.last_request: dict | None = None
        self.request_log: list[dict] = []
        self.truth = _Truth()
        #: x-request-id -> each content event's write time (perf_counter_ns: the machine's monotonic
        #: clock, loadgen's too), with `truth_stamps`
        self.event_times: dict[str, list[int]] = {}
        self._server: asyncio.AbstractServer | None = None
        self._serving = 0
        self._queue: deque[_Stream] = deque()
        self.prefix_cache = _PrefixCache()
        self.rng = random.Random(0)

    async def start(self) -> int:
        """Listen on 127.0.0.1; returns the bound port."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Handler(self), "127.0.0.1", self.port, backlog=4096,
                                                ssl=self.ssl_context)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def close(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.close()

    def _route(self, conn: _Handler, path: bytes, body: bytes) -> None:
        if path == b"/v1/models":
            conn.write(_json_response("200 OK", {"object": "list", "data": [{"id": MODEL_NAME, "object": "model"}]}))
        elif path == b"/stats":
            conn.write(_json_response("200 OK", self.stats()))
        elif path == b"/metrics" and self.script.metrics:
            body = self.exposition().encode()
            conn.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\n"
                       b"content-length: %d\r\n\r\n%s" % (len(body), body))
        elif path == b"/last_request":
            conn.write(_json_response("200 OK", self.last_request))
        elif path == b"/truth" and self.script.truth_stamps:
            conn.write(_json_response("200 OK", self.event_times))
        elif path == b"/requests" and self.script.log_requests:
            conn.write(_json_response("200 OK", self.request_log))
        elif path in (b"/tokenize", b"/detokenize") and not self.script.has_tokenize:
            conn.write(_json_response("404 Not Found", {"detail": "Not Found"}))
        elif path == b"/tokenize":
            text = msgspec.json.decode(body, type=_Tokenize).prompt
            tokens = list(text.encode())
            conn.write(_json_response("200 OK", {"count": len(tokens), "max_model_len": MAX_MODEL_LEN,
                                                 "tokens": tokens}))
        elif path == b"/detokenize":
            tokens = msgspec.json.decode(body, type=_Detokenize).tokens
            conn.write(_json_response("200 OK", {"prompt": bytes(tokens).decode(errors="replace")}))
        elif path in (b"/v1/chat/completions", b"/v1/completions"):
            self._count_body(body)
            self._generate(conn, path == b"/v1/chat/completions", body)
        elif path in API_ROUTES:
            self._count_body(body)
            API_ROUTES[path](self, conn, body)
        else:
            conn.write(_json_response("404 Not Found", {"error": "not found"}))

    def stats(self) -> dict:
        """True per-request TTFT (ms) and mean gap (ms) as written by the server."""
        t = self.truth
        return {
            "num_requests": t.num_requests,
            "ttft_ms": [x / 1e6 for x in t.ttft_ns],
            "mean_gap_ms": (t.gap_ns_sum / t.num_gaps / 1e6) if t.num_gaps else None,
            "num_tokens_sent": len(t.ttft_ns) + t.num_gaps,
            "num_empty_text_events_sent": t.num_empty,
            "request_body_bytes": t.num_body_bytes, "image_parts": t.num_images,
            "embedding_inputs": t.num_inputs, "embedding_prompt_tokens": t.num_prompt_tokens,
            "max_awaiting_first_token": t.max_awaiting_first, "awaiting_first_token": t.num_awaiting_first,
        }

    def _count_body(self, body: bytes) -> None:
        """issue 32: the bytes and image parts of a generation or embeddings request, as received."""
        self.truth.num_body_bytes += len(body)
        self.truth.num_images += body.count(b'"type":"image_url"')

    def exposition(self) -> str:
        """Prometheus text in the scripted server's dialect, from the truth so far."""
        t = self.truth
        running, waiting, kv, preempted, tokens, ttft, itl = METRIC_NAMES[self.script.metrics]
        label = f'{{model_name="{MODEL_NAME}"}}'
        lines = [f"# TYPE {running} gauge", f"{running}{label} {t.open_streams}",
                 f"# TYPE {waiting} gauge", f"{waiting}{label} {SCRIPTED_WAITING}",
                 f"# TYPE {kv} gauge", f"{kv}{label} {SCRIPTED_KV_USAGE}",
                 f"# TYPE {preempted.removesuffix('_total')} counter", f"{preempted}{label} {SCRIPTED_PREEMPTIONS}",
                 f"# TYPE {tokens.removesuffix('_total')} counter", f"{tokens}{label} {len(t.ttft_ns) + t.num_gaps}"]
        for name, total_ns, count in ((ttft, sum(t.ttft_ns), len(t.ttft_ns)), (itl, t.gap_ns_sum, t.num_gaps)):
            lines += [f"# TYPE {name} histogram", f'{name}_bucket{{le="+Inf",model_name="{MODEL_NAME}"}} {count}',
                      f"{name}_sum{label} {total_ns / 1e9!r}", f"{name}_count{label} {count}"]
        return "\n".join(lines) + "\n"

    def _generate(self, conn: _Handler, is_chat: bool, body: bytes) -> None:
        arrived = time.perf_counter_ns()
        req = msgspec.json.decode(body, type=_Request)
        fault = self.script.faults[self.truth.num_requests % len(self.script.faults)]
        self.truth.num_requests += 1
        n = self.script.num_tokens or req.max_completion_tokens or req.max_tokens or 16
        # NOTE: a text prompt counts as its /tokenize length (bytes); anything else as scripted.
        prompt_tokens = len(req.prompt.encode()) if isinstance(req.prompt, str) else self.script.prompt_tokens
        cached = None
        if self.script.prefix_cache:
            data = _prompt_bytes(req)
            prompt_tokens, cached = len(data), self.prefix_cache.admit(data)
        if fault == "hang":
            return
        if fault == "http_500":
            conn.write(_json_response("500 Internal Server Error", {"error": {"message": "scripted failure"}}))
            return
        if fault in hostile.FAULTS:
            hostile.respond(conn, fault, is_chat, n, prompt_tokens)
            return
        usage = bool(req.stream_options and req.stream_options.get("include_usage"))
        token = " tok"
        if self.script.log_requests:
            token = f" a{self.truth.num_requests}"
            self.request_log.append({"n": self.truth.num_requests, "body": msgspec.json.decode(body),
                                     "answer": self.script.answer(token, n)})
        if not req.stream:
            self._answer_whole(conn, is_chat, n, arrived, prompt_tokens, token, cached)
            return
        if fault == "endless":
            conn.write(_SSE_HEAD)
            _endless(conn)
            return
        stream = _Stream(self, conn, is_chat, n, usage, fault, arrived, prompt_tokens, token)
        stream.cached_tokens = cached
        self.truth.open_streams += 1
        self.truth.awaiting_first(+1)
        role = _ROLE_CHUNK if is_chat and not self.script.role_chunk else b""
        if fault == "close_delimited":
            conn.write(_CLOSE_HEAD + role)
        else:
            conn.write(_SSE_HEAD + (_chunked(role) if role else b""))
        self._admit(stream)

    def _admit(self, stream: _Stream) -> None:
        """Start the stream now, or queue it (FIFO) while `capacity` streams are being served."""
        if self.script.capacity is not None and self._serving >= self.script.capacity:
            self._queue.append(stream)
            return
        self._serving += 1
        stream.begin()

    def release(self) -> None:
        """A served stream ended: start the longest-waiting one."""
        self._serving -= 1
        if self._queue:
            self._admit(self._queue.popleft())

    def _answer_whole(self, conn: _Handler, is_chat: bool, n: int, arrived: int, prompt_tokens: int,
                      token: str = " tok", cached: int | None = None) -> None:
        async def later() -> None:
            await asyncio.sleep((self.script.ttft_ms + self.script.gap_ms * (n - 1)) / 1e3)
            text = self.script.answer(token, n)
            choice = {"index": 0, "finish_reason": "length"}
            choice.update({"message": {"role": "assistant", "content": text}} if is_chat else {"text": text})
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n,
                     "total_tokens": prompt_tokens + n, **_cache_details(cached)}
            self.truth.ttft_ns.append(time.perf_counter_ns() - arrived)
            conn.write(_json_response("200 OK", {"id": "c", "choices": [choice], "usage": usage}))

        asyncio.get_running_loop().create_task(later())


class _Stream:
    """One streaming response, written by timer callbacks (no coroutine per stream)."""

    cached_tokens: int | None = None  # with a prefix cache: the prompt's cached tokens

    def __init__(self, server, conn, is_chat, n, usage, fault, arrived, prompt_tokens, token=" tok") -> None:
        self.server, self.conn, self.is_chat = server, conn, is_chat
        self.payload = _CHAT_TOKEN if is_chat else _TEXT_TOKEN
        if token != " tok":
            self.payload = self.payload.replace(b'" tok"', msgspec.json.encode(token))
        self.empty_payload = self.payload.replace(msgspec.json.encode(token), b'""')
        self.prompt_tokens, self.token = prompt_tokens, token
        self.n, self.usage, self.fault, self.arrived = n, usage, fault, arrived
        self.sent = 0
        self.times = None
        if server.script.truth_stamps and conn.request_id is not None:
            self.times = server.event_times.setdefault(conn.request_id, [])
        self.last_ns = 0
        self.first_ns = arrived
        self.pending = b""
        self.t0 = 0.0
        self.released = False
        self.scale = 1.0 + server.rng.random() * server.script.spread

    def begin(self) -> None:
        """Served from now: the first token `ttft_ms` later (a queued stream starts its clock here)."""
        loop = asyncio.get_running_loop()
        self.t0 = loop.time() + self.server.script.ttft_ms * self.scale / 1e3
        loop.call_at(self.t0, self.step)

    def _release(self) -> None:
        if not self.released:
            self.released = True
            self.server.release()

    def step(self) -> None:
        script = self.server.script
        if script.gap_ms == 0:
            self._flood()
            return
        if not self._token():
            self._release()
            return
        if self.sent >= self.n:
            self._finish()
            return
        loop = asyncio.get_running_loop()
        loop.call_at(self.t0 + self.sent * script.gap_ms * self.scale / 1e3, self.step)

    def _flood(self) -> None:
        if self.server.script.burst and self.fault == "ok":
            self._burst()
            return
        while self.sent < self.n and self._token():
            pass
        if self.sent >= self.n:
            self._finish()
        else:
            self._release()

    def _burst(self) -> None:
        """All tokens and the end of the stream in one write (the truth stamps them all now)."""
        events = b"".join([self._event(i) for i in range(self.n)])
        now = time.perf_counter_ns()
        truth = self.server.truth
        truth.ttft_ns.append(now - self.arrived)
        truth.awaiting_first(-1)
        self.first_ns = now
        truth.num_gaps += self.n - 1
        if self.times is not None:
            self.times += [now] * self.n
        self.sent = self.n
        self._finish(events)

    def _event(self, i: int) -> bytes:
        """Token event `i` (0-based): empty where the script says; the first after the role chunk
        when that goes with it (`role_chunk`)."""
        script = self.server.script
        payload = (_kind_event(script, i, self.token) if self.is_chat else None) or self.payload
        if script.is_empty(i):
            payload = self.empty_payload
            self.server.truth.num_empty += 1
        if i == 0 and self.is_chat and script.role_chunk:
            payload = _ROLE_CHUNK + payload
        return payload

    def _token(self) -> bool:
        if self.fault == "reset" and self.sent == self.n // 2:
            if self.conn.transport is not None:
                self.conn.transport.abort()
            return False
        payload = self._event(self.sent)
        if self.fault == "malformed" and self.sent == self.n // 2:
            payload = b"data: {not json\n\n"
        now = time.perf_counter_ns()
        truth = self.server.truth
        if self.sent == 0:
            truth.ttft_ns.append(now - self.arrived)
            truth.awaiting_first(-1)
            self.first_ns = now
        else:
            truth.gap_ns_sum += now - self.last_ns
            truth.num_gaps += 1
        self.last_ns = now
        self.sent += 1
        if self.times is not None:
            self.times.append(now)
        return self._send(payload)

    def _send(self, events: bytes, is_last: bool = False) -> bool:
        """Frame and write events as this stream's fault asks (chunked, split CRLF, or raw)."""
        if self.fault == "close_delimited":
            ok = self.conn.write(events)
            if is_last and self.conn.transport is not None:
                self.conn.transport.close()
            return ok
        if self.fault == "split_crlf":
            # NOTE: each event's last `\r` goes out now, its `\n` with the next write.
            events = self.pending + events.replace(b"\n", b"\r\n")
            if not is_last:
                events, self.pending = events[:-1], events[-1:]
        return self.conn.write(_chunked(events) + (b"0\r\n\r\n" if is_last else b""))

    def _finish(self, head: bytes = b"") -> None:
        """Write the finish event, usage, [DONE] and the end of the body, after `head`."""
        self.server.truth.open_streams -= 1
        self._release()
        fin = {"index": 0, "finish_reason": "length"}
        fin.update({"delta": {}} if self.is_chat else {"text": ""})
        out = [head, b"data: " + msgspec.json.encode({"id": "c", "choices": [fin]}) + b"\n\n"]
        if self.usage:
            usage = {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.n,
                     "total_tokens": self.prompt_tokens + self.n, **_cache_details(self.cached_tokens)}
            if self.is_chat and self.server.script.reasoning_tokens:
                usage["completion_tokens_details"] = {"reasoning_tokens": min(self.server.script.reasoning_tokens, self.n)}
            out.append(b"data: " + msgspec.json.encode({"id": "c", "choices": [], "usage": usage}) + b"\n\n")
        if self.conn.asks_timing:
            out.append(self._timing_comment())
        out.append(_DONE)
        self._send(b"".join(out), is_last=True)


    def _timing_comment(self) -> bytes:
        first = (self.first_ns - self.arrived) / 1e6
        decode = (time.perf_counter_ns() - self.first_ns) / 1e6
        fields = {**SCRIPTED_TIMING, "first_output_ms": first, "decode_ms": decode}
        return b": server-timing " + msgspec.json.encode(fields) + b"\n\n"


def _kind_event(script: ServerScript, i: int, token: str) -> bytes | None:
    """Chat token event `i` (0-based) as a reasoning delta (the first `reasoning_tokens`) or, with
    `tool_calls`, a tool-call delta (the first names the function); None: a content event."""
    if i < script.reasoning_tokens:
        delta: dict = {script.reasoning_field: token}
    elif script.tool_calls:
        call: dict = {"index": 0, "function": {"arguments": token}}
        if i == script.reasoning_tokens:
            call = {"index": 0, "id": "call_0", "type": "function", "function": {"name": TOOL_NAME, "arguments": ""}}
        delta = {"tool_calls": [call]}
    else:
        return None
    chunk = {"id": "c", "object": "chat.completion.chunk", "model": "m",
             "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    return b"data: " + msgspec.json.encode(chunk) + b"\n\n"


# issue 32: APIs: /v1/embeddings (a whole answer ttft_ms after the request) and /v1/responses
# (streamed as chat is, in the Responses API's events).
GENERATION_PATHS = (b"/v1/chat/completions", b"/v1/completions", b"/v1/embeddings", b"/v1/responses")
EMBEDDING_DIM = 8


class _EmbeddingsRequest(msgspec.Struct):
    input: str | list  # a text, texts, token ids, or lists of token ids


class _ResponsesRequest(msgspec.Struct):
    input: str | list | None = None
    max_output_tokens: int | None = None
    stream: bool = False


def _embed(server: ScriptedServer, conn: _Handler, body: bytes) -> None:
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
        conn.write(_json_response("500 Internal Server Error", {"error": {"message": "scripted failure"}}))
        return

    async def later() -> None:
        await asyncio.sleep(server.script.ttft_ms / 1e3)
        data = [{"object": "embedding", "index": i, "embedding": [0.5] * EMBEDDING_DIM} for i in range(len(inputs))]
        truth = server.truth
        truth.ttft_ns.append(time.perf_counter_ns() - arrived)
        truth.num_inputs += len(inputs)
        truth.num_prompt_tokens += tokens
        conn.write(_json_response("200 OK", {"object": "list", "data": data, "model": MODEL_NAME,
                                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}))

    asyncio.get_running_loop().create_task(later())


def _respond(server: ScriptedServer, conn: _Handler, body: bytes) -> None:
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
        conn.write(_json_response("500 Internal Server Error", {"error": {"message": "scripted failure"}}))
        return
    stream = _ResponsesStream(server, conn, False, n, True, fault, arrived, prompt_tokens)
    server.truth.open_streams += 1
    server.truth.awaiting_first(+1)
    conn.write(_SSE_HEAD + _chunked(_response_event("response.created", {"response": {"status": "in_progress"}})))
    server._admit(stream)


def _response_event(kind: str, fields: dict) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (kind.encode(), msgspec.json.encode({"type": kind, **fields}))


class _ResponsesStream(_Stream):
    """A `_Stream` whose tokens are `response.output_text.delta` events and whose end is
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


class _PrefixCache:
    """`--prefix-cache`: the BLOCK-token blocks of every prompt seen (a token is a byte, as this
    server's /tokenize counts); a prompt's cached tokens are its leading blocks that an earlier
    prompt had, as vLLM counts whole KV blocks. Bounded: forgotten at MAX_BLOCKS."""

    BLOCK = 16
    MAX_BLOCKS = 1 << 20

    def __init__(self) -> None:
        self.seen: set[int] = set()

    def admit(self, data: bytes) -> int:
        """The cached tokens of prompt `data`; its blocks are cached from now on."""
        keys, key = [], 0
        for start in range(0, len(data) - self.BLOCK + 1, self.BLOCK):
            key = hash((key, data[start:start + self.BLOCK]))
            keys.append(key)
        hits = next((j for j, k in enumerate(keys) if k not in self.seen), len(keys))
        if len(self.seen) + len(keys) > self.MAX_BLOCKS:
            self.seen.clear()
        self.seen.update(keys)
        return hits * self.BLOCK


def _prompt_bytes(req: _Request) -> bytes:
    """The prompt as the prefix cache sees it: a completion's text, a chat's message texts joined."""
    if req.messages is not None:
        return "".join(m.get("content", "") for m in req.messages
                       if isinstance(m, dict) and isinstance(m.get("content"), str)).encode()
    return req.prompt.encode() if isinstance(req.prompt, str) else msgspec.json.encode(req.prompt)


def _cache_details(cached: int | None) -> dict:
    return {} if cached is None else {"prompt_tokens_details": {"cached_tokens": cached}}


def _endless(conn: _Handler) -> None:
    """Write 64 KB events every millisecond for as long as the client reads (bounded buffer)."""
    if conn.transport is None or conn.transport.is_closing():
        return
    if conn.transport.get_write_buffer_size() < (1 << 20):
        conn.write(_chunked(_BIG_EVENT))
    asyncio.get_running_loop().call_later(0.001, _endless, conn)


def spawn(*flags: str, cwd: str | None = None) -> tuple[subprocess.Popen, str]:
    """Start `python -m loadgen.selftest.testserver FLAGS` as a subprocess; the process and its base URL."""
    proc = subprocess.Popen([sys.executable, "-m", "loadgen.selftest.testserver", *flags], stdout=subprocess.PIPE,
                            text=True, cwd=cwd)
    line = proc.stdout.readline()  # type: ignore[union-attr]
    if not line.startswith("listening"):
        proc.kill()
        raise RuntimeError(f"loadgen.selftest.testserver did not start: {line!r}")
    return proc, f"http://127.0.0.1:{int(line.split()[1])}"


def main(argv: list[str] | None = None) -> None:
    """Run the scripted server in the foreground (used as a subprocess by selfbench)."""
    p = argparse.ArgumentParser(prog="python -m loadgen.selftest.testserver")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--ttft-ms", type=float, default=20.0)
    p.add_argument("--gap-ms", type=float, default=20.0)
    p.add_argument("--num-tokens", type=int, default=None)
    p.add_argument("--faults", default="ok")
    p.add_argument("--burst", action="store_true", help="with --gap-ms 0: one write per response, not per token")
    p.add_argument("--no-tokenize", action="store_true", help="answer 404 on /tokenize, /detokenize")
    p.add_argument("--metrics", choices=sorted(METRIC_NAMES), default=None,
                   help="serve /metrics with this server's names (else 404)")
    p.add_argument("--log-requests", action="store_true",
                   help="keep every completion body and its answer (GET /requests); tokens are ' a<N>'")
    p.add_argument("--capacity", type=int, default=None,
                   help="serve at most this many streams at once; others wait (FIFO) before their TTFT clock")
    p.add_argument("--truth-stamps", action="store_true",
                   help="keep each content event's write time per x-request-id (GET /truth)")
    p.add_argument("--empty-every", type=int, default=None, metavar="K",
                   help="every K-th token event has an empty text (a token that decoded to no text)")
    p.add_argument("--role-chunk", action="store_true",
                   help="chat: the role-only chunk goes out in the first token's write (vLLM's order), "
                   "not with the response head")
    p.add_argument("--reasoning-tokens", type=int, default=0, metavar="K",
                   help="chat: the first K token events are reasoning deltas")
    p.add_argument("--reasoning-field", choices=REASONING_FIELDS, default="reasoning_content")
    p.add_argument("--tool-calls", action="store_true",
                   help="chat: the token events after the reasoning are tool-call deltas, not content")
    p.add_argument("--prefix-cache", action="store_true",
                   help="a prefix cache of 16-byte blocks: usage counts prompt bytes and gives cached_tokens")
    p.add_argument("--spread", type=float, default=0.0, metavar="F",
                   help="each stream's TTFT and gaps times a seeded factor drawn from [1, 1 + F]")
    p.add_argument("--cpu", type=int, default=None, help="pin the server to this core")
    p.add_argument("--certfile", default=None, help="serve https with this certificate (and --keyfile)")
    p.add_argument("--keyfile", default=None)
    args = p.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    script = ServerScript(args.ttft_ms, args.gap_ms, args.num_tokens, faults=tuple(args.faults.split(",")),
                          has_tokenize=not args.no_tokenize, burst=args.burst, metrics=args.metrics,
                          log_requests=args.log_requests, capacity=args.capacity,
                          truth_stamps=args.truth_stamps, empty_every=args.empty_every,
                          role_chunk=args.role_chunk, reasoning_tokens=args.reasoning_tokens,
                          reasoning_field=args.reasoning_field, tool_calls=args.tool_calls,
                          prefix_cache=args.prefix_cache, spread=args.spread)
    import uvloop

    async def serve() -> None:
        ctx = None
        if args.certfile:
            import ssl

            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(args.certfile, args.keyfile)
        server = ScriptedServer(script, args.port, ctx)
        port = await server.start()
        print(f"listening {port}", flush=True)
        await asyncio.Event().wait()

    uvloop.run(serve())


if __name__ == "__main__":
    main()
