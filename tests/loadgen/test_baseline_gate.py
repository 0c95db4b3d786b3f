"""`loadgen compare BASELINE.json RUN.json --fail-on METRIC=+N%`: a CI gate against a committed
baseline (tests/loadgen/baselines/scripted-ttft50.json: 8 requests to the scripted server at a 50 ms
TTFT), replayed with `--config BASELINE.json` against a fresh server."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.cli import main

BASELINE = str(Path(__file__).parent / "baselines" / "scripted-ttft50.json")


def _replay(server, tmp_path) -> str:
    out = str(tmp_path / "run.json")
    assert main(["--config", BASELINE, "--base-url", server.base_url, "--output", out]) == 0
    return out


def test_a_run_of_the_same_workload_holds_the_bounds(start_server, tmp_path, capsys):
    run = _replay(start_server("--ttft-ms", "50", "--gap-ms", "1"), tmp_path)
    capsys.readouterr()
    rc = main(["compare", BASELINE, run, "--fail-on", "total_output_tokens=-10%", "--fail-on", "completed=-1%"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("loadgen compare:")]
    assert rc == 0
    assert lines == [
        "loadgen compare: run.json: total_output_tokens 41 vs 41 in scripted-ttft50.json: +0.0% (fail past -10%): ok",
        "loadgen compare: run.json: completed 8 vs 8 in scripted-ttft50.json: +0.0% (fail past -1%): ok"]


def test_a_slower_server_fails_the_ttft_bound(start_server, tmp_path, capsys):
    # NOTE: the server waits 250 ms before each first token: p99 TTFT cannot stay within 10% of ~54 ms.
    run = _replay(start_server("--ttft-ms", "250", "--gap-ms", "1"), tmp_path)
    capsys.readouterr()
    rc = main(["compare", BASELINE, run, "--fail-on", "p99_ttft_ms=+10%", "--fail-on", "completed=-1%"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("loadgen compare:")]
    assert rc == 1
    assert lines[0].startswith("loadgen compare: run.json: p99_ttft_ms ") and lines[0].endswith(": FAIL")
    assert lines[1].endswith(": ok")


def test_a_malformed_bound_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["compare", BASELINE, BASELINE, "--fail-on", "p99_ttft_ms=10%"])
    assert exc.value.code == 2 and "expected METRIC=+N%" in capsys.readouterr().err


def test_a_metric_the_runs_lack_is_a_one_line_error(capsys):
    assert main(["compare", BASELINE, BASELINE, "--fail-on", "no_such_metric=+5%"]) == 2
    err = capsys.readouterr().err
    assert "no number under 'no_such_metric'" in err and len(err.strip().splitlines()) == 1
