"""Server metrics: vLLM's, SGLang's and the reference server's names, and the scrape during a real run
against the scripted server, whose /metrics series are known."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from loadgen.cli import main
from loadgen.measure.prometheus import SampleLines, parse
from loadgen.measure.server_metrics import (
    ALL_NAMES,
    dialect,
    read_histograms,
    read_series,
    server_vs_client,
    wanted_names,
)
from loadgen.plan.config import RunConfig
from loadgen.selftest.scripted_stream import (
    SCRIPTED_KV_USAGE,
    SCRIPTED_PREEMPTIONS,
    SCRIPTED_TIMING,
    SCRIPTED_WAITING,
)
from reference_impl.messages import SchedulerStats
from reference_impl.server.metrics import ServerMetrics

# Written from vLLM's documented names (docs.vllm.ai, "Production Metrics"): two engines (DP ranks).
VLLM = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 7.0
vllm:num_requests_running{engine="1",model_name="m"} 5.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:num_requests_waiting{engine="1",model_name="m"} 1.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="0",model_name="m"} 4.0
vllm:num_preemptions_total{engine="1",model_name="m"} 1.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 1000.0
vllm:generation_tokens_total{engine="1",model_name="m"} 600.0
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="m"} 40.0
vllm:iteration_tokens_total_count{engine="0",model_name="m"} 40.0
vllm:iteration_tokens_total_sum{engine="0",model_name="m"} 1000.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 10.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 10.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.5
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 990.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 990.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} 9.9
"""
# vLLM V0 spellings: gpu_cache_usage_perc, time_per_output_token_seconds.
VLLM_V0 = """# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.75
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_count{model_name="m"} 4.0
vllm:time_per_output_token_seconds_sum{model_name="m"} 0.2
"""
# Written from SGLang's documented names (docs.sglang.io, "Production Metrics").
SGLANG = """# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m"} 12.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m"} 30.0
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m"} 0.28
# TYPE sglang:num_retracted_reqs gauge
sglang:num_retracted_reqs{model_name="m"} 1.0
# TYPE sglang:num_retracted_requests counter
sglang:num_retracted_requests_total{model_name="m"} 48.0
# TYPE sglang:generation_tokens counter
sglang:generation_tokens_total{model_name="m"} 7.557572e+06
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 100.0
sglang:time_to_first_token_seconds_sum{model_name="m"} 20.0
sglang:time_to_first_token_seconds_count{model_name="m"} 100.0
# TYPE sglang:inter_token_latency_seconds histogram
sglang:inter_token_latency_seconds_sum{model_name="m"} 3.0
sglang:inter_token_latency_seconds_count{model_name="m"} 300.0
"""


def test_vllm_names_sum_over_engines_and_average_kv_use():
    m = parse(VLLM)
    assert dialect(m) == "vllm"
    s = read_series(m, "vllm")
    assert (s["running"], s["waiting"], s["preemptions"], s["generation_tokens"]) == (12, 3, 5, 1600)
    assert s["kv_usage"] == pytest.approx(0.375) and s["engine_steps"] == 40
    assert s["prefill_steps"] is None and s["decode_steps"] is None
    h = read_histograms(m, "vllm")
    assert h["ttft"] == ("vllm:time_to_first_token_seconds", 0.5, 10)
    assert h["itl"] == ("vllm:inter_token_latency_seconds", pytest.approx(9.9), 990)


def test_vllm_v0_spellings():
    m = parse(VLLM_V0)
    assert dialect(m) == "vllm"
    assert read_series(m, "vllm")["kv_usage"] == 0.75
    assert read_histograms(m, "vllm")["itl"] == ("vllm:time_per_output_token_seconds", 0.2, 4)


def test_sglang_names_and_retractions_from_the_counter_not_the_gauge():
    m = parse(SGLANG)
    assert dialect(m) == "sglang"
    s = read_series(m, "sglang")
    assert (s["running"], s["waiting"], s["kv_usage"], s["preemptions"]) == (12, 30, 0.28, 48)
    assert s["generation_tokens"] == 7_557_572
    assert read_histograms(m, "sglang")["ttft"] == ("sglang:time_to_first_token_seconds", 20.0, 100)


def test_the_reference_servers_own_exposition():
    metrics = ServerMetrics()
    metrics.generation_tokens.inc(42)
    stats = SchedulerStats(request_id=0, num_running_reqs=3, num_waiting_reqs=9, num_used_tokens=50,
                           max_total_tokens=200, num_prefill_steps=4, num_decode_steps=11,
                           num_generated_tokens=42, prefill_delayer_outcomes={})
    text = metrics.render(stats)
    m = parse(text.decode())
    assert dialect(m) == "reference"
    s = read_series(m, "reference")
    assert (s["running"], s["waiting"], s["kv_usage"], s["generation_tokens"]) == (3, 9, 0.25, 42)
    assert (s["prefill_steps"], s["decode_steps"], s["preemptions"]) == (4, 11, None)


def test_unknown_metrics_have_no_dialect():
    assert dialect(parse("# TYPE process_cpu_seconds counter\nprocess_cpu_seconds_total 3.0\n")) is None


def test_server_vs_client_notes_only_past_the_margin():
    block = {"dialect": "vllm", "run": {"mean_ttft_ms": 50.0, "mean_itl_ms": 10.1, "generation_tokens": 100}}
    summary = {"mean_ttft_ms": 60.0, "mean_tpot_ms": 10.0, "mean_itl_ms": 99.0, "total_output_tokens": 100}
    out = server_vs_client(block, summary)
    assert [r["name"] for r in out["rows"]] == ["mean TTFT (ms)", "mean ITL, server / TPOT, client (ms)",
                                                "output tokens"]
    assert len(out["notes"]) == 1 and out["notes"][0].startswith("mean TTFT (ms): server 50.00 vs client 60.00")


def _run(url: str, tmp_path, *extra: str) -> dict:
    out = tmp_path / "r.json"
    rc = main(["--base-url", url, "--random-input-len", "8", "--random-output-len", "8", "--quiet",
               "--concurrency", "4", "--num-prompts", "12", "--server-metrics-interval", "0.2",
               "--timeline-interval", "100", "--output", str(out), *extra])
    assert rc == 0
    return json.loads(out.read_text())


@pytest.mark.parametrize("names", ["vllm", "sglang"])
def test_scrape_during_a_run_reads_the_known_series(start_server, tmp_path, names):
    server = start_server("--ttft-ms", "20", "--gap-ms", "30", "--num-tokens", "8", "--metrics", names)
    data = _run(server.base_url, tmp_path)
    sm = data["server_metrics"]
    assert (sm["status"], sm["dialect"], sm["failed_scrapes"]) == ("ok", names, 0)
    series = sm["series"]
    assert sm["scrapes"] == len(series["t_s"]) >= 3
    assert set(series["waiting"]) == {SCRIPTED_WAITING} and set(series["kv_usage"]) == {SCRIPTED_KV_USAGE}
    assert set(series["preemptions"]) == {SCRIPTED_PREEMPTIONS}
    assert series["running"][0] == 0 and series["running"][-1] == 0 and max(series["running"]) <= 4
    assert series["generation_tokens"][0] == 0 and series["generation_tokens"][-1] == 96
    assert series["t_s"] == sorted(series["t_s"]) and series["t_s"][0] < 0 < series["t_s"][-1]
    # Over the run: the server's own counts are the truth, exactly.
    run = sm["run"]
    assert (run["generation_tokens"], run["preemptions"], run["ttft_count"], run["itl_count"]) == (96, 0, 12, 84)
    truth = server.stats()
    assert run["mean_ttft_ms"] == pytest.approx(sum(truth["ttft_ms"]) / 12, rel=1e-6)
    assert run["mean_itl_ms"] == pytest.approx(truth["mean_gap_ms"], rel=1e-6)
    rows = {r["name"]: r for r in data["summary"]["server_vs_client"]["rows"]}
    assert rows["output tokens"]["ratio"] == 1.0


def test_warm_up_requests_are_left_out_of_the_servers_window(start_server, tmp_path):
    # Before: the baseline was scraped before the warm-up, so the server counted 4 more requests
    # (128 vs 96 tokens) and server_vs_client blamed "warm-up and other clients".
    server = start_server("--ttft-ms", "5", "--gap-ms", "5", "--num-tokens", "8", "--metrics", "vllm")
    data = _run(server.base_url, tmp_path, "--warmup", "4")
    sm = data["server_metrics"]
    assert (sm["run"]["generation_tokens"], sm["run"]["ttft_count"]) == (96, 12)
    assert (sm["window"], sm["failed_scrapes"]) == ("run", 0)
    rows = {r["name"]: r for r in data["summary"]["server_vs_client"]["rows"]}
    assert rows["output tokens"]["ratio"] == 1.0
    # NOTE: only the token count is the warm-up's; a 5 ms TTFT's note depends on the machine's load
    assert not [n for n in data["summary"]["server_vs_client"]["notes"] if n.startswith("output tokens")]


def test_the_timeline_counts_every_request_token_and_gap(start_server, tmp_path):
    server = start_server("--ttft-ms", "5", "--gap-ms", "5", "--num-tokens", "8", "--faults", "ok,ok,http_500")
    data = _run(server.base_url, tmp_path, "--max-error-rate", "0.5")
    (bucket,) = data["timeline"]["buckets"]
    assert (bucket["started"], bucket["finished"], bucket["errors"]) == (12, 12, 4)
    assert bucket["output_tokens"] == 8 * 8 and bucket["ttft_ms"]["n"] == 8 and bucket["itl_ms"]["n"] == 8 * 7
    assert data["cdf"]["ttft_ms"][0][0] == 0 and data["cdf"]["ttft_ms"][-1] == [100.0, data["max_ttft_ms"]]


def test_a_target_without_metrics_gets_one_line_and_the_run_goes_on(start_server, tmp_path):
    server = start_server("--ttft-ms", "2", "--gap-ms", "1")
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "loadgen", "--base-url", server.base_url, "--quiet",
                           "--concurrency", "2", "--num-prompts", "4", "--random-input-len", "8",
                           "--random-output-len", "4", "--output", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "server metrics" in ln]
    assert lines == ["loadgen: server metrics unavailable: HTTP 404; the run goes on without them "
                     "(--no-server-metrics silences this)"]
    data = json.loads(out.read_text())
    assert data["completed"] == 4 and data["server_metrics"]["status"] == "unavailable: HTTP 404"


def test_no_server_metrics_scrapes_nothing(start_server, tmp_path):
    server = start_server("--ttft-ms", "2", "--gap-ms", "1", "--metrics", "vllm")
    data = _run(server.base_url, tmp_path, "--no-server-metrics")
    assert data["server_metrics"] == {"status": "off"} and "server_vs_client" not in data["summary"]


def test_the_ttft_split_from_scripted_server_timing(start_server, tmp_path):
    server = start_server("--ttft-ms", "25", "--gap-ms", "5", "--num-tokens", "4")
    out = tmp_path / "r.json"
    assert main(["--base-url", server.base_url, "--quiet", "--concurrency", "3", "--num-prompts", "9",
                 "--random-input-len", "8", "--random-output-len", "4", "--output", str(out),
                 "--records", str(tmp_path / "r.jsonl")]) == 0
    split = json.loads(out.read_text())["summary"]["ttft_split"]
    rows = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    truth_ms = server.stats()["ttft_ms"]
    assert split["requests"] == 9
    # The server's spans are the scripted ones, exactly; its first output is its true TTFT.
    for part, key in (("queue", "queue_ms"), ("prefill", "prefill_ms")):
        assert split["mean_ms"][part] == split["p99_ms"][part] == SCRIPTED_TIMING[key]
    assert split["mean_ms"]["server_other"] == pytest.approx(sum(truth_ms) / 9 - 5.0, abs=1e-9)
    assert split["mean_ms"]["decode"] == 0.0
    # client/network is what the client saw beyond the server's first output, request by request.
    client = [r["ttft_ms"] - r["server_first_output_ms"] for r in rows]
    assert split["mean_ms"]["client_network"] == pytest.approx(sum(client) / 9, abs=1e-9)
    assert all(c > 0 for c in client)


def _only(text: str, names: frozenset[str], piece_len: int) -> str:
    lines = SampleLines(names)
    data = text.encode()
    for i in range(0, len(data), piece_len):
        lines.feed(data[i:i + piece_len])
    return lines.text()


@pytest.mark.parametrize("piece_len", [1, 7, 1 << 20])
@pytest.mark.parametrize("text, kind", [(VLLM, "vllm"), (VLLM_V0, "vllm"), (SGLANG, "sglang")])
def test_reading_only_the_wanted_lines_reads_the_same(text, kind, piece_len):
    full = parse(text)
    for names in (wanted_names(kind), ALL_NAMES):
        few = parse(_only(text, names, piece_len))
        assert len(few) <= len(full) and dialect(few) == kind
        assert read_series(few, kind) == read_series(full, kind)
        assert read_histograms(few, kind) == read_histograms(full, kind)


def _loadgen(url: str, out, *extra: str) -> list[str]:
    return [sys.executable, "-m", "loadgen", "--base-url", url, "--quiet", "--model", "hostile-model",
            "--no-server-tokenize", "--num-prompts", "6", "--request-rate", "4", "--random-input-len", "8",
            "--random-output-len", "4", "--output", str(out), *extra]


def _run_against(url: str, tmp_path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "r.json"
    proc = subprocess.run(_loadgen(url, out, *extra), capture_output=True, text=True, timeout=180)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc, json.loads(out.read_text())


# Before: an endless or 1 GiB body grew to 4 GB, a dripping head held the run before it started,
# 10^6 series cost 1-2 GB and 13-16 s.
@pytest.mark.parametrize("mode, why", [
    ("endless", "body past 16 MiB"), ("huge", "body past 16 MiB"), ("many_other", "body past 16 MiB"),
    ("many_read", "more than 10,000 samples of the names read"), ("drip_head", "no whole answer within 5 s"),
])
def test_a_hostile_baseline_scrape_costs_one_line_and_the_run_goes_on(start_hostile_metrics, tmp_path, mode, why):
    _, url = start_hostile_metrics("--metrics", mode)
    proc, data = _run_against(url, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [ln for ln in proc.stderr.splitlines() if "server metrics" in ln] == [
        f"loadgen: server metrics unavailable: {why}; the run goes on without them "
        "(--no-server-metrics silences this)"]
    assert data["completed"] == 6 and data["server_metrics"]["status"] == f"unavailable: {why}"


@pytest.mark.parametrize("mode, why", [("endless", "body past 16 MiB"), ("drip", "no whole answer within 2 s")])
def test_a_target_turning_hostile_after_the_baseline_costs_failed_scrapes_not_the_run(
        start_hostile_metrics, tmp_path, mode, why):
    _, url = start_hostile_metrics("--metrics", mode, "--from-scrape", "2")
    proc, data = _run_against(url, tmp_path, "--server-metrics-interval", "0.2")
    assert proc.returncode == 0, proc.stderr
    sm = data["server_metrics"]
    assert data["completed"] == 6 and not data["interrupted"]
    assert (sm["status"], sm["scrapes"], sm["last_failure"]) == ("ok", 1, why)
    assert sm["failed_scrapes"] >= 1 and sm["series"]["waiting"] == [2.0]


def test_a_failed_scrape_after_the_warm_up_keeps_the_first_baseline_and_says_so(start_hostile_metrics, tmp_path):
    _, url = start_hostile_metrics("--metrics", "endless", "--from-scrape", "2")
    proc, data = _run_against(url, tmp_path, "--warmup", "2")
    assert proc.returncode == 0, proc.stderr
    sm = data["server_metrics"]
    assert (sm["status"], sm["last_failure"]) == ("ok", "body past 16 MiB") and sm["failed_scrapes"] >= 1
    assert sm["window"] == "run and warm-up (the scrape after the warm-up failed)"


def _interrupt_at_scrape(peer, loadgen: subprocess.Popen, n: int) -> None:
    """Ctrl-C (SIGINT) to loadgen once the peer has received its `n`-th scrape."""
    for line in peer.stdout:
        if line.strip() == f"scrape {n}":
            loadgen.send_signal(signal.SIGINT)
            return
    raise AssertionError(f"the peer ended before scrape {n}")


def test_ctrl_c_in_the_last_scrape_keeps_the_finished_load(start_hostile_metrics, popen_ctrl_c, tmp_path):
    # The load ends before the thread's first scrape (60 s): scrape 2 is stop()'s, and it drips.
    peer, url = start_hostile_metrics("--metrics", "drip", "--from-scrape", "2")
    out = tmp_path / "r.json"
    loadgen = popen_ctrl_c(_loadgen(url, out, "--server-metrics-interval", "60"),
                           stderr=subprocess.PIPE, text=True)
    _interrupt_at_scrape(peer, loadgen, 2)
    _, stderr = loadgen.communicate(timeout=120)
    assert loadgen.returncode == 130 and "Traceback" not in stderr, stderr
    data = json.loads(out.read_text())
    assert data["completed"] == 6 and data["interrupted"]
    assert (data["server_metrics"]["status"], data["server_metrics"]["scrapes"]) == ("ok", 1)


def test_ctrl_c_in_the_baseline_scrape_is_one_line_and_exit_130(start_hostile_metrics, popen_ctrl_c, tmp_path):
    peer, url = start_hostile_metrics("--metrics", "drip")
    out = tmp_path / "r.json"
    loadgen = popen_ctrl_c(_loadgen(url, out), stderr=subprocess.PIPE, text=True)
    _interrupt_at_scrape(peer, loadgen, 1)
    _, stderr = loadgen.communicate(timeout=120)
    assert loadgen.returncode == 130
    assert stderr.strip().splitlines() == [
        "loadgen: interrupted (Ctrl-C) before the results were ready; nothing was written"]
    assert not out.exists()


def test_minus_inf_gauges_are_saved_as_minus_inf(start_hostile_metrics, strict_json, tmp_path):
    _, url = start_hostile_metrics("--metrics", "neg_inf")
    proc, _ = _run_against(url, tmp_path, "--server-metrics-interval", "0.2")
    assert proc.returncode == 0, proc.stderr
    series = strict_json((tmp_path / "r.json").read_text())["server_metrics"]["series"]
    assert set(series["running"]) == set(series["waiting"]) == {"-inf"}


# Before: 1e300 passed and killed the scraping thread (OverflowError in its wait).
@pytest.mark.parametrize("interval", ["0", "0.01", "3601", "1e300", "inf", "nan", "abc"])
def test_the_scrape_interval_is_in_a_sane_range(interval, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--base-url", "http://127.0.0.1:9", "--num-prompts", "1", "--server-metrics-interval", interval])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--server-metrics-interval" in err, err


def test_a_run_config_refuses_an_interval_out_of_range_too():
    with pytest.raises(ValueError, match=r"in \[0.05, 3600\] s"):
        RunConfig(base_url="http://127.0.0.1:9", num_prompts=1, concurrency=1, server_metrics_interval_s=1e300)
