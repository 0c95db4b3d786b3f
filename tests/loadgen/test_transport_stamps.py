"""The lean transport's stamping and pooling, in process (issue 35's mutation selection for
loadgen/run/transport.py): every body piece carries the kernel receive stamp of its read, in
`now_ns`'s clock, between the request's send and the loop's read; without kernel stamps the loop
stamp stands in and the run says so (`stamp_source`); requests are built once, to the byte; idle
connections are kept up to the cap. A scripted HTTP server on 127.0.0.1 runs in a thread."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time

import httpx
import pytest

from loadgen.run.clock import now_ns
from loadgen.run.transport import (
    BODY_EXTENSION,
    LeanRequest,
    LeanTransport,
    StampedBody,
    head_size,
)

# NOTE: a hang (a mutant that never ends a body) fails in 20 s, not at the suite's 300 s
pytestmark = pytest.mark.timeout(20)

GAP_S = 0.25



#: Every test's event loop ends within this: a hang (a broken connection that never ends a body, or
#: a reader callback spinning) fails the test instead of waiting for pytest's timeout, which the
#: loop would swallow as a callback's exception.
WAIT_S = 15


def bounded_run(coro, debug: bool = False, runner=asyncio.run):
    """`runner(coro)` (asyncio.run or uvloop.run), cancelled with TimeoutError after WAIT_S."""
    async def bounded():
        return await asyncio.wait_for(coro, WAIT_S)

    return runner(bounded(), debug=debug)


class ScriptedServer:
    """Answers each request on each connection with `script(n)`: a list of (bytes, pause before
    them; None closes, a callable is called with the socket and then closes); records the connections
    taken, the requests' bytes, and `now_ns()` before each write."""

    def __init__(self, script, tls: ssl.SSLContext | None = None) -> None:
        self.script = script
        self.tls = tls
        self.alpn: list[str | None] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.num_connections = 0
        self.requests: list[bytes] = []
        self.sent_ns: list[int] = []
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.num_connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        if self.tls is not None:
            try:
                conn = self.tls.wrap_socket(conn, server_side=True)
            except (OSError, ssl.SSLError):
                conn.close()
                return
            self.alpn.append(conn.selected_alpn_protocol())
        with conn:
            buf = b""
            while True:
                while b"\r\n\r\n" not in buf:
                    try:
                        data = conn.recv(65536)
                    except OSError:  # reset by the client
                        data = b""
                    if not data:
                        self.closed.set()
                        return
                    buf += data
                head, buf = buf.split(b"\r\n\r\n", 1)
                self.requests.append(head + b"\r\n\r\n")
                for data, pause in self.script(len(self.requests)):
                    time.sleep(pause)
                    self.sent_ns.append(now_ns())
                    if data is None:
                        return
                    if callable(data):  # an action on the socket before it closes (e.g. a reset)
                        data(conn)
                        return
                    try:
                        conn.sendall(data)
                    except OSError:  # the client dropped the connection
                        self.closed.set()
                        return

    def close(self) -> None:
        self.sock.close()


def _chunked(*pieces: bytes) -> list[tuple[bytes, float]]:
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    parts = [b"%x\r\n%s\r\n" % (len(p), p) for p in pieces]
    return [(head + parts[0], 0.0)] + [(p, GAP_S) for p in parts[1:]] + [(b"0\r\n\r\n", 0.0)]


def _sized(body: bytes) -> list[tuple[bytes, float]]:
    return [(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body), 0.0)]


@pytest.fixture
def server():
    servers: list[ScriptedServer] = []

    def start(script, tls: ssl.SSLContext | None = None) -> ScriptedServer:
        servers.append(ScriptedServer(script, tls))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def _get(transport: LeanTransport, port: int, path: str = "/") -> LeanRequest:
    return transport.prepare(httpx.Request("GET", f"http://127.0.0.1:{port}{path}"))


async def _body(transport: LeanTransport, port: int, block_s: float = 0.0) -> tuple[int, StampedBody, int]:
    """Send a GET; optionally block the loop before reading; return status, body, send time."""
    sent = now_ns()
    status, _, body = await transport.open(_get(transport, port))
    if block_s:
        time.sleep(block_s)
    await body.complete()
    return status, body, sent


def test_each_piece_has_its_reads_kernel_stamp_between_the_send_and_the_loops_read(server):
    srv = server(lambda n: _chunked(b"one", b"two", b"three"))

    async def go():
        transport = LeanTransport()
        status, body, sent = await _body(transport, srv.port)
        await transport.aclose()
        return transport, status, body, sent

    # NOTE: debug mode refuses a blocking socket in sock_connect
    transport, status, body, sent = bounded_run(go(), debug=True)
    assert status == 200 and b"".join(body.chunks) == b"onetwothree"
    assert body.is_kernel
    assert len(body.stamps) == len(body.loop_stamps) == len(body.floors) == 3
    for stamp, loop, server_sent in zip(body.stamps, body.loop_stamps, srv.sent_ns, strict=False):
        assert server_sent <= stamp <= loop
    assert all(b - a >= 0.8 * GAP_S * 1e9 for a, b in zip(body.stamps, body.stamps[1:], strict=False))
    assert body.floors[0] >= sent and body.floors[1] == body.loop_stamps[0]
    assert list(body.floors) == sorted(body.floors)
    assert transport.stamp_source == "kernel"
    assert (transport.num_kernel_stamped, transport.num_loop_stamped) == (1, 0)
    assert transport.read_stats.num_unstamped == 0


def test_a_blocked_loop_keeps_the_kernel_stamp_of_when_the_bytes_came(server):
    srv = server(lambda n: [(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n", 0.0), (b"hello", GAP_S)])

    async def late():
        transport = LeanTransport()
        _, _, body = await transport.open(_get(transport, srv.port))
        time.sleep(8 * GAP_S)  # the body's bytes arrive while the loop is blocked
        await body.complete()
        return body

    body = bounded_run(late())
    assert srv.sent_ns[1] <= body.stamps[0]
    assert body.loop_stamps[0] - body.stamps[0] >= 3 * GAP_S * 1e9


def test_without_kernel_stamps_the_loop_stamp_stands_in_and_is_counted(server):
    srv = server(lambda n: _chunked(b"a", b"b"))

    async def go():
        transport = LeanTransport(kernel_stamps=False)
        before = transport.stamp_source
        (_, body, _), _ = await asyncio.gather(_body(transport, srv.port), _body(transport, srv.port))
        return transport, before, body

    transport, before, body = bounded_run(go())
    assert before == "loop"
    assert not body.is_kernel and list(body.stamps) == list(body.loop_stamps)
    assert transport.read_stats.num_unstamped >= 4
    assert transport.stamp_source == "loop"
    assert (transport.num_kernel_stamped, transport.num_loop_stamped) == (0, 2)


def test_stamp_source_is_mixed_when_some_connections_had_no_kernel_stamps(server):
    one, two = server(lambda n: _sized(b"x")), server(lambda n: _sized(b"y"))

    async def go():
        transport = LeanTransport()
        fresh = transport.stamp_source
        await _body(transport, one.port)
        transport.kernel_stamps = False
        await _body(transport, two.port)
        return transport, fresh

    transport, fresh = bounded_run(go())
    assert fresh == "kernel"
    assert (transport.num_kernel_stamped, transport.num_loop_stamped) == (1, 1)
    assert transport.stamp_source == "mixed"


def test_prepare_builds_the_request_bytes_and_target_once():
    request = httpx.Request("POST", "http://example.test/v1/x?a=1", content=b"{}",
                            headers={"x-k": "v"})
    lean = LeanTransport.prepare(request)
    assert lean.key == ("example.test", 80, False)
    head = b"".join(b"%s: %s\r\n" % pair for pair in request.headers.raw)
    assert lean.data == b"POST /v1/x?a=1 HTTP/1.1\r\n" + head + b"\r\n{}"
    assert LeanTransport.prepare(httpx.Request("GET", "https://h.test/")).key == ("h.test", 443, True)
    assert LeanTransport.prepare(httpx.Request("GET", "https://h.test:8443/")).key == ("h.test", 8443, True)
    assert LeanTransport.prepare(httpx.Request("GET", "http://h.test:81/")).key == ("h.test", 81, False)
    with pytest.raises(httpx.UnsupportedProtocol, match="^LeanTransport serves http:// and https:// only$"):
        LeanTransport.prepare(httpx.Request("GET", "ftp://h.test/"))


def test_head_size_is_the_bytes_of_the_head_as_sent():
    headers = [(b"content-type", b"text/event-stream"), (b"x", b"")]
    sent = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nx: \r\n\r\n"
    assert head_size(200, "OK", headers) == len(sent)
    assert head_size(404, "Not Found", []) == len(b"HTTP/1.1 404 Not Found\r\n\r\n")


def test_idle_connections_are_reused_up_to_the_keepalive_cap(server):
    srv = server(lambda n: _sized(b"%d" % n))

    async def go(cap: int, concurrent: int):
        before = srv.num_connections
        transport = LeanTransport(max_keepalive=cap)
        for _ in range(2):
            results = await asyncio.gather(*[_body(transport, srv.port) for _ in range(concurrent)])
            assert all(status == 200 for status, _, _ in results)
        idle = transport._num_idle
        await transport.aclose()
        assert (transport.num_kernel_stamped, transport.num_loop_stamped) == (srv.num_connections - before, 0)
        return idle

    assert bounded_run(go(4, 1)) == 1 and srv.num_connections == 1
    assert bounded_run(go(2, 3)) == 2
    assert srv.num_connections == 1 + 3 + 1  # 3 at first, 2 kept: 1 new the second time
    assert bounded_run(go(0, 1)) == 0 and srv.num_connections == 5 + 2


def test_aclose_closes_the_idle_connections(server):
    srv = server(lambda n: _sized(b"z"))

    async def go():
        transport = LeanTransport()
        await _body(transport, srv.port)
        await transport.aclose()
        return transport._num_idle, transport._idle

    assert bounded_run(go()) == (0, {})
    assert srv.closed.wait(20)


def test_httpx_client_gets_the_stamped_body_as_an_extension(server):
    srv = server(lambda n: _sized(b"body"))

    async def go():
        async with httpx.AsyncClient(transport=LeanTransport()) as client:
            response = await client.get(f"http://127.0.0.1:{srv.port}/p")
            await response.aread()
            return response

    response = bounded_run(go())
    assert response.status_code == 200 and response.content == b"body"
    assert response.headers["content-length"] == "4"
    body = response.extensions[BODY_EXTENSION]
    assert isinstance(body, StampedBody) and body.chunks == [b"body"]
    assert response.extensions["http_version"] == b"HTTP/1.1"
    assert srv.requests[0].startswith(b"GET /p HTTP/1.1\r\n")


def test_a_connection_lost_mid_head_is_a_read_error_naming_the_request(server):
    srv = server(lambda n: [(b"HTTP/1.1 200 OK\r\n", 0.0), (None, 0.0)])

    async def go():
        async with httpx.AsyncClient(transport=LeanTransport()) as client:
            await client.get(f"http://127.0.0.1:{srv.port}/")

    with pytest.raises(httpx.ReadError, match="connection lost: closed by peer") as failed:
        bounded_run(go())
    assert failed.value.request.url.port == srv.port
    request = httpx.Request("GET", f"http://127.0.0.1:{srv.port}/")

    async def bare():
        await LeanTransport().handle_async_request(request)

    with pytest.raises(httpx.ReadError) as failed:
        bounded_run(bare())
    assert failed.value.request is request


def test_a_refused_connection_is_a_one_line_connect_error():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()

    async def go():
        await LeanTransport().open(_get(LeanTransport(), port))

    with pytest.raises(httpx.ConnectError, match=f"^cannot connect to 127.0.0.1:{port}: "):
        bounded_run(go())


def test_a_failed_tls_handshake_is_a_connect_error_and_the_context_is_made_once():
    raw = socket.create_server(("127.0.0.1", 0))
    port = raw.getsockname()[1]

    def garbage():
        conn, _ = raw.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        conn.close()

    threading.Thread(target=garbage, daemon=True).start()

    async def plain():
        transport = LeanTransport(verify=False)
        await transport.open(transport.prepare(httpx.Request("GET", f"https://127.0.0.1:{port}/")))

    with pytest.raises(httpx.ConnectError, match=f"^TLS handshake with 127.0.0.1:{port} failed: "):
        bounded_run(plain())
    raw.close()
    given = ssl.create_default_context()
    transport = LeanTransport(verify=given)
    assert transport._context() is given and transport._context() is given
    own = LeanTransport(verify=False)._context()
    assert own.verify_mode == ssl.CERT_NONE


def test_a_host_is_resolved_once_for_concurrent_connections_and_again_after_a_failure(server):
    srv = server(lambda n: _sized(b"r"))
    lookups: list[tuple[str, int]] = []

    async def go():
        transport = LeanTransport()
        resolve = transport._resolve

        async def counted(host: str, port: int):
            lookups.append((host, port))
            return await resolve(host, port)

        transport._resolve = counted
        request = transport.prepare(httpx.Request("GET", f"http://localhost:{srv.port}/"))
        results = await asyncio.gather(*[transport.open(request) for _ in range(3)])
        results.append(await transport.open(request))
        addresses = await transport._addresses[("localhost", srv.port)]
        with pytest.raises(httpx.ConnectError, match="^cannot connect to no-such-host.invalid:80: "):
            await transport.open(transport.prepare(httpx.Request("GET", "http://no-such-host.invalid/")))
        return results, addresses, transport._addresses

    results, addresses, after = bounded_run(go())
    assert [status for status, _, _ in results] == [200] * 4
    assert lookups == [("localhost", srv.port), ("no-such-host.invalid", 80)]
    assert addresses and all(kind == socket.SOCK_STREAM for _, kind, *_ in addresses)
    assert ("no-such-host.invalid", 80) not in after and ("localhost", srv.port) in after


def test_a_host_without_addresses_is_a_connect_error_saying_so():
    async def go():
        transport = LeanTransport()

        async def nothing(host: str, port: int):
            return []

        transport._resolve = nothing
        await transport.open(transport.prepare(httpx.Request("GET", "http://empty.test:81/")))

    with pytest.raises(httpx.ConnectError, match="^cannot connect to empty.test:81: no address$"):
        bounded_run(go())


def test_numeric_addresses_need_no_lookup():
    async def go():
        return (await LeanTransport._resolve("127.0.0.1", 1), await LeanTransport._resolve("::1", 2))

    four, six = bounded_run(go())
    assert four == [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", 1))]
    assert six == [(socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("::1", 2))]


def test_https_verifies_by_default_asks_for_http11_and_keeps_kernel_stamps(server, certificate):
    cert, key = certificate
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    tls.set_alpn_protocols(["h2", "http/1.1"])
    srv = server(lambda n: _chunked(b"se", b"cure"), tls)
    url = f"https://127.0.0.1:{srv.port}/"

    async def go(transport: LeanTransport, to: str = url):
        try:
            status, _, body = await transport.open(transport.prepare(httpx.Request("GET", to)))
            await body.complete()
            return status, body
        finally:
            await transport.aclose()

    with pytest.raises(httpx.ConnectError, match="certificate verify failed"):
        bounded_run(go(LeanTransport()))
    trusting = ssl.create_default_context(cafile=cert)
    with pytest.raises(httpx.ConnectError, match="Hostname mismatch"):  # the name is checked
        bounded_run(go(LeanTransport(verify=trusting), f"https://localhost:{srv.port}/"))
    status, body = bounded_run(go(LeanTransport(verify=trusting)))
    assert status == 200 and b"".join(body.chunks) == b"secure"
    assert body.is_kernel and len(body.stamps) == 2
    assert all(s <= loop for s, loop in zip(body.stamps, body.loop_stamps, strict=True))
    assert srv.alpn == ["http/1.1"]
