"""The CI guard's decisions: the accept tag, flagged benchmarks, one verdict line per gate."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.gate import accepted_gates, flagged, max_ratio, verdict

ROOT = Path(__file__).resolve().parents[2]
# Rows as `asv continuous --split` prints them.
LOG = """\
| Change   | Before [83069378]    | After [9f1c2a3b]    |   Ratio | Benchmark (Parameter)                                                  |
|----------|----------------------|---------------------|---------|------------------------------------------------------------------------|
| +        | 11.9k                | 12.1k               |    1.02 | bench_instructions.TrackInstructions.track_instructions('h2-first-chunk', 'optimized') |
| !        | 7.93±0.1ms           | failed              |     n/a | bench_stream_outputs.TimeStreamOutputs.time_request('optimized', 4000) |
|          | 68.5k                | 68.5k               |   ~1.00 | bench_instructions.TrackInstructions.track_instructions('h2-first-chunk', 'legacy') |
| -        | 1.50±0.01μs          | 1.20±0.01μs         |    0.80 | bench_sse.TimeChatChunk.time_encode('optimized', 'first')              |
"""


def test_accept_tag_names_gates_and_a_reason_may_follow():
    assert accepted_gates("Fix X\n\nasv-accept: counts: the copy buys a lock-free path\n") == {"counts"}
    assert accepted_gates("asv-accept: counts, wall") == {"counts", "wall"}
    assert accepted_gates("ASV-Accept: both") == {"counts", "wall"}
    assert accepted_gates("mentions asv-accept: counts mid-line only") == set()
    assert accepted_gates("No tag here") == set()


def test_accept_tag_naming_no_gate_is_an_error_so_a_typo_never_passes():
    with pytest.raises(ValueError, match="names no gate"):
        accepted_gates("asv-accept: count (typo)")


def test_flagged_lists_slower_and_newly_failing_benchmarks_only():
    assert flagged(LOG) == [
        "bench_instructions.TrackInstructions.track_instructions('h2-first-chunk', 'optimized')",
        "bench_stream_outputs.TimeStreamOutputs.time_request('optimized', 4000)",
    ]


def test_max_ratio_reads_the_table():
    assert max_ratio(LOG) == (1.02, "bench_instructions.TrackInstructions.track_instructions("
                                    "'h2-first-chunk', 'optimized')")
    assert max_ratio("no table") is None


def test_verdict_fails_only_on_a_fired_gate_that_is_not_accepted():
    lines, status = verdict({"counts": 1, "wall": 0}, set(), {"counts": LOG})
    assert status == 1
    assert lines[0].startswith("asv gate counts: FIRED (2 flagged: ")
    assert lines[1] == "asv gate wall: pass"
    lines, status = verdict({"counts": 1, "wall": 0}, {"counts"}, {"counts": LOG})
    assert status == 0
    assert "accepted by the commit message" in lines[0]
    _, status = verdict({"counts": 0, "wall": 1}, {"counts"})
    assert status == 1


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@localhost", *args],
                   check=True, capture_output=True)


@pytest.mark.parametrize(("message", "expected_status", "expected_line"), [
    ("Slower on purpose\n\nasv-accept: counts (the trade-off is documented)", 0,
     "asv gate counts: FIRED, accepted by the commit message"),
    ("Slower by accident", 1, "asv gate counts: FIRED (2 flagged"),
    ("Typo\n\nasv-accept: cuonts", 2, None),
])
def test_verdict_command_reads_the_commit_message(tmp_path, message, expected_status, expected_line):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "commit", "-q", "--allow-empty", "-m", message)
    log = tmp_path / "counts.log"
    log.write_text(LOG)
    proc = subprocess.run([sys.executable, "-m", "benchmarks.gate", "verdict", "HEAD", "counts=1", "wall=0",
                           "--log", f"counts={log}"], cwd=repo, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == expected_status, proc.stderr
    if expected_line:
        assert proc.stdout.splitlines()[0].startswith(expected_line)
        assert proc.stdout.splitlines()[1] == "asv gate wall: pass"
    else:
        assert "names no gate" in proc.stderr


def test_max_ratio_can_keep_one_gates_benchmarks():
    assert max_ratio(LOG, match=r"^bench_sse[.]") == (0.80, "bench_sse.TimeChatChunk.time_encode('optimized', 'first')")


def test_exact_ratios_read_asv_results_files(tmp_path):
    import json

    from benchmarks.gate import exact_ratios

    columns = ["result", "params", "version"]
    name = "bench_instructions.TrackInstructions.track_instructions"
    params = [["'h2-first-chunk'"], ["'legacy'", "'optimized'"]]
    for rev, values in (("aaaaaaaa11", [68_000.0, 11_900.0]), ("bbbbbbbb22", [68_000.0, 12_138.0])):
        results = {name: [values, params, "v"], "bench_sse.TimeChatChunk.time_encode": [[float("nan")], [["'x'"]], "v"]}
        (tmp_path / f"{rev[:8]}-env-x.json").write_text(json.dumps({"result_columns": columns, "results": results}))
    ratios = exact_ratios(str(tmp_path), "aaaaaaaa11", "bbbbbbbb22", r"^bench_")
    assert ratios == {f"{name}('h2-first-chunk', 'legacy')": 1.0,
                      f"{name}('h2-first-chunk', 'optimized')": pytest.approx(1.02)}
