"""Where a report goes, and the checks that keep it from writing over anything it did not make.

Full-scale reports go to ``reports/<scenario>/`` (committed); a run at ``--scale`` below 1 goes
to the git-ignored scratch folder ``results/reports/`` unless told otherwise, and never into
``reports/``. An output directory must be new, empty, or a previous report of the same kind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from loadgen.report.jsonfile import JsonFileError, read_json

ROOT = Path(__file__).resolve().parent.parent
REPORTS_DIR = ROOT / "reports"
SCRATCH_DIR = ROOT / "results" / "reports"
#: Every entry a report (or the bench report) writes at its top level.
REPORT_ENTRIES = frozenset({"index.html", "README.md", "summary.json", "results", "raw", "profiles",
                            "flamegraphs"})
#: A report's summary.json is tens of KB; anything past this is not one.
MAX_SUMMARY_BYTES = 16 * 2**20


class OutputError(ValueError):
    """The output directory cannot take this report; nothing was run or written."""


def default_dir(scenario: str, scale: float = 1.0) -> Path:
    """``reports/<scenario>`` at full scale, else ``results/reports/<scenario>-scale<S>``."""
    return REPORTS_DIR / scenario if scale == 1.0 else SCRATCH_DIR / f"{scenario}-scale{scale:g}"


def check(out_dir: Path, scenario: str, scale: float = 1.0) -> None:
    """Raise ``OutputError`` unless ``out_dir`` may receive a ``scenario`` report at ``scale``."""
    out_dir = Path(out_dir)
    if scale != 1.0 and _is_within(out_dir, REPORTS_DIR):
        raise OutputError(f"{out_dir}: a run at scale {scale:g} cannot go into {REPORTS_DIR}, which "
                          f"holds the full-scale reports; leave --out-dir out (scratch: {SCRATCH_DIR})")
    for parent in (out_dir, *out_dir.parents):
        if parent.exists() and not parent.is_dir():
            raise OutputError(f"{parent} is a file, not a directory")
    if not out_dir.exists() or not any(out_dir.iterdir()):
        return
    foreign = sorted(p.name for p in out_dir.iterdir() if p.name not in REPORT_ENTRIES)
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise OutputError(f"{out_dir} holds files this report did not make ({shown}); "
                          "choose a new or empty directory")
    made_for, says = _scenario_of(out_dir)
    if made_for != scenario:
        raise OutputError(f"{out_dir} is not a previous {scenario!r} report ({says}); "
                          "choose a new or empty directory")


@contextlib.contextmanager
def staging(out_dir: Path, scenario: str, scale: float = 1.0) -> Iterator[Path]:
    """A new private directory beside ``out_dir`` to build a report in, moved to ``out_dir``
    (``replace``) when the block ends, removed when it raises."""
    # NOTE: every file is written into a directory made here, so nothing is ever written through a
    # link planted in out_dir; the old out_dir is moved aside and removed, never written into.
    out_dir = Path(out_dir).resolve()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        yield tmp
        replace(tmp, out_dir, scenario, scale)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def replace(new: Path, out_dir: Path, scenario: str, scale: float = 1.0) -> None:
    """Move the finished report ``new`` to ``out_dir``, removing the previous report there."""
    check(out_dir, scenario, scale)
    old = None
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
        out_dir.rename(old)
    new.rename(out_dir)
    if old is not None:
        shutil.rmtree(old)


def _scenario_of(directory: Path) -> tuple[str | None, str]:
    """The scenario its summary.json names (read bounded), and how a message says so."""
    try:
        summary = read_json(directory / "summary.json", MAX_SUMMARY_BYTES)
    except JsonFileError as error:
        return None, f"no readable summary.json: {error}"
    scenario = summary.get("scenario") if isinstance(summary, dict) else None
    if not isinstance(scenario, str):
        return None, "its summary.json names no scenario"
    return scenario, f"its summary.json names {scenario!r}"


def _is_within(path: Path, folder: Path) -> bool:
    return path.resolve() == folder.resolve() or folder.resolve() in path.resolve().parents
