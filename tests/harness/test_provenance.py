"""The code fingerprint: what makes a published figure stale, and what does not."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from harness import provenance


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the measured packages, to edit."""
    for package in provenance.MEASURED:
        shutil.copytree(provenance.ROOT / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_a_copy_has_the_same_fingerprint(tree: Path):
    assert provenance.fingerprint(tree) == provenance.fingerprint()


def test_a_code_change_changes_it(tree: Path):
    before = provenance.fingerprint(tree)
    _edit(tree / "reference_impl/server/wakeups.py", "await asyncio.sleep(0)", "await asyncio.sleep(0.0)")
    assert provenance.fingerprint(tree) != before


def test_a_change_in_loadgen_changes_it(tree: Path):
    before = provenance.fingerprint(tree)
    path = tree / "loadgen/run/sse.py"
    path.write_text(path.read_text() + "\nEXTRA = 1\n")
    assert provenance.fingerprint(tree) != before


def test_comments_docstrings_and_layout_do_not(tree: Path):
    before = provenance.fingerprint(tree)
    path = tree / "reference_impl/server/wakeups.py"
    text = path.read_text()
    text = text.replace('"""H1: how', '"""H1 (reworded docstring): how', 1)
    path.write_text("# a new comment\n" + text.replace("\n\n\nclass", "\n\n\n# note\nclass") + "\n\n")
    assert provenance.fingerprint(tree) == before


def test_never_measured_and_excluded_parts_do_not(tree: Path):
    before = provenance.fingerprint(tree, exclude=(provenance.TORCH_ENGINE,))
    (tree / "loadgen/selftest/testserver.py").write_text("X = 1\n")
    (tree / "loadgen/sweep/driver.py").write_text("X = 2\n")
    (tree / "loadgen/run/ray_pool.py").write_text("X = 3\n")
    model = tree / provenance.TORCH_ENGINE / "model.py"
    model.write_text(model.read_text() + "\nY = 2\n")
    assert provenance.fingerprint(tree, exclude=(provenance.TORCH_ENGINE,)) == before
    assert provenance.fingerprint(tree) != provenance.fingerprint(provenance.ROOT)


def test_a_record_is_fresh_only_while_the_code_is_the_same(tree: Path):
    record = {"fingerprint": provenance.fingerprint(tree), "fingerprint_excludes": []}
    assert provenance.is_fresh(record, tree)
    _edit(tree / "reference_impl/server/wakeups.py", "await asyncio.sleep(0)", "pass")
    assert not provenance.is_fresh(record, tree)


@pytest.mark.parametrize("record", [None, {}, {"commit": "abc"}])
def test_a_missing_fingerprint_is_never_fresh(record):
    assert not provenance.is_fresh(record)


def test_a_fingerprint_is_16_hex_digits_over_code_and_data_files(tree: Path):
    before = provenance.fingerprint(tree)
    assert len(before) == 16 and int(before, 16) >= 0
    (tree / "reference_impl/tokenizer/embedded/chat.jinja").write_text("{% if x %}{{ x }}{% endif %}\n")
    assert provenance.fingerprint(tree) != before  # a data file that is not Python is hashed as bytes
    cache = tree / "loadgen/run/__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "stale.py").write_text("X = 1\n")
    assert all("__pycache__" not in p.as_posix() for p in provenance.measured_files(tree))


def test_a_record_keeps_its_excludes_and_is_fresh_by_them(tree: Path):
    model = tree / provenance.TORCH_ENGINE / "model.py"
    recorded = {"fingerprint": provenance.fingerprint(tree, (provenance.TORCH_ENGINE,)),
                "fingerprint_excludes": [*provenance.NEVER_MEASURED, provenance.TORCH_ENGINE]}
    model.write_text(model.read_text() + "\nY = 2\n")
    assert provenance.is_fresh(recorded, tree)
    assert not provenance.is_fresh({"fingerprint": recorded["fingerprint"]}, tree)  # no excludes: all code


def test_record_names_the_commit_and_what_the_fingerprint_covers(tmp_path: Path):
    rec = provenance.record((provenance.TORCH_ENGINE,))
    assert rec == {"commit": provenance.commit(), "fingerprint": provenance.fingerprint(exclude=(provenance.TORCH_ENGINE,)),
                   "fingerprint_of": ["reference_impl", "loadgen"],
                   "fingerprint_excludes": [*provenance.NEVER_MEASURED, provenance.TORCH_ENGINE]}
    assert provenance.commit(tmp_path) == "unknown"  # outside git
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@localhost"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "a.py").write_text("X = 1\n")
    subprocess.run([*git, "add", "a.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    short = subprocess.run([*git, "rev-parse", "--short", "HEAD"], check=True, capture_output=True, text=True)
    assert provenance.commit(tmp_path) == short.stdout.strip()
    (tmp_path / "a.py").write_text("X = 2\n")
    assert provenance.commit(tmp_path) == short.stdout.strip() + "-dirty"
