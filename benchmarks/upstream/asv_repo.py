"""asv over upstream releases: a local git repository with one commit per release tree.

The repository (``<cache>/asv/repo``) holds each release's `sglang/` tree as one commit, tagged
by its version, oldest first, so a new release is one more commit. asv runs the suite in
`benchmarks/upstream/asv_suite` with ``environment_type: existing`` (the cached venv's python)
and records each release under its commit (``--set-commit-hash``); the release's source is put
on ``ASV_PYTHONPATH`` (asv drops ``PYTHONPATH``). `asv compare` then prints each consecutive pair.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from packaging.version import Version

from benchmarks.upstream import releases

MACHINE = "upstream-releases"
COUNT_FACTOR = 1.015
"""As the reference count gate (benchmarks/README.md): 2% more instructions is flagged."""
COUNTS_BENCHMARK = "bench_upstream_counts.TrackUpstreamInstructions.track_instructions"
"""Only this suite's current counts: asv also compares results of benchmarks stored under
older names."""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def release_repo(versions: Sequence[str]) -> Path:
    """The release repository with a commit (tag = version) for each of ``versions`` (in order)."""
    repo = releases.CACHE / "asv" / "repo"
    if not (repo / ".git").exists():
        repo.mkdir(parents=True, exist_ok=True)
        _git(repo, "init", "-q", "-b", "main")
    tags = set(_git(repo, "tag").split())
    for version in versions:
        if version in tags:
            continue
        src = releases.ensure_source(version)
        shutil.rmtree(repo / "sglang", ignore_errors=True)
        shutil.copytree(src / "sglang", repo / "sglang")
        _git(repo, "add", "-A")
        _git(repo, "-c", "user.name=benchmarks.upstream", "-c", "user.email=none@localhost",
             "commit", "-q", "--allow-empty", "-m", f"sglang {version} (PyPI wheel)")
        _git(repo, "tag", version)
    return repo


def config(repo: Path, python: Path) -> Path:
    """Write the asv configuration for ``repo``; its path."""
    base = releases.CACHE / "asv"
    conf = {"version": 1, "project": "sglang", "project_url": "https://github.com/sgl-project/sglang",
            "repo": str(repo), "branches": ["main"], "environment_type": "existing",
            "pythons": [str(python)], "benchmark_dir": str(Path(__file__).parent / "asv_suite"),
            "env_dir": str(base / "env"), "results_dir": str(base / "results"),
            "html_dir": str(base / "html")}
    path = base / "asv.conf.json"
    path.write_text(json.dumps(conf, indent=1))
    return path


def _asv(conf: Path, *args: str, env: dict | None = None) -> int:
    cmd = ["asv", "--config", str(conf), *args]
    print("$ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, env=env, cwd=conf.parent).returncode


def run(hot_paths: Sequence[str], versions: Sequence[str] | None = None) -> int:
    """Benchmark ``versions`` (default: every release of ``hot_paths``' pairs) and compare them."""
    from benchmarks.upstream.cases import CASES

    versions = list(versions or sorted({v for hp in hot_paths for v in releases.PAIRS[hp]},
                                       key=Version))
    python = releases.ensure_venv()
    repo = release_repo(versions)
    conf = config(repo, python)
    _asv(conf, "machine", "--yes", "--machine", MACHINE)
    bench = "|".join(f"\\('{c.name}'\\)" for c in CASES if c.hot_path in hot_paths)
    status = 0
    for version in versions:
        env = {**os.environ, "ASV_PYTHONPATH": os.pathsep.join(
            [str(releases.source_dir(version)), str(releases.ROOT)])}
        status |= _asv(conf, "run", "--machine", MACHINE, "-E", f"existing:{python}",
                       "--set-commit-hash", _git(repo, "rev-parse", version), "-b", bench,
                       "--show-stderr", env=env)
    for before, after in zip(versions, versions[1:], strict=False):
        print(f"== {before} -> {after}", flush=True)
        status |= count_gate(conf, _git(repo, "rev-parse", before), _git(repo, "rev-parse", after))
    return status


def count_gate(conf: Path, before: str, after: str) -> int:
    """`asv compare` of two releases at the count factor; 1 if an instruction count rose past it
    (the same rule as the CI's count gate), else 0. Prints the whole comparison."""
    cmd = ["asv", "--config", str(conf), "compare", "--machine", MACHINE, "--split",
           "--factor", str(COUNT_FACTOR), before, after]
    text = subprocess.run(cmd, cwd=conf.parent, capture_output=True, text=True).stdout
    print(text, flush=True)
    worse = [line for line in text.splitlines()
             if line.startswith("| +") and COUNTS_BENCHMARK in line]
    if worse:
        print(f"counts gate: {len(worse)} upstream instruction count(s) rose past {COUNT_FACTOR}")
    return 1 if worse else 0
