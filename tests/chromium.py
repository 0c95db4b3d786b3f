"""Headless Chromium for the page tests: found on PATH, or the test skips naming the install command."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

CHROMIUM_INSTALL = "apt-get update && apt-get install -y chromium"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run")


def chromium_runner() -> Callable[..., subprocess.CompletedProcess]:
    """run(profile_dir, *args): headless Chromium run to its end; skips the test when it is missing.

    Chromium is optional (``scripts/setup.sh --test`` installs it as root when apt can), so a
    machine without it skips the page tests with the command that installs it.
    """
    binary = next(filter(None, map(shutil.which, CHROMIUM_NAMES)), None)
    if binary is None:
        pytest.skip(f"Chromium is missing; install it with `{CHROMIUM_INSTALL}` "
                    "(`bash scripts/setup.sh --test` does, as root)")

    def run(profile: Path, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                              capture_output=True, text=True, timeout=180)
    return run
