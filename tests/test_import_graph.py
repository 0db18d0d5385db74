"""The project's import graph: every module imports, and no module reaches itself through imports.

The graph is read from the source (every ``import``, also inside functions: a lazy import is still
a dependency, it only moves the moment it bites), so a cycle is found even where Python would
happen to import it without an error. ``__main__`` modules are doors run by ``python -m``; nothing
imports them, so they cannot close a cycle and are left out of the import check.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("lcb", "topologies", "optimizers", "hydra_plugins")


def project_modules(root: Path = REPO) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of the project's packages."""
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imported_names(module: str, path: Path) -> Iterator[str]:
    """Every dotted name the module imports (``from a import b`` yields ``a.b``: b may be a module)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            yield source
            yield from (f"{source}.{alias.name}" for alias in node.names)


def import_graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """module -> the project modules it imports (a name resolves to its longest module prefix)."""

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = {resolve(name) for name in _imported_names(module, path)}
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


MODULES = project_modules()
GRAPH = import_graph(MODULES)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.endswith("__main__")))
def test_every_module_imports(module: str) -> None:
    importlib.import_module(module)


def test_import_graph_has_no_cycles() -> None:
    assert cycles(GRAPH) == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles(GRAPH))


def test_cycle_finder_finds_a_lazy_cycle(tmp_path: Path) -> None:
    """Positive control: the shape of the old report_plots <-> report_trust cycle (one side lazy)."""
    package = tmp_path / "optimizers"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "plots.py").write_text("from optimizers.panels import TRUST\n")
    (package / "panels.py").write_text("def draw():\n    from optimizers import plots\n    return plots\n")
    (package / "leaf.py").write_text("import optimizers.plots\n")
    graph = import_graph(project_modules(tmp_path))
    assert graph["optimizers.leaf"] == {"optimizers.plots"}
    assert cycles(graph) == [["optimizers.panels", "optimizers.plots"]]
