"""A lean HTTP/1.1 keep-alive transport for `httpx.AsyncClient`, over asyncio protocols and httptools.

The stock httpx transport wakes the reading coroutine once per network read and walks several
generator layers per chunk. Here the body bytes are stamped with `now_ns()` (perf_counter_ns,
`clock.py`) inside the protocol callback, the moment they arrive, and kept with their stamps; a
reader that only needs the stamped body awaits `StampedBody.complete()` once per response instead
of once per chunk. Ordinary iteration (`response.aiter_raw()`) still works, so the transport is a drop-in
behind the public httpx API. The stamped body is exposed as `response.extensions["loadgen.body"]`.

`LeanTransport.prepare` turns an `httpx.Request` into its bytes once, before the run, and
`LeanTransport.open` sends them straight on a pooled connection: the run's hot path then skips
httpx's client layers (auth, redirects, cookies, response wrapping), about 40 µs a request.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httptools
import httpx

from loadgen.run.clock import now_ns

BODY_EXTENSION = "loadgen.body"
_NO_BODY_STATUS = frozenset({204, 304})
DEFAULT_MAX_HEAD_BYTES = 64 << 10


class ResponseTooLarge(httpx.TransportError):
    """A response body passed the per-response byte cap while it was being read."""


class BadResponse(httpx.RemoteProtocolError):
    """The response broke HTTP/1.1: an unparsable head, or a head past the header byte cap."""


def header_cap_message(max_bytes: int) -> str:
    """The error text for a response head cut at `max_bytes` (shared by both transports)."""
    return (f"response head passed --max-response-header-bytes {max_bytes} before its end "
            "(endless header lines?); connection dropped")


def head_size(status: int, reason: str, headers: list[tuple[bytes, bytes]]) -> int:
    """The bytes of a response head as sent: status line, header lines, the blank line."""
    return len(reason) + 15 + sum([len(name) + len(value) + 4 for name, value in headers]) + 2


def too_large_message(max_bytes: int) -> str:
    """The error text for a body cut at `max_bytes` (shared by both transports)."""
    return (f"response body passed --max-response-bytes {max_bytes} before its end "
            "(an endless stream?); connection dropped")


class StampedBody(httpx.AsyncByteStream):
    """Response body chunks with their arrival times (perf_counter_ns), filled by the protocol."""

    def __init__(self, conn: _Connection, max_bytes: int) -> None:
        self._conn: _Connection | None = conn
        self._max_bytes = max_bytes
        self.num_bytes = 0
        self.chunks: list[bytes] = []
        self.stamps: list[int] = []
        self._done = asyncio.get_running_loop().create_future()
        self._wakeup: asyncio.Future | None = None
        self._read_pos = 0

    def _feed(self, data: bytes) -> None:
        if self.num_bytes + len(data) > self._max_bytes:
            # NOTE: checked before keeping the bytes, so what is kept never passes the cap.
            self._conn.abort(ResponseTooLarge(too_large_message(self._max_bytes)))  # type: ignore[union-attr]
            return
        self.num_bytes += len(data)
        # NOTE: the stamp is taken in the read callback, before any coroutine runs.
        self.stamps.append(now_ns())
        self.chunks.append(data)
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    def _finish(self, exc: BaseException | None) -> None:
        self._conn = None
        if not self._done.done():
            if exc is None:
                self._done.set_result(None)
            else:
                self._done.set_exception(exc)
                self._done.exception()  # mark retrieved: a reader may never await it
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    @property
    def is_complete(self) -> bool:
        """True once the whole body arrived (or the connection failed)."""
        return self._done.done()

    async def complete(self) -> None:
        """Wait for the end of the body; raises the transport error if the connection failed."""
        await self._done

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            if self._read_pos < len(self.chunks):
                pending = self.chunks[self._read_pos :]
                self._read_pos = len(self.chunks)
                yield b"".join(pending)
                continue
            if self._done.done():
                self._done.result()
                return
            self._wakeup = asyncio.get_running_loop().create_future()
            await self._wakeup

    async def aclose(self) -> None:
        if self._conn is not None:
            self._conn.abort(httpx.ReadError("response closed before its end"))


class _Connection(asyncio.Protocol):
    """One keep-alive connection; serves one request at a time."""

    def __init__(self, pool: LeanTransport, key: tuple[str, int], max_body_bytes: int,
                 max_head_bytes: int) -> None:
        self._pool = pool
        self._max_body_bytes = max_body_bytes
        self._max_head_bytes = max_head_bytes
        self._head_bytes = 0
        self._is_waiting = False  # a request was sent and its response is not complete yet
        self._is_informational = False
        self._key = key
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._headers: list[tuple[bytes, bytes]] = []
        self._head: asyncio.Future | None = None
        self.body: StampedBody | None = None
        self.is_closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self.body is None:  # NOTE: only outside a body; a body's reads skip these checks
            if not self._is_waiting:
                self.close()  # bytes nobody asked for: this connection can no longer be trusted
                return
            self._head_bytes += len(data)
            if self._head_bytes > self._max_head_bytes:
                self._feed_past_head_cap(data)
                return
        self._feed(data)

    def _feed(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.abort(BadResponse("unexpected protocol upgrade"))
        except httptools.HttpParserError as exc:
            self.abort(BadResponse(f"malformed HTTP response: {exc}"))

    def _feed_past_head_cap(self, data: bytes) -> None:
        """Feed what the cap allows; the rest only if the head ended within it."""
        allowed = len(data) - (self._head_bytes - self._max_head_bytes)
        self._feed(data[:allowed])
        if self.body is None and self._is_waiting and not self.is_closed:
            self.abort(BadResponse(header_cap_message(self._max_head_bytes)))
        elif not self.is_closed:
            self._feed(data[allowed:])

    def connection_lost(self, exc: Exception | None) -> None:
        self.is_closed = True
        if exc is None and self.body is not None and self._is_close_delimited():
            body, self.body = self.body, None
            body._finish(None)
            return
        self._fail(httpx.ReadError(f"connection lost: {exc or 'closed by peer'}"))

    def _is_close_delimited(self) -> bool:
        """True when the body has no length and no chunking: it ends when the peer closes."""
        names = {name.lower() for name, _ in self._headers}
        status = self._parser.get_status_code()
        has_body = status >= 200 and status not in _NO_BODY_STATUS
        return has_body and not names & {b"content-length", b"transfer-encoding"}

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if not self._is_waiting:
            self.close()  # a second response to one request
            return
        if status < 200:
            # NOTE: 100 Continue and 103 Early Hints come before the real response (101 raises
            # HttpParserUpgrade); their heads count against the header cap too.
            self._is_informational = True
            self._headers = []
            return
        self.body = StampedBody(self, self._max_body_bytes)
        if self._head is not None and not self._head.done():
            self._head.set_result((self._parser.get_status_code(), self.body))

    def on_body(self, body: bytes) -> None:
        if self.body is not None:  # None once aborted in the middle of a read
            self.body._feed(body)

    def on_message_complete(self) -> None:
        if self._is_informational:
            self._is_informational = False
            return
        if not self._is_waiting:
            return
        self._is_waiting = False
        body, self.body = self.body, None
        keep_alive = self._parser.should_keep_alive()
        if body is not None:
            body._finish(None)
        if keep_alive and not self.is_closed:
            self._pool._release(self._key, self)
        else:
            self.close()

    async def send(self, data: bytes) -> tuple[int, list, StampedBody]:
        """Write one request and wait for the response head."""
        self._headers = []
        self._parser = httptools.HttpResponseParser(self)
        self._head = asyncio.get_running_loop().create_future()
        self._head_bytes = 0
        self._is_waiting = True
        self._transport.write(data)  # type: ignore[union-attr]
        try:
            status, body = await self._head
        except asyncio.CancelledError:
            self.abort(httpx.ReadError("request cancelled"))
            raise
        return status, self._headers, body

    def _fail(self, exc: BaseException) -> None:
        if self._head is not None and not self._head.done():
            self._head.set_exception(exc)
            self._head.exception()
        if self.body is not None:
            self.body._finish(exc)
            self.body = None

    def abort(self, exc: BaseException) -> None:
        """Drop the connection; pending waiters get `exc`."""
        self._fail(exc)
        self.close()

    def close(self) -> None:
        """Close without waiting."""
        self.is_closed = True
        if self._transport is not None:
            self._transport.abort()


@dataclass(frozen=True)
class LeanRequest:
    """A request as the bytes the lean transport writes, and the (host, port) it goes to."""

    key: tuple[str, int]
    data: bytes


class LeanTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 keep-alive transport for plain-http targets; keeps up to `max_keepalive` idle.

    A body longer than `max_body_bytes` fails with `ResponseTooLarge` while it is read; a response
    head (1xx heads included) longer than `max_head_bytes` with `BadResponse`."""

    def __init__(self, max_keepalive: int = 4096, max_body_bytes: int = 1 << 62,
                 max_head_bytes: int = DEFAULT_MAX_HEAD_BYTES) -> None:
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._max_body_bytes = max_body_bytes
        self._max_head_bytes = max_head_bytes
        self._max_keepalive = max_keepalive
        self._num_idle = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        try:
            status, headers, body = await self.open(self.prepare(request))
        except (httpx.ReadError, httpx.RemoteProtocolError) as exc:
            raise type(exc)(str(exc), request=request) from None
        return httpx.Response(
            status, headers=headers, stream=body,
            extensions={BODY_EXTENSION: body, "http_version": b"HTTP/1.1"},
        )

    @staticmethod
    def prepare(request: httpx.Request) -> LeanRequest:
        """The request's bytes, built once (its body must have been read: built with `content=`)."""
        url = request.url
        if url.scheme != "http":
            raise httpx.UnsupportedProtocol("LeanTransport serves http:// only")
        return LeanRequest((url.host, url.port or 80), _request_head(request) + request.content)

    async def open(self, request: LeanRequest) -> tuple[int, list, StampedBody]:
        """Send a prepared request; its status, headers and the body as it arrives."""
        conn = await self._acquire(request.key)
        return await conn.send(request.data)

    async def _acquire(self, key: tuple[str, int]) -> _Connection:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            self._num_idle -= 1
            if not conn.is_closed:
                return conn
        loop = asyncio.get_running_loop()
        try:
            _, conn = await loop.create_connection(self._new_connection(key), *key)
        except OSError as exc:
            raise httpx.ConnectError(f"cannot connect to {key[0]}:{key[1]}: {exc}") from None
        return conn

    def _new_connection(self, key: tuple[str, int]):
        return lambda: _Connection(self, key, self._max_body_bytes, self._max_head_bytes)

    def _release(self, key: tuple[str, int], conn: _Connection) -> None:
        if self._num_idle >= self._max_keepalive:
            conn.close()
            return
        self._idle.setdefault(key, []).append(conn)
        self._num_idle += 1

    async def aclose(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()
        self._num_idle = 0


def _request_head(request: httpx.Request) -> bytes:
    target = request.url.raw_path
    lines = [request.method.encode() + b" " + target + b" HTTP/1.1"]
    lines += [name + b": " + value for name, value in request.headers.raw]
    return b"\r\n".join(lines) + b"\r\n\r\n"
