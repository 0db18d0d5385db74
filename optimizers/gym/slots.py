"""Where a world's facts live on each topology: the components of the smallest team (two roles
where the topology has roles), and the problems every world is scored on."""

from __future__ import annotations

from collections.abc import Mapping

TEAM_SIZE = 2  # the smallest team of every topology: cheap rollouts, still two roles where roles exist

# (main, other) component of each topology at TEAM_SIZE.
SLOTS: Mapping[str, tuple[str, str]] = {
    "single": ("role/solver", "role/solver"),
    "independent": ("role/coder", "role/coder"),
    "sequential": ("role/debugger", "role/coder"),
    "centralized": ("role/coder_worker", "role/manager"),
    "decentralized": ("role/debater", "protocol/handoff"),
}


def components_of(topology: str) -> tuple[str, ...]:
    main, other = SLOTS[topology]
    return (main,) if main == other else (main, other)


def builtin_problems() -> tuple[str, ...]:
    from lcb.data import load_problems

    return tuple(p.id for p in load_problems("builtin").problems)
