"""`loadgen report` (the HTML page, through the real CLI and headless Chromium) and `--csv`."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.selftest.testserver import SCRIPTED_TIMING

HEADINGS = ("Runs", "Summary", "Client health", "Where the times come from", "Plots", "Output throughput and requests in flight",
            "TTFT and ITL over time", "Latency distributions (CDF)", "Server queue and KV cache",
            "TTFT split (mean ms)", "Server vs client", "Flags (config)", "Machine (environment)")
NETWORK_REF = re.compile(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", re.I)


def _loadgen(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loadgen", *args], capture_output=True, text=True,
                          timeout=120)


def _quantiles(scale: float) -> dict:
    return {"n": 40, "p50": 10 * scale, "p90": 15 * scale, "p99": 30 * scale}


def _run(label: str, scale: float, client_bound: bool) -> dict:
    """A results object by hand, in the schema `loadgen --output` writes (timeline, cdf, server)."""
    buckets = [{"t_s": float(t), "started": 8, "finished": 8 if t else 0, "errors": 0,
                "in_flight": 4.0 + (t % 3), "output_tokens": int(400 * scale), "output_tok_s": 400.0 * scale + t,
                "ttft_ms": _quantiles(scale + t / 10) if t else None, "itl_ms": _quantiles(scale / 4)}
               for t in range(12)]
    cdf = {key: [[q, base * scale * (1 + q / 25)] for q in (0, 10, 25, 50, 75, 90, 99, 100)]
           for key, base in (("ttft_ms", 10), ("itl_ms", 2), ("tpot_ms", 2.5), ("e2e_latency_ms", 300))}
    t = [0.5 * i for i in range(24)]
    return {
        "label": label, "date": "20261126-120000", "base_url": "http://127.0.0.1:30000",
        "model_id": "tiny-llama", "backend": "openai-chat", "transport": "lean",
        "loadgen_version": "0.1.0", "client_bound": client_bound, "completed": 96, "failed": 0,
        "duration": 12.0, "output_throughput": 1234.56 * scale, "request_throughput": 8.0,
        "mean_ttft_ms": 11.0 * scale, "median_ttft_ms": 10.0 * scale, "p99_ttft_ms": 31.0 * scale,
        "mean_itl_ms": 2.5 * scale, "median_itl_ms": 2.0, "p99_itl_ms": 9.0,
        "mean_tpot_ms": 2.6, "median_tpot_ms": 2.5, "p99_tpot_ms": 4.0,
        "mean_e2e_latency_ms": 320.0, "median_e2e_latency_ms": 300.0, "p99_e2e_latency_ms": 700.0,
        "config": {"concurrency": 4, "num_prompts": 96, "slo": {"ttft_ms": None}},
        "environment": {"python": "3.11.2", "cpu_count": 2, "loadgen_version": "0.1.0"},
        "summary": {
            "client_health": {"client_bound_reasons": ["worker 0 cpu 97%"] if client_bound else [],
                              "client_health_notes": [],
                              "client_bound_cause": "the machine is busy: worker 0 waited" if client_bound else None,
                              "stamp_source": "kernel", "coalesced_share": 0.125 * scale,
                              "uncertain_event_share": 0.0, "ttft_exact_share": 0.5 + 0.25 * scale,
                              "ttft_uncertainty_p99_ms": 1.25 * scale, "ttft_tolerance_ms": 2.0,
                              "client_delay": {"reads": 4321, "mean_ms": 1.0, "p50_ms": 0.5 * scale,
                                               "p99_ms": 12.5 * scale, "max_ms": 40.0},
                              "refill": {"refill_lag_p50_ms": 0.2, "refill_lag_p99_ms": 3.5 * scale,
                                         "idle_share": 0.01},
                              "workers": [{"worker": 0, "cpu_share": 0.5, "run_wait_share": 0.31,
                                           "run_wait_p99_ms": 9.0, "involuntary_switches": 12}]},
            "server_vs_client": {"rows": [{"name": "output tokens", "server": 9600, "client": 9504,
                                           "ratio": 1.0101}],
                                 "margin": 0.05, "notes": [f"{label}: server counted EOS tokens"]},
            "ttft_split": {"requests": 96, "mean_ms": {"client_network": 1.0, "queue": 3.0 * scale,
                                                       "prefill": 5.0, "server_other": 2.0},
                           "p50_ms": {"client_network": 0.9, "queue": 2.0, "prefill": 5.0, "server_other": 1.0},
                           "p99_ms": {"client_network": 3.0, "queue": 9.0, "prefill": 7.0, "server_other": 4.0}},
        },
        "timeline": {"interval_s": 1.0, "buckets": buckets,
                     "steady_state": {"start_s": 2.0, "end_s": 9.0, "rule": "in flight within 10%",
                                      "requests": 60, "output_throughput": 1200.0,
                                      "request_throughput": 8.0}},
        "cdf": cdf,
        "server_metrics": {"status": "ok", "url": "http://127.0.0.1:30000/metrics", "dialect": "vllm",
                           "interval_s": 0.5,
                           "series": {"t_s": t, "running": [4 - (i % 2) for i in range(24)],
                                      "waiting": [None] + [i % 3 for i in range(23)],
                                      "kv_usage": [0.1 * scale + 0.01 * i for i in range(24)]}},
    }


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    """Two hand-made runs rendered by `python -m loadgen report`."""
    folder = tmp_path_factory.mktemp("report")
    paths = []
    for name, scale, bound in (("alpha-run", 1.0, True), ("beta-run", 1.5, False)):
        paths.append(folder / f"{name}.json")
        paths[-1].write_text(json.dumps(_run(name, scale, bound)))
    out = folder / "r.html"
    proc = _loadgen("report", *map(str, paths), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(out)
    return out


def test_page_has_labels_summary_verdict_and_notes_and_no_network(page: Path):
    text = page.read_text()
    assert not NETWORK_REF.search(text), NETWORK_REF.search(text)
    assert "alpha-run" in text and "beta-run" in text
    assert "1,234.56" in text and "1,851.84" in text  # output throughput of each run
    assert "client-bound: numbers not trustworthy" in text and "worker 0 cpu 97%" in text
    assert "client healthy" in text
    assert "alpha-run: server counted EOS tokens" in text and "beta-run: server counted EOS tokens" in text
    assert "tiny-llama" in text and "http://127.0.0.1:30000" in text
    assert text.count("<img ") == 5
    # where the times came from and how exact: stamps, client delay, shares, TTFT bound, CPU wait
    assert "cause: the machine is busy: worker 0 waited" in text
    assert "0.50 / 12.50 / 40.00" in text and "0.75 / 18.75 / 40.00" in text  # client delay per run
    assert "12.5%" in text and "18.8%" in text and "75.0%" in text and "31.0%" in text
    assert "1.25 / 2.00" in text and "3.50, 1.0%" in text


def test_page_in_chromium_shows_every_plot(page: Path, chromium: str, tmp_path):
    import matplotlib.image

    shot = tmp_path / "page.png"
    proc = chromium(tmp_path / "profile", "--window-size=1200,3000", f"--screenshot={shot}", page.as_uri())
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", proc.stderr[-2000:]
    pixels = matplotlib.image.imread(str(shot))[..., :3].reshape(-1, 3)
    assert len({tuple(p) for p in pixels[::7].round(2).tolist()}) > 50, "the screenshot looks blank"
    dom = chromium(tmp_path / "profile", "--dump-dom", page.as_uri()).stdout
    images = re.findall(r"<img [^>]*>", dom)
    assert len(images) == 5
    assert all(re.search(r'src="data:image/png;base64,[A-Za-z0-9+/=]{100,}"', img) for img in images), images
    for heading in HEADINGS:
        assert re.search(rf"<h[23]>{re.escape(heading)}</h[23]>", dom), heading


def test_an_old_file_renders_with_notes_instead_of_plots(tmp_path):
    old = {k: v for k, v in _run("old", 1.0, False).items()
           if k not in ("timeline", "cdf", "server_metrics", "config", "environment")}
    del old["summary"]["ttft_split"], old["summary"]["server_vs_client"]
    path, out = tmp_path / "old.json", tmp_path / "old.html"
    path.write_text(json.dumps(old))
    proc = _loadgen("report", str(path), "--output", str(out), "--label", "legacy")
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "<img " not in text and "legacy" in text
    assert "legacy: no timeline in this file (older loadgen)" in text
    assert "legacy (not in this file): no server metrics series" in text
    assert "Server vs client" not in text and "1,234.56" in text


def test_a_new_and_an_empty_run_share_the_page():
    from loadgen.report.html import render

    text = render([_run("full", 1.0, False), {}], ["full", "empty"])
    assert text.count("<img ") == 5 and "empty: no timeline in this file (older loadgen)" in text
    assert "client health not judged" in text and "full: server counted EOS tokens" in text


@pytest.mark.parametrize("content, says", [(None, "No such file"), ("[1, 2]", "not a loadgen results file")])
def test_bad_input_is_one_line_naming_the_file(tmp_path, content, says):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    proc = _loadgen("report", str(path), "--output", str(tmp_path / "r.html"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and says in lines[0], proc.stderr
    assert not (tmp_path / "r.html").exists()


def test_report_help_and_a_label_per_file(tmp_path):
    proc = _loadgen("report", "--help")
    assert proc.returncode == 0 and "--output" in proc.stdout and "--label" in proc.stdout
    path = tmp_path / "a.json"
    path.write_text(json.dumps(_run("a", 1.0, False)))
    proc = _loadgen("report", str(path), "--label", "x", "--label", "y", "--output", str(tmp_path / "r.html"))
    assert proc.returncode == 2 and "--label given 2 times for 1 files" in proc.stderr


def test_csv_has_one_row_per_request(start_server, tmp_path):
    from loadgen.report.records_csv import COLUMNS

    server = start_server("--ttft-ms", "3", "--gap-ms", "1")
    out = tmp_path / "r.csv"
    proc = _loadgen("--base-url", server.base_url, "--random-input-len", "8", "--random-output-len", "6",
                    "--concurrency", "4", "--num-prompts", "8", "--quiet", "--csv", str(out))
    assert proc.returncode == 0, proc.stderr
    with out.open(newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert tuple(reader.fieldnames) == COLUMNS
    assert len(rows) == 8 and sorted(int(r["index"]) for r in rows) == list(range(8))
    assert all(r["ok"] == "True" and float(r["ttft_ms"]) > 0 and float(r["e2e_ms"]) >= float(r["ttft_ms"])
               for r in rows)
    assert all(float(r["server_queue_ms"]) == SCRIPTED_TIMING["queue_ms"] for r in rows)  # scripted timing


def test_peers_files_share_the_page_with_plots_made_by_and_notes(tmp_path, chromium):
    """vLLM's (detailed and plain) and SGLang's (a JSON Lines file of two runs) files next to loadgen's."""
    peer_files = Path(__file__).parent / "peer_files"
    own = tmp_path / "own.json"
    own.write_text(json.dumps(_run("own-run", 1.0, False)))
    paths = [own, peer_files / "vllm_0.32.0_detailed.json", peer_files / "vllm_0.32.0_plain.json",
             peer_files / "sglang_bench_serving.jsonl"]
    out = tmp_path / "peers.html"
    proc = _loadgen("report", *map(str, paths), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    for label in ("own-run", "vllm_0.32.0_detailed.json", "vllm_0.32.0_plain.json", "sglang-run", "sglang-run-2"):
        assert f"<th>{label}</th>" in text, label
    made_by = ["loadgen 0.1.0", *["vllm bench serve (fields as vLLM 0.32.0 writes them)"] * 2,
               *["SGLang bench_serving (from its fields)"] * 2]
    assert "<tr><td>made by</td>" + "".join(f"<td class='num'>{m}</td>" for m in made_by) + "</tr>" in text
    assert "older loadgen" not in text  # a peer's missing plot says why in its tool's terms
    assert ("vllm_0.32.0_plain.json: vllm bench serve writes per-request start times only with "
            "--save-detailed: no timeline in this file") in text
    assert "sglang-run: SGLang bench_serving writes no per-request start times: no timeline in this file" in text
    assert "sglang-run-2: no per-request times in this file (SGLang bench_serving writes them with " \
           "--output-details): no CDF" in text
    assert "most requests in flight at one instant" in text and "the role-only chunk included" in text
    assert "no client-health verdict in this file; made by vllm bench serve" in text
    assert "<td>note</td><td class='num'>hello</td>" in text and "<td>server_info</td>" in text
    assert "<h2>Also in the files</h2>" in text
    dom = chromium(tmp_path / "profile", "--dump-dom", out.as_uri()).stdout
    images = re.findall(r"<img [^>]*>", dom)
    assert len(images) == 5 and all("data:image/png;base64," in img for img in images)
    shot = tmp_path / "peers.png"
    chromium(tmp_path / "profile", "--window-size=1200,3000", f"--screenshot={shot}", out.as_uri())
    import matplotlib.image

    pixels = matplotlib.image.imread(str(shot))[..., :3].reshape(-1, 3)
    assert len({tuple(p) for p in pixels[::7].round(2).tolist()}) > 50, "the screenshot looks blank"


@pytest.mark.parametrize("low, high", [(0.01, 50.0), (2.0, 3.5)])
def test_log_axes_are_labelled_in_plain_numbers(low, high):
    """With mathtext off (labels from files stay text), a log axis must not show `$\\mathdefault...$`."""
    import matplotlib.pyplot as plt

    from loadgen.report.html import TEXT_ONLY, log_x

    with plt.rc_context(TEXT_ONLY):
        fig, ax = plt.subplots()
        ax.plot([low, high], [0, 1])
        log_x(ax)
        fig.canvas.draw()
        labels = [t.get_text() for t in ax.get_xticklabels(minor=False) + ax.get_xticklabels(minor=True)]
        plt.close(fig)
    shown = [t for t in labels if t]
    assert shown and all(re.fullmatch(r"\d+(\.\d+)?", t) for t in shown), labels
