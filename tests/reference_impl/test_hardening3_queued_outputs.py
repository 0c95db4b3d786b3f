"""Issue 23 item 7, every form: a stream whose client never reads is cut off by
--max-queued-output-bytes (499, its request aborted) before the legacy H3 'copy' form's queued
copies grow the HTTP process without bound; a client that reads is never cut."""

from __future__ import annotations

import threading
import time

import httpx
import openai
import pytest

from harness.probes import slow_client
from reference_impl.subprocess_server import ServerProcess
from tests.reference_impl.conftest import MODEL, metric

MAX_PEAK_RSS_MB = 600  # 5 such streams peaked at ~2.5 GB before the bound, ~300 MB with it
NEVER = ("--timeout-response-write", "3600")  # only the queue bound can end a stream here
STATUS_499 = 'num_requests_total{endpoint="chat",status="499"}'


def _peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmHWM"))


def _wait_for_499s(srv: ServerProcess, http_pid: int, count: int) -> str:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        text = httpx.get(srv.url + "/metrics", timeout=60).text
        if metric(text, STATUS_499) >= count:
            return text
        assert _peak_rss_mb(http_pid) < MAX_PEAK_RSS_MB, "memory kept growing: never cut off"
        time.sleep(0.2)
    raise AssertionError(f"only {metric(text, STATUS_499):.0f} of {count} streams ended as 499")


@pytest.mark.parametrize("flags", [
    ("--all-legacy",),  # the default bound
    ("--stream-output", "reference", "--max-queued-output-bytes", "1000000"),
    ("--stream-output", "reference-full", "--max-queued-output-bytes", "1000000"),
    ("--incremental-streaming-output", "--max-queued-output-bytes", "1000000"),
], ids=["all-legacy", "reference", "reference-full", "incremental"])
def test_streams_whose_client_never_reads_end_as_499_with_bounded_memory(flags):
    with ServerProcess("--sim-profile", "zero", *NEVER, *flags) as srv:
        srv.warm_up()
        http = srv.child_pids()["http"]
        socks = [slow_client(srv.port, MODEL, n=n) for n in (1, 1, 1, 1, 2)]
        try:
            text = _wait_for_499s(srv, http, len(socks))
        finally:
            for sock in socks:
                sock.close()
        assert metric(text, STATUS_499) == len(socks)
        assert metric(text, "num_tracked_reqs") == 0
        assert _peak_rss_mb(http) < MAX_PEAK_RSS_MB
        ok = httpx.post(srv.url + "/v1/chat/completions", timeout=60,
                        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                              "max_tokens": 8})
        assert ok.status_code == 200


def test_readers_that_keep_up_are_not_cut_under_all_legacy():
    """A reader that takes its outputs is never cut, even with a bound below one output (copy-form
    outputs grow to ~22 KB at 2,000 tokens; the bound is 4 KiB): outputs are queued by the same
    event loop, so they only ever land while such a reader waits for them."""
    # NOTE: the default profile sleeps >= 6 ms a decode step, so a reader keeps up on any
    # machine; with the zero profile a starved reader on a busy machine can fall behind.
    num_tokens, finals = 2_000, []

    def read(client: openai.OpenAI) -> None:
        stream = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=num_tokens,
            stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
        finish, usage = None, None
        for chunk in stream:
            finish = next((c.finish_reason for c in chunk.choices if c.finish_reason), finish)
            usage = chunk.usage or usage
        finals.append((finish, usage.completion_tokens))

    with ServerProcess("--all-legacy", "--max-queued-output-bytes", "4096") as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", timeout=300, max_retries=0)
        readers = [threading.Thread(target=read, args=(client,)) for _ in range(3)]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join()
        text = httpx.get(srv.url + "/metrics", timeout=60).text
    assert finals == [("length", num_tokens)] * 3
    assert metric(text, STATUS_499) == 0
