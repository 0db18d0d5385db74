"""Where a world's facts live on each topology (the components of the smallest team: two roles
where the topology has roles), and the problems worlds are scored on.

A generated instance draws its own *synthetic problems* (``CASE``): ``<builtin id>~<k>`` is case k
of a built-in problem, with its own difficulty; the team sees the built-in statement under a
``Case <id>.`` line (so every case reads as its own problem), and the reference programs of the
built-in problem are its correct and wrong answers. The first gym's worlds use the 14 built-ins.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lcb.problem import Problem

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


@lru_cache(maxsize=1)
def _builtins() -> Mapping[str, Problem]:
    """The built-in problems by id, loaded once per process (decoding their hidden tests cost
    ~10 ms, and a job asked for them once per synthetic problem it touched). Problems are frozen."""
    from lcb.data import load_problems

    return MappingProxyType({p.id: p for p in load_problems("builtin").problems})


def builtin_problems() -> tuple[str, ...]:
    return tuple(_builtins())


CASE = "~"
_CASE_LINE = "Case {id}."


def base_problem(problem_id: str) -> str:
    """The built-in problem behind a (synthetic) problem id."""
    return problem_id.partition(CASE)[0]


def case_line(problem_id: str) -> str:
    return _CASE_LINE.format(id=problem_id)


class GymProblems(dict):  # type: ignore[type-arg]
    """Problem id -> ``lcb.problem.Problem`` for built-in and synthetic ids (made on first use)."""

    def __missing__(self, problem_id: str):  # noqa: ANN204 - a Problem
        import dataclasses

        base = _builtins()[base_problem(problem_id)]
        problem = base if problem_id == base.id else dataclasses.replace(
            base, id=problem_id, statement=f"{case_line(problem_id)}\n{base.statement}")
        self[problem_id] = problem
        return problem
