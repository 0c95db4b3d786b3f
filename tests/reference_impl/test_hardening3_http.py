"""Hardening round 3 (issue 23), HTTP framing: each test failed on the code before its fix."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest

from harness.probes import slow_client
from reference_impl.subprocess_server import ServerProcess
from tests.reference_impl.conftest import MODEL, metric

LINE = b"X-Pad: " + b"a" * 8000 + b"\r\n"


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmRSS"))


def _status_line(sock: socket.socket) -> bytes:
    sock.settimeout(20)
    try:
        return sock.recv(200).split(b"\r\n")[0]
    except OSError:
        return b""


def _send_endless_head(port: int, max_bytes: int, out: list) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n")
        try:
            for _ in range(max_bytes // len(LINE)):
                sock.sendall(LINE)
        except OSError:
            pass
        out.append(_status_line(sock))


def test_endless_request_heads_get_431_and_memory_stays_flat():
    with ServerProcess("--sim-profile", "zero") as srv:
        srv.wait_ready()
        http = srv.child_pids()["http"]
        before = _rss_mb(http)
        statuses: list[bytes] = []
        threads = [threading.Thread(target=_send_endless_head, args=(srv.port, 8 * 2**20, statuses))
                   for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # NOTE: before the cap httptools buffered all 160 MiB (+160 MB RSS) and answered nothing.
        assert statuses == [b"HTTP/1.1 431 Request Header Fields Too Large"] * 20
        assert _rss_mb(http) - before < 64
        headers = {"x-pad": "a" * 60_000}  # under the 64 KiB default
        assert httpx.get(srv.url + "/health", headers=headers, timeout=30).status_code == 200
        big_body = {"tokens": [65] * 300_000}  # a body past 64 KiB is not a head
        assert httpx.post(srv.url + "/detokenize", json=big_body, timeout=60).status_code == 200


def _head_of(size: int) -> bytes:
    """An incomplete request head of exactly ``size`` bytes (its end not yet sent)."""
    start = b"GET /health HTTP/1.1\r\nHost: t\r\nX-Pad: "
    return start + b"a" * (size - len(start))


def test_max_request_header_bytes_flag_sets_the_cap_to_the_byte():
    with ServerProcess("--sim-profile", "zero", "--max-request-header-bytes", "8192") as srv:
        srv.wait_ready()
        with socket.create_connection(("127.0.0.1", srv.port)) as at_cap:
            at_cap.sendall(_head_of(8192))
            at_cap.sendall(b"\r\n\r\n")
            assert _status_line(at_cap) == b"HTTP/1.1 200 OK"
        with socket.create_connection(("127.0.0.1", srv.port)) as past_cap:
            past_cap.sendall(_head_of(8193))
            past_cap.settimeout(20)
            answer = b"".join(iter(lambda: past_cap.recv(4096), b""))  # to the server's close
        assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), answer
        assert b"The request head passed 8192 bytes" in answer


@pytest.mark.parametrize("form", ["reference", "reference-full"])
def test_a_client_that_stops_reading_is_cut_off_as_499(form):
    with ServerProcess("--sim-profile", "zero", "--stream-output", form,
                       "--timeout-response-write", "1") as srv:
        srv.wait_ready()
        srv.warm_up()
        http = srv.child_pids()["http"]
        before = _rss_mb(http)
        socks = [slow_client(srv.port, MODEL) for _ in range(5)]
        try:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                metrics = httpx.get(srv.url + "/metrics", timeout=30).text
                if metric(metrics, 'num_requests_total{endpoint="chat",status="499"}') >= 5:
                    break
                assert _rss_mb(http) - before < 1000, "stopped early: memory kept growing"
                time.sleep(0.5)
        finally:
            for sock in socks:
                sock.close()
        assert metric(metrics, 'num_requests_total{endpoint="chat",status="499"}') == 5
        assert metric(metrics, "num_tracked_reqs") == 0
        assert _rss_mb(http) - before < 300


GOOD_CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.mark.parametrize("field, value", [("stream", "true"), ("n", True), ("max_tokens", "5")])
def test_ill_typed_fields_are_not_coerced(server, field, value):
    response = httpx.post(server.url + "/v1/chat/completions", json={**GOOD_CHAT, field: value},
                          timeout=60)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == field


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_bodies_not_declared_json_are_rejected(server, content_type):
    headers = {"content-type": content_type} if content_type else {}
    for path in ("/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"):
        response = httpx.post(server.url + path, content=json.dumps(GOOD_CHAT), headers=headers,
                              timeout=60)
        assert response.status_code == 400, (path, response.text)
        assert "application/json" in response.json()["error"]["message"]
    ok = httpx.post(server.url + "/v1/chat/completions", content=json.dumps(GOOD_CHAT),
                    headers={"content-type": "Application/JSON; charset=utf-8"}, timeout=60)
    assert ok.status_code == 200


def test_an_unknown_expectation_gets_417(server):
    response = httpx.post(server.url + "/v1/chat/completions", json=GOOD_CHAT,
                          headers={"expect": "bogus"}, timeout=60)
    assert response.status_code == 417
    ok = httpx.post(server.url + "/v1/chat/completions", json=GOOD_CHAT,
                    headers={"expect": "100-continue"}, timeout=60)
    assert ok.status_code == 200


def test_an_http10_stream_is_close_delimited(server):
    body = json.dumps({**GOOD_CHAT, "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        sock.settimeout(60)
        data = b""
        while chunk := sock.recv(65536):  # the server ends the body by closing
            data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert b"transfer-encoding" not in head.lower()
    assert payload.startswith(b"data: {") and payload.endswith(b"data: [DONE]\n\n")


def test_head_and_options_on_read_only_endpoints(server):
    for path in ("/health", "/metrics", "/v1/models"):
        head = httpx.head(server.url + path, timeout=30)
        assert head.status_code == 200 and head.content == b""
        options = httpx.options(server.url + path, timeout=30)
        assert options.status_code == 204
        assert set(options.headers["allow"].split(", ")) == {"GET", "HEAD", "OPTIONS"}
    metrics = httpx.get(server.url + "/metrics", timeout=30).text
    assert 'status="405"' not in metrics
