"""One lean-transport connection, in process (issue 35's mutation selection for
loadgen/run/connection.py, where the client's stamps are taken): the queue sampling of full reads
and its window rule at its boundary, the loop-iteration marks behind the reads' lower bounds, a
kernel stamp later than its read, the body and head caps at their exact sizes, and the HTTP/1.1
rules that decide whether a connection is kept: informational heads, close-delimited bodies,
bytes nobody asked for, `connection: close`, a cancelled send, a partial write."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import ssl
import struct
import threading
import time

import httpx
import pytest
import uvloop

from loadgen.run.connection import (
    READ_BYTES,
    BadResponse,
    LoopIterations,
    ReadStats,
    ResponseTooLarge,
    enable_kernel_stamps,
    header_cap_message,
    too_large_message,
)
from loadgen.run.transport import LeanTransport
from tests.loadgen import test_transport_stamps as stamps
from tests.loadgen.test_transport_stamps import GAP_S, _body, _chunked, _get, _sized, bounded_run

server = stamps.server  # the scripted server fixture

# NOTE: a hang (a mutant that never ends a body) fails in 20 s, not at the suite's 300 s
pytestmark = pytest.mark.timeout(20)

OK_HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n"


def _failure(port: int, error: type[BaseException], **options) -> str:
    """The message of the `error` that a GET to `port` ends in, through LeanTransport(**options)."""
    async def go():
        transport = LeanTransport(**options)
        try:
            with pytest.raises(error) as caught:
                await _body(transport, port)
        finally:
            await transport.aclose()
        return str(caught.value)

    return bounded_run(go())


class _Queue(socket.socket):
    """A real socket whose receive buffer size is scripted (the kernel rounds and doubles it)."""

    rcvbuf = 0

    def getsockopt(self, *args):  # noqa: D401
        if args[:2] == (socket.SOL_SOCKET, socket.SO_RCVBUF):
            if self.rcvbuf < 0:
                raise OSError("scripted failure")
            return self.rcvbuf
        return super().getsockopt(*args)


@pytest.fixture
def queued():
    """A connected pair: (reader whose rcvbuf is scripted, writer)."""
    a, b = socket.socketpair()
    reader = _Queue(fileno=a.detach())
    yield reader, b
    reader.close()
    b.close()


def _wait_queued(reader: socket.socket, writer: socket.socket, data: bytes) -> None:
    writer.sendall(data)
    deadline = time.monotonic() + 10
    while len(reader.recv(len(data) + 1, socket.MSG_PEEK)) < len(data):
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_full_read_samples_the_queue_and_counts_a_closing_window_at_half_the_buffer(queued):
    reader, writer = queued
    stats = ReadStats()
    _wait_queued(reader, writer, b"x" * 1000)
    queued_bytes = 1000 + READ_BYTES  # what is queued plus the full read just taken
    reader.rcvbuf = 2 * queued_bytes + 1  # just over: the window is still open
    stats.full_read(reader)
    assert (stats.num_full_reads, stats.max_queued_bytes, stats.num_window_full) == (1, queued_bytes, 0)
    reader.rcvbuf = 2 * queued_bytes  # at the boundary: about closed
    stats.full_read(reader)
    assert (stats.num_full_reads, stats.max_queued_bytes, stats.num_window_full) == (2, queued_bytes, 1)
    reader.recv(500)
    stats.full_read(reader)  # less queued: the maximum stays, and the window is open again
    assert (stats.num_full_reads, stats.max_queued_bytes, stats.num_window_full) == (3, queued_bytes, 1)
    reader.rcvbuf = 2 * (queued_bytes - 500)
    stats.full_read(reader)  # at the boundary again: counted again
    assert (stats.num_full_reads, stats.max_queued_bytes, stats.num_window_full) == (4, queued_bytes, 2)


def test_a_full_read_whose_queue_cannot_be_read_is_still_counted(queued):
    reader, writer = queued
    stats = ReadStats()
    _wait_queued(reader, writer, b"x" * 10)
    reader.rcvbuf = -1
    stats.full_read(reader)
    assert (stats.num_full_reads, stats.max_queued_bytes, stats.num_window_full) == (1, 0, 0)


def test_loop_marks_run_while_reads_are_late_and_keep_the_mark_before_the_latest():
    async def go():
        it = LoopIterations()
        assert it.is_usable and not it.is_marking and it.floor_ns == 0
        before = time.monotonic_ns()
        it.late_read()
        it.late_read()  # one mark queued at a time
        assert it.is_marking and it.has_late_read
        await asyncio.sleep(0)  # the first mark ran: the one before it is none yet
        assert it.floor_ns == 0 and it.is_marking and not it.has_late_read
        await asyncio.sleep(0)  # the second mark ran: the first is the floor; no late read since
        first, second = it.floor_ns, it._last
        assert before <= first < second <= time.monotonic_ns()
        assert not it.is_marking
        for _ in range(3):
            await asyncio.sleep(0)
        assert it.floor_ns == first  # no marks without late reads
        it.late_read()
        await asyncio.sleep(0)
        assert it.floor_ns == second  # a late read marks again: the floor moves on one mark
        return it

    bounded_run(go(), runner=uvloop.run)


def test_loop_marks_are_not_used_on_asyncios_own_loop():
    async def go():
        return LoopIterations().is_usable

    assert bounded_run(go()) is False


def test_a_kernel_stamp_later_than_its_read_is_counted_and_replaced_by_the_read(server):
    srv = server(lambda n: [(OK_HEAD % 3 + b"a", 0.0), (b"b", GAP_S), (b"c", GAP_S)])

    async def go():
        transport = LeanTransport()
        transport.clock.offset_ns -= 10**12  # the realtime clock stepped back by 1000 s
        _, body, _ = await _body(transport, srv.port)
        await transport.aclose()
        return transport, body

    transport, body = bounded_run(go(), runner=uvloop.run)
    assert transport.read_stats.num_stamp_after_read == len(set(body.loop_stamps)) == 3
    assert transport.read_stats.num_unstamped == 0
    assert list(body.stamps) == list(body.loop_stamps)
    # each read's stamp is its own read time: none was late, so no loop marks ran
    assert not transport.iterations.is_marking and transport.iterations.floor_ns == 0


def test_each_read_without_a_kernel_stamp_is_counted_once(server):
    srv = server(lambda n: [(OK_HEAD % 3 + b"a", 0.0), (b"b", GAP_S), (b"c", GAP_S)])

    async def go():
        transport = LeanTransport(kernel_stamps=False)
        _, body, _ = await _body(transport, srv.port)
        await transport.aclose()
        return transport, body

    transport, body = bounded_run(go())
    assert transport.read_stats.num_unstamped == len(set(body.loop_stamps)) == 3


def test_a_late_read_on_asyncios_own_loop_starts_no_marks(server):
    srv = server(lambda n: [(OK_HEAD % 5, 0.0), (b"hello", GAP_S)])

    async def go():
        transport = LeanTransport()
        _, body, _ = await _body(transport, srv.port, block_s=4 * GAP_S)  # the body's read comes late
        await asyncio.sleep(0.05)
        await transport.aclose()
        return transport, body

    transport, body = bounded_run(go())
    assert body.loop_stamps[0] - body.stamps[0] > 1_000_000
    assert not transport.iterations.is_marking and transport.iterations.floor_ns == 0


def test_a_read_after_another_connections_late_read_takes_the_loop_mark_as_its_lower_bound(server):
    late = server(lambda n: [(OK_HEAD % 2 + b"a", 0.0), (b"b", 0.3)])
    idle = server(lambda n: [(OK_HEAD % 2 + b"x", 0.0), (b"y", 1.5)])

    async def go():
        transport = LeanTransport()
        asyncio.get_running_loop().call_later(0.1, time.sleep, 0.8)  # the loop is blocked 0.1-0.9 s
        (_, one, _), (_, two, _) = await asyncio.gather(_body(transport, late.port), _body(transport, idle.port))
        await transport.aclose()
        return one, two

    one, two = bounded_run(go(), runner=uvloop.run)
    assert one.loop_stamps[1] - one.stamps[1] > 1_000_000  # "b" came while the loop was blocked
    # "y"'s connection last drained its socket at "x"; the loop's marks after the late read of "b"
    # are later, and "y" was not in the socket at the mark before them
    assert two.floors[1] > two.loop_stamps[0]
    assert one.loop_stamps[1] <= two.floors[1] < two.stamps[1]


def test_reads_that_fill_the_buffer_keep_their_lower_bound_and_are_sampled(server):
    size = 4 * READ_BYTES
    srv = server(lambda n: [(OK_HEAD % size + b"z" * size, 0.0)])

    async def go():
        transport = LeanTransport()
        _, body, sent = await _body(transport, srv.port, block_s=1.0)
        await transport.aclose()
        return transport, body, sent

    transport, body, sent = bounded_run(go(), runner=uvloop.run)
    assert body.num_bytes == size
    stats = transport.read_stats
    assert stats.num_full_reads >= 2 and stats.max_queued_bytes >= 2 * READ_BYTES
    # bytes may still be queued after a full read: the next read keeps the same lower bound
    assert len(set(body.floors[:stats.num_full_reads])) == 1 and body.floors[0] >= sent
    assert transport.iterations.floor_ns > 0  # the late reads started the loop marks


@pytest.mark.parametrize("extra, ok", [(0, True), (1, False)])
def test_the_body_cap_admits_exactly_its_size(server, extra, ok):
    cap = 1000
    srv = server(lambda n: _sized(b"b" * (cap + extra)))

    async def go():
        transport = LeanTransport(max_body_bytes=cap)
        _, _, body = await transport.open(_get(transport, srv.port))
        try:
            await body.complete()
        except ResponseTooLarge as exc:
            return body, str(exc)
        finally:
            await transport.aclose()
        return body, None

    body, error = bounded_run(go())
    if ok:
        assert error is None and body.num_bytes == cap
    else:
        assert error == too_large_message(cap)
        assert sum(map(len, body.chunks)) == body.num_bytes <= cap


@pytest.mark.parametrize("spare, ok", [(0, True), (-1, False)])
def test_the_head_cap_admits_a_head_of_exactly_its_size_with_its_body_in_the_same_read(server, spare, ok):
    head = OK_HEAD % 5000
    srv = server(lambda n: [(head + b"q" * 5000, 0.0)])

    async def go():
        transport = LeanTransport(max_head_bytes=len(head) + spare)
        try:
            _, body, _ = await _body(transport, srv.port)
        except BadResponse as exc:
            return None, str(exc)
        finally:
            await transport.aclose()
        return body, None

    body, error = bounded_run(go())
    if ok:
        assert error is None and b"".join(body.chunks) == b"q" * 5000
    else:
        assert body is None and error == header_cap_message(len(head) - 1)


def test_informational_heads_are_skipped_and_their_headers_dropped(server):
    early = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n"
    srv = server(lambda n: [(early, 0.0), (b"HTTP/1.1 200 OK\r\nx-final: 1\r\ncontent-length: 2\r\n\r\nok", 0.1)])

    async def go():
        transport = LeanTransport()
        status, headers, body = await transport.open(_get(transport, srv.port))
        await body.complete()
        await transport.aclose()
        return status, headers, body

    status, headers, body = bounded_run(go())
    assert status == 200 and b"".join(body.chunks) == b"ok"
    assert [name.lower() for name, _ in headers] == [b"x-final", b"content-length"]


def _two_gets(transport: LeanTransport, port: int):
    async def go():
        first = await _body(transport, port)
        await asyncio.sleep(0.2)
        second = await _body(transport, port)
        await transport.aclose()
        return first, second

    return bounded_run(go())


@pytest.mark.parametrize("close, connections", [(False, 1), (True, 2)])
def test_a_connection_is_reused_unless_the_response_says_close(server, close, connections):
    head = b"HTTP/1.1 200 OK\r\n%scontent-length: 2\r\n\r\nhi" % (b"connection: close\r\n" if close else b"")
    srv = server(lambda n: [(head, 0.0)])
    (status1, body1, _), (status2, body2, _) = _two_gets(LeanTransport(), srv.port)
    assert (status1, status2) == (200, 200) and body1.chunks == body2.chunks == [b"hi"]
    assert srv.num_connections == connections


@pytest.mark.parametrize("pause", [0.0, 0.1])
def test_bytes_nobody_asked_for_end_the_connection(server, pause):
    srv = server(lambda n: [(_sized(b"hi")[0][0], 0.0), (_sized(b"xx")[0][0], pause)])
    (_, body1, _), (_, body2, _) = _two_gets(LeanTransport(), srv.port)
    assert body1.chunks == body2.chunks == [b"hi"]
    assert srv.num_connections == 2


def test_a_body_without_length_ends_when_the_peer_closes(server):
    srv = server(lambda n: [(b"HTTP/1.1 200 OK\r\n\r\nto the end", 0.0), (None, 0.1)])

    async def go():
        transport = LeanTransport()
        _, body, _ = await _body(transport, srv.port)
        await transport.aclose()
        return body

    assert b"".join(bounded_run(go()).chunks) == b"to the end"


@pytest.mark.parametrize("head", [OK_HEAD % 100, b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"])
def test_a_framed_body_cut_by_the_peer_is_a_read_error(server, head):
    srv = server(lambda n: [(head + b"5\r\npart", 0.0), (None, 0.1)])
    assert _failure(srv.port, httpx.ReadError) == "connection lost: closed by peer"


def test_a_no_content_answer_cut_by_the_peer_before_its_head_ended_is_a_read_error(server):
    srv = server(lambda n: [(b"HTTP/1.1 204 No Content\r\nx-a: 1\r\n", 0.0), (None, 0.1)])
    assert _failure(srv.port, httpx.ReadError) == "connection lost: closed by peer"


@pytest.mark.parametrize("answer, message", [
    (b"NOT HTTP AT ALL\r\n\r\n", "malformed HTTP response"),
    (b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n",
     "unexpected protocol upgrade$"),
])
def test_a_broken_or_upgraded_response_is_a_bad_response(server, answer, message):
    srv = server(lambda n: [(answer, 0.0)])
    assert re.match(message, _failure(srv.port, BadResponse))


def test_a_cancelled_send_drops_its_connection(server):
    srv = server(lambda n: [(_sized(b"late")[0][0], 1.0 if n == 1 else 0.0)])

    async def go():
        transport = LeanTransport()
        task = asyncio.ensure_future(transport.open(_get(transport, srv.port)))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        _, body, _ = await _body(transport, srv.port)
        await transport.aclose()
        return body

    assert bounded_run(go()).chunks == [b"late"]
    assert srv.num_connections == 2


def test_closing_a_body_before_its_end_drops_the_connection(server):
    srv = server(lambda n: _chunked(b"one", b"two", b"three"))

    async def go():
        transport = LeanTransport()
        _, _, body = await transport.open(_get(transport, srv.port))
        await body.aclose()
        with pytest.raises(httpx.ReadError, match="^response closed before its end$"):
            await body.complete()
        await transport.aclose()

    bounded_run(go())
    assert srv.closed.wait(10)


def test_a_request_larger_than_the_socket_buffer_is_written_in_parts():
    size = 8 << 20
    listener = socket.create_server(("127.0.0.1", 0))
    got = []

    def serve():
        conn, _ = listener.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            time.sleep(0.5)  # the client's socket buffer fills meanwhile
            while len(data) < size:
                data += conn.recv(1 << 20)
            got.append(len(data))
            conn.sendall(_sized(b"done")[0][0])
            data = b""
            while len(data) < size:  # the second request, on the kept connection
                data += conn.recv(1 << 20)
            got.append(len(data))
            conn.sendall(_sized(b"again")[0][0])

    threading.Thread(target=serve, daemon=True).start()
    errors = []

    async def go():
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: errors.append(context))
        transport = LeanTransport()
        port = listener.getsockname()[1]
        bodies = []
        for _ in range(2):
            request = httpx.Request("POST", f"http://127.0.0.1:{port}/", content=b"p" * size)
            status, _, body = await transport.open(transport.prepare(request))
            await body.complete()
            bodies.append((status, body.chunks))
        await asyncio.sleep(0.1)
        await transport.aclose()
        return bodies

    try:
        bodies = bounded_run(go(), runner=uvloop.run)
    finally:
        listener.close()
    assert bodies == [(200, [b"done"]), (200, [b"again"])]
    assert len(got) == 2 and min(got) >= size
    assert errors == []  # no callback failed (e.g. a writer left on the socket)


def test_the_cap_messages_name_the_flag_and_the_cap():
    assert header_cap_message(7) == ("response head passed --max-response-header-bytes 7 before its end "
                                     "(endless header lines?); connection dropped")
    assert too_large_message(9) == ("response body passed --max-response-bytes 9 before its end "
                                    "(an endless stream?); connection dropped")


def test_a_socket_that_refuses_the_stamp_option_reads_without_stamps():
    sock = socket.socket()
    assert enable_kernel_stamps(sock) is True
    sock.close()  # setsockopt now fails (EBADF)
    assert enable_kernel_stamps(sock) is False


def test_a_body_is_iterated_as_its_pieces_arrive_and_whole_once_arrived(server):
    srv = server(lambda n: _chunked(b"one", b"two", b"three")[:-1] + [(b"0\r\n\r\n", GAP_S)])

    async def go():
        transport = LeanTransport()
        _, _, live = await transport.open(_get(transport, srv.port))
        pieces = [piece async for piece in live]  # waits for each piece (GAP_S apart), then the end
        _, _, done = await transport.open(_get(transport, srv.port))
        await done.complete()
        whole = [piece async for piece in done]  # everything had arrived: one piece
        await transport.aclose()
        return pieces, whole

    pieces, whole = bounded_run(go())
    assert pieces == [b"one", b"two", b"three"]
    assert whole == [b"onetwothree"]


def test_a_reset_connection_says_so(server):
    def reset(conn):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    srv = server(lambda n: [(OK_HEAD % 100 + b"part", 0.0), (reset, 0.2)])
    assert re.match("connection lost: .*reset by peer", _failure(srv.port, httpx.ReadError))


def _tls_server(certificate, answer: bytes, hold_s: float):
    """A TLS server in a thread: reads one request head, writes `answer`, sends close_notify, and
    keeps the TCP connection open `hold_s` more; returns (port, requests seen)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*certificate)
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []

    def serve():
        raw, _ = listener.accept()
        listener.close()
        with context.wrap_socket(raw, server_side=True) as conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            seen.append(data)
            conn.sendall(answer)
            try:
                # close_notify, then it waits for the client's; the TCP connection stays open
                conn.unwrap().close()
            except OSError:  # the client closed the connection at the close_notify
                return
            time.sleep(hold_s)

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1], seen


def test_a_tls_close_notify_ends_a_close_delimited_body_while_tcp_stays_open(certificate):
    port, seen = _tls_server(certificate, b"HTTP/1.1 200 OK\r\n\r\nuntil close_notify", hold_s=30)

    async def go():
        transport = LeanTransport(verify=ssl.create_default_context(cafile=certificate[0]))
        request = transport.prepare(httpx.Request("GET", f"https://127.0.0.1:{port}/"))
        status, _, body = await transport.open(request)
        await body.complete()  # not at the TCP close, 30 s later: the test's loop ends in 15 s
        await transport.aclose()
        return status, body

    status, body = bounded_run(go())
    assert status == 200 and b"".join(body.chunks) == b"until close_notify"
    assert seen and seen[0].startswith(b"GET / HTTP/1.1\r\n")


def test_an_https_connection_is_kept_alive_and_carries_only_the_requests(server, certificate):
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(*certificate)
    srv = server(lambda n: _sized(b"ok%d" % n + bytes(range(256)) * 800), tls)  # 200 KB: many TLS records

    async def go():
        transport = LeanTransport(verify=ssl.create_default_context(cafile=certificate[0]))
        bodies = []
        for _ in range(2):
            request = transport.prepare(httpx.Request("GET", f"https://127.0.0.1:{srv.port}/"))
            _, _, body = await transport.open(request)
            await body.complete()
            bodies.append(b"".join(body.chunks))
        await transport.aclose()
        return bodies

    assert bounded_run(go()) == [b"ok%d" % n + bytes(range(256)) * 800 for n in (1, 2)]
    assert srv.num_connections == 1
    assert [head.split(b"\r\n")[0] for head in srv.requests] == [b"GET / HTTP/1.1"] * 2


def test_a_server_that_closes_during_the_tls_handshake_is_a_connect_error_saying_so():
    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        conn, _ = listener.accept()
        conn.recv(65536)  # the ClientHello
        conn.close()

    threading.Thread(target=serve, daemon=True).start()

    async def go():
        transport = LeanTransport()
        request = transport.prepare(httpx.Request("GET", f"https://127.0.0.1:{listener.getsockname()[1]}/"))
        with pytest.raises(httpx.ConnectError) as caught:
            await transport.open(request)
        await transport.aclose()
        return str(caught.value)

    try:
        message = bounded_run(go())
    finally:
        listener.close()
    assert message.endswith("failed: connection closed during the TLS handshake")


def test_a_broken_tls_record_is_a_read_error_naming_the_tls_failure(certificate):
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*certificate)
    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        raw, _ = listener.accept()
        conn = context.wrap_socket(raw, server_side=True)
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        conn.sendall(OK_HEAD % 100 + b"part")
        time.sleep(0.2)
        # NOTE: an application-data record that fails its integrity check, under the TLS layer
        socket.socket(fileno=os.dup(conn.fileno())).sendall(b"\x17\x03\x03\x00\x20" + b"\x00" * 32)
        time.sleep(5)
        conn.close()

    threading.Thread(target=serve, daemon=True).start()

    async def go():
        transport = LeanTransport(verify=ssl.create_default_context(cafile=certificate[0]))
        request = transport.prepare(httpx.Request("GET", f"https://127.0.0.1:{listener.getsockname()[1]}/"))
        _, _, body = await transport.open(request)
        with pytest.raises(httpx.ReadError) as caught:
            await body.complete()
        await transport.aclose()
        return str(caught.value)

    try:
        message = bounded_run(go())
    finally:
        listener.close()
    assert re.match(r"connection lost: \[SSL: \w+\]", message), message


def test_a_request_cancelled_while_its_body_is_still_being_written_drops_the_connection():
    listener = socket.create_server(("127.0.0.1", 0))
    accepted = []

    def serve():
        conn, _ = listener.accept()
        accepted.append(conn)  # never read: the client's writes stall

    threading.Thread(target=serve, daemon=True).start()

    errors = []

    async def go():
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: errors.append(context))
        transport = LeanTransport()
        port = listener.getsockname()[1]
        request = transport.prepare(httpx.Request("POST", f"http://127.0.0.1:{port}/", content=b"p" * (32 << 20)))
        task = asyncio.ensure_future(transport.open(request))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.1)  # the loop runs on without the writer
        await transport.aclose()

    try:
        bounded_run(go(), runner=uvloop.run)
    finally:
        listener.close()
        for conn in accepted:
            conn.close()
    assert errors == []


def test_the_head_cap_counts_a_head_across_its_reads(server):
    head = OK_HEAD % 2
    half = len(head) // 2
    srv = server(lambda n: [(head[:half], 0.0), (head[half:] + b"ok", GAP_S)])
    # each read is under the cap, the head is not
    assert _failure(srv.port, BadResponse, max_head_bytes=len(head) - 1) == header_cap_message(len(head) - 1)
