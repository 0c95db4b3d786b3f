"""`loadgen report` (the HTML page, through the real CLI and headless Chromium) and `--csv`."""

from __future__ import annotations

import csv
import html
import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.selftest.scripted_stream import SCRIPTED_TIMING

HEADINGS = ("Runs", "Workload", "Summary", "Client health", "Where the times come from", "Plots", "Output throughput and requests in flight",
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


WORKLOAD = {"command": "loadgen --base-url http://127.0.0.1:30000 --request-rate 4 --concurrency 8 --num-prompts 96",
            "dataset": "random", "convention": "vllm", "token_event_rule": "loadgen",
            "input_tokens": {"mean": 512.46, "min": 100, "max": 900},
            "output_tokens": {"mean": 60.0, "min": 1, "max": 128},
            "mode": "rate", "concurrency": 8, "request_rate": 4.0, "num_prompts": 96, "duration_s": None,
            "warmup": 2, "stamps": "kernel",
            "machine": {"cpu_count": 2, "usable_cores": 2, "platform": "Linux-test", "load_avg_1m": 1.5}}


def _rows(dom: str, heading: str) -> dict[str, tuple[bool, list[str]]]:
    """The table under `<h2>heading</h2>` in a DOM: its first cell -> (highlighted, the other cells)."""
    body = dom.split(f"<h2>{heading}</h2>", 1)[1].split("</table>", 1)[0]
    out = {}
    for attrs, cells in re.findall(r"<tr([^>]*)>(.*?)</tr>", body, re.S):
        texts = [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", cells, re.S)]
        out[texts[0]] = ("diff" in attrs, texts[1:])
    return out


def test_each_run_states_its_workload_and_differences_are_highlighted(tmp_path, chromium):
    """A run with the `workload` block next to one from before it: the page (as Chromium reads it)
    has the Workload table, each row per run, the rows that differ highlighted and the rest not."""
    new, old = _run("new-run", 1.0, False), _run("old-run", 1.5, False)
    new["workload"] = WORKLOAD
    old["config"]["stream"], old["config"]["request_rate"] = True, "inf"
    old["dataset"] = {"name": "random", "random_input_len": 1024, "random_output_len": 128,
                      "random_range_ratio": 0.0, "length_convention": "sglang"}
    old["total_input_tokens"], old["total_output_tokens"], old["token_event_rule"] = 49152, 5760, "loadgen"
    paths = [tmp_path / "new.json", tmp_path / "old.json"]
    for path, run in zip(paths, (new, old), strict=True):
        path.write_text(json.dumps(run))
    out = tmp_path / "w.html"
    proc = _loadgen("report", *map(str, paths), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    dom = chromium(tmp_path / "profile", "--dump-dom", out.as_uri()).stdout
    rows = _rows(dom, "Workload")
    assert rows[""] == (False, ["new-run", "old-run"])
    assert rows["command"] == (True, [WORKLOAD["command"], "not recorded (file from before the workload block)"])
    assert rows["dataset"] == (True, ["random", "random: asked 1024 in, 128 out, range ratio 0"])
    assert rows["length convention"] == (True, ["vllm", "sglang"])
    assert rows["token events"] == (False, ["loadgen", "loadgen"])  # the old file's top-level rule
    assert rows["input tokens (mean / min / max)"] == (True, ["512.5 / 100 / 900",
                                                              "512 / - / - (total 49152 over 96 requests)"])
    assert rows["output tokens (mean / min / max)"][1] == ["60 / 1 / 128", "60 / - / - (total 5760 over 96 requests)"]
    assert rows["load"] == (True, ["rate: sends 4 req/s, at most 8 in flight",
                                   "concurrency: sends all at once, at most 4 in flight"])
    assert rows["warm-up"][1][0] == "2 requests before the measured window (not in the client's figures or plots)"
    assert rows["machine"][1] == ["2 cores (2 usable), Linux-test, load average 1.5 (1 min)", "2 cores (- usable), -"]
    assert "new-run: warm-up of 2 requests before time 0, in no plot" in dom and "old-run: warm-up" not in dom
    # The summary: a ratio column per run against the first; booleans as true/false in the flags.
    summary = _rows(dom, "Summary")
    assert summary["metric"][1] == ["new-run", "old-run", "old-run / new-run"]
    assert summary["Output token throughput (tok/s)"][1] == ["1,234.56", "1,851.84", "1.50x"]
    assert summary["Failed requests"][1] == ["0", "0", "-"]
    flags = _rows(dom, "Flags (config)")
    assert flags["stream"] == (True, ["-", "true"]) and flags["concurrency"] == (False, ["4", "4"])
    assert "1.00" not in flags["stream"][1]


def test_a_page_without_its_workload_block_fails_this_check(tmp_path, chromium):
    """The check above, on a page whose Workload section is cut out: it must notice."""
    path, out = tmp_path / "a.json", tmp_path / "a.html"
    path.write_text(json.dumps({**_run("a", 1.0, False), "workload": WORKLOAD}))
    assert _loadgen("report", str(path), "--output", str(out)).returncode == 0
    text = out.read_text()
    cut = re.sub(r"<h2>Workload</h2>.*?</table>", "", text, count=1, flags=re.S)
    assert cut != text
    out.write_text(cut)
    dom = chromium(tmp_path / "profile", "--dump-dom", out.as_uri()).stdout
    with pytest.raises(IndexError):
        _rows(dom, "Workload")


def test_failed_scrapes_and_zero_series_are_said_not_drawn():
    """The storm: 11 of 14 scrapes failed, the 3 that answered read 0: a note, no flat plot."""
    from loadgen.report.html import render

    storm = _run("storm", 1.0, False)
    storm["server_metrics"].update(scrapes=3, failed_scrapes=11, last_failure="timed out reading /metrics",
                                   series={"t_s": [0.0, 20.0, 40.0], "running": [0, 0, 0], "waiting": [0, 0, 0],
                                           "kv_usage": [0.0, 0.0, 0.0]})
    text = render([storm], ["storm"])
    assert text.count("<img ") == 4  # throughput, latency, CDF, TTFT split: no server plot
    assert ("storm: 11 of 14 scrapes of /metrics failed (last: timed out reading /metrics); its series "
            "holds only the 3 that answered") in text
    assert "storm: its 3 scrapes read 0 for every series, not drawn" in text
    both = render([storm, _run("fine", 1.0, False)], ["storm", "fine"])
    assert both.count("<img ") == 5 and "storm: its 3 scrapes read 0" in both


def test_an_outlier_puts_the_latency_panel_on_a_log_axis_and_says_so():
    from loadgen.report.html import render

    run = _run("spiky", 1.0, False)
    run["timeline"]["buckets"][5]["itl_ms"] = {"n": 40, "p50": 2.5, "p90": 3.0, "p99": 40000.0}
    text = render([run], ["spiky"])
    assert "ITL per chunk (ms): log scale: a few values are far above the rest (largest 40000 ms)" in text
    assert "TTFT (ms): log scale" not in text
    assert "log scale" not in render([_run("calm", 1.0, False)], ["calm"])


def test_steady_state_is_named_and_a_batch_window_is_none():
    """A window that requests kept refilling is named; one from a batch sent at once (an older file's)
    is said to be none, with the rule."""
    from loadgen.report.html import render

    assert "calm: steady state 2-9 s (shaded): " in render([_run("calm", 1.0, False)], ["calm"])
    batch = _run("batch", 1.0, False)
    for b in batch["timeline"]["buckets"]:
        b["started"] = 96 if b["t_s"] == 0 else 0
    text = html.unescape(render([batch], ["batch"]))
    assert "batch: no steady state: the file's window 2-9 s saw no request start after its first interval" in text
    batch["timeline"]["steady_state"] = None
    text = html.unescape(render([batch], ["batch"]))
    assert "batch: no steady state (by the rule below)" in text
    assert "the steady-state rule: from the first to the last interval" in text


@pytest.mark.parametrize("low, high", [(2000.0, 9000.0), (1500.0, 40000.0), (0.05, 3000.0), (14.996, 15.003)])
def test_cdf_tick_labels_do_not_overlap(low, high):
    import matplotlib.pyplot as plt

    from loadgen.report.plots import TEXT_ONLY, cdf_figure

    points = [[q, low * (high / low) ** (q / 100)] for q in range(0, 101, 5)]
    with plt.rc_context(TEXT_ONLY):
        fig = cdf_figure([({k: points for k in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_latency_ms")}, "run", "C0")])
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            labels = [t for t in ax.get_xticklabels(minor=False) + ax.get_xticklabels(minor=True)
                      if t.get_text() and t.get_visible()]
            lo, hi = ax.get_xlim()
            boxes = sorted((b.x0, b.x1, t.get_text()) for t in labels
                           if lo <= t.get_position()[0] <= hi and (b := t.get_window_extent(renderer)))
            assert len(boxes) >= 2, boxes
            assert all(a[1] < b[0] for a, b in itertools.pairwise(boxes)), boxes
            assert all("e" not in text and "+" not in text for *_, text in boxes), boxes
        plt.close(fig)


def test_a_sweep_page_states_its_workload():
    """The sweep page's Workload: what it swept, and its first run's workload block."""
    from loadgen.report.sweep_html import render_sweeps

    run = {**_run("point", 1.0, False), "workload": WORKLOAD}
    stat = {"mean": 10.0, "low": 9.0, "high": 11.0}
    point = {"value": 4, "phase": "list", "repeats": 1, "client_bound": False, "runs": [run], "slo": None,
             "metrics": {"p99_ttft_ms": stat, "p99_tpot_ms": stat, "p99_e2e_latency_ms": stat,
                         "output_throughput": {"mean": 1200.0, "low": None, "high": None}}}
    sweep = {"kind": "sweep", "variable": "concurrency", "values": [4], "repeats": 1, "points": [point],
             "answer": None, "rules": {}}
    text = html.unescape(render_sweeps([sweep], ["s"]))
    assert "<h2>Workload</h2>" in text
    assert f"{WORKLOAD['command']} (the first point's run)" in text
    assert "swept concurrency: 4; 1 repeat(s) each; first run: rate: sends 4 req/s, at most 8 in flight" in text
