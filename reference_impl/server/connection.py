"""Per-connection guards of the HTTP process: body size, vanished clients, stalled requests.

- ``read_body``: rejects a body past the limit by its Content-Length before reading it, and by
  the bytes received while reading a chunked one (413), so a huge body is never buffered.
- ``watch_disconnect`` / ``SSEResponse``: a listener on the ASGI ``receive`` channel sets the
  request's ``ClientGone`` the moment uvicorn sees the connection lost. uvicorn drops writes to
  a closed connection silently, and a cancellation can miss a stream that is always ready, so
  the stream itself checks ``ClientGone`` at every wake-up and stops.
- ``timed_http_protocol``: uvicorn's httptools protocol with a request-read timeout: a
  connection that sends nothing, or only part of a request, is closed when it expires (uvicorn
  times out only idle keep-alive connections between requests), and a request head past
  ``--max-request-header-bytes`` is answered 431 (httptools has no limit of its own). A
  connection whose write buffer stays full (a client that stopped reading) for
  ``--timeout-response-write`` is closed: its stream ends and is counted 499, in every H3 form.
- ``OpenFilesWatch``: connections that use up the open-file limit are logged once per burst
  (past it the event loop refuses connections without a word).
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
from collections.abc import AsyncIterator, Callable

from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from reference_impl.server.protocol import error_body
from reference_impl.server.serving import BadRequest
from reference_impl.server.tokenizer_manager import ClientGone

logger = logging.getLogger(__name__)
CLIENT_CLOSED_REQUEST = 499  # nginx's status for a client that left before the response
ABORT_CONNECTION = "reference.abort_connection"
"""Scope key of a callable that drops the request's connection (set by our HTTP protocol)."""


async def read_body(raw: Request, max_bytes: int) -> bytes:
    """The request body, or a 413 ``BadRequest`` once it is known to pass ``max_bytes``."""
    length = raw.headers.get("content-length", "")
    if length.isdigit() and int(length) > max_bytes:
        raise _too_large(int(length), max_bytes)
    chunks, size = [], 0
    async for chunk in raw.stream():
        size += len(chunk)
        if size > max_bytes:
            raise _too_large(size, max_bytes)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(size: int, max_bytes: int) -> BadRequest:
    return BadRequest(f"The request body has at least {size} bytes; the limit is {max_bytes} "
                      f"(--max-request-body-bytes).", code=413, status=413)


async def watch_disconnect(receive: Receive, gone: ClientGone) -> None:
    """Set ``gone`` when the client disconnects (run as a task; cancel it when done)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    gone.set()


class SSEResponse(StreamingResponse):
    """An SSE stream that stops, and aborts its request, as soon as the client is gone."""

    def __init__(self, content: AsyncIterator[bytes], gone: ClientGone,
                 on_client_gone: Callable[[], None]):
        super().__init__(content, media_type="text/event-stream")
        self.gone = gone
        self.on_client_gone = on_client_gone

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        abort_connection = scope.get(ABORT_CONNECTION)
        if abort_connection is not None:
            # NOTE: a stream cut off while its write waits on a full buffer (the tokenizer
            # manager's --max-queued-output-bytes) returns from that write only once the
            # connection is gone; after a real disconnect this does nothing.
            self.gone.on_set(abort_connection)
        listener = asyncio.create_task(watch_disconnect(receive, self.gone))
        try:
            await self.stream_response(send)
        except (ConnectionAbortedError, OSError):
            self.gone.set()
        finally:
            listener.cancel()
            await self.body_iterator.aclose()
        if self.gone.is_set:
            logger.info("client disconnected from a stream; its request was aborted")
            self.on_client_gone()


class OpenFilesWatch:
    """Warns once per burst when a connection takes one of the last open files (RLIMIT_NOFILE):
    past the limit libuv accepts and at once closes new connections, logging nothing. Warns
    again once the open connections have fallen to half of what they were then."""

    headroom = 8  # files other than connections (zmq, logs) may take the very last ones

    def __init__(self) -> None:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.max_fds = None if soft == resource.RLIM_INFINITY else soft
        self.num_connections_at_limit: int | None = None  # None: armed

    def on_connection_made(self, fd: int, num_connections: int) -> None:
        """A connection got file descriptor ``fd``; ``num_connections`` are open."""
        if (self.max_fds is None or self.num_connections_at_limit is not None
                or fd < self.max_fds - self.headroom):
            return
        self.num_connections_at_limit = num_connections
        logger.warning("%d open connections have used up nearly all %d open files (RLIMIT_NOFILE, "
                       "fd %d): further connections are refused until some close; set "
                       "--limit-concurrency below the limit or raise it (ulimit -n)",
                       num_connections, self.max_fds, fd)

    def on_connection_lost(self, num_connections: int) -> None:
        at_limit = self.num_connections_at_limit
        if at_limit is not None and num_connections <= at_limit // 2:
            self.num_connections_at_limit = None


class _TimedHttpToolsProtocol(HttpToolsProtocol):
    """httptools protocol that closes a connection whose request is not complete in time, and
    answers 431 to a request whose head passes ``max_header_bytes``."""

    request_read_timeout = 30.0
    max_header_bytes = 64 * 1024
    response_write_timeout = 10.0
    open_files: OpenFilesWatch | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._read_timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None
        self._head_bytes: int | None = 0  # bytes of the current request's head; None once complete
        self._head_restarted = False

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm_read_timer()
        sock = transport.get_extra_info("socket")
        if self.open_files is not None and sock is not None:
            self.open_files.on_connection_made(sock.fileno(), len(self.connections))

    def data_received(self, data: bytes) -> None:
        self._head_restarted = False
        super().data_received(data)
        # NOTE: httptools buffers a head without limit (and joins a long header line in
        # quadratic time); counting what was fed while the head is incomplete bounds both. A
        # read in which a pipelined request's head began is not counted (it may hold the last
        # request's body): one read more at most.
        if self._head_bytes is None or self._head_restarted or self.transport.is_closing():
            return
        self._head_bytes += len(data)
        if self._head_bytes > self.max_header_bytes:
            self._reject_head()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_read_timer()

    def on_headers_complete(self) -> None:
        self._head_bytes = None
        self.scope[ABORT_CONNECTION] = self.transport.abort
        super().on_headers_complete()
        if self.cycle is not None and self.scope.get("http_version") == "1.0":
            # NOTE: uvicorn frames a response without Content-Length as chunked even for an
            # HTTP/1.0 client, which has no chunked encoding; the cycle's task starts later.
            self.cycle.__class__ = _Http10Cycle

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._head_bytes, self._head_restarted = 0, True
        self._disarm_read_timer()

    def _reject_head(self) -> None:
        logger.info("request head passed %d bytes (--max-request-header-bytes); answered 431",
                    self.max_header_bytes)
        body = json.dumps(error_body(
            f"The request head passed {self.max_header_bytes} bytes "
            f"(--max-request-header-bytes).", code=431)).encode()
        self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                             b"content-type: application/json\r\nconnection: close\r\n"
                             b"content-length: %d\r\n\r\n%s" % (len(body), body))
        self.transport.close()

    def connection_lost(self, exc) -> None:
        self._disarm_read_timer()
        self._disarm_write_timer()
        super().connection_lost(exc)
        if self.open_files is not None:
            self.open_files.on_connection_lost(len(self.connections))

    def pause_writing(self) -> None:
        # NOTE: a client that stopped reading keeps the transport paused; its stream then stops
        # pulling outputs, which pile up in the request state (quadratically in the legacy H3
        # form). Closing the connection when no write drains in time ends the stream as a 499.
        super().pause_writing()
        self._disarm_write_timer()
        self._write_timer = self.loop.call_later(self.response_write_timeout, self._write_timed_out)

    def resume_writing(self) -> None:
        self._disarm_write_timer()
        super().resume_writing()

    def _disarm_write_timer(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _write_timed_out(self) -> None:
        self._write_timer = None
        logger.info("client read nothing for %.1f s (--timeout-response-write); connection closed",
                    self.response_write_timeout)
        self.transport.abort()

    def _arm_read_timer(self) -> None:
        self._disarm_read_timer()
        self._read_timer = self.loop.call_later(self.request_read_timeout, self._read_timed_out)

    def _disarm_read_timer(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _read_timed_out(self) -> None:
        self._read_timer = None
        if not self.transport.is_closing():
            self.transport.close()


class _Http10Cycle(RequestResponseCycle):
    """A response to an HTTP/1.0 request: without Content-Length, its end is the connection's
    close (RFC 9112, 6.3), never a chunked body."""

    _close_delimited = False

    async def send(self, message) -> None:
        if message["type"] == "http.response.start" and self._needs_close_delimiting(message):
            self._close_delimited, self.chunked_encoding, self.keep_alive = True, False, False
        elif self._close_delimited and message["type"] == "http.response.body":
            await self._send_close_delimited(message)
            return
        await super().send(message)

    def _needs_close_delimiting(self, message) -> bool:
        names = {name.lower() for name, _ in message.get("headers", [])}
        return (b"content-length" not in names and self.scope["method"] != "HEAD"
                and message["status"] not in (204, 304))

    async def _send_close_delimited(self, message) -> None:
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected or self.response_complete:
            return
        self.transport.write(message.get("body", b""))
        if not message.get("more_body", False):
            self.response_complete = True
            self.message_event.set()
            self.transport.close()


def timed_http_protocol(request_read_timeout: float, max_header_bytes: int = 64 * 1024,
                        response_write_timeout: float = 10.0) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with ``request_read_timeout`` seconds to receive a request,
    at most ``max_header_bytes`` in a request's head, ``response_write_timeout`` seconds for a
    paused (full) write buffer to drain, and a warning when connections use up the open files."""
    return type("TimedHttpToolsProtocol", (_TimedHttpToolsProtocol,),
                {"request_read_timeout": request_read_timeout, "max_header_bytes": max_header_bytes,
                 "response_write_timeout": response_write_timeout, "open_files": OpenFilesWatch()})
