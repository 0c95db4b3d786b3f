"""A scripted server whose own view of the run is hostile: its `/metrics` and its server timing.

`python -m loadgen.selftest.hostile_metrics --metrics MODE [--from-scrape N]` answers the first N-1
scrapes of `/metrics` with a small valid exposition (the reference server's names) and every later
one with MODE: "ok" (the same valid text), "endless" (a chunked body that never ends), "huge" (a
body of 1 GiB, announced by its content-length), "drip" (a valid body, one byte every 0.7 s),
"drip_head" (the response head, one byte every 0.7 s), "many_read" / "many_other" (10^6 label
series of a name loadgen reads / of one it does not), "neg_inf" (the gauges at -Inf), "wide" (the
valid text and NUM_WIDE label series of another name: within the byte bound, past the series cap).

Completions (`/v1/completions`, `/v1/chat/completions`) get four tokens; a whole response carries
`Server-Timing: VALUE` (`--server-timing VALUE`), a streamed one the comment `: server-timing JSON`
(`--timing-comment JSON`). `/v1/models` lists one model. Binds to 127.0.0.1 only; it prints
`listening PORT` when ready, then `scrape N` as each scrape arrives; with `--certfile` and
`--keyfile` it serves https.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import ssl
import subprocess
import sys

MODES = ("ok", "endless", "huge", "drip", "drip_head", "many_read", "many_other", "neg_inf", "wide")
DRIP_S = 0.7
NUM_MANY = 10**6
NUM_WIDE = 200_000
HUGE_BYTES = 1 << 30
OK_METRICS = (b"# TYPE reference:num_running_reqs gauge\nreference:num_running_reqs 0\n"
              b"# TYPE reference:num_waiting_reqs gauge\nreference:num_waiting_reqs 2\n"
              b"# TYPE reference:generation_tokens_total counter\nreference:generation_tokens_total 5\n")
NEG_INF_METRICS = (b"reference:num_running_reqs -Inf\nreference:num_waiting_reqs -Inf\n"
                   b"reference:generation_tokens_total 5\n")
_FILLER = b"# filler " + b"x" * 1014 + b"\n"  # 1 KiB, a comment
_MODELS = b'{"object":"list","data":[{"id":"hostile-model","object":"model"}]}'
_TEXT = b'{"id":"c","choices":[{"index":0,"text":" tok"}]}'
_CHAT = b'{"id":"c","choices":[{"index":0,"delta":{"content":" tok"}}]}'
_NUM_TOKENS = 4


class Peer:
    """One server: the mode, the scrape count so far, the timing it sends."""

    def __init__(self, mode: str, from_scrape: int, server_timing: str | None, timing_comment: str | None):
        self.mode, self.from_scrape = mode, from_scrape
        self.server_timing, self.timing_comment = server_timing, timing_comment
        self.num_scrapes = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer requests on one connection until the client closes it."""
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                length = next((int(v) for k, _, v in (ln.partition(":") for ln in lines[1:])
                               if k.strip().lower() == "content-length"), 0)
                body = await reader.readexactly(length) if length else b""
                await self._answer(writer, method, path, body)
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, method: str, path: str, body: bytes) -> None:
        if path == "/metrics":
            self.num_scrapes += 1
            print(f"scrape {self.num_scrapes}", flush=True)  # NOTE: a test's cue (e.g. for Ctrl-C)
            mode = self.mode if self.num_scrapes >= self.from_scrape else "ok"
            await METRICS[mode](writer)
        elif path == "/v1/models":
            _whole(writer, b"application/json", _MODELS)
        elif method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            chunk = _CHAT if "chat" in path else _TEXT
            if b'"stream":true' in body.replace(b" ", b""):
                _stream(writer, chunk, self.timing_comment)
            else:
                _whole(writer, b"application/json", _whole_body(chunk),
                       () if self.server_timing is None else ((b"server-timing", self.server_timing.encode()),))
        else:
            _whole(writer, b"text/plain", b"not found", status=b"404 Not Found")
        await writer.drain()


def _whole(writer, content_type: bytes, body: bytes, headers=(), status: bytes = b"200 OK") -> None:
    extra = b"".join(k + b": " + v + b"\r\n" for k, v in headers)
    writer.write(b"HTTP/1.1 " + status + b"\r\ncontent-type: " + content_type + b"\r\n" + extra
                 + b"content-length: %d\r\n\r\n" % len(body) + body)


def _whole_body(chunk: bytes) -> bytes:
    text = b'"text":"' + b" tok" * _NUM_TOKENS + b'"'
    message = b'"message":{"role":"assistant","content":"' + b" tok" * _NUM_TOKENS + b'"}'
    choice = text if b'"text"' in chunk else message
    return (b'{"id":"c","choices":[{"index":0,' + choice + b'}],'
            b'"usage":{"prompt_tokens":8,"completion_tokens":%d}}' % _NUM_TOKENS)


def _stream(writer, chunk: bytes, comment: str | None) -> None:
    events = [b"data: " + chunk + b"\n\n"] * _NUM_TOKENS
    if comment is not None:
        events.append(b": server-timing " + comment.encode() + b"\n\n")
    _whole(writer, b"text/event-stream", b"".join(events) + b"data: [DONE]\n\n")


async def _ok(writer) -> None:
    _whole(writer, b"text/plain; version=0.0.4", OK_METRICS)


async def _neg_inf(writer) -> None:
    _whole(writer, b"text/plain; version=0.0.4", NEG_INF_METRICS)


async def _chunked(writer, pieces) -> None:
    """A chunked body from `pieces`, as fast as the client reads."""
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n")
    for piece in pieces:
        writer.write(b"%x\r\n" % len(piece) + piece + b"\r\n")
        await writer.drain()
    writer.write(b"0\r\n\r\n")


async def _endless(writer) -> None:
    await _chunked(writer, itertools.repeat(_FILLER * 64))


async def _many(writer, name: bytes, num: int = NUM_MANY, first: bytes = b"") -> None:
    lines = (b"".join(b'%s{series="%d"} 1\n' % (name, i) for i in range(start, start + 1000))
             for start in range(0, num, 1000))
    await _chunked(writer, itertools.chain([first] if first else [], lines))  # NOTE: an empty chunk ends a body


async def _wide(writer) -> None:
    await _many(writer, b"process_open_things", NUM_WIDE, OK_METRICS)


async def _huge(writer) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n\r\n" % HUGE_BYTES)
    block = _FILLER * 64
    for _ in range(HUGE_BYTES // len(block)):
        writer.write(block)
        await writer.drain()


async def _drip(writer) -> None:
    await _drip_bytes(writer, b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(OK_METRICS), OK_METRICS)


async def _drip_head(writer) -> None:
    await _drip_bytes(writer, b"", b"HTTP/1.1 200 OK\r\n" + b"x-pad: " + b"a" * 10**6)


async def _drip_bytes(writer, head: bytes, body: bytes) -> None:
    writer.write(head)
    for i in range(len(body)):
        await asyncio.sleep(DRIP_S)
        writer.write(body[i:i + 1])
        await writer.drain()


METRICS = {"ok": _ok, "endless": _endless, "huge": _huge, "drip": _drip, "drip_head": _drip_head,
           "many_read": lambda w: _many(w, b"reference:num_running_reqs"),
           "many_other": lambda w: _many(w, b"process_open_things"), "neg_inf": _neg_inf, "wide": _wide}


def spawn(*flags: str) -> tuple[subprocess.Popen, str]:
    """Start `python -m loadgen.selftest.hostile_metrics FLAGS`; the process and its base URL."""
    proc = subprocess.Popen([sys.executable, "-m", "loadgen.selftest.hostile_metrics", *flags],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()  # type: ignore[union-attr]
    if not line.startswith("listening"):
        proc.kill()
        raise RuntimeError(f"loadgen.selftest.hostile_metrics did not start: {line!r}")
    scheme = "https" if "--certfile" in flags else "http"
    return proc, f"{scheme}://127.0.0.1:{int(line.split()[1])}"


def main(argv: list[str] | None = None) -> None:
    """Serve in the foreground until killed."""
    p = argparse.ArgumentParser(prog="python -m loadgen.selftest.hostile_metrics")
    p.add_argument("--metrics", choices=MODES, default="ok")
    p.add_argument("--from-scrape", type=int, default=1, help="scrapes before this one get valid text")
    p.add_argument("--server-timing", default=None, help="the Server-Timing header of whole responses")
    p.add_argument("--timing-comment", default=None, help="the JSON of streamed responses' comment")
    p.add_argument("--certfile", default=None, help="serve https with this certificate (and --keyfile)")
    p.add_argument("--keyfile", default=None)
    args = p.parse_args(argv)
    peer = Peer(args.metrics, args.from_scrape, args.server_timing, args.timing_comment)
    ctx = None
    if args.certfile:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(args.certfile, args.keyfile)

    async def serve() -> None:
        server = await asyncio.start_server(peer.serve, "127.0.0.1", 0, ssl=ctx)
        print(f"listening {server.sockets[0].getsockname()[1]}", flush=True)
        await server.serve_forever()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
