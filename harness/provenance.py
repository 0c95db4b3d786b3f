"""Which code a result measured: the commit, and a fingerprint of the measured packages' code.

The fingerprint hashes each module's syntax tree with docstrings dropped (comments never reach
the tree), plus the bytes of package data files, so an edit to a comment or a docstring leaves
a published figure fresh and any change to what runs makes it stale.
"""

from __future__ import annotations

import ast
import hashlib
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: What a measurement runs: the server and the load generator.
MEASURED = ("reference_impl", "loadgen")
#: Parts of those packages no measurement runs: loadgen's self-tests and peers, `loadgen sweep`
#: (reports run single loads) and the Ray pool (reports fork their workers).
NEVER_MEASURED = ("loadgen/selftest/", "loadgen/sweep/", "loadgen/run/ray_pool.py")
#: The torch engine: measured only by scenarios on ``--engine torch``.
TORCH_ENGINE = "reference_impl/engine/torch_engine"
DATA_SUFFIXES = (".json", ".jinja")


def _code_digest(source: bytes) -> bytes:
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, include_attributes=False).encode()


def measured_files(root: Path = ROOT, exclude: tuple[str, ...] = ()) -> list[Path]:
    """The source and data files a measurement depends on, in a fixed order."""
    skipped = (*NEVER_MEASURED, *exclude)
    files = []
    for package in MEASURED:
        for path in sorted((root / package).rglob("*")):
            rel = path.relative_to(root).as_posix()
            if path.suffix not in (".py", *DATA_SUFFIXES) or "__pycache__" in rel:
                continue
            if not any(rel == s or rel.startswith(s.rstrip("/") + "/") for s in skipped):
                files.append(path)
    return files


def fingerprint(root: Path = ROOT, exclude: tuple[str, ...] = ()) -> str:
    """sha256 (16 hex digits) over the measured files' code, docstrings and comments aside."""
    digest = hashlib.sha256()
    for path in measured_files(root, exclude):
        data = path.read_bytes()
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(_code_digest(data) if path.suffix == ".py" else data)
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def commit(root: Path = ROOT) -> str:
    """``git describe --always --dirty`` of the checkout, or ``unknown`` outside git."""
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=root, capture_output=True,
                              text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def record(exclude: tuple[str, ...] = ()) -> dict[str, object]:
    """What a ``summary.json`` keeps: the commit, the fingerprint and what it covers."""
    return {"commit": commit(), "fingerprint": fingerprint(exclude=exclude),
            "fingerprint_of": [*MEASURED], "fingerprint_excludes": [*NEVER_MEASURED, *exclude]}


def is_fresh(provenance: dict | None, root: Path = ROOT) -> bool:
    """Whether a recorded provenance still matches the code here (a missing one never does)."""
    if not provenance or "fingerprint" not in provenance:
        return False
    exclude = tuple(e for e in provenance.get("fingerprint_excludes", ()) if e not in NEVER_MEASURED)
    return provenance["fingerprint"] == fingerprint(root, exclude)
