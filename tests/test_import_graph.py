"""The project's import graph: every module imports, no module reaches itself through imports, and
every room imports only what its rule allows (docs/architecture.md).

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


# --------------------------------------------------------------------------- the rule of each room
# Floors: lcb <- topologies <- optimizers (nothing points up). Inside optimizers: the core (its
# top-level modules) <- the methods (one package each, the core only: team structure comes through
# optimizers.team_graph) and the protocol's rooms, each importing only the rooms below it.
PROTOCOL = "optimizers.protocol"
METHODS_EXTEND = {"mamut_gepa": {"gepa"}}  # a method built on another may import it
ROOM_RULES: dict[str, set[str]] = {
    "lcb": {"lcb"},
    "topologies": {"lcb", "topologies"},
    "core": {"lcb", "topologies", "core"},
    "protocol": {"protocol"},
    "protocol.grid": {"lcb", "topologies", "core", "protocol", "protocol.grid"},
    "protocol.job": {"lcb", "topologies", "core", "protocol", "protocol.grid", "protocol.job"},
    "protocol.aggregate": {"core", "protocol", "protocol.grid", "protocol.aggregate"},
    "protocol.report": {"lcb", "core", "protocol", "protocol.grid", "protocol.aggregate", "protocol.report"},
    "protocol.run": {"lcb", "topologies", "core", "protocol", "protocol.grid", "protocol.job",
                     "protocol.aggregate", "protocol.report", "protocol.run"},
    # The grid command lists, checks and reads the grid: the one room above the app.
    "protocol.grid_command": {"lcb", "topologies", "core", "protocol", "protocol.grid", "protocol.job",
                              "protocol.aggregate", "protocol.report", "protocol.run", "protocol.grid_command"},
    # The gym drives methods through the core's seams on scripted worlds, with the real team
    # runtime and the job's LCB team system; no method and no room above the job reaches it.
    "gym": {"lcb", "topologies", "core", "protocol", "protocol.grid", "protocol.job", "gym"},
}
# Doors (python -m ..., the __main__ modules) are run by people, never imported: they may open any room.
METHOD_PACKAGES = frozenset(
    p.name for p in (REPO / "optimizers").iterdir()
    if (p / "__init__.py").is_file() and p.name not in {"protocol", "gym"}
)


def room_of(module: str) -> str | None:
    """The room whose rule applies to ``module`` (None: a door, or a package outside the rules)."""
    parts = module.split(".")
    if parts[-1] == "__main__" or parts[0] == "hydra_plugins":
        return None
    if parts[0] != "optimizers":
        return parts[0]
    if len(parts) == 1:
        return "core"
    if parts[1] == "protocol":
        return "protocol" if len(parts) == 2 else f"protocol.{parts[2]}"
    if parts[1] == "gym":
        return "gym"
    return f"method.{parts[1]}" if parts[1] in METHOD_PACKAGES else "core"


def allowed(room: str) -> set[str]:
    if room.startswith("method."):
        name = room.split(".", 1)[1]
        return {"core", room, *(f"method.{other}" for other in METHODS_EXTEND.get(name, ()))}
    return ROOM_RULES[room]


def violations(graph: Mapping[str, set[str]]) -> list[str]:
    found = []
    for module, targets in sorted(graph.items()):
        room = room_of(module)
        if room is None:
            continue
        for target in sorted(targets):
            target_room = room_of(target) or "a door"
            if target_room not in allowed(room):
                found.append(f"{module} ({room}) imports {target} ({target_room})")
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


def test_every_room_imports_only_what_its_rule_allows() -> None:
    assert violations(GRAPH) == []


def test_room_rules_catch_a_method_reaching_into_the_teams_and_a_room_reaching_up() -> None:
    """Positive control: the edges issue 23 removed, and a report module importing the app."""
    graph = {
        "optimizers.maspob.graph": {"topologies.teams.layouts", "optimizers.team_graph"},
        "optimizers.hivemind.game": {"topologies.types"},
        "optimizers.protocol.report.plots": {"optimizers.protocol.run.app", "optimizers.protocol.report.canvas"},
        "optimizers.protocol.job.engine": {"optimizers.protocol.grid_command.cli"},
        "optimizers.protocol.grid.cells": {"optimizers.protocol.run.app"},  # the ground floor reaching up
        "optimizers.protocol.grid_command.cli": {"optimizers.protocol.run.app"},  # the top room: allowed
        "topologies.models": {"optimizers.base"},
    }
    assert violations(graph) == [
        "optimizers.hivemind.game (method.hivemind) imports topologies.types (topologies)",
        "optimizers.maspob.graph (method.maspob) imports topologies.teams.layouts (topologies)",
        "optimizers.protocol.grid.cells (protocol.grid) imports optimizers.protocol.run.app (protocol.run)",
        "optimizers.protocol.job.engine (protocol.job) imports optimizers.protocol.grid_command.cli "
        "(protocol.grid_command)",
        "optimizers.protocol.report.plots (protocol.report) imports optimizers.protocol.run.app (protocol.run)",
        "topologies.models (topologies) imports optimizers.base (core)",
    ]
