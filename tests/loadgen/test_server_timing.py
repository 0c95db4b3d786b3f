"""loadgen against the reference server: every request carries the server's timing, both transports;
and against a hostile peer whose timing values are out of range."""

from __future__ import annotations

import pytest

from loadgen.cli import main
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


def _hostile_run(url: str, tmp_path, strict_json, *extra: str) -> tuple[int, dict, list[dict]]:
    out, records = tmp_path / "r.json", tmp_path / "r.jsonl"
    rc = main(["--base-url", url, "--quiet", "--model", "hostile-model", "--no-server-tokenize",
               "--no-server-metrics", "--concurrency", "4", "--num-prompts", "16", "--random-input-len", "8",
               "--random-output-len", "4", "--output", str(out), "--records", str(records), *extra])
    return rc, strict_json(out.read_text()), [strict_json(line) for line in records.read_text().splitlines()]


# Before: desc="1e30" killed the worker ("completed 0, failed 0", exit 5); nan failed 15 of 16
# requests, inf 16 of 16. Both transports: the lean one once handed a request the head of the next
# request on its reused connection (no Server-Timing then, 4 runs in 27).
@pytest.mark.parametrize("transport", ["lean", "httpx"])
@pytest.mark.parametrize("steps", ["1e30", "nan", "inf"])
def test_hostile_server_timing_header_values_are_ignored_and_every_request_counts(start_hostile_metrics,
                                                                                 strict_json, tmp_path, steps,
                                                                                 transport):
    _, url = start_hostile_metrics("--server-timing", f'arrival_to_queue;dur=0.5, queue;dur=nan, prefill;dur=inf, '
                                                      f'first_output;dur=1e308, prefill_steps;desc="{steps}"')
    rc, data, rows = _hostile_run(url, tmp_path, strict_json, "--no-stream", "--transport", transport)
    assert rc == 0 and (data["completed"], data["failed"]) == (16, 0)
    assert {(r["server_arrival_to_queue_ms"], r["server_queue_ms"], r["server_prefill_ms"],
             r["server_first_output_ms"], r["server_prefill_steps"]) for r in rows} == {(0.5, None, None, None, None)}


# Before: the TTFT split of these spans (first output 1e308 after a queue of -1e308) was written
# as NaN, which strict JSON readers refuse.
def test_hostile_server_timing_comment_spans_never_make_nan_in_the_results(start_hostile_metrics, strict_json,
                                                                          tmp_path):
    _, url = start_hostile_metrics("--timing-comment", '{"queue_ms":-1e308,"prefill_ms":0,"first_output_ms":1e308,'
                                                       '"prefill_steps":3}')
    rc, data, rows = _hostile_run(url, tmp_path, strict_json)
    assert rc == 0 and (data["completed"], data["failed"]) == (16, 0)
    assert "ttft_split" not in data["summary"]
    assert {(r["server_queue_ms"], r["server_prefill_ms"], r["server_first_output_ms"], r["server_prefill_steps"])
            for r in rows} == {(None, 0.0, None, 3)}
