"""Valid but awkward responses from a real server on 127.0.0.1, with both transports: CRLF split
across reads, close-delimited bodies, and endless streams (cut at the per-response byte cap)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from loadgen.plan.config import RunConfig
from loadgen.plan.datasets import DatasetConfig
from loadgen.run.runner import run
from loadgen.run.transport import BODY_EXTENSION, LeanTransport, ResponseTooLarge

SMALL = DatasetConfig(random_input_len=8, random_output_len=6, random_range_ratio=1.0)
TRANSPORTS = ("lean", "httpx")


def _errors(summary: dict) -> dict:
    return {k: v["count"] for k, v in summary["errors"].items()}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("fault", ["split_crlf", "close_delimited"])
def test_valid_awkward_streams_all_succeed(start_server, transport, fault):
    server = start_server("--ttft-ms", "3", "--gap-ms", "3", "--num-tokens", "6", "--faults", fault)
    for backend in ("openai-chat", "openai-completions"):
        cfg = RunConfig(base_url=server.base_url, concurrency=4, num_prompts=8, transport=transport,
                        backend=backend, timeout_s=30.0)
        s = run(cfg, SMALL).summary
        assert _errors(s) == {} and s["completed"] == 8, (backend, s["errors"])
        assert s["total_output_tokens_client"] == 8 * 6


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_endless_stream_ends_at_the_byte_cap_not_the_timeout(start_server, transport):
    server = start_server("--ttft-ms", "1", "--faults", "endless,ok")
    cfg = RunConfig(base_url=server.base_url, concurrency=2, num_prompts=4, transport=transport,
                    timeout_s=120.0, max_response_bytes=2 << 20)
    result = run(cfg, SMALL)
    s = result.summary
    assert _errors(s) == {"too_large": 2} and s["completed"] == 2, s["errors"]
    assert "--max-response-bytes 2097152" in s["errors"]["too_large"]["example"]
    failed = [r for r in result.records if not r.ok]
    # NOTE: ended by the cap, so well inside the timeout whatever the machine's load.
    assert all((r.end_ns - r.start_ns) / 1e9 < cfg.timeout_s / 2 for r in failed)


def test_lean_transport_never_keeps_more_than_the_cap(start_server):
    server = start_server("--ttft-ms", "1", "--faults", "endless")
    cap = 1 << 20

    async def read() -> tuple[int, BaseException | None]:
        transport = LeanTransport(max_body_bytes=cap)
        async with httpx.AsyncClient(base_url=server.base_url, transport=transport) as client:
            req = client.build_request("POST", "/v1/completions", json={"stream": True, "prompt": "x"})
            response = await client.send(req, stream=True)
            body = response.extensions[BODY_EXTENSION]
            try:
                await body.complete()
            except ResponseTooLarge as exc:
                return body.num_bytes, exc
            return body.num_bytes, None

    kept, exc = asyncio.run(read())
    assert isinstance(exc, ResponseTooLarge)
    assert cap - 70_000 < kept <= cap
