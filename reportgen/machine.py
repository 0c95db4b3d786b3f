"""Where a report was made: CPU, cores, memory, GPU, versions and the commit."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _gpu() -> str:
    try:
        import torch
    except ImportError:
        return "none (torch not installed)"
    if not torch.cuda.is_available():
        return "none"
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return ", ".join(names)


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _version(module: str) -> str:
    try:
        return __import__(module).__version__
    except (ImportError, AttributeError):
        return "not installed"


def commit() -> str:
    """HEAD's short hash, with ``+dirty`` when the working tree has changes."""
    head = _run(["git", "rev-parse", "--short", "HEAD"]) or "unknown"
    return head + ("+dirty" if _run(["git", "status", "--porcelain", "--untracked-files=no"]) else "")


def describe(py_spy: str) -> dict[str, str]:
    """The machine and software a report ran on, as label -> value."""
    memory = _memory_gib()
    return {
        "CPU": _cpu_model(),
        "cores": f"{os.cpu_count()} ({len(os.sched_getaffinity(0))} usable)",
        "memory": f"{memory} GiB" if memory else "unknown",
        "GPU": _gpu(),
        "OS": platform.platform(),
        "Python": sys.version.split()[0],
        "torch": _version("torch"),
        "py-spy": _run([py_spy, "--version"]).removeprefix("py-spy "),
        "loadgen": _version("loadgen"),
        "commit": commit(),
    }
