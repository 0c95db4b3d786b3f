"""Safe output: a report never writes over files it did not make, and toy runs stay out of reports/."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from reportgen import output
from tests.reportgen.conftest import run_cli

#: A reportgen child refused a hostile file maps far less; the old reader grew past this on /dev/zero.
HOSTILE_MEMORY = 3 * 2**30


def _fake_report(directory: Path, scenario: str) -> Path:
    (directory / "results").mkdir(parents=True)
    (directory / "summary.json").write_text(json.dumps({"scenario": scenario}))
    (directory / "index.html").write_text("<html></html>")
    return directory


def test_new_or_empty_directory_is_fine(tmp_path: Path):
    output.check(tmp_path / "new" / "deeper", "storm")
    output.check(tmp_path, "storm")


def test_previous_report_of_the_same_scenario_may_be_replaced(tmp_path: Path):
    old = _fake_report(tmp_path / "storm", "storm")
    new = _fake_report(tmp_path / "new", "storm")
    (new / "README.md").write_text("fresh")
    output.replace(new, old, "storm")
    assert (old / "README.md").read_text() == "fresh"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["storm"]


@pytest.mark.parametrize("make", ["file", "foreign", "other-scenario", "no-summary", "file-parent"])
def test_refused_outputs(tmp_path: Path, make: str):
    target = tmp_path / "out"
    if make == "file":
        target.write_text("keep me")
    elif make == "foreign":
        _fake_report(target, "storm")
        (target / ".git").mkdir()
    elif make == "other-scenario":
        _fake_report(target, "long-output")
    elif make == "no-summary":
        (target / "results").mkdir(parents=True)
    else:
        target.write_text("keep me")
        target = target / "inner"
    with pytest.raises(output.OutputError):
        output.check(target, "storm")


def test_a_scaled_down_run_never_goes_into_reports():
    with pytest.raises(output.OutputError, match="scale 0.5"):
        output.check(output.REPORTS_DIR / "storm", "storm", 0.5)
    assert output.default_dir("storm", 0.5).parent == output.SCRATCH_DIR
    assert output.default_dir("storm") == output.REPORTS_DIR / "storm"


@pytest.mark.parametrize("flags", [
    ["--out-dir", "{file}"], ["--out-dir", "{foreign}"], ["--out-dir", "{tree}"],
    ["--rate", "0"], ["--rate", "-5"], ["--scale", "0"], ["--scale", "2"], ["--duration", "0"],
    ["--scale", "0.5", "--out-dir", "{reports}"],
])
def test_cli_refuses_before_any_load(tmp_path: Path, flags: list[str]):
    """Each of these exits 2 at parse time and leaves the target as it was."""
    file = tmp_path / "file.txt"
    file.write_text("keep me")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.md").write_text("mine")
    paths = {"file": file, "foreign": foreign, "tree": output.ROOT, "reports": output.REPORTS_DIR / "storm"}
    proc = run_cli("run", "storm", *[f.format(**paths) for f in flags], timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert file.read_text() == "keep me" and (foreign / "notes.md").read_text() == "mine"
    assert (output.ROOT / ".git").exists()


def test_bench_refuses_a_foreign_directory(tmp_path: Path):
    (tmp_path / "notes.md").write_text("mine")
    proc = run_cli("bench", "--out-dir", str(tmp_path), timeout=120)
    assert proc.returncode == 2 and "notes.md" in proc.stderr


def _hostile_summaries(folder: Path) -> dict[str, Path]:
    """Directories whose summary.json is /dev/zero, a FIFO, or JSON nested past any bound, by name."""
    made = {}
    for name in ("dev-zero", "fifo", "deep"):
        made[name] = folder / name
        made[name].mkdir()
    (made["dev-zero"] / "summary.json").symlink_to("/dev/zero")
    os.mkfifo(made["fifo"] / "summary.json")
    (made["deep"] / "summary.json").write_text('{"scenario": ' + "[" * 100_000 + "]" * 100_000 + "}")
    return made


def test_run_refuses_an_out_dir_whose_summary_is_not_a_file_at_parse_time(tmp_path: Path):
    for name, out_dir in _hostile_summaries(tmp_path).items():
        proc = run_cli("run", "storm", "--scale", "0.05", "--out-dir", str(out_dir), timeout=120,
                       max_memory=HOSTILE_MEMORY)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (name, proc.stderr[-800:])
        error = proc.stderr.strip().splitlines()[-1]
        assert "no readable summary.json" in error and str(out_dir) in error, (name, error)


def test_table_names_a_summary_that_is_not_a_file_in_one_line(tmp_path: Path):
    for name, made in _hostile_summaries(tmp_path).items():
        reports = tmp_path / f"reports-{name}"
        reports.mkdir()
        made.rename(reports / "storm")
        proc = run_cli("table", "--reports-dir", str(reports), timeout=120, max_memory=HOSTILE_MEMORY)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1, (name, proc.stderr[-800:])
        assert "storm/summary.json" in lines[0], (name, lines[0])


def test_bench_never_writes_through_a_planted_link(tmp_path: Path):
    from reportgen import bench

    out, victims = tmp_path / "bench", tmp_path / "victims"
    out.mkdir()
    victims.mkdir()
    (victims / "summary.json").write_text(json.dumps({"scenario": "bench", "keep": "me"}))
    (victims / "notes.md").write_text("keep me")
    (out / "summary.json").symlink_to(victims / "summary.json")
    (out / "README.md").symlink_to(victims / "notes.md")
    data = {"scenario": "bench", "h5_regime": {}, "h3_growth": {"command": "python -m benchmarks.h3_growth",
                                                                "rows": []}}
    assert bench.save(data, out) == out
    assert (victims / "notes.md").read_text() == "keep me"
    assert json.loads((victims / "summary.json").read_text())["keep"] == "me"
    assert not (out / "README.md").is_symlink() and not (out / "summary.json").is_symlink()
    assert (out / "README.md").read_text() == bench.readme(data)
    assert json.loads((out / "summary.json").read_text()) == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench", "victims"]  # nothing left aside
