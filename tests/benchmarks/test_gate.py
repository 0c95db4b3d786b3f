"""The CI guard's decisions: the accept tag, flagged benchmarks, one verdict line per gate; the CI step
(``scripts/asv_ci.sh``) judged by the guard of BASE."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.gate import (
    Accept,
    allowed_ratio,
    commit_accepts,
    flagged,
    max_ratio,
    moved,
    parse_accept,
    range_accepts,
    summary,
    verdict,
)

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


H2_FIRST = "bench_instructions.TrackInstructions.track_instructions('h2-first-chunk', 'optimized')"
H3_FAILED = "bench_stream_outputs.TimeStreamOutputs.time_request('optimized', 4000)"
LOG_SLOWER = LOG.replace("| !", "|  ")  # the same table without the failure


@pytest.mark.parametrize(("value", "expected"), [
    ("counts h2- +5%: the check buys safety", ("counts", "h2-", 5.0, "the check buys safety")),
    (r"wall ^bench_sse\.TimeChatChunk\. +12.5%:   a reason: with colons",
     ("wall", r"^bench_sse\.TimeChatChunk\.", 12.5, "a reason: with colons")),
])
def test_accept_tag_names_a_gate_a_pattern_and_a_bound(value, expected):
    acc = parse_accept(value, "abc")
    assert (acc.gate, acc.pattern, acc.bound_pct, acc.reason) == expected


@pytest.mark.parametrize(("value", "why"), [
    ("counts", "does not read as"),                           # the old form: a whole gate
    ("counts: the copy buys a lock-free path", "does not read as"),
    ("wall, counts unaffected", "does not read as"),          # reason text is never a gate name
    ("both .* +5%: everything", "is not a gate"),
    ("cuonts h2- +5%: typo", "is not a gate"),
    ("counts h2-( +5%: r", "not a regular expression"),
    ("counts h2- +0%: r", "must be above 0"),
    ("counts h2- +5000%: r", "at most"),
    ("counts h2- 5%: r", "does not read as"),
    ("counts h2- +5%", "does not read as"),
    ("counts h2- +5%:   ", "does not read as"),
    ("counts h2- +nan%: r", "does not read as"),
])
def test_accept_tag_of_any_other_shape_is_an_error_so_a_typo_never_passes(value, why):
    with pytest.raises(ValueError, match=why):
        parse_accept(value)


def test_allowed_ratio_takes_each_commits_largest_bound_and_compounds_over_commits():
    accepts = [Accept("counts", "h2-", 5.0, "r", "c1"), Accept("counts", "first", 2.0, "r", "c1"),
               Accept("counts", "h2-", 10.0, "r", "c2"), Accept("wall", ".", 50.0, "r", "c3")]
    assert allowed_ratio(accepts, "counts", "track('h2-first-chunk', 'optimized')") == pytest.approx(1.05 * 1.10)
    assert allowed_ratio(accepts, "counts", "track('h4-finish-10k', 'optimized')") is None


def test_flagged_lists_slower_and_newly_failing_benchmarks_only():
    assert flagged(LOG) == [
        "bench_instructions.TrackInstructions.track_instructions('h2-first-chunk', 'optimized')",
        "bench_stream_outputs.TimeStreamOutputs.time_request('optimized', 4000)",
    ]


def test_max_ratio_reads_the_table():
    assert max_ratio(LOG) == (1.02, "bench_instructions.TrackInstructions.track_instructions("
                                    "'h2-first-chunk', 'optimized')")
    assert max_ratio("no table") is None




def test_verdict_fails_on_a_fired_gate_unless_a_tag_covers_every_flagged_benchmark():
    lines, status = verdict({"counts": 1, "wall": 0}, [], {"counts": LOG})
    assert status == 1
    assert lines[0].startswith("asv gate counts: FIRED (2 flagged: ")
    assert lines[1] == "asv gate wall: pass"
    h2 = Accept("counts", "h2-first", 3.0, "r", "c1")
    lines, status = verdict({"counts": 1}, [h2], {"counts": LOG_SLOWER})
    assert status == 0
    assert lines[0] == (f"asv gate counts: FIRED, accepted by asv-accept (1 flagged: {H2_FIRST} < 1.025 (table) "
                        "within +3% (c1))")
    # A failure at HEAD is never accepted, whatever the tags say.
    lines, status = verdict({"counts": 1}, [h2, Accept("counts", ".", 50.0, "r", "c2")], {"counts": LOG})
    assert status == 1
    assert f"{H3_FAILED} failed at HEAD" in lines[0] and "accepted" not in lines[0]
    # Another gate's tag, another benchmark's tag, a bound too small (the table's 1.02 may be up to
    # 1.025), an asv exit without a table: no acceptance.
    for accepts, log in (([Accept("wall", ".", 50.0, "r", "c1")], LOG_SLOWER),
                         ([Accept("counts", "h4-", 50.0, "r", "c1")], LOG_SLOWER),
                         ([Accept("counts", "h2-first", 2.0, "r", "c1")], LOG_SLOWER), ([h2], "")):
        lines, status = verdict({"counts": 1}, accepts, {"counts": log})
        assert status == 1 and "accepted" not in lines[0], lines


def test_verdict_uses_the_exact_ratio_when_stored_results_have_it():
    h2 = [Accept("counts", "h2-first", 2.0, "r", "c1")]
    lines, status = verdict({"counts": 1}, h2, {"counts": LOG_SLOWER}, {H2_FIRST: 1.0195})
    assert (status, lines[0].endswith(f"{H2_FIRST} 1.0195 within +2% (c1))")) == (0, True), lines
    lines, status = verdict({"counts": 1}, h2, {"counts": LOG_SLOWER}, {H2_FIRST: 1.0204})
    assert (status, lines[0].endswith(f"{H2_FIRST} 1.0204, past +2%)")) == (1, True), lines


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@localhost", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def _commit(repo, message, files=None):
    for path, text in (files or {}).items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


def _repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    return repo


# What `git merge --squash` writes: the squashed commits' messages, indented.
SQUASH = """Squashed commit of the following:

commit 0123456789abcdef0123456789abcdef01234567
Author: t <t@localhost>

    Slower on purpose

    asv-accept: wall . +50%: quoted from an old commit
"""


def test_range_accepts_reads_every_commit_of_the_range_and_only_its_trailers(tmp_path, monkeypatch):
    repo = _repo(tmp_path)
    monkeypatch.chdir(repo)
    base = _commit(repo, "Base\n\nasv-accept: wall . +50%: before the range, never read")
    first = _commit(repo, "First\n\nasv-accept: counts h2- +5%: one\nasv-accept: wall sse +20%: two")
    _commit(repo, "Body\n\nasv-accept: counts . +50%: mid-body, then prose\n\nMore prose.")
    _commit(repo, "Prose\n\nA paragraph of prose that quotes a tag on a line of its own.\n"
                  "asv-accept: counts . +50%: in prose")
    _commit(repo, SQUASH)
    _commit(repo, "Mentions asv-accept: counts . +50%: in the subject")
    accepts, notes = range_accepts(base, "HEAD")
    assert [(a.gate, a.pattern, a.bound_pct, a.commit) for a in accepts] == [
        ("counts", "h2-", 5.0, first), ("wall", "sse", 20.0, first)]
    assert len(notes) == 3 and all("ignored: not trailers" in n for n in notes), notes
    _commit(repo, "Typo\n\nasv-accept: counts: the old form")
    with pytest.raises(ValueError, match="does not read as"):
        range_accepts(base, "HEAD")


WALL_TABLE = """\
| Change   | Before [83069378]    | After [9f1c2a3b]    |   Ratio | Benchmark (Parameter)                                     |
|----------|----------------------|---------------------|---------|-----------------------------------------------------------|
| +        | 1.50±0.01μs          | {after}±0.01μs         |    {ratio} | bench_sse.TimeChatChunk.time_encode('optimized', 'first') |
"""
# A scripted stand-in for asv (the real one builds environments and measures for minutes): every
# `python -m asv continuous` prints $FAKE_ASV_TABLE and exits 1, as asv does on a slowdown.
FAKE_PYTHON = f"""#!/bin/bash
if [ "${{1:-}} ${{2:-}}" = "-m asv" ]; then
    [ "${{3:-}}" != continuous ] || {{ cat "$FAKE_ASV_TABLE"; exit 1; }}
    exit 0
fi
exec {sys.executable} "$@"
"""


def _guard_repo(tmp_path, ci_script=None):
    """A repository whose first commit holds the guard of this tree (or ``ci_script``)."""
    repo = _repo(tmp_path)
    files = {path: (ROOT / path).read_text() for path in ("scripts/asv_ci.sh", "benchmarks/gate.py",
                                                           "benchmarks/__init__.py", "asv.conf.json")}
    if ci_script is not None:
        files["scripts/asv_ci.sh"] = ci_script
    return repo, _commit(repo, "base: the guard", files)


def _ci_step(tmp_path, repo, base, ratio=1.07):
    """``bash scripts/asv_ci.sh BASE HEAD`` in ``repo`` (wall gate only; asv scripted)."""
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    table = tmp_path / "table.txt"
    table.write_text(WALL_TABLE.format(after=f"{1.5 * ratio:.2f}", ratio=f"{ratio:.2f}"))
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHON": str(fake), "FAKE_ASV_TABLE": str(table),
           "ASV_GATES": "wall", "ASV_RETRIES": "1", "ASV_LOG_DIR": str(tmp_path / "logs"),
           "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    proc = subprocess.run(["bash", "scripts/asv_ci.sh", base, "HEAD"], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def test_ci_step_is_judged_by_the_guard_of_base_not_by_the_change(tmp_path):
    repo, base = _guard_repo(tmp_path)
    weak = (repo / "benchmarks/gate.py").read_text().replace("status = 1", "status = 0")
    _commit(repo, "A change that weakens its judge", {"benchmarks/gate.py": weak})
    status, out = _ci_step(tmp_path, repo, base)
    assert status == 1, out
    assert "asv gate wall: FIRED (1 flagged: bench_sse.TimeChatChunk.time_encode('optimized', 'first')" in out
    assert f"the guard of {base[:8]} judges" in out
    assert "this range changes the guard (benchmarks/gate.py )" in out
    assert not list((tmp_path / "tmp").iterdir())  # the judge's folder is removed


def test_ci_step_bootstraps_from_head_when_base_predates_the_rule(tmp_path):
    repo, base = _guard_repo(tmp_path, ci_script="#!/usr/bin/env bash\necho old guard; exit 0\n")
    _commit(repo, "The guard of this tree", {"scripts/asv_ci.sh": (ROOT / "scripts/asv_ci.sh").read_text()})
    status, out = _ci_step(tmp_path, repo, base)
    assert status == 1, out
    assert "predates the judge-from-BASE rule" in out and "old guard" not in out
    assert "asv gate wall: FIRED" in out


def test_ci_step_reads_the_tags_of_every_commit_in_the_range_within_their_bound(tmp_path):
    repo, base = _guard_repo(tmp_path)
    tagged = _commit(repo, "Slower on purpose\n\nasv-accept: wall TimeChatChunk +10%: the check buys safety")
    _commit(repo, "A README line, no tag")
    status, out = _ci_step(tmp_path, repo, base)
    assert status == 0, out
    assert f"asv: asv-accept in {tagged[:8]}: wall TimeChatChunk +10%: the check buys safety" in out
    assert "asv gate wall: FIRED, accepted by asv-accept (1 flagged: " in out
    status, out = _ci_step(tmp_path, repo, base, ratio=1.12)
    assert status == 1 and "past +10%" in out, out


@pytest.mark.parametrize(("message", "expected_status", "expected"), [
    (SQUASH, 1, "ignored: not trailers of its message"),
    ("Slower\n\nasv-accept: wall, counts unaffected", 2, "does not read as"),
    ("Slower\n\nasv-accept: counts TimeChatChunk +10%: the other gate", 1, "no asv-accept names it"),
    ("Slower\n\nasv-accept: wall TimeWakeups +10%: another benchmark", 1, "no asv-accept names it"),
])
def test_ci_step_does_not_accept_what_no_trailer_names(tmp_path, message, expected_status, expected):
    repo, base = _guard_repo(tmp_path)
    _commit(repo, message)
    status, out = _ci_step(tmp_path, repo, base)
    assert status == expected_status, out
    assert expected in out


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


def test_summary_gives_each_gates_verdict_moved_benchmarks_and_accepting_tags():
    tag = Accept("counts", "h2-first", 3.0, "the check buys safety", "c1abcdef99")
    logs = {"counts": LOG, "wall": ""}
    lines, _ = verdict({"counts": 1, "wall": 0}, [tag], logs)
    text = summary("83069378aa", "9f1c2a3bbb", lines, logs, [tag])
    assert [row[0] for row in moved(LOG)] == ["+", "!", "-"]  # the unchanged row is left out
    assert text.startswith("## asv guard: `83069378..9f1c2a3b`")
    assert "### counts: ❌ FIRED\n" in text and "### wall: ✅ pass\n" in text
    assert f"| + | 11.9k | 12.1k | 1.02 | {H2_FIRST} |" in text
    assert "| - | 1.50±0.01μs | 1.20±0.01μs | 0.80 | bench_sse.TimeChatChunk.time_encode('optimized', 'first') |" in text
    assert f"{H3_FAILED} failed at HEAD" in text
    assert text.endswith("### wall: ✅ pass\n\nNo benchmark moved.\n")  # and no tag line for wall
    assert "Accepted by: `c1abcdef` h2-first +3%: the check buys safety" in text


def test_summary_text_to_the_character_with_pipes_escaped_and_a_gate_without_a_log():
    tags = [Accept("counts", "h2|first", 3.0, "a|b", "c1abcdef99"), Accept("counts", "sse", 2.5, "ok", "d2abcdef99"),
            Accept("wall", "x", 1.0, "w", "e3abcdef99")]
    lines = ["asv gate counts: FIRED (1 flagged: a|b 1.02)", "asv gate wall: pass"]
    assert summary("83069378aa", "9f1c2a3bbb", lines, {"counts": LOG}, tags) == "\n".join([
        "## asv guard: `83069378..9f1c2a3b`", "", "### counts: ❌ FIRED", "",
        "| change | before | after | ratio | benchmark |", "|---|---|---|---|---|",
        f"| + | 11.9k | 12.1k | 1.02 | {H2_FIRST} |", f"| ! | 7.93±0.1ms | failed | n/a | {H3_FAILED} |",
        "| - | 1.50±0.01μs | 1.20±0.01μs | 0.80 | bench_sse.TimeChatChunk.time_encode('optimized', 'first') |", "",
        "Verdict: FIRED (1 flagged: a\\|b 1.02)", "",
        "Accepted by: `c1abcdef` h2\\|first +3%: a\\|b; `d2abcdef` sse +2.5%: ok", "",
        "### wall: ✅ pass", "", "No log.", "", "Accepted by: `e3abcdef` x +1%: w", ""])


def test_verdict_command_appends_the_summary_to_the_file_it_is_given(tmp_path, capsys, monkeypatch):
    from benchmarks.gate import main

    repo = _repo(tmp_path)
    monkeypatch.chdir(repo)  # NOTE: in-process, so that mutation testing sees the --summary path
    base = _commit(repo, "base")
    head = _commit(repo, "slower\n\nasv-accept: counts h2-first +3%: on purpose")
    log, out = tmp_path / "counts.log", tmp_path / "summary.md"
    log.write_text(LOG_SLOWER)
    out.write_text("earlier step\n")
    assert main(["verdict", base, head, "counts=1", "--log", f"counts={log}", "--summary", str(out)]) == 0
    assert capsys.readouterr().out.endswith(f"asv: Markdown summary appended to {out}\n")
    text = out.read_text()
    assert text.startswith("earlier step\n## asv guard: ") and "### counts: ✅ FIRED, accepted by asv-accept" in text
    assert text.endswith(f"Accepted by: `{head[:8]}` h2-first +3%: on purpose\n\n")  # a blank line after it


COUNTS_TABLE = """\
| Change   | Before [83069378]    | After [9f1c2a3b]    |   Ratio | Benchmark (Parameter)                                     |
|----------|----------------------|---------------------|---------|-----------------------------------------------------------|
| +        | 11.9k                | 12.1k               |    {ratio} | bench_instructions.TrackInstructions.track_instructions('h2-first-chunk', 'optimized') |
"""
# A scripted asv that judges as asv does: `continuous --factor F` flags (exit 1) a ratio above F.
JUDGING_PYTHON = f"""#!{sys.executable}
import os, sys
args = sys.argv[1:]
if args[:2] != ["-m", "asv"]:
    os.execv({sys.executable!r}, [{sys.executable!r}, *args])
if args[2:3] == ["continuous"]:
    bench = args[args.index("-b") + 1]
    ratio = float(os.environ["FAKE_COUNTS_RATIO" if "instructions" in bench else "FAKE_WALL_RATIO"])
    table = os.environ["FAKE_COUNTS_TABLE" if "instructions" in bench else "FAKE_WALL_TABLE"]
    print(open(table).read().format(ratio=f"{{ratio:.2f}}", after=f"{{1.5 * ratio:.2f}}"))
    sys.exit(1 if ratio > float(args[args.index("--factor") + 1]) else 0)
"""


def _both_gates(tmp_path, repo, base, counts_ratio, wall_ratio):
    """``bash scripts/asv_ci.sh BASE HEAD`` with both gates, each slowed by its ratio."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("python", JUDGING_PYTHON), ("valgrind", "#!/bin/sh\nexit 0\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "counts.txt").write_text(COUNTS_TABLE)
    (tmp_path / "wall.txt").write_text(WALL_TABLE)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path), "PYTHON": str(bin_dir / "python"),
           "FAKE_COUNTS_TABLE": str(tmp_path / "counts.txt"), "FAKE_WALL_TABLE": str(tmp_path / "wall.txt"),
           "FAKE_COUNTS_RATIO": str(counts_ratio), "FAKE_WALL_RATIO": str(wall_ratio), "ASV_RETRIES": "1",
           "ASV_LOG_DIR": str(tmp_path / "logs"), "TMPDIR": str(tmp_path / "tmp")}
    proc = subprocess.run(["bash", "scripts/asv_ci.sh", base, "HEAD"], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize(("counts_ratio", "wall_ratio", "fired"), [
    (1.01, 1.0, []), (1.02, 1.0, ["counts"]),  # counts: factor 1.015, so a 2% slowdown is caught
    (1.0, 1.19, []), (1.0, 1.21, ["wall"]),    # wall: factor 1.2
])
def test_ci_step_gates_fire_at_their_documented_factors(tmp_path, counts_ratio, wall_ratio, fired):
    repo, base = _guard_repo(tmp_path)
    _commit(repo, "A change")
    status, out = _both_gates(tmp_path, repo, base, counts_ratio, wall_ratio)
    assert "factor 1.015 ===" in out and "factor 1.2 ===" in out, out
    assert status == (1 if fired else 0), out
    for gate in ("counts", "wall"):
        assert (f"asv gate {gate}: FIRED" in out) == (gate in fired), out
        assert (f"asv gate {gate}: pass" in out) == (gate not in fired), out


def _results(folder, rev: str, values: list[float]) -> None:
    import json

    name = "bench_instructions.TrackInstructions.track_instructions"
    results = {name: [values, [["'h2-first-chunk'"], ["'legacy'", "'optimized'"]], "v"]}
    (folder / f"{rev[:8]}-env-x.json").write_text(json.dumps({"result_columns": ["result", "params", "version"],
                                                              "results": results}))


def test_gate_command_line_prints_what_the_guard_script_reads(tmp_path, capsys):
    from benchmarks.gate import main

    log = tmp_path / "counts.log"
    log.write_text(LOG)

    def out(*argv: str) -> tuple[int, str]:
        status = main(list(argv))
        return status, capsys.readouterr().out

    assert out("flagged", str(log)) == (0, "|".join("^" + re.escape(n) + "$" for n in (H2_FIRST, H3_FAILED)) + "\n")
    assert out("ratio", str(log)) == (0, f"1.020 {H2_FIRST}\n")
    assert out("ratio", str(log), "--match", "^bench_sse") == (0, "0.800 bench_sse.TimeChatChunk.time_encode"
                                                                "('optimized', 'first')\n")
    assert out("ratio", str(log), "--match", "nothing") == (0, "n/a\n")
    _results(tmp_path, "aaaaaaaa11", [68_000.0, 11_900.0])
    _results(tmp_path, "bbbbbbbb22", [69_360.0, 11_662.0])
    track = "bench_instructions.TrackInstructions.track_instructions"
    assert out("exact", str(tmp_path), "aaaaaaaa11", "bbbbbbbb22") == (
        0, f"1.0200 {track}('h2-first-chunk', 'legacy'); lowest 0.9800\n")
    assert out("exact", str(tmp_path), "aaaaaaaa11", "bbbbbbbb22", "--match", "^bench_sse") == (0, "n/a\n")
    with pytest.raises(SystemExit) as exc:
        main([])  # a command is required
    assert exc.value.code == 2 and "required: command" in capsys.readouterr().err


def test_gate_verdict_command_reads_the_range_the_logs_and_stored_results(tmp_path, capsys, monkeypatch):
    from benchmarks.gate import main

    repo = _repo(tmp_path)
    monkeypatch.chdir(repo)
    base = _commit(repo, "Base")
    head = _commit(repo, "Slower\n\nA quoted tag:\nasv-accept: wall . +50%: quoted\n\n"
                         "asv-accept: counts h2-first +2%: the check buys safety")
    log = tmp_path / "counts=1.log"  # a path may hold "="
    log.write_text(LOG_SLOWER)
    results = tmp_path / "results"
    results.mkdir()
    _results(results, base, [68_000.0, 11_900.0])
    _results(results, head, [68_000.0, 12_138.0])  # exactly +2.0%, within the tag
    status = main(["verdict", base, head, "counts=1", "wall=0", "--log", f"counts={log}", "--results", str(results)])
    assert (status, capsys.readouterr().out.splitlines()) == (0, [
        f"asv: asv-accept in {head[:8]}: counts h2-first +2%: the check buys safety",
        f"asv: 1 asv-accept line(s) in {head[:8]} ignored: not trailers of its message (quoted or in the body)",
        f"asv gate counts: FIRED, accepted by asv-accept (1 flagged: {H2_FIRST} 1.0200 within +2% ({head[:8]}))",
        "asv gate wall: pass"])
    # without stored results the table's 1.02 may be up to 1.025: past the tag's +2%
    assert main(["verdict", base, head, "counts=1", "--log", f"counts={log}",
                 "--results", str(tmp_path / "missing")]) == 1
    assert f"{H2_FIRST} < 1.025 (table), past +2%" in capsys.readouterr().out
    _commit(repo, "Typo\n\nasv-accept: counts: the old form")
    assert main(["verdict", base, "HEAD", "counts=0"]) == 2
    assert "does not read as" in capsys.readouterr().err
    assert main(["verdict", base, "no-such-rev", "counts=0"]) == 2
    assert capsys.readouterr().err.startswith(f"asv: git log {base}..no-such-rev failed: ")
    with pytest.raises(SystemExit, match="expected GATE=VALUE with GATE one of counts, wall, got 'speed=1'"):
        main(["verdict", base, head, "speed=1"])
    with pytest.raises(SystemExit, match="got 'counts'"):
        main(["verdict", base, head, "counts"])


def test_accept_tag_bounds_and_error_texts_name_the_commit():
    assert parse_accept("counts h2- +0.5%: r").bound_pct == 0.5 and parse_accept("wall . +1000%: r").bound_pct == 1000
    with pytest.raises(ValueError, match=r"^asv-accept in 0123abcd: 'x' does not read as asv-accept: GATE"):
        parse_accept("x", "0123abcd99")
    with pytest.raises(ValueError, match=r"^asv-accept: 'both' is not a gate \(choose from counts, wall; one per"):
        parse_accept("both . +5%: r")
    accepts, notes = commit_accepts("0123abcd99", ["counts . +5%: r"], "S\n\nasv-accept: a\nasv-accept: b\n")
    assert [a.commit for a in accepts] == ["0123abcd99"]
    assert notes == ["asv: 1 asv-accept line(s) in 0123abcd ignored: not trailers of its message (quoted or in the body)"]


def test_range_accepts_keeps_every_commits_tags_and_reads_the_subject_line(tmp_path, monkeypatch):
    repo = _repo(tmp_path)
    monkeypatch.chdir(repo)
    base = _commit(repo, "Base")
    one = _commit(repo, "One\n\nasv-accept: counts h2- +5%: one")
    two = _commit(repo, "Two\n\nBody with a \x1f unit separator.\n\nasv-accept: wall sse +20%: two")
    _commit(repo, "asv-accept: counts . +50%: a subject is no trailer")
    accepts, notes = range_accepts(base, "HEAD")
    assert sorted((a.commit, a.pattern) for a in accepts) == sorted([(one, "h2-"), (two, "sse")])
    assert len(notes) == 1 and "ignored" in notes[0]
    with pytest.raises(subprocess.CalledProcessError):
        range_accepts(base, "no-such-rev")


def test_allowed_ratio_of_a_bound_under_one_percent():
    assert allowed_ratio([Accept("counts", ".", 0.5, "r", "c1")], "counts", "x") == pytest.approx(1.005)


def test_table_readers_skip_short_lines_read_tilde_ratios_and_keep_the_first_of_a_tie():
    tie = LOG.replace("~1.00", "~1.02") + "| a | b | c | d\n"
    assert max_ratio(tie) == (1.02, H2_FIRST)  # the first row of the two at 1.02; the short line skipped
    assert max_ratio(tie, match=".") == (1.02, H2_FIRST)
    assert max_ratio(LOG.replace("~1.00", "~1.30"))[0] == 1.30
    assert flagged(tie) == [H2_FIRST, H3_FAILED]


def test_exact_ratios_keep_matching_positive_results_present_at_both_commits(tmp_path):
    import json

    from benchmarks.gate import exact_ratios

    columns = ["result", "params", "version", "started_at"]  # a row may lack later columns
    for rev, wall_s, extra in (("aaaaaaaa11", [2e-6, 1e-6], {}),
                               ("bbbbbbbb22", [3e-6, 0.0], {"bench_sse.T.time_new": [[1.0], [], "v"]})):
        results = {"bench_other.T.time_y": [[5.0], [], "v"], "bench_sse.T.time_encode": [wall_s, [["'a'", "'b'"]], "v"],
                   **extra}
        (tmp_path / f"{rev[:8]}-env-x.json").write_text(json.dumps({"result_columns": columns, "results": results}))
    ratios = exact_ratios(str(tmp_path), "aaaaaaaa11", "bbbbbbbb22", r"^bench_sse")
    # 0.0 (no result) and a benchmark new at HEAD are left out
    assert ratios == {"bench_sse.T.time_encode('a')": pytest.approx(1.5)}


def test_verdict_judges_every_gate_and_says_when_asv_left_no_table():
    lines, status = verdict({"wall": 0, "counts": 1}, [], {})
    assert (lines, status) == (["asv gate wall: pass", "asv gate counts: FIRED (exit 1)"], 1)
    assert verdict({"counts": 1}, [], {"counts": LOG})[0][0] == (
        f"asv gate counts: FIRED (2 flagged: {H2_FIRST} < 1.025 (table), no asv-accept names it; "
        f"{H3_FAILED} failed at HEAD)")
    nondet = verdict({"counts": 1}, [], {"counts": LOG_SLOWER + "NonDeterministic\n"})[0][0]
    assert nondet == (f"asv gate counts: FIRED (1 flagged: {H2_FIRST} < 1.025 (table), no asv-accept names it) "
                      "instruction counts were not reproducible (see the log)")
    two = [Accept("counts", "h2-", 2.5, "r", "0123abcd99"), Accept("counts", "first", 1.0, "r", "4567efab99")]
    lines, status = verdict({"counts": 1}, two, {"counts": LOG_SLOWER}, {H2_FIRST: 1.025 * 1.01})
    assert status == 0 and lines[0].endswith("within +3.525% (0123abcd, 4567efab))"), lines
