"""The scripted server's `--spread F` (loadgen/selftest/scripted_stream.py): each stream's TTFT and
gaps times a seeded factor from [1, 1 + F], so a test's requests vary as a real server's do."""

from __future__ import annotations

import random

import httpx
import pytest

from loadgen.selftest.scripted_stream import ServerScript


def _stream(base_url: str) -> None:
    body = {"model": "m", "prompt": "hi", "max_tokens": 3, "stream": True}
    with httpx.stream("POST", base_url + "/v1/completions", json=body, timeout=30) as r:
        assert r.status_code == 200 and b"[DONE]" in r.read()


def test_each_stream_waits_at_least_its_seeded_share_of_the_spread(start_server):
    server = start_server("--ttft-ms", "100", "--gap-ms", "1", "--spread", "1.0")
    for _ in range(8):
        _stream(server.base_url)  # NOTE: one at a time: the n-th stream draws the n-th factor
    rng = random.Random(0)  # the server's seed
    scales = [1.0 + rng.random() for _ in range(8)]
    ttfts = server.stats()["ttft_ms"]
    # a timer fires at its time or later, never before: each TTFT is at least its scaled delay
    assert len(ttfts) == 8 and all(t >= 100 * s - 0.5 for t, s in zip(ttfts, scales, strict=True)), (ttfts, scales)
    # without the spread every TTFT would be about 100 ms: the largest bound is far above that
    assert max(scales) > 1.8, scales


def test_a_negative_spread_is_refused():
    with pytest.raises(ValueError, match="spread must be >= 0"):
        ServerScript(spread=-0.1)
