"""A lean HTTP/1.1 keep-alive transport for `httpx.AsyncClient`, over raw sockets and httptools.

The stock httpx transport wakes the reading coroutine once per network read and walks several
generator layers per chunk. Here each connection (`connection.py`) reads its socket from an
event-loop reader callback with `recvmsg`: every body piece is kept with the kernel's receive
stamp of its read (where the OS gives one) and the loop stamp beside it; a reader that only needs
the stamped body awaits `StampedBody.complete()` once per response instead of once per chunk.
Ordinary iteration (`response.aiter_raw()`) still works, so the transport is a drop-in behind the
public httpx API. The stamped body is exposed as `response.extensions["loadgen.body"]`.

`LeanTransport.prepare` turns an `httpx.Request` into its bytes once, before the run, and
`LeanTransport.open` sends them straight on a pooled connection: the run's hot path then skips
httpx's client layers (auth, redirects, cookies, response wrapping), about 40 µs a request.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from dataclasses import dataclass

import httpx

from loadgen.run.clock import KernelClock
from loadgen.run.connection import (
    BadResponse,
    Connection,
    LoopIterations,
    ReadStats,
    ResponseTooLarge,
    StampedBody,
    Tls,
    header_cap_message,
    too_large_message,
)

__all__ = ["BODY_EXTENSION", "BadResponse", "LeanRequest", "LeanTransport", "ResponseTooLarge",
           "StampedBody", "head_size", "header_cap_message", "too_large_message"]

BODY_EXTENSION = "loadgen.body"
DEFAULT_MAX_HEAD_BYTES = 64 << 10


def head_size(status: int, reason: str, headers: list[tuple[bytes, bytes]]) -> int:
    """The bytes of a response head as sent: status line, header lines, the blank line."""
    return len(reason) + 15 + sum([len(name) + len(value) + 4 for name, value in headers]) + 2


@dataclass(frozen=True)
class LeanRequest:
    """A request as the bytes the lean transport writes, and the (host, port, is_tls) it goes to."""

    key: tuple[str, int, bool]
    data: bytes


class LeanTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 keep-alive transport for http:// and https:// targets; keeps up to `max_keepalive` idle.

    https runs TLS over memory BIOs on the connection's own socket (`connection.Tls`), so its reads
    keep their kernel stamps; `verify` is httpx's (True, False or an SSL context).

    A body longer than `max_body_bytes` fails with `ResponseTooLarge` while it is read; a response
    head (1xx heads included) longer than `max_head_bytes` with `BadResponse`. Connections ask
    for the kernel's receive stamps unless `kernel_stamps` is off (`stamp_source` says what they got)."""

    def __init__(self, max_keepalive: int = 4096, max_body_bytes: int = 1 << 62,
                 max_head_bytes: int = DEFAULT_MAX_HEAD_BYTES, kernel_stamps: bool = True,
                 verify: bool | ssl.SSLContext = True) -> None:
        self._idle: dict[tuple, list[Connection]] = {}
        self._addresses: dict[tuple[str, int], asyncio.Future] = {}
        self._verify = verify
        self._ssl_context: ssl.SSLContext | None = None
        self._max_body_bytes = max_body_bytes
        self._max_head_bytes = max_head_bytes
        self._max_keepalive = max_keepalive
        self._num_idle = 0
        self.kernel_stamps = kernel_stamps
        self.clock = KernelClock()
        self.read_stats = ReadStats()
        self._iterations: LoopIterations | None = None
        self.num_kernel_stamped = self.num_loop_stamped = 0  # connections

    @property
    def iterations(self) -> LoopIterations:
        """The running loop's iteration marks (made on the first connection, inside the loop)."""
        if self._iterations is None:
            self._iterations = LoopIterations()
        return self._iterations

    @property
    def stamp_source(self) -> str:
        """"kernel" when every connection had kernel stamps, "loop" when none, "mixed" otherwise."""
        if self.num_loop_stamped == 0 and self.kernel_stamps:
            return "kernel"
        return "loop" if self.num_kernel_stamped == 0 else "mixed"

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        try:
            status, headers, body = await self.open(self.prepare(request))
        except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError) as exc:
            raise type(exc)(str(exc), request=request) from None
        return httpx.Response(
            status, headers=headers, stream=body,
            extensions={BODY_EXTENSION: body, "http_version": b"HTTP/1.1"},
        )

    @staticmethod
    def prepare(request: httpx.Request) -> LeanRequest:
        """The request's bytes, built once (its body must have been read: built with `content=`)."""
        url = request.url
        if url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol("LeanTransport serves http:// and https:// only")
        is_tls = url.scheme == "https"
        key = (url.host, url.port or (443 if is_tls else 80), is_tls)
        return LeanRequest(key, _request_head(request) + request.content)

    async def open(self, request: LeanRequest) -> tuple[int, list, StampedBody]:
        """Send a prepared request; its status, headers and the body as it arrives."""
        conn = await self._acquire(request.key)
        return await conn.send(request.data)

    async def _acquire(self, key: tuple[str, int, bool]) -> Connection:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            self._num_idle -= 1
            if not conn.is_closed:
                return conn
        sock, tls = await self._connect(key)
        conn = Connection(self, key, sock, self._max_body_bytes, self._max_head_bytes, tls)
        if conn.has_kernel_stamps:
            self.num_kernel_stamped += 1
        else:
            self.num_loop_stamped += 1
        return conn

    async def _connect(self, key: tuple[str, int, bool]) -> tuple[socket.socket, Tls | None]:
        """A connected non-blocking socket to `key`, trying each of its addresses in turn, and its
        TLS state once the handshake is done (https)."""
        host, port, is_tls = key
        sock = await self._open_socket(host, port)
        if not is_tls:
            return sock, None
        try:
            tls = Tls(self._context(), host)
            await tls.handshake(sock)
        except (OSError, ssl.SSLError) as exc:  # NOTE: ssl.SSLError is an OSError; named for the reader
            sock.close()
            raise httpx.ConnectError(f"TLS handshake with {host}:{port} failed: {exc}") from None
        except BaseException:
            sock.close()
            raise
        return sock, tls

    async def _addresses_of(self, host: str, port: int) -> list[tuple]:
        """The addresses of `host`, resolved once per target (concurrent first connections share one
        lookup; a numeric address needs none: no thread per connection in a burst of 2048)."""
        key = (host, port)
        if (lookup := self._addresses.get(key)) is None:
            lookup = self._addresses[key] = asyncio.ensure_future(self._resolve(host, port))
        try:
            return await asyncio.shield(lookup)
        except OSError:
            if self._addresses.get(key) is lookup:
                del self._addresses[key]  # NOTE: a failed lookup is tried again by the next connection
            raise

    @staticmethod
    async def _resolve(host: str, port: int) -> list[tuple]:
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            return await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
        return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (host, port))]

    async def _open_socket(self, host: str, port: int) -> socket.socket:
        loop = asyncio.get_running_loop()
        try:
            error: OSError = OSError("no address")
            for family, kind, proto, _, address in await self._addresses_of(host, port):
                sock = socket.socket(family, kind, proto)
                try:
                    sock.setblocking(False)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    await loop.sock_connect(sock, address)
                    return sock
                except OSError as exc:
                    sock.close()
                    error = exc
                except BaseException:
                    sock.close()
                    raise
            raise error
        except OSError as exc:
            raise httpx.ConnectError(f"cannot connect to {host}:{port}: {exc}") from None

    def _context(self) -> ssl.SSLContext:
        """httpx's SSL context for `verify` (its CA bundle, or the one given), asking for HTTP/1.1."""
        if self._ssl_context is None:
            verify = self._verify
            context = verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(verify=verify)
            context.set_alpn_protocols(["http/1.1"])
            self._ssl_context = context
        return self._ssl_context

    def _release(self, key: tuple, conn: Connection) -> None:
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
