"""No module of these packages (subpackages included) imports a module that imports it back
(``TYPE_CHECKING`` included).

The scheduler's regimes (PD decode, DP attention) are seams chosen at start-up, and the report
renderer and runner depend one way; each once made a circle.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGES = ("reference_impl.scheduler", "reference_impl.server", "harness", "reportgen", "loadgen")
PACKAGE = "reference_impl.scheduler"


def _modules(package: str = PACKAGE) -> dict[str, Path]:
    """Every module of the package and of its subpackages (``__init__`` files left out)."""
    folder = Path(importlib.import_module(package).__file__).parent
    return {".".join((package, *path.relative_to(folder).with_suffix("").parts)): path
            for path in folder.rglob("*.py") if path.stem != "__init__"}


def _imported_names(path: Path) -> set[str]:
    """Every module name an ``import`` anywhere in the file names, and each ``from x import y``
    as both ``x`` and ``x.y``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _import_graph(package: str = PACKAGE) -> dict[str, set[str]]:
    modules = _modules(package)
    return {name: (_imported_names(path) & modules.keys()) - {name}
            for name, path in modules.items()}


def _cycle_through(start: str, graph: dict[str, set[str]]) -> list[str] | None:
    stack, seen = [[start]], {start}
    while stack:
        path = stack.pop()
        for dep in graph[path[-1]]:
            if dep == start:
                return [*path, dep]
            if dep not in seen:
                seen.add(dep)
                stack.append([*path, dep])
    return None


def test_the_graph_sees_every_module_and_a_known_edge():
    graph = _import_graph()
    assert {f"{PACKAGE}.scheduler", f"{PACKAGE}.policy", f"{PACKAGE}.dp_group"} <= graph.keys()
    assert f"{PACKAGE}.policy" in graph[f"{PACKAGE}.scheduler"]


def test_the_loadgen_graph_crosses_subpackages():
    graph = _import_graph("loadgen")
    assert {"loadgen.cli", "loadgen.plan.datasets", "loadgen.run.runner"} <= graph.keys()
    assert "loadgen.plan.config" in graph["loadgen.run.runner"]
    assert "loadgen.plan.traces" in graph["loadgen.plan.datasets"]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle(package):
    graph = _import_graph(package)
    cycles = [" -> ".join(c) for name in sorted(graph) if (c := _cycle_through(name, graph))]
    assert not cycles, cycles
