"""What the scripted server (`testserver`) writes: its script, the truth it keeps, and one
streaming response (`Stream`: timer callbacks write each token on schedule, with the script's
faults), plus the prefix cache that `--prefix-cache` counts cached tokens with."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import msgspec

from loadgen.selftest import hostile

MODEL_NAME = "scripted-model"
FAULTS = frozenset({"ok", "http_500", "reset", "malformed", "hang", "split_crlf", "close_delimited",
                    "endless"}) | hostile.FAULTS
ROLE_CHUNK = b'data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
CHAT_TOKEN = b'data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":" tok","reasoning_content":null},"finish_reason":null}]}\n\n'
TEXT_TOKEN = b'data: {"id":"c","object":"text_completion","model":"m","choices":[{"index":0,"text":" tok","finish_reason":null}]}\n\n'
DONE = b"data: [DONE]\n\n"
SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
CLOSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
BIG_EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"' + b"x" * 65536 + b'"}}]}\n\n'
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
    prefix_cache: bool = False  # a prefix cache (PrefixCache); usage counts prompt bytes and cached_tokens
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
class Truth:
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


class Request(msgspec.Struct):
    prompt: str | list[int] | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stream: bool = False
    stream_options: dict | None = None
    messages: list | None = None


def chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def json_response(status: str, payload: object) -> bytes:
    body = msgspec.json.encode(payload)
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode() + body


class Stream:
    """One streaming response, written by timer callbacks (no coroutine per stream)."""

    cached_tokens: int | None = None  # with a prefix cache: the prompt's cached tokens

    def __init__(self, server, conn, is_chat, n, usage, fault, arrived, prompt_tokens, token=" tok") -> None:
        self.server, self.conn, self.is_chat = server, conn, is_chat
        self.payload = CHAT_TOKEN if is_chat else TEXT_TOKEN
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
            payload = ROLE_CHUNK + payload
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
        return self.conn.write(chunked(events) + (b"0\r\n\r\n" if is_last else b""))

    def _finish(self, head: bytes = b"") -> None:
        """Write the finish event, usage, [DONE] and the end of the body, after `head`."""
        self.server.truth.open_streams -= 1
        self._release()
        fin = {"index": 0, "finish_reason": "length"}
        fin.update({"delta": {}} if self.is_chat else {"text": ""})
        out = [head, b"data: " + msgspec.json.encode({"id": "c", "choices": [fin]}) + b"\n\n"]
        if self.usage:
            usage = {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.n,
                     "total_tokens": self.prompt_tokens + self.n, **cache_details(self.cached_tokens)}
            if self.is_chat and self.server.script.reasoning_tokens:
                usage["completion_tokens_details"] = {"reasoning_tokens": min(self.server.script.reasoning_tokens, self.n)}
            out.append(b"data: " + msgspec.json.encode({"id": "c", "choices": [], "usage": usage}) + b"\n\n")
        if self.conn.asks_timing:
            out.append(self._timing_comment())
        out.append(DONE)
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


class PrefixCache:
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


def prompt_bytes(req: Request) -> bytes:
    """The prompt as the prefix cache sees it: a completion's text, a chat's message texts joined."""
    if req.messages is not None:
        return "".join(m.get("content", "") for m in req.messages
                       if isinstance(m, dict) and isinstance(m.get("content"), str)).encode()
    return req.prompt.encode() if isinstance(req.prompt, str) else msgspec.json.encode(req.prompt)


def cache_details(cached: int | None) -> dict:
    return {} if cached is None else {"prompt_tokens_details": {"cached_tokens": cached}}

