"""loadgen against the reference server: every request carries the server's timing, both transports."""

from __future__ import annotations

import pytest

from loadgen.plan.config import RunConfig
from loadgen.plan.datasets import DatasetConfig
from loadgen.run.runner import run
from reference_impl.subprocess_server import ServerProcess

SMALL = DatasetConfig(random_input_len=16, random_output_len=8, random_range_ratio=1.0)


@pytest.fixture(scope="module")
def url():
    srv = ServerProcess().wait_ready()  # default sim profile: every span takes real time
    yield srv.url
    srv.stop()


@pytest.mark.parametrize("transport", ["lean", "httpx"])
@pytest.mark.parametrize("stream", [True, False])
def test_every_request_has_server_timing_and_the_ttft_split(url, transport, stream):
    cfg = RunConfig(base_url=url, concurrency=4, num_prompts=8, transport=transport, stream=stream)
    result = run(cfg, SMALL)
    records = [r for r in result.records if r.ok]
    assert len(records) == 8
    for r in records:
        assert r.server_prefill_steps is not None and r.server_prefill_steps >= 1
        assert min(r.server_queue_ms, r.server_prefill_ms, r.server_decode_ms,
                   r.server_arrival_to_queue_ms) >= 0
        ttft_ms = (r.first_token_ns - r.start_ns) / 1e6
        # the server's arrival → first output lies inside the client's send → first token
        assert 0 <= r.server_first_output_ms <= ttft_ms
    split = result.summary["ttft_split"]
    assert split["requests"] == 8
    assert set(split["mean_ms"]) == {"client_network", "queue", "prefill", "decode", "server_other"}
    assert split["mean_ms"]["client_network"] >= 0 and split["mean_ms"]["prefill"] > 0
    assert (split["mean_ms"]["decode"] > 0) is (not stream)
    parts = sum(split["mean_ms"].values())
    mean_ttft = sum((r.first_token_ns - r.start_ns) / 1e6 for r in records) / len(records)
    assert parts == pytest.approx(mean_ttft, rel=1e-6)


def test_no_split_without_server_timing(url):
    cfg = RunConfig(base_url=url, concurrency=2, num_prompts=2, server_timing=False)
    result = run(cfg, SMALL)
    assert all(r.ok and r.server_first_output_ms is None for r in result.records)
    assert "ttft_split" not in result.summary
