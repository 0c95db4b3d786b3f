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
Binds to 127.0.0.1 only. The script, the truth and one stream's writing are in `scripted_stream.py`,
the embeddings and Responses APIs in `scripted_apis.py`; this module parses HTTP, routes and queues.
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

import httptools
import msgspec

from loadgen.selftest import hostile
from loadgen.selftest.scripted_apis import API_ROUTES, GENERATION_PATHS
from loadgen.selftest.scripted_stream import (
    BIG_EVENT,
    CLOSE_HEAD,
    MAX_MODEL_LEN,
    METRIC_NAMES,
    MODEL_NAME,
    REASONING_FIELDS,
    ROLE_CHUNK,
    SCRIPTED_KV_USAGE,
    SCRIPTED_PREEMPTIONS,
    SCRIPTED_WAITING,
    SSE_HEAD,
    PrefixCache,
    Request,
    ServerScript,
    Stream,
    Truth,
    cache_details,
    chunked,
    json_response,
    prompt_bytes,
)


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


class ScriptedServer:
    """The scripted server; `start()` inside a running loop, `close()` to stop."""

    def __init__(self, script: ServerScript, port: int = 0, ssl_context=None) -> None:
        self.script = script
        self.port = port
        self.ssl_context = ssl_context
        self.last_request: dict | None = None
        self.request_log: list[dict] = []
        self.truth = Truth()
        #: x-request-id -> each content event's write time (perf_counter_ns: the machine's monotonic
        #: clock, loadgen's too), with `truth_stamps`
        self.event_times: dict[str, list[int]] = {}
        self._server: asyncio.AbstractServer | None = None
        self._serving = 0
        self._queue: deque[Stream] = deque()
        self.prefix_cache = PrefixCache()
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
            conn.write(json_response("200 OK", {"object": "list", "data": [{"id": MODEL_NAME, "object": "model"}]}))
        elif path == b"/stats":
            conn.write(json_response("200 OK", self.stats()))
        elif path == b"/metrics" and self.script.metrics:
            body = self.exposition().encode()
            conn.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\n"
                       b"content-length: %d\r\n\r\n%s" % (len(body), body))
        elif path == b"/last_request":
            conn.write(json_response("200 OK", self.last_request))
        elif path == b"/truth" and self.script.truth_stamps:
            conn.write(json_response("200 OK", self.event_times))
        elif path == b"/requests" and self.script.log_requests:
            conn.write(json_response("200 OK", self.request_log))
        elif path in (b"/tokenize", b"/detokenize") and not self.script.has_tokenize:
            conn.write(json_response("404 Not Found", {"detail": "Not Found"}))
        elif path == b"/tokenize":
            text = msgspec.json.decode(body, type=_Tokenize).prompt
            tokens = list(text.encode())
            conn.write(json_response("200 OK", {"count": len(tokens), "max_model_len": MAX_MODEL_LEN,
                                                 "tokens": tokens}))
        elif path == b"/detokenize":
            tokens = msgspec.json.decode(body, type=_Detokenize).tokens
            conn.write(json_response("200 OK", {"prompt": bytes(tokens).decode(errors="replace")}))
        elif path in (b"/v1/chat/completions", b"/v1/completions"):
            self._count_body(body)
            self._generate(conn, path == b"/v1/chat/completions", body)
        elif path in API_ROUTES:
            self._count_body(body)
            API_ROUTES[path](self, conn, body)
        else:
            conn.write(json_response("404 Not Found", {"error": "not found"}))

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
        req = msgspec.json.decode(body, type=Request)
        fault = self.script.faults[self.truth.num_requests % len(self.script.faults)]
        self.truth.num_requests += 1
        n = self.script.num_tokens or req.max_completion_tokens or req.max_tokens or 16
        # NOTE: a text prompt counts as its /tokenize length (bytes); anything else as scripted.
        prompt_tokens = len(req.prompt.encode()) if isinstance(req.prompt, str) else self.script.prompt_tokens
        cached = None
        if self.script.prefix_cache:
            data = prompt_bytes(req)
            prompt_tokens, cached = len(data), self.prefix_cache.admit(data)
        if fault == "hang":
            return
        if fault == "http_500":
            conn.write(json_response("500 Internal Server Error", {"error": {"message": "scripted failure"}}))
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
            conn.write(SSE_HEAD)
            _endless(conn)
            return
        stream = Stream(self, conn, is_chat, n, usage, fault, arrived, prompt_tokens, token)
        stream.cached_tokens = cached
        self.truth.open_streams += 1
        self.truth.awaiting_first(+1)
        role = ROLE_CHUNK if is_chat and not self.script.role_chunk else b""
        if fault == "close_delimited":
            conn.write(CLOSE_HEAD + role)
        else:
            conn.write(SSE_HEAD + (chunked(role) if role else b""))
        self._admit(stream)

    def _admit(self, stream: Stream) -> None:
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
                     "total_tokens": prompt_tokens + n, **cache_details(cached)}
            self.truth.ttft_ns.append(time.perf_counter_ns() - arrived)
            conn.write(json_response("200 OK", {"id": "c", "choices": [choice], "usage": usage}))

        asyncio.get_running_loop().create_task(later())


def _endless(conn: _Handler) -> None:
    """Write 64 KB events every millisecond for as long as the client reads (bounded buffer)."""
    if conn.transport is None or conn.transport.is_closing():
        return
    if conn.transport.get_write_buffer_size() < (1 << 20):
        conn.write(chunked(BIG_EVENT))
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
