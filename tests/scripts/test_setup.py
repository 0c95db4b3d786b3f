"""scripts/setup.sh and scripts/test.sh: the main job's set-up installs no test tools, and apt
failing (its lock held by another install) never stops the set-up; the page tests then skip."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("dirname", "grep", "tail", "printf", "cat")
APT_LOCKED = """#!/bin/sh
echo "apt-get $*" >> "$LOG"
echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)" >&2
exit 100
"""
# A stand-in python: torch importable, pip records what it was asked to install.
PYTHON = """#!/bin/sh
echo "python $*" >> "$LOG"
"""
ROOT_ID = """#!/bin/sh
echo 0
"""


def _bin(tmp_path: Path) -> Path:
    """A PATH with the shell tools setup.sh uses, a root `id`, an apt-get whose lock is held, no chromium."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        (bin_dir / tool).symlink_to(shutil.which(tool))
    for name, text in (("apt-get", APT_LOCKED), ("python", PYTHON), ("id", ROOT_ID)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _setup(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, str]:
    bin_dir, log = _bin(tmp_path), tmp_path / "log"
    env = {"PATH": str(bin_dir), "PYTHON": str(bin_dir / "python"), "LOG": str(log)}
    proc = subprocess.run(["/bin/bash", str(ROOT / "scripts/setup.sh"), *args], capture_output=True,
                          text=True, env=env, timeout=60)
    return proc, log.read_text() if log.exists() else ""


def test_main_job_setup_installs_the_server_extra_alone_and_never_calls_apt(tmp_path):
    proc, log = _setup(tmp_path)
    assert proc.returncode == 0, proc.stderr
    # NOTE: the base install is loadgen alone: the main job needs the reference server's extra.
    assert "pip install -q -e .[server]" in log and "[test]" not in log
    assert "apt-get" not in log


def test_test_setup_warns_and_goes_on_when_apt_is_locked(tmp_path):
    proc, log = _setup(tmp_path, "--test")
    assert proc.returncode == 0, proc.stderr
    assert "pip install -q -e .[test]" in log and "apt-get" in log
    assert "warning: chromium not installed, going on" in proc.stderr
    assert "Could not get lock" in proc.stderr and "apt-get install -y chromium" in proc.stderr


def test_page_tests_skip_naming_the_install_command_without_chromium(tmp_path):
    # NOTE: an empty PATH hides chromium; pytest and its tests start python by its full path.
    env = {**os.environ, "PATH": str(tmp_path), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "tests/reportgen/test_render.py::test_page_renders_in_chromium_with_tables_and_flamegraphs",
                           "tests/loadgen/test_report_html.py::test_page_in_chromium_shows_every_plot"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "failed" not in proc.stdout and "error" not in proc.stdout.lower()
    assert "apt-get update && apt-get install -y chromium" in proc.stdout
