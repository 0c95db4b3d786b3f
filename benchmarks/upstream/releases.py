"""The cached place of upstream sglang releases: wheels, their source trees and one venv.

A release is a PyPI wheel (the upstream git history cannot be fetched here, so the unit of
before/after is a release, not a merge commit). `pip download --no-deps` fetches it, its
`sglang/` tree is unzipped under ``<cache>/src/<version>``, and one venv (system site packages,
so the installed CPU torch is reused) holds the few runtime packages the measured modules
import; everything CUDA-only is stubbed (`stubs.py`). The cache is git-ignored.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("SGLANG_UPSTREAM_CACHE", ROOT / ".cache" / "upstream"))

PAIRS = {
    "H1": ("0.5.10.post1", "0.5.11"),   # sglang#22606 (batched wake-ups)
    "H2": ("0.5.10.post1", "0.5.11"),   # sglang#22606 (msgspec SSE chunks)
    "H3": ("0.5.10.post1", "0.5.11"),   # sglang#22548, #22567 (no per-step copy)
    "H4": ("0.5.12.post1", "0.5.13"),   # sglang#25098 (array('q')); 0.5.12.post1 still has lists
    "H5": ("0.5.11", "0.5.12"),         # sglang#23189 (queue-based prefill delayer)
    "H6": ("0.5.10.post1", "0.5.11"),   # sglang#22658 (integer offsets)
}
"""Hot path -> (release before its change, release after), by upload date against merge date."""

VENV_REQUIREMENTS = (
    "psutil", "pybase64", "setproctitle", "orjson", "msgspec", "partial_json_parser", "pyzmq",
    "uvloop", "interegular", "einops", "sentencepiece", "compressed-tensors", "gguf", "dill",
    "transformers==5.6.0",
)
"""What the measured modules import beyond this project's own environment (transformers pinned
as sglang 0.5.11-0.5.13 pin it: a newer one refuses sglang's config registrations)."""


class ReleaseError(RuntimeError):
    """A release could not be fetched, unpacked or measured (the message says which and why)."""


def source_dir(version: str) -> Path:
    """Where release ``version``'s `sglang/` tree lies (the directory to put on `sys.path`)."""
    return CACHE / "src" / version


def venv_python() -> Path:
    return CACHE / "venv" / "bin" / "python"


def _run(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ReleaseError(f"{what} failed ({done.returncode}): {tail[0]}")


def ensure_source(version: str) -> Path:
    """Download (once) and unpack release ``version``; its source directory."""
    target = source_dir(version)
    if (target / "sglang" / "__init__.py").exists():
        return target
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    found = sorted(wheels.glob(f"sglang-{version}-*.whl"))
    if not found:
        _run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
              f"sglang=={version}", "-d", str(wheels)], f"pip download sglang=={version}")
        found = sorted(wheels.glob(f"sglang-{version}-*.whl"))
    if not found:
        raise ReleaseError(f"no wheel of sglang=={version} in {wheels}")
    try:
        with zipfile.ZipFile(found[0]) as wheel:
            wheel.extractall(target, [n for n in wheel.namelist() if n.startswith("sglang/")])
    except zipfile.BadZipFile as exc:
        raise ReleaseError(f"{found[0].name} cannot be unpacked: {exc}") from exc
    return target


def ensure_venv() -> Path:
    """Build (once) the venv that runs every release; its python."""
    python = venv_python()
    stamp = CACHE / "venv" / "requirements.sha1"
    digest = hashlib.sha1("\n".join(VENV_REQUIREMENTS).encode()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == digest:
        return python
    CACHE.mkdir(parents=True, exist_ok=True)
    if not python.exists():
        _run([sys.executable, "-m", "venv", "--system-site-packages", str(CACHE / "venv")], "venv")
    _run([str(python), "-m", "pip", "install", "-q", *VENV_REQUIREMENTS], "pip install into the venv")
    stamp.write_text(digest)
    return python
