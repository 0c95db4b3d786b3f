"""The terminal result: the headline block first (fixed width), then the details; one number
format; labels that never wrap at 100 columns; failed scrapes and the server's window said."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys

from rich.console import Console

from loadgen.plan.config import RunConfig
from loadgen.plan.datasets import DatasetConfig
from loadgen.report.results import fmt
from loadgen.report.terminal import details, print_table
from loadgen.run.runner import run

#: A number of four or more digits without thousands separators (nor part of a decimal or a name).
BARE_THOUSANDS = re.compile(r"(?<![\w.,])\d{4,}(?![\w])")


def _loadgen_table(url: str, *extra: str) -> list[str]:
    """`python -m loadgen` (no --quiet) at 100 columns: its stdout's lines."""
    proc = subprocess.run([sys.executable, "-m", "loadgen", "--base-url", url, "--concurrency", "4",
                           "--random-input-len", "300", "--random-output-len", "8", *extra],
                          capture_output=True, text=True, timeout=180, env={**os.environ, "COLUMNS": "100"})
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout.splitlines()


def test_the_headline_block_comes_first_at_one_width_with_one_number_format(start_server):
    # Before: a 60-75 line table, the headline figures among token accounting rows, median and p50
    # printed side by side, counts with and without thousands separators.
    server = start_server("--ttft-ms", "3", "--gap-ms", "1", "--num-tokens", "8")
    lines = _loadgen_table(server.base_url, "--num-prompts", "40")
    end = lines.index("=" * len(lines[0]))
    block = lines[:end + 1]
    assert lines[0].startswith("=") and " loadgen result " in lines[0]
    assert {len(line) for line in block} == {len(lines[0])}
    rows = dict(line.split(":", 1) for line in block[1:] if ":" in line)
    assert rows["Successful requests"].strip() == "40" and rows["Total output tokens (server usage)"].strip() == "320"
    assert rows["Client-bound"].strip() in ("no", "YES (see details)")
    grid = block[block.index(next(ln for ln in block if "Latency (ms)" in ln)) + 1:end]
    assert grid[0].split() == ["mean", "p50", "p90", "p95", "p99", "p99.9"]
    assert [row.split()[0] for row in grid[1:]] == ["TTFT", "TPOT", "ITL", "E2E"]
    text = "\n".join(lines)
    assert "median" not in text and BARE_THOUSANDS.search(text) is None, BARE_THOUSANDS.search(text)
    assert "Input tokens as built" in text and re.search(r"Input tokens as built +\d{1,3}(,\d{3})+\b", text)
    assert max(len(line.rstrip()) for line in lines) <= 100
    # Usage and the client's count agree: nothing is "unknown" about tokens nobody is missing.
    assert re.search(r"events with several tokens +none missing", text), text


def test_no_label_wraps_at_100_columns(start_server):
    # Before: "server vs client mean ITL, server / TPOT, client (ms)" took two lines at 100 columns.
    server = start_server("--ttft-ms", "3", "--gap-ms", "1", "--num-tokens", "6", "--metrics", "vllm",
                          "--empty-every", "3")
    cfg = RunConfig(base_url=server.base_url, concurrency=2, num_prompts=6, warmup=1)
    result = run(cfg, DatasetConfig(name="random", random_input_len=16, random_output_len=6))
    table = details(result)
    labels = [str(label) for label in table.columns[0]._cells]
    assert "  server vs client" in labels and "TTFT split (ms)" in labels
    # Before: "client network", though the part is mostly the client's own delay (README, "TTFT split").
    assert "  outside server timing" in labels and "    client network" not in labels
    out = io.StringIO()
    print_table(result, Console(file=out, width=100))
    lines = out.getvalue().splitlines()
    for label in labels:
        assert any(line.startswith(label + " ") for line in lines), label


def test_failed_scrapes_are_counted_in_the_table(start_hostile_metrics):
    # Before: 11 of 14 failed scrapes left the table saying only "vllm, 3 scrapes".
    _, url = start_hostile_metrics("--metrics", "endless", "--from-scrape", "2")
    lines = _loadgen_table(url, "--model", "hostile-model", "--no-server-tokenize", "--num-prompts", "6",
                           "--request-rate", "4", "--server-metrics-interval", "0.2", "--warmup", "1")
    (row,) = [line for line in lines if line.startswith("server metrics ")]
    assert re.search(r"\d+ scrapes, \d+ failed \(last: body past 16 MiB\)", row), row
    (window,) = [line for line in lines if line.startswith("  window ")]
    assert "run and warm-up (the scrape after the warm-up failed)" in window


def test_one_number_format():
    assert [fmt(True), fmt(False), fmt(None)] == ["true", "false", "-"]
    assert [fmt(123121), fmt(123121, "{:,.0f}"), fmt(1234.5), fmt(0.125, "{:.1%}")] == [
        "123,121", "123,121", "1,234.50", "12.5%"]
