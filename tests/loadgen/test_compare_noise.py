"""`loadgen compare` with noise (issue 32): each headline metric's difference to the first run with a
seeded bootstrap 95% interval from the runs' per-request records, the significant ones marked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from loadgen.cli import main
from loadgen.report.noise import (
    HEADLINE,
    Samples,
    _replicates,
    bounded,
    difference,
    interval_text,
    lists_samples,
    metric_level,
    read_records,
    requests_to_bound,
)


def _samples(rng: np.random.Generator, n: int, scale: float = 1.0) -> Samples:
    ttft = rng.gamma(4.0, 10.0, n) * scale
    gaps = rng.gamma(9.0, 1.0, n) * scale
    return Samples(ttft, gaps, ttft + 30 * gaps, np.column_stack([30 * gaps, np.full(n, 30.0)]))


def test_same_distribution_is_not_significant_and_a_10_percent_shift_is():
    rng = np.random.default_rng(7)
    a, same, slower = _samples(rng, 800), _samples(rng, 800), _samples(rng, 800, scale=1.1)
    for metric in HEADLINE:
        d = difference(a, same, metric, seed=1)
        assert d["low"] <= d["diff"] <= d["high"] and not d["significant"], d
    shifted = {m: difference(a, slower, m, seed=1) for m in HEADLINE}
    assert all(shifted[m]["significant"] and shifted[m]["low"] > 0 for m in HEADLINE if m.startswith("mean")), shifted
    # the same seed gives the same interval
    assert difference(a, slower, "p99_ttft_ms", seed=3) == difference(a, slower, "p99_ttft_ms", seed=3)


def test_a_percentile_too_near_the_edge_of_a_small_run_gets_an_open_interval():
    # The p99 of 30 requests: the bootstrap only redraws their top few values, so without the exact
    # test a 1% drift of the machine between two runs read as significant (it failed a CI run).
    level = metric_level()
    assert requests_to_bound(99.0, level) == 597 and requests_to_bound(50.0, level) == 9
    assert bounded(596, 99.0, level) == (True, False) and bounded(597, 99.0, level) == (True, True)
    rng = np.random.default_rng(5)
    small, shifted = _samples(rng, 30), _samples(rng, 30, scale=2.0)
    p99 = difference(small, shifted, "p99_ttft_ms", seed=1)
    assert (p99["low"], p99["high"], p99["significant"]) == (None, None, False), p99
    assert interval_text(p99) == "[-inf, +inf]" and "from 597 requests on" in p99["open"]
    # the median and the mean of the same 30 requests are bounded, and the doubling shows
    for metric in ("p50_ttft_ms", "mean_ttft_ms"):
        d = difference(small, shifted, metric, seed=1)
        assert d["significant"] and d["low"] > 0 and "open" not in d, d
    # a large run's p99 is bounded, and only the side the small run cannot close stays open
    large = _samples(rng, 1000, scale=2.0)
    one_side = difference(small, large, "p99_ttft_ms", seed=1)
    assert one_side["low"] is None and one_side["high"] is not None and not one_side["significant"]
    both = difference(_samples(rng, 1000), large, "p99_ttft_ms", seed=1)
    assert both["significant"] and both["low"] > 0 and "open" not in both


def test_a_percentiles_replicates_follow_the_brute_force_bootstrap():
    # The order statistic's Beta law against resampling the requests themselves.
    rng = np.random.default_rng(11)
    values = rng.lognormal(3.0, 0.5, 300)
    fast = _replicates(values, 90.0, np.random.default_rng(1), 4000)
    brute = np.array([np.sort(values[rng.integers(0, 300, 300)])[int(np.ceil(0.9 * 300)) - 1] for _ in range(4000)])
    for q in (5, 50, 95):
        assert np.percentile(fast, q) == pytest.approx(np.percentile(brute, q), rel=0.02)


def test_a_bad_records_file_is_a_one_line_error(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"ok": true, "ttft_ms": 1}\nnot json\n')
    with pytest.raises(ValueError, match="bad.jsonl line 2: not a JSON record"):
        read_records(str(bad))


def _run(server, records, out) -> list[str]:
    return [sys.executable, "-m", "loadgen", "--base-url", server.base_url, "--quiet", "--no-server-tokenize",
            "--random-input-len", "8", "--random-output-len", "8", "--concurrency", "2", "--num-prompts", "30",
            "--records", str(records), "--output", str(out)]


def _two_runs(start_server, tmp_path, flags_a, flags_b) -> tuple[str, str]:
    # NOTE: both runs at once, each against its own server: the machine's load is the same for both.
    a, b = start_server(*flags_a), start_server(*flags_b)
    procs = [subprocess.Popen(_run(s, tmp_path / f"{n}.jsonl", tmp_path / f"{n}.json"), stderr=subprocess.PIPE,
                              text=True) for n, s in (("a", a), ("b", b))]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    return str(tmp_path / "a.json"), str(tmp_path / "b.json")


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # NOTE: whole metric names in the table


def _compare(capsys, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(["compare", *args])
    return rc, capsys.readouterr().out


def test_two_runs_of_the_same_load_differ_in_nothing_significant(start_server, tmp_path, capsys):
    # NOTE: with requests that vary (--spread) the sampling noise is the run's, not the machine's drift
    flags = ("--ttft-ms", "40", "--gap-ms", "10", "--num-tokens", "8", "--spread", "0.5")
    a, b = _two_runs(start_server, tmp_path, flags, flags)
    # NOTE: at a joint 99.9% a false alarm is 1 in 1,000 (at 95%, 1 in 20)
    rc, out = _compare(capsys, a, b, "--fail-on", "mean_ttft_ms=+1%", "--significant-only", "--confidence", "0.999")
    assert rc == 0, out
    assert "difference to" in out and "b.json" in out
    rows = [ln for ln in out.splitlines() if ln.startswith("│ b.json")]
    assert len(rows) == len(HEADLINE) and not any(ln.rstrip().rstrip("│").rstrip().endswith("*") for ln in rows), out
    # 30 requests bound no p99: its rows are open, and the caption says from how many requests they would be
    assert all("[-inf, +inf]" in ln for ln in rows if " p99_" in ln) and "from 986 requests on" in out, out


def test_two_different_loads_differ_significantly_and_fail_the_gate(start_server, tmp_path, capsys):
    a, b = _two_runs(start_server, tmp_path, ("--ttft-ms", "20", "--gap-ms", "5", "--num-tokens", "8"),
                     ("--ttft-ms", "60", "--gap-ms", "15", "--num-tokens", "8"))
    rc, out = _compare(capsys, a, b, "--fail-on", "mean_ttft_ms=+10%", "--significant-only", "--seed", "3")
    assert rc == 1, out
    gate = [ln for ln in out.splitlines() if ln.startswith("loadgen compare:")]
    assert len(gate) == 1 and "99.50% interval of the difference [" in gate[0] and gate[0].endswith(": FAIL")
    for metric in ("mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "mean_e2e_latency_ms"):
        (row,) = [ln for ln in out.splitlines() if ln.startswith("│ b.json") and f" {metric} " in ln]
        assert row.rstrip().rstrip("│").rstrip().endswith("*"), row
    # the records named on the command line give the same intervals as those the runs' flags name
    rc2, out2 = _compare(capsys, a, b, "--records", str(tmp_path / "a.jsonl"), "--records",
                         str(tmp_path / "b.jsonl"), "--seed", "3")
    assert rc2 == 0 and [ln for ln in out2.splitlines() if ln.startswith("│ b.json")] == \
        [ln for ln in out.splitlines() if ln.startswith("│ b.json")]
    assert json.loads((tmp_path / "b.json").read_text())["records_file"].endswith("b.jsonl")
    # the same differences as JSON, and on the report page
    assert main(["compare", a, b, "--seed", "3", "--output", str(tmp_path / "d.json")]) == 0
    saved = json.loads((tmp_path / "d.json").read_text())["differences"]["b.json"]
    assert saved["mean_ttft_ms"]["significant"] and set(saved) == set(HEADLINE)
    # each figure from the records is the summary's own (same samples, same statistic)
    runs = {n: json.loads((tmp_path / f"{n}.json").read_text()) for n in ("a", "b")}
    for metric, d in saved.items():
        assert (d["a"], d["b"]) == (pytest.approx(runs["a"][metric]), pytest.approx(runs["b"][metric])), metric
    page = tmp_path / "r.html"
    assert main(["report", a, b, "--output", str(page)]) == 0
    text = page.read_text()
    assert "Differences to the first run" in text
    assert "<td>b.json</td><td class='num'>mean_ttft_ms</td>" in text


def test_a_files_own_per_request_lists_give_intervals_too(capsys):
    # vLLM's --save-detailed file: its ttfts, itls, latencies and output_lens, compared with itself.
    vllm = str(Path(__file__).parent / "peer_files" / "vllm_0.32.0_detailed.json")
    rc, out = _compare(capsys, vllm, vllm, "--output", "/dev/null")
    assert rc == 0
    rows = [ln for ln in out.splitlines() if ln.startswith("│ vllm_0.32.0_detailed.json")]
    assert len(rows) == len(HEADLINE) and "no per-request samples" not in out
    data = json.loads(Path(vllm).read_text())
    samples = lists_samples(data)
    # the figures the lists give are the file's own
    assert samples.ttft.mean() == pytest.approx(data["mean_ttft_ms"])
    assert samples.tpot.mean() == pytest.approx(data["mean_tpot_ms"])
    assert samples.e2e.mean() == pytest.approx(data["mean_e2el_ms"])
    same = difference(samples, samples, "p99_ttft_ms")
    assert same["diff"] == 0 and not same["significant"]
