"""Server metrics from any server (issue 32): every series kept up to a cap, the well-known names of
vLLM, SGLang, TGI and dcgm-exporter mapped, and several `--server-metrics-url` in one run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from loadgen.cli import main
from loadgen.measure.all_series import AllSeries, series_key
from loadgen.measure.prometheus import Deadline, SampleLines, fetch, parse
from loadgen.measure.server_metrics import _deltas, dialect, read_series, wanted_names
from loadgen.measure.targets import energy_per_token, figure_lines
from loadgen.plan.config import DEFAULT_MAX_SERIES
from loadgen.selftest.hostile_metrics import NUM_WIDE

DCGM = (Path(__file__).parent / "fixtures" / "exporters" / "dcgm_exporter.txt").read_text()
#: dcgm-exporter's energy counters in the fixture (mJ, GPUs 0 and 1).
DCGM_ENERGY_MJ = (1204117263, 1199820447)

VLLM_CACHE_AND_SPEC = """\
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} %(queries)d
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} %(hits)d
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} %(draft)d
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} %(accepted)d
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2.0
"""

TGI = """\
# TYPE tgi_queue_size gauge
tgi_queue_size 3
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 5
# TYPE tgi_request_generated_tokens histogram
tgi_request_generated_tokens_bucket{le="10"} 2
tgi_request_generated_tokens_bucket{le="+Inf"} 7
tgi_request_generated_tokens_sum 640
tgi_request_generated_tokens_count 7
# TYPE tgi_request_mean_time_per_token_duration histogram
tgi_request_mean_time_per_token_duration_bucket{le="+Inf"} 7
tgi_request_mean_time_per_token_duration_sum 0.21
tgi_request_mean_time_per_token_duration_count 7
"""


def test_dcgm_exporters_text_maps_gpu_utilisation_memory_power_and_energy():
    m = parse(DCGM)
    assert dialect(m) == "dcgm"
    s = read_series(m, "dcgm")
    # utilisation is averaged over the GPUs; memory, power and energy are summed
    assert s["gpu_util"] == 40 and s["memory_used_mib"] == 61234 + 60876
    assert s["power_w"] == pytest.approx(312.45 + 298.12)
    assert s["energy_mj"] == sum(DCGM_ENERGY_MJ)
    # the `# TYPE ... counter` line makes it a counter (the parser adds `_total`), a gauge stays one
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total" in m.counters
    assert "DCGM_FI_DEV_POWER_USAGE" not in m.counters


def test_tgi_names_and_its_mean_time_per_token():
    m = parse(TGI)
    assert dialect(m) == "tgi"
    s = read_series(m, "tgi")
    assert (s["running"], s["waiting"], s["generation_tokens"]) == (5, 3, 640)
    run = _deltas(parse(TGI.replace(" 640", " 40").replace("count 7", "count 1").replace("sum 0.21", "sum 0.03")),
                  m, "tgi")
    assert run["generation_tokens"] == 600 and run["itl_count"] == 6
    assert run["mean_itl_ms"] == pytest.approx(30.0)


def test_prefix_cache_hit_rate_and_spec_decode_acceptance_over_the_run():
    before = parse(VLLM_CACHE_AND_SPEC % {"queries": 1000, "hits": 100, "draft": 50, "accepted": 10})
    after = parse(VLLM_CACHE_AND_SPEC % {"queries": 3000, "hits": 1600, "draft": 450, "accepted": 310})
    run = _deltas(before, after, "vllm")
    assert (run["prefix_cache_queries"], run["prefix_cache_hits"]) == (2000, 1500)
    assert run["prefix_cache_hit_rate"] == 0.75 and run["spec_acceptance_rate"] == 0.75


def test_sample_lines_keep_every_name_up_to_the_cap_and_count_the_rest():
    body = (b"# TYPE other_total counter\n" + b"".join(b'other_total{i="%d"} %d\n' % (i, i) for i in range(10))
            + b"vllm:num_requests_running 2\n")
    lines = SampleLines(frozenset({"vllm:num_requests_running"}), max_series=4)
    for i in range(0, len(body), 7):
        lines.feed(body[i:i + 7])
    m = parse(lines.text(), lines.num_dropped)
    # the names read are always kept; 4 others (with their `# TYPE`), 6 counted
    assert m.value("vllm:num_requests_running") == 2 and m.num_dropped == 6
    assert sorted(v for (n, _), v in m.samples.items() if n == "other_total") == [0, 1, 2, 3]
    assert "other_total" in m.counters


def test_all_series_keep_counters_first_last_delta_and_gauges_stats_up_to_the_cap():
    every = AllSeries(max_series=3)
    for i in range(3):
        every.add(parse(f'# TYPE c counter\nc_total{{x="a"}} {10 + 5 * i}\ng {i * 2}\nh 1\nlate {i}\n'))
    block = every.block()
    assert block["counters"] == {'c_total{x="a"}': {"first": 10, "last": 20, "delta": 10}}
    assert block["gauges"]["g"] == {"mean": 2.0, "min": 0, "max": 4, "last": 4, "scrapes": 3}
    assert (block["num_series"], block["num_dropped"]) == (3, 1)  # `late` is past the cap
    assert series_key("n", frozenset({("b", "2"), ("a", "1")})) == 'n{a="1",b="2"}'


def test_energy_per_output_token_from_the_dcgm_targets():
    block = {"dialect": "vllm", "run": {}, "others": [
        {"dialect": "dcgm", "run": {"energy_j": 300.0, "mean_gpu_util": 50.0, "mean_power_w": 600.0,
                                    "max_memory_used_mib": 100.0}}]}
    out = energy_per_token(block, {"total_output_tokens": 1500})
    assert out["energy_per_output_token_j"] == 0.2 and out["mean_gpu_util_pct"] == 50.0
    assert energy_per_token({"dialect": "vllm", "run": {}}, {"total_output_tokens": 1}) is None


class _Exporter(BaseHTTPRequestHandler):
    """dcgm-exporter's text; each scrape the GPUs have used 50 J more (50,000 mJ each)."""

    num_scrapes = 0

    def do_GET(self):  # noqa: N802 (http.server's name)
        type(self).num_scrapes += 1
        text = DCGM
        for mj in DCGM_ENERGY_MJ:
            text = text.replace(f" {mj}\n", f" {mj + 50_000 * (self.num_scrapes - 1)}\n")
        body = text.encode()
        self.send_response(200)
        self.send_header("content-type", "text/plain; version=0.0.4")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def exporter():
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Exporter", (_Exporter,), {"num_scrapes": 0}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()
    server.server_close()


def test_a_run_scrapes_the_server_and_a_dcgm_exporter_beside_it(start_server, exporter, tmp_path):
    server = start_server("--ttft-ms", "5", "--gap-ms", "20", "--num-tokens", "8", "--metrics", "vllm")
    out = tmp_path / "r.json"
    rc = main(["--base-url", server.base_url, "--random-input-len", "8", "--random-output-len", "8", "--quiet",
               "--concurrency", "4", "--num-prompts", "12", "--server-metrics-interval", "0.2",
               "--server-metrics-url", server.base_url + "/metrics", "--server-metrics-url", exporter,
               "--output", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    sm = data["server_metrics"]
    (gpu,) = sm["others"]
    assert (sm["status"], sm["dialect"], gpu["status"], gpu["dialect"]) == ("ok", "vllm", "ok", "dcgm")
    # every series of the server is kept: its counters over the run, its gauges' statistics
    counters = sm["all_series"]["counters"]
    assert counters['vllm:generation_tokens_total{model_name="scripted-model"}']["delta"] == 96
    assert sm["all_series"]["num_dropped"] == 0
    # the exporter's: 16 fields x 2 GPUs, its energy 50 J per GPU per scrape after the baseline
    assert gpu["all_series"]["num_series"] == 32 and gpu["failed_scrapes"] == 0
    assert gpu["run"]["energy_j"] == pytest.approx(2 * 50.0 * (gpu["scrapes"] - 1))
    assert (gpu["run"]["mean_gpu_util"], gpu["run"]["max_memory_used_mib"]) == (40, 61234 + 60876)
    energy = data["summary"]["energy"]
    assert energy["energy_per_output_token_j"] == pytest.approx(gpu["run"]["energy_j"] / 96)
    # the report page shows each target's figures and the energy per output token
    page = tmp_path / "r.html"
    assert main(["report", str(out), "--output", str(page)]) == 0
    text = page.read_text()
    assert "Server metrics: every target" in text and f"server metrics 2</td><td class='num'>{exporter}: dcgm" in text
    assert f"{energy['energy_per_output_token_j']:,.4f} J" in text


def test_a_target_past_the_series_cap_keeps_the_cap_and_counts_the_rest(start_hostile_metrics):
    # 200,000 series within the byte bound: the scrape keeps the names read and 2,000 others.
    _, url = start_hostile_metrics("--metrics", "wide")
    with httpx.Client(limits=httpx.Limits(max_keepalive_connections=0)) as client:
        tracemalloc.start()
        try:
            m = fetch(client, url + "/metrics", Deadline(60), wanted_names("reference"), 2000)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert m.value("reference:num_waiting_reqs") == 2
    assert len(m) == 3 + 2000 and m.num_dropped == NUM_WIDE - 2000
    assert peak < 8 << 20


def test_a_run_says_in_one_line_where_the_cap_was_hit(start_hostile_metrics, tmp_path):
    _, url = start_hostile_metrics("--metrics", "wide")
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "loadgen", "--base-url", url, "--model", "hostile-model",
                           "--no-server-tokenize", "--num-prompts", "4", "--request-rate", "8",
                           "--random-input-len", "8", "--random-output-len", "4",
                           "--server-metrics-max-series", "100", "--output", str(out)],
                          capture_output=True, text=True, timeout=180, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    sm = json.loads(out.read_text())["server_metrics"]
    assert (sm["status"], sm["all_series"]["num_series"]) == ("ok", 100)
    assert sm["all_series"]["num_dropped"] >= NUM_WIDE - 100
    assert [" ".join(ln.split()) for ln in proc.stdout.splitlines() if "series cap" in ln] == [
        f"series cap {url}/metrics: series cap 100 hit, "
        f"{sm['all_series']['num_dropped']:,} series not kept (--server-metrics-max-series)"]


def test_the_rows_the_table_and_the_page_show():
    block = {"status": "ok", "url": "http://s/metrics", "dialect": "vllm",
             "run": {"prefix_cache_hit_rate": 0.75, "spec_acceptance_rate": 0.5},
             "all_series": {"max_series": 2000, "num_series": 120, "num_dropped": 0},
             "others": [{"status": "unavailable: HTTP 404", "url": "http://g/metrics"},
                        {"status": "ok", "url": "http://h/metrics", "dialect": "sglang", "scrapes": 5,
                         "failed_scrapes": 1, "last_failure": "HTTP 500", "run": {"mean_cache_hit_rate": 0.25},
                         "all_series": {"max_series": 10, "num_series": 10, "num_dropped": 4}}]}
    assert figure_lines(block, {}) == [
        ("  prefix-cache hit rate", "75.0%"), ("  spec-decode acceptance", "50.0%"),
        ("  series kept", "120 (cap 2,000)"),
        ("server metrics 2", "http://g/metrics: unavailable: HTTP 404"),
        ("server metrics 3", "http://h/metrics: sglang, 5 scrapes, 1 failed (last: HTTP 500)"),
        ("  cache hit rate (mean)", "25.0%"), ("  series kept", "10 (cap 10)"),
        ("  series cap", "http://h/metrics: series cap 10 hit, 4 series not kept (--server-metrics-max-series)")]


def test_vllms_own_exposition_maps_and_fits_under_the_default_cap():
    # Scraped from vLLM 0.32.0's CPU build (../shared/peers/vllm-cpu, --enable-prefix-caching) at start.
    text = (Path(__file__).parent / "fixtures" / "exporters" / "vllm_0.32.0_cpu.txt").read_text()
    m = parse(text)
    assert dialect(m) == "vllm" and len(m) < DEFAULT_MAX_SERIES
    s = read_series(m, "vllm")
    assert all(s[name] == 0 for name in ("running", "waiting", "kv_usage", "generation_tokens",
                                         "prefix_cache_hits", "prefix_cache_queries"))
    assert {"vllm:prefix_cache_hits_total", "vllm:generation_tokens_total"} <= m.counters
    assert "vllm:prefix_cache_hits_created" not in m.counters
