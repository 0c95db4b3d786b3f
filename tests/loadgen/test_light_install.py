"""The base install (`pip install serving-hotpaths`, no extras) is enough for loadgen: importing its
command line, library and scripted test server pulls in neither torch nor matplotlib, and every
distribution their modules import (at the top or inside a function) is a base dependency or one of
theirs, except the extras' packages that a flag asks for."""

from __future__ import annotations

import ast
import importlib.metadata as md
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENTRY_MODULES = ("loadgen", "loadgen.cli", "loadgen.api", "loadgen.selftest.testserver")
HEAVY = ("torch", "matplotlib", "fastapi", "uvicorn", "pydantic", "zmq", "safetensors", "ray", "aiohttp",
         "reference_impl")
#: Imported only when a flag asks for it, which says which extra to install.
OPTIONAL = {"ray": "ray", "PIL": "vision"}


def _loaded() -> dict[str, str]:
    """Every module importing ENTRY_MODULES loads, in a fresh interpreter: name -> file."""
    code = (f"import importlib, json, sys; [importlib.import_module(m) for m in {ENTRY_MODULES!r}]; "
            "print(json.dumps({n: getattr(m, '__file__', None) for n, m in sys.modules.items()}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(proc.stdout)


def _imports_of_loadgen(loaded: dict[str, str]) -> set[str]:
    """The top-level names the loaded loadgen modules import anywhere in their source."""
    names = set()
    for module, path in loaded.items():
        if module.split(".")[0] != "loadgen" or path is None:
            continue
        for node in ast.walk(ast.parse(Path(path).read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
    return names


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.-]+", requirement).group()).lower()


def _closure(names: list[str]) -> set[str]:
    """The distributions `names` install: themselves and, recursively, their non-extra requirements."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        todo += [_name(r) for r in requires if "extra" not in r.partition(";")[2]]
    return seen


def test_import_loadgen_pulls_in_no_heavy_package():
    imported = {name.split(".")[0] for name in _loaded()}
    assert "loadgen" in imported and not imported & set(HEAVY), sorted(imported & set(HEAVY))


def test_every_distribution_loadgen_imports_comes_with_the_base_install():
    base = [_name(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]]
    assert not set(base) & {"torch", "matplotlib", "fastapi", "uvicorn"}
    installed = _closure(base)
    by_module = md.packages_distributions()
    third_party = _imports_of_loadgen(_loaded()) - set(sys.stdlib_module_names) - {"loadgen", *OPTIONAL}
    assert {"httpx", "msgspec", "yaml"} <= third_party
    missing = {m: by_module.get(m) for m in third_party
               if not {_name(d) for d in by_module.get(m, [m])} & installed}
    assert not missing, f"imported by loadgen but not installed by its base dependencies: {missing}"


def test_report_without_matplotlib_names_the_extra_in_one_line(tmp_path):
    code = ("import sys; sys.modules['matplotlib'] = None; from loadgen.cli import main; "
            f"sys.exit(main(['report', {str(ROOT / 'tests/loadgen/baselines/scripted-ttft50.json')!r}, "
            f"'--output', {str(tmp_path / 'r.html')!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "pip install 'serving-hotpaths[plot]'" in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "r.html").exists()
