"""LangGraph teams for LCB: one module per topology, a registry and ``run_team``.

Importing this package is cheap (layouts and limits only); the graph machinery is loaded on first
use of ``TEAMS``, ``run_team`` or ``validate_spec``.
"""

from __future__ import annotations

from typing import Any

from topologies.teams.layouts import LayoutError, TOPOLOGIES
from topologies.teams.limits import TeamLimits

_LAZY = {
    "TEAMS": "topologies.teams.registry",
    "TeamBuilder": "topologies.teams.registry",
    "run_team": "topologies.teams.registry",
    "validate_spec": "topologies.teams.registry",
    "trajectory_to_dict": "topologies.teams.trajectory",
    "trajectory_from_dict": "topologies.teams.trajectory",
}

__all__ = ["LayoutError", "TOPOLOGIES", "TeamLimits", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'topologies.teams' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
