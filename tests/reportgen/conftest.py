"""Fixtures: each scenario run once at the smallest scale through the real CLI; headless Chromium."""

from __future__ import annotations

import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from reportgen.scenarios import SCENARIOS, SMALLEST_SCALE
from tests.chromium import chromium_runner

# NOTE: tiny loads keep some processes busy for only tens of ms; 1 kHz sampling makes every
# process's profile non-empty (reports themselves default to 100 Hz).
TEST_RATE = 1000


def torch_engine_listed() -> bool:
    """Whether ``python -m reference_impl --help`` offers the torch engine."""
    help_text = subprocess.run([sys.executable, "-m", "reference_impl", "--help"],
                               capture_output=True, text=True, timeout=120).stdout
    return "torch" in help_text.partition("--engine")[2].partition("\n")[0]


def run_cli(*args: str, env: dict | None = None, timeout: float = 900,
            max_memory: int | None = None) -> subprocess.CompletedProcess:
    """``python -m reportgen ARGS`` as a subprocess (its address space capped at ``max_memory``)."""
    cap = None if max_memory is None else lambda: resource.setrlimit(resource.RLIMIT_AS, (max_memory, max_memory))
    return subprocess.run([sys.executable, "-m", "reportgen", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, preexec_fn=cap)


@pytest.fixture(scope="session", params=sorted(SCENARIOS))
def report(request, tmp_path_factory) -> Path:
    """One scenario's report directory, made at the smallest scale."""
    name = request.param
    if name == "torch" and not torch_engine_listed():
        pytest.skip("`python -m reference_impl --help` lists no torch engine (issue 4 not merged)")
    out = tmp_path_factory.mktemp("reports") / name
    proc = run_cli("run", name, "--scale", str(SMALLEST_SCALE), "--rate", str(TEST_RATE),
                   "--out-dir", str(out))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return out


@pytest.fixture(scope="session")
def chromium() -> Callable[..., subprocess.CompletedProcess]:
    """chromium(profile_dir, *args): headless Chromium run to its end; a skip when it is missing."""
    return chromium_runner()
