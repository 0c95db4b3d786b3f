"""One keep-alive HTTP/1.1 connection of the lean transport, read with `recvmsg` and kernel stamps.

The connection owns a non-blocking socket and reads it from an event-loop reader callback with
`recvmsg`. On Linux the socket has `SO_TIMESTAMPNS` on, so each read carries the time the kernel
queued its last byte (CLOCK_REALTIME, moved into `now_ns`'s clock by `KernelClock`); the read's
loop stamp (`now_ns()` when the callback ran) is kept beside it, so how late the client read is
measured exactly per read. Where the kernel gives no stamp (another OS, a refused option, a read
without one) the loop stamp stands in, and the read is counted.

The coalescing rule: the kernel merges segments that wait in a socket's receive queue and keeps
the newest one's stamp, so a read that holds k events stamps all k at the time of its last byte.
Each read's lower bound is kept too, so an event that shared its read with later bytes has a known
uncertainty (`sse.py`): the bytes of a read arrived after the later of the connection's previous
read that drained the socket (or the request's write) and the poll before the loop's previous one
(`LoopIterations`: a socket with bytes at that poll would have been read in the previous iteration).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import sys
from array import array
from collections.abc import AsyncIterator
from typing import Protocol

import httptools
import httpx

try:
    import fcntl
except ImportError:  # NOTE: not on Windows; the queue is then not sampled
    fcntl = None

from loadgen.run.clock import KernelClock, now_ns

#: Bytes asked of one read: a read that fills it may leave more queued (see `ReadStats`).
READ_BYTES = 1 << 16
#: A read this long after its kernel stamp is late: the loop is behind (see `LoopIterations`).
LATE_NS = 1_000_000
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform == "linux" else None)
_SCM_TIMESTAMPNS = _SO_TIMESTAMPNS
_ANC_BYTES = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0
_unpack_timespec = struct.Struct("@qq").unpack
_FIONREAD = 0x541B  # NOTE: Linux's SIOCINQ: bytes waiting in the receive queue
_NO_BODY_STATUS = frozenset({204, 304})


class ResponseTooLarge(httpx.TransportError):
    """A response body passed the per-response byte cap while it was being read."""


class BadResponse(httpx.RemoteProtocolError):
    """The response broke HTTP/1.1: an unparsable head, or a head past the header byte cap."""


def header_cap_message(max_bytes: int) -> str:
    """The error text for a response head cut at `max_bytes` (shared by both transports)."""
    return (f"response head passed --max-response-header-bytes {max_bytes} before its end "
            "(endless header lines?); connection dropped")


def too_large_message(max_bytes: int) -> str:
    """The error text for a body cut at `max_bytes` (shared by both transports)."""
    return (f"response body passed --max-response-bytes {max_bytes} before its end "
            "(an endless stream?); connection dropped")


class ReadStats:
    """A transport's reads: how many, how many had no kernel stamp, and how far reading fell behind.

    A read that fills READ_BYTES may have left bytes queued: then the queue is read (FIONREAD) and
    compared with the socket's receive buffer. At half of it the receive window the client
    advertises is about closed (Linux advertises about half the buffer), so the server's writes
    stall: `num_window_full` counts those reads."""

    def __init__(self) -> None:
        self.num_unstamped = 0
        self.num_stamp_after_read = 0  # a kernel stamp later than its read: the clock moved
        self.num_full_reads = 0
        self.max_queued_bytes = 0
        self.num_window_full = 0

    def full_read(self, sock: socket.socket) -> None:
        """Note a read that filled its buffer: sample what is still queued."""
        self.num_full_reads += 1
        if fcntl is None:
            return
        try:
            queued = struct.unpack("i", fcntl.ioctl(sock.fileno(), _FIONREAD, b"\0\0\0\0"))[0] + READ_BYTES
            rcvbuf = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        except OSError:
            return
        self.max_queued_bytes = max(self.max_queued_bytes, queued)
        if queued * 2 >= rcvbuf:
            self.num_window_full += 1


class LoopIterations:
    """Marks event-loop iterations while reads come late, for the reads' lower bounds.

    uvloop runs `call_soon` callbacks in the idle phase of the iteration after the one that queued
    them, before that iteration's poll, and at most one mark is queued at a time; so the mark
    before the latest one ran before the previous iteration's poll. A socket read now had no bytes
    at that poll (else it would have been read then): that mark (`floor_ns`) is a lower bound of
    the read's bytes. Marks cost an iteration each, so they run only while reads come later than
    LATE_NS after their kernel stamps (the loop is behind, its iterations are long and the bound
    matters); a read on time has the bound of its connection's previous read."""

    def __init__(self) -> None:
        self.floor_ns = 0  # the mark before the latest
        self._last = 0
        self.is_marking = False  # a mark is queued
        self.has_late_read = False  # a late read since the last mark
        self._loop = asyncio.get_running_loop()
        import uvloop  # NOTE: the order above is uvloop's; asyncio's loop gets no iteration bound

        self.is_usable = isinstance(self._loop, uvloop.Loop)

    def late_read(self) -> None:
        """A read came late: keep marking iterations."""
        self.has_late_read = True
        if not self.is_marking:
            self.is_marking = True
            self._loop.call_soon(self._mark)

    def _mark(self) -> None:
        self.floor_ns, self._last = self._last, now_ns()
        if self.has_late_read:
            self.has_late_read = False
            self._loop.call_soon(self._mark)
        else:
            self.is_marking = False


class StampedBody(httpx.AsyncByteStream):
    """Response body pieces with the kernel stamp, loop stamp and lower bound of the read that
    brought each (all `now_ns` clock), filled by the connection."""

    def __init__(self, conn: Connection, max_bytes: int) -> None:
        self._conn: Connection | None = conn
        self._max_bytes = max_bytes
        self.num_bytes = 0
        self.chunks: list[bytes] = []
        # NOTE: arrays, not lists: no object per stamp, and nothing for the collector to walk.
        self.stamps = array("q")
        self.loop_stamps = array("q")
        self.floors = array("q")
        self.is_kernel = False
        self._done = asyncio.get_running_loop().create_future()
        self._wakeup: asyncio.Future | None = None
        self._read_pos = 0

    def _feed(self, data: bytes, stamp: int, loop_stamp: int, floor: int) -> None:
        if self.num_bytes + len(data) > self._max_bytes:
            # NOTE: checked before keeping the bytes, so what is kept never passes the cap.
            self._conn.abort(ResponseTooLarge(too_large_message(self._max_bytes)))  # type: ignore[union-attr]
            return
        self.num_bytes += len(data)
        self.stamps.append(stamp)
        self.loop_stamps.append(loop_stamp)
        self.floors.append(floor)
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


class Tls:
    """TLS over memory BIOs on the connection's own socket, so reads keep their kernel stamps: the
    plaintext of a TLS record becomes readable with the read that completed the record."""

    def __init__(self, context: ssl.SSLContext, host: str) -> None:
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = context.wrap_bio(self.incoming, self.outgoing, server_hostname=host)
        self.is_closed = False  # the peer sent close_notify

    async def handshake(self, sock: socket.socket) -> None:
        """Run the handshake over `sock` (non-blocking, connected)."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                self.obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush(loop, sock)
                data = await loop.sock_recv(sock, READ_BYTES)
                if not data:
                    raise ConnectionResetError("connection closed during the TLS handshake") from None
                self.incoming.write(data)
        await self._flush(loop, sock)

    async def _flush(self, loop, sock: socket.socket) -> None:
        if out := self.outgoing.read():
            await loop.sock_sendall(sock, out)

    def decrypt(self, data: bytes) -> bytes:
        """The plaintext that `data` (raw bytes from the socket) completes; raises ssl.SSLError."""
        self.incoming.write(data)
        out = []
        while True:
            try:
                plain = self.obj.read(READ_BYTES)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                self.is_closed = True
                break
            if not plain:  # NOTE: CPython's read gives b"" at the peer's close_notify: it never raises
                self.is_closed = True
                break
            out.append(plain)
        return b"".join(out)

    def encrypt(self, data: bytes) -> bytes:
        """`data` as TLS records to write (with anything else TLS has to send)."""
        if data:
            self.obj.write(data)
        return self.outgoing.read()


def enable_kernel_stamps(sock: socket.socket) -> bool:
    """Ask the kernel to stamp this socket's reads; False where it cannot."""
    if _SO_TIMESTAMPNS is None or not _ANC_BYTES:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


class ConnectionPool(Protocol):
    """What a Connection needs of the transport that pools it (run/transport.py's LeanTransport)."""

    clock: KernelClock
    read_stats: ReadStats
    iterations: LoopIterations
    kernel_stamps: bool

    def _release(self, key: tuple, conn: Connection) -> None: ...


class Connection:
    """One keep-alive connection on its own socket; serves one request at a time."""

    def __init__(self, pool: ConnectionPool, key: tuple, sock: socket.socket,
                 max_body_bytes: int, max_head_bytes: int, tls: Tls | None = None) -> None:
        self._pool = pool
        self._clock: KernelClock = pool.clock
        self._stats: ReadStats = pool.read_stats
        self._iterations: LoopIterations | None = pool.iterations if pool.iterations.is_usable else None
        self._key = key
        self._sock = sock
        self._tls = tls
        self._fd = sock.fileno()
        self._recvmsg = sock.recvmsg
        self._anc_bytes = _ANC_BYTES if pool.kernel_stamps and enable_kernel_stamps(sock) else 0
        self._max_body_bytes = max_body_bytes
        self._max_head_bytes = max_head_bytes
        self._head_bytes = 0
        self._is_waiting = False  # a request was sent and its response is not complete yet
        self._is_informational = False
        self._parser = httptools.HttpResponseParser(self)
        self._headers: list[tuple[bytes, bytes]] = []
        self._head: asyncio.Future | None = None
        self._pending: memoryview | None = None
        self._loop = asyncio.get_running_loop()
        self.body: StampedBody | None = None
        self.is_closed = False
        self.stamp = self.loop_stamp = self.floor_ns = self.read_floor_ns = 0
        self._was_full = False
        self._loop.add_reader(self._fd, self._on_readable)

    @property
    def has_kernel_stamps(self) -> bool:
        return bool(self._anc_bytes)

    def _on_readable(self) -> None:
        try:
            data, anc, _, _ = self._recvmsg(READ_BYTES, self._anc_bytes)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        loop_ns = now_ns()
        if not data:
            self._lost(None)
            return
        if anc and anc[0][1] == _SCM_TIMESTAMPNS:
            sec, nsec = _unpack_timespec(anc[0][2])
            stamp = sec * 1_000_000_000 + nsec - self._clock.offset_ns
            if stamp > loop_ns:
                self._stats.num_stamp_after_read += 1
                stamp = loop_ns
        else:
            stamp = loop_ns
            self._stats.num_unstamped += 1
        self.stamp, self.loop_stamp, self.read_floor_ns = stamp, loop_ns, self.floor_ns
        if (it := self._iterations) is not None:
            if loop_ns - stamp > LATE_NS:
                it.late_read()
            if not self._was_full and it.floor_ns > self.floor_ns:
                self.read_floor_ns = it.floor_ns
        if len(data) == READ_BYTES:
            self._was_full = True
            self._stats.full_read(self._sock)  # NOTE: bytes may remain: the floor stays put
        else:
            self._was_full = False
            self.floor_ns = loop_ns
        if self._tls is not None:
            self._tls_received(data)
        elif self.body is not None:
            self._feed(data)  # NOTE: inside a body, the common case: no head checks
        else:
            self.data_received(data)

    def _tls_received(self, data: bytes) -> None:
        try:
            plain = self._tls.decrypt(data)  # type: ignore[union-attr]
            if out := self._tls.encrypt(b""):  # type: ignore[union-attr]
                self._send_raw(out)  # NOTE: e.g. an answer to a key update
        except ssl.SSLError as exc:
            self._lost(exc)
            return
        if plain:
            self.data_received(plain)
        if self._tls.is_closed and not self.is_closed:  # type: ignore[union-attr]
            self._lost(None)

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

    def _lost(self, exc: Exception | None) -> None:
        self.close()
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
        self.body.is_kernel = bool(self._anc_bytes)
        if self._head is not None and not self._head.done():
            # NOTE: the headers travel with the future: a response parsed whole in one read puts
            # the connection back in the pool, and the next send resets self._headers before the
            # waiter resumes.
            self._head.set_result((status, self.body, self._headers))

    def on_body(self, body: bytes) -> None:
        if self.body is not None:  # None once aborted in the middle of a read
            self.body._feed(body, self.stamp, self.loop_stamp, self.read_floor_ns)

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
        self._head = self._loop.create_future()
        self._head_bytes = 0
        self._is_waiting = True
        self.floor_ns = now_ns()  # NOTE: no byte of the answer can come before the request
        self._was_full = False
        self._write(data)
        try:
            status, body, headers = await self._head
        except asyncio.CancelledError:
            self.abort(httpx.ReadError("request cancelled"))
            raise
        return status, headers, body

    def _write(self, data: bytes) -> None:
        if self._tls is not None:
            try:
                data = self._tls.encrypt(data)
            except ssl.SSLError as exc:
                self.abort(httpx.WriteError(f"cannot write the request: {exc}"))
                return
        self._send_raw(data)

    def _send_raw(self, data: bytes) -> None:
        if self._pending is not None:
            self._pending = memoryview(bytes(self._pending) + data)
            return
        try:
            sent = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self.abort(httpx.WriteError(f"cannot write the request: {exc}"))
            return
        if sent < len(data):
            self._pending = memoryview(data)[sent:]
            self._loop.add_writer(self._fd, self._on_writable)

    def _on_writable(self) -> None:
        try:
            sent = self._sock.send(self._pending)  # type: ignore[arg-type]
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.abort(httpx.WriteError(f"cannot write the request: {exc}"))
            return
        self._pending = self._pending[sent:]  # type: ignore[index]
        if not self._pending:
            self._pending = None
            self._loop.remove_writer(self._fd)

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
        if self.is_closed:
            return
        self.is_closed = True
        self._loop.remove_reader(self._fd)
        if self._pending is not None:
            self._pending = None
            self._loop.remove_writer(self._fd)
        self._sock.close()
