"""The AIPerf peer's own parts that run without AIPerf: the server's truth between two readings, and failures."""

from __future__ import annotations

import httpx
import pytest

from loadgen.selftest import aiperf_peer


def _stream(url: str, max_tokens: int) -> None:
    body = {"model": "scripted-model", "messages": [{"role": "user", "content": "hi"}],
            "max_completion_tokens": max_tokens, "stream": True}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=30) as r:
        r.read()


def test_truth_between_counts_only_the_requests_in_between(start_server):
    server = start_server("--ttft-ms", "5", "--gap-ms", "2")
    _stream(server.base_url, 3)  # before the first reading: not counted
    before = aiperf_peer.server_truth(server.base_url)
    for _ in range(4):
        _stream(server.base_url, 5)
    after = aiperf_peer.server_truth(server.base_url)
    truth = aiperf_peer._truth_between(before, after)
    assert truth["true_requests"] == 4
    assert truth["true_tokens"] == 20
    assert 5.0 <= truth["true_median_ttft_ms"] <= truth["true_p99_ttft_ms"]
    # NOTE: the mean of the 16 gaps in between, not of all 18: a gap may fall under 2 ms (tokens go out
    # on a fixed schedule, so a late first token shortens the next gap), so no bound on its value.
    assert after["gaps"] - before["gaps"] == 16 and before["gaps"] == 2
    assert truth["true_mean_gap_ms"] == pytest.approx((after["gap_sum_ms"] - before["gap_sum_ms"]) / 16)
    assert truth["true_mean_gap_ms"] > 0


def test_a_failing_client_gives_one_error_line_not_an_exception(start_server, tmp_path):
    server = start_server()
    fake = tmp_path / "aiperf"
    fake.write_text("#!/bin/sh\necho 'no such option' >&2\nexit 3\n")
    fake.chmod(0o755)
    row = aiperf_peer.run_aiperf(str(fake), server.base_url, 4, 1.0, 4, 0)
    assert row["returncode"] == 3
    assert row["error"].startswith("exit 3: ") and "no such option" in row["error"]


def test_only_loopback_targets():
    with pytest.raises(ValueError, match="127.0.0.1"):
        aiperf_peer.run_aiperf("aiperf", "http://10.0.0.1:8000", 4, 1.0, 4, 0)
