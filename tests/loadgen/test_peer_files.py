"""The peers' result files read by `loadgen compare` and `loadgen report`: vLLM 0.32.0's
`--save-result` (two real files, see tests/loadgen/peer_files/README.md) and SGLang bench_serving's
`--output-file` JSON Lines (written by hand from its source). Every field reaches a row or is
listed, rows whose definitions differ carry a note, and each file says which tool made it."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from loadgen import cli
from loadgen.report import peers
from loadgen.report.compare import COMPARE_KEYS, compare
from loadgen.report.html import HEADER_KEYS
from loadgen.report.results import TABLE_ROWS
from loadgen.report.runfile import load_runs
from loadgen.selftest.testserver import spawn

PEER_FILES = Path(__file__).parent / "peer_files"
VLLM_DETAILED = PEER_FILES / "vllm_0.32.0_detailed.json"
VLLM_PLAIN = PEER_FILES / "vllm_0.32.0_plain.json"
SGLANG = PEER_FILES / "sglang_bench_serving.jsonl"
#: The rows a peer's file fills in `compare` (the issue: total throughput and E2E were blank).
FILLED = ("completed", "failed", "duration", "total_input_tokens", "total_output_tokens", "request_throughput",
          "input_throughput", "output_throughput", "total_throughput", "max_output_tokens_per_s", "concurrency",
          "max_concurrent_requests", *(f"{stat}_{name}_ms" for name in ("ttft", "tpot", "itl", "e2e_latency")
                                       for stat in ("mean", "median", "std", "p99")))


@pytest.fixture(scope="module")
def loadgen_file(tmp_path_factory) -> Path:
    """A real loadgen run against the scripted server (every 3rd token has empty text)."""
    path = tmp_path_factory.mktemp("lg") / "loadgen.json"
    proc, url = spawn("--ttft-ms", "5", "--gap-ms", "2", "--num-tokens", "6", "--empty-every", "3")
    try:
        rc = cli.main(["--base-url", url, "--concurrency", "2", "--num-prompts", "8", "--random-input-len", "16",
                       "--random-output-len", "6", "--quiet", "--no-server-metrics", "--output", str(path)])
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert rc == 0
    return path


def _compare(*paths: Path) -> tuple[dict[str, list[str]], list[str], list[str]]:
    """`compare`'s rows by metric (the cells after it), its column names, and its caption lines."""
    console = Console(record=True, width=600)
    compare([str(p) for p in paths], console)
    lines = console.export_text().splitlines()
    rows = {}
    for line in lines:
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells and cells[0]:
            rows[cells[0]] = cells[1:]
    head = next(line for line in lines if "┃" in line)
    names = [c.strip() for c in head.split("┃")[2:-1]]
    caption = [line.strip() for line in lines if not re.search(r"[│┃┏┗┡└┌]", line) and line.strip()]
    return rows, names, caption


def _notes(caption: list[str]) -> dict[str, str]:
    return {m[1]: m[2] for line in caption if (m := re.match(r"(\[\d+\]) (.*)", line))}


def test_compare_fills_every_row_from_a_vllm_and_an_sglang_file(loadgen_file):
    rows, names, caption = _compare(loadgen_file, VLLM_DETAILED, SGLANG)
    assert names == ["loadgen.json", VLLM_DETAILED.name, f"{SGLANG.name} #1", f"{SGLANG.name} #2"]
    vllm = json.loads(VLLM_DETAILED.read_text())
    for key in FILLED:
        lg, vl, sg = rows[key][:3]
        assert re.match(r"-?\d", lg) and re.match(r"-?\d", vl) and re.match(r"-?\d", sg), (key, rows[key])
    assert rows["total_throughput"][1].startswith(f"{vllm['total_token_throughput']:.2f}")
    assert rows["p99_e2e_latency_ms"][1].startswith(f"{vllm['p99_e2el_ms']:.2f}")
    assert rows["p90_ttft_ms"][1].startswith(f"{vllm['p90_ttft_ms']:.2f}")  # a percentile vLLM was asked for
    assert rows["failed"][2].startswith("1")  # SGLang writes no count: its `errors` list holds one
    assert rows["mean_client_queue_time_ms"][1].startswith(f"{vllm['mean_client_queue_time_ms']:.2f}")


def test_compare_says_who_made_each_file_and_notes_each_row_defined_otherwise(loadgen_file):
    rows, _, caption = _compare(loadgen_file, VLLM_DETAILED, SGLANG)
    made = rows["made by"]
    assert made[0].startswith("loadgen ") and made[1].startswith("vllm bench serve") \
        and made[2].startswith("SGLang bench_serving")
    assert rows["token events"][0].startswith("loadgen rule: every event with a text field")
    assert rows["token events"][0].endswith("; 16 with empty text")  # 8 requests, tokens 3 and 6
    assert rows["token events"][1].startswith("vllm rule: vllm bench serve's: every event with choices")
    assert rows["token events"][2].startswith("sglang rule: SGLang bench_serving's: events with non-empty")
    notes = _notes(caption)
    marker = lambda cell: re.search(r"\[\d+\]$", cell)[0]  # noqa: E731
    assert "most requests in flight at one instant" in notes[marker(rows["max_concurrent_requests"][1])]
    assert "1-s bucket" in notes[marker(rows["max_concurrent_requests"][2])]
    assert "role-only chunk" in notes[marker(rows["mean_ttft_ms"][1])]
    assert "one gap per chunk with `choices`" in notes[marker(rows["p99_itl_ms"][1])]
    assert "non-empty text" in notes[marker(rows["mean_itl_ms"][2])]
    assert "not in SGLang bench_serving's file" in notes[marker(rows["request_goodput"][2])]
    assert "not in SGLang bench_serving's file" in notes[marker(rows["failed"][3])]  # line 2: no details
    assert not re.search(r"\[\d+\]", " ".join(rows["mean_ttft_ms"][:1]))  # loadgen's own: no note
    assert all(cell != "-" for key in (*COMPARE_KEYS, "client_bound") for cell in rows[key][1:]), \
        "a peer's empty cell says why"


@pytest.mark.parametrize("path", [VLLM_DETAILED, VLLM_PLAIN, SGLANG], ids=lambda p: p.name)
def test_every_field_of_a_peer_file_reaches_a_row_or_is_listed(path, tmp_path):
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    runs = load_runs(str(path))
    assert len(runs) == len(lines)
    rows, _, caption = _compare(path)
    listed = " ".join(caption)
    for data, (_, run) in zip(lines, runs, strict=True):
        prov = run["provenance"]
        assert prov["fields"].keys() | prov["also"].keys() == data.keys()
        for key, target in prov["fields"].items():
            shown = target in rows or f"{key} " in listed
            assert shown, f"{key} -> {target} reaches no row and is not listed"
        assert all(f"{key} " in listed for key in prov["also"])
    out = tmp_path / "r.html"
    assert cli.main(["report", str(path), "--output", str(out)]) == 0
    page = out.read_text()
    on_page = {key for key, _, _ in TABLE_ROWS} | set(HEADER_KEYS) | {"label"}
    for _, run in runs:
        prov = run["provenance"]
        assert all(f"<td>{key}</td>" in page for key in prov["also"]), "the 'Also in the files' table"
        for key, target in prov["fields"].items():
            assert target in on_page or peers.LATENCY_KEY.fullmatch(target) \
                or f"<td>{target.removeprefix('config.')}</td>" in page, (key, target)


def test_per_request_lists_give_the_files_own_figures():
    """The CDFs and the timeline rebuilt from the lists agree with the figures the tool wrote."""
    def at(run: dict, name: str, q: float) -> float:
        return dict(map(tuple, run["cdf"][f"{name}_ms"]))[q]

    for path in (VLLM_DETAILED, SGLANG):
        data = json.loads(path.read_text().splitlines()[0])
        run = load_runs(str(path))[0][1]
        assert at(run, "ttft", 50.0) == pytest.approx(data["median_ttft_ms"])
        assert at(run, "itl", 99.0) == pytest.approx(data["p99_itl_ms"])
        if path == VLLM_DETAILED:
            assert at(run, "tpot", 50.0) == pytest.approx(data["median_tpot_ms"])
            assert at(run, "e2e_latency", 99.0) == pytest.approx(data["p99_e2el_ms"])
    run = load_runs(str(VLLM_DETAILED))[0][1]
    vllm = json.loads(VLLM_DETAILED.read_text())
    events = sum(1 + len(gaps) for gaps in vllm["itls"])
    assert sum(b["output_tokens"] for b in run["timeline"]["buckets"]) == events
    assert max(b["output_tok_s"] for b in run["timeline"]["buckets"]) == vllm["max_output_tokens_per_s"]
    assert run["concurrency"] == pytest.approx(sum(vllm["latencies"]) / vllm["duration"])


def test_the_failed_request_stays_out_of_sglangs_distributions():
    data = json.loads(SGLANG.read_text().splitlines()[0])
    run = load_runs(str(SGLANG))[0][1]
    ok = [t for t, e in zip(data["ttfts"], data["errors"], strict=True) if not e]
    assert len(ok) == data["completed"] < len(data["ttfts"])
    assert run["cdf"]["ttft_ms"][0][1] == pytest.approx(min(ok) * 1e3)
    assert run["failed"] == 1 and "e2e_latency_ms" not in run["cdf"]


def test_a_json_lines_file_is_one_run_per_line_and_labels_count_runs(tmp_path, capsys):
    out = tmp_path / "r.html"
    assert cli.main(["report", str(SGLANG), "--output", str(out), "--label", "a", "--label", "b"]) == 0
    text = out.read_text()
    assert "SGLang bench_serving (from its fields)" in text and ">a<" in text and ">b<" in text
    with pytest.raises(SystemExit):
        cli.main(["report", str(SGLANG), "--output", str(out), "--label", "a"])
    assert "--label given 1 times for 1 files holding 2 runs" in capsys.readouterr().err


@pytest.mark.parametrize("field, value, says", [
    (("duration",), math.inf, "Infinity at duration is not a JSON number"),
    (("itls", 0, 0), math.inf, "Infinity at itls[0][0]"),
    (("server_info", "version"), math.inf, "Infinity at server_info.version"),
    (("request_rate",), -math.inf, "-Infinity is not a JSON number"),
])
def test_infinity_is_read_only_as_a_top_level_request_rate(field, value, says, tmp_path, capsys):
    first, second = SGLANG.read_text().splitlines()
    data = json.loads(first)  # NOTE: Python's json reads SGLang's Infinity, and writes it back
    node = data
    for key in field[:-1]:
        node = node[key]
    node[field[-1]] = value
    path = tmp_path / "s.jsonl"
    path.write_text(second + "\n" + json.dumps(data) + "\n")
    for args in (("compare", str(path)), ("report", str(path), "--output", str(tmp_path / "r.html"))):
        assert cli.main(list(args)) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{path} line 2" in err[0] and says in err[0], err


def test_per_request_lists_of_different_lengths_are_one_line(tmp_path, capsys):
    data = json.loads(VLLM_DETAILED.read_text())
    data["start_times"].pop()
    path = tmp_path / "v.json"
    path.write_text(json.dumps(data))
    assert cli.main(["compare", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "start_times has 7 entries but" in err[0] and "has 8" in err[0], err


def test_a_timeline_spanning_years_is_not_drawn_and_a_long_one_has_bounded_buckets(tmp_path):
    data = json.loads(VLLM_DETAILED.read_text())
    for span, drawn in ((9e7, True), (2e8, False)):
        data["start_times"][-1] = data["start_times"][0] + span
        path = tmp_path / "v.json"
        path.write_text(json.dumps(data))
        run = load_runs(str(path))[0][1]
        if drawn:
            assert 1 < len(run["timeline"]["buckets"]) <= peers.MAX_TIMELINE_BUCKETS + 1
        else:
            assert "timeline" not in run and "no timeline drawn" in run["provenance"]["no_timeline"]


def test_tool_of_recognises_each_file():
    assert peers.tool_of(json.loads(VLLM_PLAIN.read_text())) == "vllm"
    assert peers.tool_of(json.loads(SGLANG.read_text().splitlines()[1].replace("Infinity", "1"))) == "sglang"
    assert peers.tool_of({"loadgen_version": "0.1.0", "total_token_throughput": 1.0}) == "loadgen"
    assert peers.tool_of({}) == "unknown"
    assert np.isinf(load_runs(str(SGLANG))[0][1]["config"]["request_rate"])


def test_statistics_a_vllm_file_lacks_are_derived_from_its_lists_and_say_so(loadgen_file):
    # The plain file holds vLLM's own E2E mean/median/std/p99 and `latencies`; loadgen's rows also
    # have p90 and max, which come from the list, and vLLM's own figures stay as they are.
    vllm = json.loads(VLLM_PLAIN.read_text())
    rows, _, caption = _compare(loadgen_file, VLLM_PLAIN)
    notes = _notes(caption)
    latencies_ms = np.asarray(vllm["latencies"]) * 1e3
    p90, mx = rows["p90_e2e_latency_ms"][1], rows["max_e2e_latency_ms"][1]
    assert p90.startswith(f"{np.percentile(latencies_ms, 90):.2f}") and mx.startswith(f"{latencies_ms.max():.2f}")
    assert notes[re.search(r"\[\d+\]$", p90)[0]].startswith("derived by loadgen from vllm bench serve's per-request")
    mean = rows["mean_e2e_latency_ms"][1]
    assert mean.startswith(f"{vllm['mean_e2el_ms']:.2f}")
    assert not notes[re.search(r"\[\d+\]$", mean)[0]].startswith("derived")
    # No list, no figure: TTFT's p90 stays "not in" the file (it holds no `ttfts`).
    assert "not in vllm bench serve's file" in notes[re.search(r"\[\d+\]$", rows["p90_ttft_ms"][1])[0]]
