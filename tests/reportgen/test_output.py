"""Safe output: a report never writes over files it did not make, and toy runs stay out of reports/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reportgen import output
from tests.reportgen.conftest import run_cli


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
