"""Kernel receive stamps against a real server on 127.0.0.1: the true TTFT through a blocked event
loop, the loop fallback named, a reader that falls behind counted, and the busy-machine verdict
with a real CPU hog (no assertion on speed: the checks are on which clock a figure came from)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import httpx
import pytest
import uvloop

from loadgen.measure.records import RequestRecord
from loadgen.plan.config import RunConfig
from loadgen.plan.datasets import Prompt
from loadgen.run.client import Client, RawResponse, finish_record, request_body
from loadgen.run.transport import LeanTransport

BLOCK_S = 0.5
MS = 1_000_000


def _prompt() -> Prompt:
    return Prompt(prompt="hello", input_len=5, output_len=2, is_exact_input_len=False)


async def _send(client: Client, cfg: RunConfig, index: int, block_s: float = 0.0) -> RawResponse:
    raw = RawResponse(RequestRecord(index=index, worker=0, intended_ns=0, start_ns=0, end_ns=0))
    request = client.prepare(request_body(cfg, "scripted-model", _prompt()), index)
    task = asyncio.create_task(client.send(request, raw))
    if block_s:
        while raw.record.start_ns == 0:  # NOTE: the request is written once send has stamped its start
            await asyncio.sleep(0)
        time.sleep(block_s)  # the event loop is blocked while the first token arrives
    await task
    return raw


def test_a_blocked_event_loop_still_reports_the_true_ttft(start_server):
    # First token 20 ms after the request, the second 800 ms later: only the first arrives while the
    # loop is blocked for 500 ms, so its read holds it alone and its kernel stamp is exact.
    server = start_server("--ttft-ms", "20", "--gap-ms", "800", "--num-tokens", "2", "--truth-stamps")
    cfg = RunConfig(base_url=server.base_url, concurrency=1, num_prompts=1, request_id_prefix="k-")

    async def go() -> tuple[RawResponse, list[int], list[int]]:
        async with Client(cfg, 1) as client:
            await _send(client, cfg, 0)  # opens the connection
            raw = await _send(client, cfg, 1, BLOCK_S)
            return raw, list(raw.stamps), list(raw.reads.loop_stamps)

    raw, stamps, loop_stamps = uvloop.run(go())
    rec = finish_record(raw)
    written = httpx.get(server.base_url + "/truth", timeout=10).json()["k-1"]
    assert rec.ok and len(rec.chunk_ns) == 2 and len(written) == 2
    first = stamps.index(rec.first_token_ns)
    # The kernel stamp is the arrival (written + the loopback's microseconds; slack for a busy machine)
    assert abs(rec.first_token_ns - written[0]) < 100 * MS
    # ... while the loop got to that read only after the block.
    assert loop_stamps[first] - stamps[first] > (BLOCK_S - 0.2) * 1e9
    assert rec.ttft_uncertainty_ns == 0 and rec.num_coalesced_events == 0


def test_a_read_that_holds_two_events_says_so_and_bounds_them(start_server):
    # Both tokens arrive while the loop is blocked: one read holds them, stamped at the second.
    server = start_server("--ttft-ms", "20", "--gap-ms", "100", "--num-tokens", "2", "--truth-stamps")
    cfg = RunConfig(base_url=server.base_url, concurrency=1, num_prompts=1, request_id_prefix="c-")

    async def go() -> RawResponse:
        async with Client(cfg, 1) as client:
            await _send(client, cfg, 0)
            return await _send(client, cfg, 1, BLOCK_S)

    rec = finish_record(uvloop.run(go()))
    written = httpx.get(server.base_url + "/truth", timeout=10).json()["c-1"]
    assert rec.ok and rec.chunk_ns[0] == rec.chunk_ns[1]  # the coalescing rule
    assert rec.num_coalesced_events >= 1
    # The bound holds: the stamp lies at most its uncertainty after the first token's write.
    assert 0 <= rec.first_token_ns - written[0] <= rec.ttft_uncertainty_ns + MS


def test_a_reader_that_falls_behind_is_counted(start_server):
    server = start_server("--ttft-ms", "1", "--faults", "endless")

    async def go() -> LeanTransport:
        transport = LeanTransport(max_body_bytes=16 << 20)
        async with httpx.AsyncClient(base_url=server.base_url, transport=transport) as client:
            req = client.build_request("POST", "/v1/completions", json={"stream": True, "prompt": "x"})
            response = await client.send(req, stream=True)
            time.sleep(BLOCK_S)  # the server fills the socket while nobody reads
            with pytest.raises(httpx.TransportError):
                async for _ in response.aiter_raw():
                    pass
        return transport

    stats = uvloop.run(go()).read_stats
    assert stats.num_full_reads >= 1 and stats.num_window_full >= 1
    assert stats.max_queued_bytes >= 1 << 16


def _loadgen(url: str, tmp_path, *flags: str, cpu: int | None = None) -> dict:
    out = tmp_path / f"r{len(list(tmp_path.iterdir()))}.json"
    cmd = [sys.executable, "-m", "loadgen", "--base-url", url, "--random-input-len", "8",
           "--random-output-len", "16", "--random-range-ratio", "1", "--quiet", "--no-server-metrics",
           "--output", str(out), *flags]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(out.read_text())


def test_every_run_says_where_its_stamps_came_from(start_server, tmp_path):
    server = start_server("--ttft-ms", "5", "--gap-ms", "5")
    for flags, source in (((), "kernel"), (("--stamps", "loop"), "loop"), (("--transport", "httpx"), "loop")):
        data = _loadgen(server.base_url, tmp_path, "--concurrency", "4", "--num-prompts", "8", *flags)
        health = data["summary"]["client_health"]
        assert health["stamp_source"] == source, flags
        assert all(w["stamp_source"] == source for w in health["workers"])
        assert (health["client_delay"] is not None) == (source == "kernel")
        assert (health["ttft_exact_share"] is not None) == (source == "kernel")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 1, reason="needs a core to pin to")
def test_a_hog_on_the_client_core_is_named_as_a_busy_machine(start_server, tmp_path):
    cores = sorted(os.sched_getaffinity(0))
    server = start_server("--ttft-ms", "5", "--gap-ms", "0", "--num-tokens", "64", "--cpu", str(cores[-1]))
    hog = subprocess.Popen(["taskset", "-c", str(cores[0]), sys.executable, "-c", "while 1: pass"])
    try:
        data = _loadgen(server.base_url, tmp_path, "--concurrency", "64", "--duration", "3", "--workers", "1",
                        cpu=cores[0])
    finally:
        hog.kill()
        hog.wait()
    health = data["summary"]["client_health"]
    worker = health["workers"][0]
    # The worker shared its core with a process that never sleeps: it waited for it, and the
    # verdict says so (as its cause, or as a note when the stamps held).
    assert worker["run_wait_share"] >= 0.10 and worker["involuntary_switches"] > 0
    said = (health["client_bound_cause"] or "") + " ".join(health["client_health_notes"])
    assert "the machine is busy" in said and "waited for a CPU held by other processes" in said
