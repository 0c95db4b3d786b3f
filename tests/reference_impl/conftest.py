"""Real reference servers on 127.0.0.1 for end-to-end tests, started and stopped by pid."""

from __future__ import annotations

import json

import httpx
import pytest

from loadgen.measure.prometheus import parse
from reference_impl.subprocess_server import ServerProcess, start_servers

__all__ = ["MODEL", "ServerProcess", "metric", "sse_events", "start_servers", "stream_chunks"]

MODEL = "reference-sim"


@pytest.fixture(scope="session")
def server():
    """One optimized server with a fast latency profile, shared by tests that only need one."""
    srv = ServerProcess("--sim-profile", "zero").wait_ready()
    yield srv
    srv.stop()


def metric(text: str, sample: str, default: float | None = 0.0) -> float:
    """One sample of the reference server's ``/metrics`` text, written as it is exposed without
    the ``reference:`` prefix, e.g. ``'num_requests_total{endpoint="chat",status="499"}'``;
    ``default`` when absent (None: absence fails the test)."""
    name, _, labels = sample.partition("{")
    pairs = dict(item.split("=", 1) for item in labels.rstrip("}").split(",") if item)
    value = parse(text).value("reference:" + name, float("nan"), **{k: v.strip('"') for k, v in pairs.items()})
    if value != value and default is None:
        raise AssertionError(f"no sample {sample!r} in /metrics")
    return default if value != value and default is not None else value


def sse_events(response: httpx.Response) -> list[str]:
    """The ``data:`` payloads of an SSE response, in order."""
    events = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            events.append(line[len("data: "):])
        elif line:
            raise AssertionError(f"unexpected SSE line {line!r}")
    return events


def stream_chunks(url: str, path: str, body: dict) -> tuple[list[dict], str]:
    """POST a streaming request; the parsed chunks and the last event (should be [DONE])."""
    with httpx.stream("POST", url + path, json={**body, "stream": True}, timeout=60) as response:
        assert response.status_code == 200, response.read()
        events = sse_events(response)
    return [json.loads(e) for e in events[:-1]], events[-1]
