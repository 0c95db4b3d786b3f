"""The server's per-connection limits, in process (issue 35's mutation selection for
reference_impl/server/connection.py): the request head cap to the byte (431), the body cap by
Content-Length and by bytes read (413), the request-read and response-write timeouts, the
open-files warning, and HTTP/1.0 responses delimited by the close. A real uvicorn server on
127.0.0.1 runs in the test's own event loop with the server's protocol class."""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import socket

import pytest
import uvicorn
from starlette.requests import Request

from reference_impl.server.connection import (
    ABORT_CONNECTION,
    OpenFilesWatch,
    SSEResponse,
    read_body,
    timed_http_protocol,
    watch_disconnect,
)
from reference_impl.server.serving import BadRequest
from reference_impl.server.tokenizer_manager import ClientGone

CAP = 600
GONE: list[tuple[str, bool]] = []  # (path, the connection's abort was in the scope) per stream left


async def _events(count: int | None, gone: ClientGone):
    """SSE events until `count` or the client is gone (checked at each wake-up, as the server's)."""
    n = 0
    while (count is None or n < count) and not gone.is_set:
        n += 1
        yield b"data: %d\n\n" % n
        await asyncio.sleep(0.01)


async def _cut(gone: ClientGone):
    """Two events, then the stream is cut off server-side (as by --max-queued-output-bytes) while
    it has more to wait for."""
    yield b"data: 1\n\n"
    yield b"data: 2\n\n"
    gone.set()
    await asyncio.sleep(0.5)
    yield b"data: late\n\n"


async def _app(scope, receive, send) -> None:
    """/sse, /sse3: an endless, a 3-event SSEResponse; /body: echoes the body's length read under a 10-byte cap (413 past it); /stream: three
    chunks without Content-Length; /big: 8 MiB in 64 KiB writes; other paths: 200 "ok"."""
    path = scope["path"]
    if path.startswith("/sse"):
        gone, aborts = ClientGone(), callable(scope.get(ABORT_CONNECTION))
        events = _cut(gone) if path == "/sse-cut" else _events(3 if path == "/sse3" else None, gone)
        response = SSEResponse(events, gone,
                               lambda: GONE.append((path, aborts)))
        await response(scope, receive, send)
        return
    status, headers, chunks = 200, [(b"content-type", b"text/plain")], [b"ok"]
    if path == "/body":
        try:
            chunks = [b"%d" % len(await read_body(Request(scope, receive), 10))]
        except BadRequest as exc:
            status, chunks = exc.status, [str(exc).encode()]
    elif path == "/sink":
        chunks = [b"%d" % len(await Request(scope, receive).body())]
    elif path == "/stream":
        chunks = [b"one,", b"two,", b"three"]
    elif path == "/big":
        chunks = [b"x" * (64 << 10)] * 128
    elif path == "/204":
        status, chunks = 204, []
    if path not in ("/stream", "/big", "/204"):
        headers.append((b"Content-Length", b"%d" % sum(map(len, chunks))))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    for chunk in chunks:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body"})  # NOTE: ASGI's defaults: no body, no more body


async def _serve(body, *, read_timeout: float = 30.0, write_timeout: float = 10.0, protocol=None):
    """Run `body(port)` against the app served with the server's protocol class (or `protocol`)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    protocol = protocol or timed_http_protocol(read_timeout, CAP, write_timeout)
    server = uvicorn.Server(uvicorn.Config(
        _app, lifespan="off", log_level="error", log_config=None, access_log=False, http=protocol,
        timeout_graceful_shutdown=2))
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        return await asyncio.wait_for(body(port), 20)  # NOTE: each test takes about 1 s
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        sock.close()


def _head(size: int, close: bool = False) -> bytes:
    """The first `size` bytes of a GET / head (padded in one header), without its blank line: the
    cap counts the bytes read while a head is not complete."""
    start = b"GET / HTTP/1.1\r\nhost: x\r\n" + b"connection: close\r\n" * close + b"x-pad: "
    assert size > len(start)
    return start + b"a" * (size - len(start))


END = b"\r\n\r\n"


async def _exchange(port: int, *parts: bytes, pause: float = 0.0) -> bytes:
    """Write `parts` (pausing between them), then read until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for part in parts:
        writer.write(part)
        await writer.drain()
        await asyncio.sleep(pause)
    data = await reader.read()
    writer.close()
    return data


async def _one(reader: asyncio.StreamReader) -> bytes:
    """One Content-Length-framed response."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    return head + await reader.readexactly(length)


def test_a_head_of_exactly_the_cap_is_served_and_one_byte_more_is_answered_431(caplog):
    async def go(port):
        at = await _exchange(port, _head(CAP, close=True), END, pause=0.2)
        over = await _exchange(port, _head(CAP + 1))
        return at, over

    with caplog.at_level(logging.INFO, logger="reference_impl.server.connection"):
        at, over = asyncio.run(_serve(go))
    assert at.startswith(b"HTTP/1.1 200 ") and at.endswith(b"ok")
    head, body = over.split(b"\r\n\r\n", 1)
    assert head.split(b"\r\n") == [b"HTTP/1.1 431 Request Header Fields Too Large",
                                   b"content-type: application/json", b"connection: close",
                                   b"content-length: %d" % len(body)]
    assert [r.getMessage() for r in caplog.records] == [
        f"request head passed {CAP} bytes (--max-request-header-bytes); answered 431"]
    message = json.loads(body)
    assert message["error"]["code"] == 431
    assert message["error"]["message"] == (
        f"The request head passed {CAP} bytes (--max-request-header-bytes).")


def test_the_head_cap_counts_every_read_of_one_head():
    async def go(port):
        head = _head(CAP + 1)
        return await _exchange(port, head[:CAP // 2], head[CAP // 2:], END, pause=0.2)

    assert asyncio.run(_serve(go)).startswith(b"HTTP/1.1 431 ")


def test_each_request_on_a_kept_alive_connection_gets_the_whole_cap():
    async def go(port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        replies = []
        for _ in range(3):
            writer.write(_head(CAP))
            await asyncio.sleep(0.2)
            writer.write(END)
            replies.append(await _one(reader))
        writer.close()
        return replies

    assert [r.split(b" ")[1] for r in asyncio.run(_serve(go))] == [b"200"] * 3


def test_a_request_not_complete_in_time_is_closed_and_one_in_time_is_served(caplog):
    async def go(port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nhost: x\r\n")
        closed = await asyncio.wait_for(reader.read(), 20)
        writer.close()
        served = await _exchange(port, _head(100, close=True) + END)
        return closed, served

    with caplog.at_level(logging.WARNING):
        closed, served = asyncio.run(_serve(go, read_timeout=0.5))
    assert not caplog.records  # e.g. a timer left set, its cancel failing in connection_lost
    assert closed == b""
    assert served.startswith(b"HTTP/1.1 200 ")


def test_a_client_that_stops_reading_is_closed_after_the_write_timeout(caplog):
    async def go(port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 30)
        writer.transport.pause_reading()
        writer.write(b"GET /big HTTP/1.1\r\nhost: x\r\n\r\n")
        await asyncio.sleep(2.0)
        writer.transport.resume_reading()
        data = await asyncio.wait_for(reader.read(), 30)
        writer.close()
        return data

    with caplog.at_level(logging.INFO, logger="reference_impl.server.connection"):
        data = asyncio.run(_serve(go, write_timeout=0.5))
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # e.g. a timer left set
    assert len(data) < 8 << 20
    assert [r.getMessage() for r in caplog.records if r.name == "reference_impl.server.connection"] == [
        "client read nothing for 0.5 s (--timeout-response-write); connection closed"]


def test_a_slow_reader_within_the_write_timeout_gets_the_whole_response():
    async def go(port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 30)
        writer.transport.pause_reading()
        writer.write(b"GET /big HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        await asyncio.sleep(0.3)
        writer.transport.resume_reading()
        data = await asyncio.wait_for(reader.read(), 30)
        writer.close()
        return data

    data = asyncio.run(_serve(go, write_timeout=20.0))
    assert data.endswith(b"x" * 1000 + b"\r\n0\r\n\r\n")


@pytest.mark.parametrize("body, headers, expected", [
    (b"x" * 10, b"content-length: 10\r\n", b"200"),
    (b"x" * 11, b"content-length: 11\r\n", b"413"),
])
def test_the_body_cap_by_content_length_to_the_byte(body, headers, expected):
    async def go(port):
        return await _exchange(port, b"POST /body HTTP/1.1\r\nhost: x\r\nconnection: close\r\n"
                               + headers + b"\r\n" + body)

    reply = asyncio.run(_serve(go))
    assert reply.split(b" ")[1] == expected
    if expected == b"200":
        assert reply.endswith(b"\r\n\r\n10")
    else:
        assert reply.endswith(b"The request body has at least 11 bytes; the limit is 10 "
                              b"(--max-request-body-bytes).")


def _receive(*chunks: bytes, length: str | None = None):
    """A scope and receive channel for a POST whose body arrives in `chunks`."""
    headers = [] if length is None else [(b"content-length", length.encode())]
    scope = {"type": "http", "method": "POST", "path": "/", "headers": headers,
             "query_string": b""}
    messages = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
                for i, c in enumerate(chunks)]

    async def receive():
        return messages.pop(0)

    return scope, receive


@pytest.mark.parametrize("chunks, length, expected", [
    ((b"12345", b"67890"), None, b"1234567890"),
    ((b"12345", b"678901"), None, 11),
    ((b"1234567890",), "10", b"1234567890"),
    ((b"1",), "11", 11),
    ((b"1234567890", b"1"), "abc", 11),
    ((b"123",), "", b"123"),
])
def test_read_body_refuses_by_content_length_or_by_bytes_read(chunks, length, expected):
    scope, receive = _receive(*chunks, length=length)

    async def go():
        return await read_body(Request(scope, receive), 10)

    if isinstance(expected, bytes):
        assert asyncio.run(go()) == expected
        return
    with pytest.raises(BadRequest) as refused:
        asyncio.run(go())
    assert refused.value.status == 413 and refused.value.code == 413
    assert str(refused.value) == (f"The request body has at least {expected} bytes; the limit is "
                                  f"10 (--max-request-body-bytes).")


def test_an_http_10_response_without_length_ends_at_the_close_not_chunked(caplog):
    async def go(port):
        head_only = await _exchange(port, b"HEAD /stream HTTP/1.0\r\n\r\n")
        stream = await _exchange(port, b"GET /stream HTTP/1.0\r\n\r\n")
        sized = await _exchange(port, b"GET / HTTP/1.0\r\n\r\n")
        empty = await _exchange(port, b"GET /204 HTTP/1.0\r\n\r\n")
        chunked = await _exchange(port, b"GET /stream HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        return head_only, stream, sized, empty, chunked

    with caplog.at_level(logging.WARNING):
        head_only, stream, sized, empty, chunked = asyncio.run(_serve(go))
    assert not caplog.records  # e.g. uvicorn's "returned without completing response"
    assert head_only.startswith(b"HTTP/1.1 200 ") and head_only.endswith(b"\r\n\r\n")
    head, body = stream.split(b"\r\n\r\n", 1)
    assert body == b"one,two,three"
    assert b"transfer-encoding" not in head.lower() and b"content-length" not in head.lower()
    assert b"connection: close" in head.lower()
    assert sized.endswith(b"\r\n\r\nok") and b"content-length: 2" in sized.lower()
    assert empty.startswith(b"HTTP/1.1 204 ") and b"transfer-encoding" not in empty.lower()
    assert b"transfer-encoding: chunked" in chunked.lower()
    assert chunked.endswith(b"5\r\nthree\r\n0\r\n\r\n")


def test_timed_http_protocol_carries_its_three_limits():
    cls = timed_http_protocol(1.5, 1234, 2.5)
    assert (cls.request_read_timeout, cls.max_header_bytes, cls.response_write_timeout) == (1.5, 1234, 2.5)
    assert isinstance(cls.open_files, OpenFilesWatch)
    default = timed_http_protocol(3.0)
    assert (default.max_header_bytes, default.response_write_timeout) == (64 * 1024, 10.0)


def test_the_open_files_warning_fires_once_per_burst_and_rearms_at_half(caplog):
    watch = OpenFilesWatch()
    watch.max_fds = 100
    with caplog.at_level(logging.WARNING, logger="reference_impl.server.connection"):
        watch.on_connection_made(91, 80)  # below max_fds - headroom (92)
        assert watch.num_connections_at_limit is None and not caplog.records
        watch.on_connection_made(92, 80)
        assert watch.num_connections_at_limit == 80 and len(caplog.records) == 1
        watch.on_connection_made(99, 81)
        assert len(caplog.records) == 1
        watch.on_connection_lost(41)
        assert watch.num_connections_at_limit == 80
        watch.on_connection_lost(40)
        assert watch.num_connections_at_limit is None
        watch.on_connection_made(95, 50)
    assert len(caplog.records) == 2
    assert caplog.records[0].getMessage() == (
        "80 open connections have used up nearly all 100 open files (RLIMIT_NOFILE, fd 92): "
        "further connections are refused until some close; set --limit-concurrency below the "
        "limit or raise it (ulimit -n)")
    unlimited = OpenFilesWatch()
    unlimited.max_fds = None
    unlimited.on_connection_made(10 ** 6, 1)
    assert unlimited.num_connections_at_limit is None


def test_a_stream_whose_client_left_stops_and_is_reported_once(caplog):
    GONE.clear()

    async def go(port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /sse HTTP/1.1\r\nhost: x\r\n\r\n")
        await reader.readuntil(b"data: 3\n\n")
        writer.close()
        for _ in range(2000):
            if GONE:
                break
            await asyncio.sleep(0.01)
        whole = await _exchange(port, b"GET /sse3 HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        return whole

    with caplog.at_level(logging.INFO, logger="reference_impl.server.connection"):
        whole = asyncio.run(_serve(go))
    assert GONE == [("/sse", True)]
    assert [r.getMessage() for r in caplog.records if r.name == "reference_impl.server.connection"] == [
        "client disconnected from a stream; its request was aborted"]
    assert b"data: 3\n\n" in whole and b"content-type: text/event-stream; charset=utf-8\r\n" in whole


def test_a_stream_cut_off_by_the_server_drops_its_connection_at_once(caplog):
    async def go(port):
        return await _exchange(port, b"GET /sse-cut HTTP/1.1\r\nhost: x\r\n\r\n")

    GONE.clear()
    with caplog.at_level(logging.WARNING):
        data = asyncio.run(_serve(go))
    assert not caplog.records  # e.g. uvicorn's "Exception in ASGI application"
    assert b"data: 2\n\n" in data
    assert b"late" not in data and not data.endswith(b"0\r\n\r\n")  # aborted, not ended


def test_watch_disconnect_sets_gone_only_on_a_disconnect():
    async def go(messages):
        gone, queue = ClientGone(), list(messages)

        async def receive():
            if not queue:
                await asyncio.sleep(3600)
            return queue.pop(0)

        task = asyncio.ensure_future(watch_disconnect(receive, gone))
        await asyncio.sleep(0.05)
        task.cancel()
        return gone.is_set

    request = {"type": "http.request", "body": b"", "more_body": False}
    assert asyncio.run(go([request, request])) is False
    assert asyncio.run(go([request, {"type": "http.disconnect"}])) is True


def test_body_bytes_after_the_head_never_count_against_the_head_cap():
    async def go(port):
        head = b"POST /sink HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: %d\r\n\r\n"
        body = b"b" * (3 * CAP)
        return await _exchange(port, head % len(body), body[:CAP], body[CAP:], pause=0.2)

    reply = asyncio.run(_serve(go))
    assert reply.startswith(b"HTTP/1.1 200 ") and reply.endswith(b"\r\n\r\n%d" % (3 * CAP))


def test_a_connection_near_the_open_files_limit_is_warned_with_its_fd_and_count(caplog):
    protocol = timed_http_protocol(30.0, CAP, 10.0)
    watch = protocol.open_files
    watch.max_fds = 12  # every connection's fd is past 12 - headroom

    async def go(port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_head(100) + END)
        await _one(reader)
        writer.close()
        for _ in range(2000):
            if watch.num_connections_at_limit is None:
                break
            await asyncio.sleep(0.01)

    with caplog.at_level(logging.WARNING, logger="reference_impl.server.connection"):
        asyncio.run(_serve(go, protocol=protocol))
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and messages[0].startswith(
        "1 open connections have used up nearly all 12 open files (RLIMIT_NOFILE, fd ")
    assert int(messages[0].split("fd ")[1].split(")")[0]) > 2
    assert watch.num_connections_at_limit is None  # the connection closed: armed again


def test_the_open_files_watch_takes_the_soft_limit_and_none_when_unlimited(monkeypatch):
    assert OpenFilesWatch().max_fds == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    monkeypatch.setattr(resource, "getrlimit", lambda _: (1024, resource.RLIM_INFINITY))
    assert OpenFilesWatch().max_fds == 1024
    monkeypatch.setattr(resource, "getrlimit", lambda _: (resource.RLIM_INFINITY,) * 2)
    assert OpenFilesWatch().max_fds is None
