"""Issue 32's run-side knobs against real servers: request cancellation (the reference server frees
what the client cancelled), several --base-url, a --model mix, and the prefill-concurrency cap
(the scripted server counts the streams still waiting for their first token)."""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace

import httpx
import pytest

from loadgen.cli import main
from loadgen.plan.config import DatasetConfig, RunConfig
from loadgen.plan.mix import picks, weighted_round_robin
from loadgen.run.runner import run
from reference_impl.subprocess_server import ServerProcess

SMALL = DatasetConfig(random_input_len=16, random_output_len=8, random_range_ratio=1.0, use_server_tokenize=False)
RUNNING = re.compile(r"^reference:num_running_reqs(?:\{[^}]*\})? (\S+)$", re.M)
TRACKED = re.compile(r"^reference:num_tracked_reqs(?:\{[^}]*\})? (\S+)$", re.M)


def _gauge(url: str, pattern: re.Pattern) -> float:
    return sum(float(v) for v in pattern.findall(httpx.get(url + "/metrics", timeout=30).text))


def _wait_gauge_zero(url: str, pattern: re.Pattern, timeout_s: float = 10.0) -> float:
    """The gauge once it reads 0, or its last reading after `timeout_s` (the server's stats lag a
    step; 10 s is far below the 36 s a 4096-token request takes uncancelled, measured here)."""
    deadline = time.monotonic() + timeout_s
    while (value := _gauge(url, pattern)) != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    return value


@pytest.mark.parametrize("transport", ["lean", "httpx"])
def test_cancelled_requests_are_counted_apart_and_the_reference_server_frees_them(transport):
    # NOTE: 4096 tokens keep the sim engine (h100-llama-8b profile, real time) busy for tens of
    # seconds per request, so a running count back at 0 soon after the run means the server aborted them.
    srv = ServerProcess().wait_ready()
    try:
        assert _gauge(srv.url, RUNNING) == 0
        long = DatasetConfig(random_input_len=16, random_output_len=4096, random_range_ratio=1.0)
        cfg = RunConfig(base_url=srv.url, concurrency=4, num_prompts=8, ignore_eos=True, transport=transport,
                        request_cancellation_rate=100, request_cancellation_delay_s=0.5, timeout_s=300,
                        server_metrics_interval_s=0.2)
        result = run(cfg, long)
        s = result.summary
        assert (s["completed"], s["failed"], s["cancelled"]) == (0, 0, 8)
        assert s["errors"] == {} and s["median_ttft_ms"] is None  # not failed, not in the percentiles
        assert all(r.is_cancelled and r.end_ns - r.start_ns >= 0.49e9 for r in result.records), \
            [(r.error_class, r.end_ns - r.start_ns) for r in result.records]
        assert max(result.server_metrics["series"]["running"]) >= 1  # the server did run them
        assert _wait_gauge_zero(srv.url, RUNNING) == 0
        assert _wait_gauge_zero(srv.url, TRACKED) == 0
    finally:
        srv.stop()


def test_smooth_weighted_round_robin_keeps_the_shares_in_every_window():
    seq = weighted_round_robin([1.0, 3.0], 40)
    assert seq[:4] == [1, 0, 1, 1]
    assert all(seq[i:i + 4].count(0) == 1 for i in range(0, 40, 4))
    assert weighted_round_robin([1.0, 1.0], 5) == [0, 1, 0, 1, 0]


def test_picks_are_seeded_and_follow_the_rate_and_weights():
    cfg = RunConfig(concurrency=1, num_prompts=1, request_cancellation_rate=30, request_cancellation_delay_s=0.2,
                    models=(("a", 1.0), ("b", 3.0)), model="a")
    chosen = picks(cfg, 4000)
    assert chosen == picks(cfg, 4000) and chosen != picks(replace(cfg, seed=2), 4000)
    delays = {p.cancel_after_s for p in chosen}
    assert delays == {None, 0.2}
    assert abs(sum(p.cancel_after_s is not None for p in chosen) / 4000 - 0.30) < 0.03
    assert abs(sum(p.model_index for p in chosen) / 4000 - 0.75) < 0.03
    assert all(p.cancel_after_s is None for p in picks(replace(cfg, request_cancellation_rate=0), 500))
    assert {p.url_index for p in chosen} == {0}


@pytest.mark.parametrize("bad", [{"request_cancellation_rate": 101}, {"request_cancellation_delay_s": -1},
                                 {"prefill_concurrency": 1, "workers": 2},
                                 {"models": (("a", 1.0), ("b", 0.0)), "model": "a"}])
def test_run_side_knobs_are_checked(bad):
    with pytest.raises(ValueError):
        RunConfig(concurrency=2, num_prompts=1, **bad)


def _flags(*extra: str) -> list[str]:
    return ["--random-input-len", "8", "--random-output-len", "6", "--no-server-tokenize", "--no-server-metrics",
            *extra]


def test_two_weighted_urls_a_model_mix_and_cancellations_each_have_their_figures(start_server, tmp_path, capsys):
    fast, slow = (start_server("--ttft-ms", ttft, "--gap-ms", "5", "--log-requests") for ttft in ("5", "400"))
    out = tmp_path / "r.json"
    rc = main(_flags("--base-url", f"{fast.base_url}=3", "--base-url", slow.base_url, "--model", "base",
                     "--model", "lora-a=1", "--concurrency", "4", "--num-prompts", "40",
                     "--request-cancellation-rate", "25", "--request-cancellation-delay", "0.2",
                     "--output", str(out)))
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["completed"] + data["cancelled"] == 40 and data["failed"] == 0 and data["cancelled"] > 0
    per_url = {row["url"]: row for row in data["per_url"]}
    assert per_url[fast.base_url]["requests"] == 30 and per_url[slow.base_url]["requests"] == 10
    for srv in (fast, slow):  # each server saw exactly the requests counted for it
        assert len(httpx.get(srv.base_url + "/requests", timeout=10).json()) == per_url[srv.base_url]["requests"]
    # the slow server's TTFT is 400 ms: each of its requests chosen for cancellation was cancelled
    assert per_url[slow.base_url]["p50_ttft_ms"] >= 400 > per_url[fast.base_url]["p99_ttft_ms"]
    sent = [r["body"]["model"] for srv in (fast, slow) for r in httpx.get(srv.base_url + "/requests").json()]
    per_model = {row["model"]: row for row in data["per_model"]}
    assert {m: sent.count(m) for m in ("base", "lora-a")} == {m: per_model[m]["requests"] for m in per_model}
    assert sum(row["cancelled"] for row in data["per_url"]) == data["cancelled"]
    text = capsys.readouterr().out
    assert "Cancelled requests" in text and f"url {slow.base_url}" in text and "model lora-a" in text
    page = tmp_path / "r.html"
    assert main(["report", str(out), "--output", str(page)]) == 0
    html = page.read_text()
    assert "per server (--base-url)" in html and "per model (--model)" in html and "lora-a" in html


def test_one_url_and_one_model_keep_the_json_as_it_was(start_server, tmp_path):
    server = start_server("--ttft-ms", "2", "--gap-ms", "1")
    out = tmp_path / "r.json"
    assert main(_flags("--base-url", server.base_url, "--model", "m", "--concurrency", "2", "--num-prompts", "4",
                       "--quiet", "--output", str(out))) == 0
    data = json.loads(out.read_text())
    assert "per_url" not in data and "per_model" not in data and data["model_id"] == "m"
    assert data["config"]["base_urls"] == [] and data["config"]["models"] == [] and data["cancelled"] == 0


@pytest.mark.parametrize("transport", ["lean", "httpx"])
@pytest.mark.parametrize("workers", [1, 2])
def test_prefill_concurrency_caps_the_requests_waiting_for_their_first_token(start_server, transport, workers):
    def max_awaiting(*cap: str) -> int:
        server = start_server("--ttft-ms", "150", "--gap-ms", "5", "--num-tokens", "20")
        assert main(_flags("--base-url", server.base_url, "--concurrency", "8", "--num-prompts", "24", "--quiet",
                           "--workers", str(workers), "--transport", transport, *cap)) == 0
        stats = server.stats()
        assert stats["num_requests"] == 24
        return stats["max_awaiting_first_token"]

    assert max_awaiting("--prefill-concurrency", "2") <= 2
    assert max_awaiting() > 2  # without the cap the same load has more at once: the check can fail


def test_several_urls_leave_out_server_vs_client_which_would_mix_one_server_with_all(start_server, tmp_path):
    first, second = (start_server("--ttft-ms", "2", "--gap-ms", "1", "--metrics", "vllm") for _ in range(2))
    out = tmp_path / "r.json"

    def versus(*urls: str) -> dict | None:
        flags = [f for url in urls for f in ("--base-url", url)]
        assert main(["--random-input-len", "8", "--random-output-len", "6", "--no-server-tokenize", "--quiet",
                     "--concurrency", "2", "--num-prompts", "8", "--output", str(out), *flags]) == 0
        data = json.loads(out.read_text())
        assert data["server_metrics"]["status"] == "ok"
        return data["summary"].get("server_vs_client")

    assert versus(first.base_url) is not None
    assert versus(first.base_url, second.base_url) is None


def test_a_weight_is_a_number_after_the_last_equals_sign():
    import argparse

    from loadgen import argtypes as at

    model = at.weighted(str)
    assert model("base") == ("base", 1.0) and model("lora=2.5") == ("lora", 2.5)
    assert model("a=b") == ("a=b", 1.0)
    assert at.weighted(at.base_url)("http://h:8001/=3") == ("http://h:8001", 3.0)
    for bad in ("lora=0", "lora=-1", "lora=inf", "lora=nan"):
        with pytest.raises(argparse.ArgumentTypeError):
            model(bad)


def test_repeated_flags_make_the_mix_and_one_stays_plain():
    from loadgen.flags import build_parser, config_from_args

    def cfg(*argv: str) -> RunConfig:
        return config_from_args(build_parser().parse_args(["--num-prompts", "4", "--concurrency", "2", *argv]))[0]

    mixed = cfg("--base-url", "http://a:1=2", "--base-url", "http://b:2", "--model", "m", "--model", "lora=3")
    assert mixed.base_url == "http://a:1" and mixed.base_urls == (("http://a:1", 2.0), ("http://b:2", 1.0))
    assert mixed.model == "m" and mixed.models == (("m", 1.0), ("lora", 3.0))
    plain = cfg("--base-url", "http://a:1", "--model", "m")
    assert (plain.base_url, plain.base_urls, plain.model, plain.models) == ("http://a:1", (), "m", ())
