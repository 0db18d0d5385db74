"""The team registry and the one entry point, ``run_team``."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import lru_cache
from types import ModuleType
from typing import Any

from lcb.problem import Problem
from topologies.teams import centralized, decentralized, independent, sequential, single
from topologies.teams.layouts import LayoutError, check_mask, role_names, team_roster
from topologies.teams.limits import TeamLimits
from topologies.routing import routing_session
from topologies.teams.session import RunContext, TeamResult
from topologies.types import ChatClient, CommunicationFormat, Decoding, ModelCallError, TeamSpec, Trajectory


@dataclass(frozen=True, slots=True)
class TeamBuilder:
    """How to build and run one topology: a compiled LangGraph graph per team shape."""

    name: str
    build: Callable[[TeamSpec], Any]
    answer_roles: Callable[[TeamSpec], tuple[str, ...]]
    recursion_limit: Callable[[TeamSpec], int]


def _builder(name: str, module: ModuleType) -> TeamBuilder:
    limit = getattr(module, "recursion_limit", lambda spec: 50)
    return TeamBuilder(name, module.build, module.answer_roles, limit)


TEAMS: dict[str, TeamBuilder] = {
    "single": _builder("single", single),
    "independent": _builder("independent", independent),
    "sequential": _builder("sequential", sequential),
    "centralized": _builder("centralized", centralized),
    "decentralized": _builder("decentralized", decentralized),
}


def validate_spec(spec: TeamSpec) -> None:
    """Raise ``LayoutError`` (a ValueError) for a spec no team can run."""
    if spec.topology not in TEAMS:
        raise LayoutError(f"unknown topology {spec.topology!r}; expected one of {', '.join(TEAMS)}")
    role_names(spec.topology, spec.team_size)  # validates the size
    CommunicationFormat(spec.communication)
    if spec.rounds < 1:
        raise LayoutError(f"rounds must be >= 1, not {spec.rounds}")
    if spec.max_turns < 1:
        raise LayoutError(f"max_turns must be >= 1, not {spec.max_turns}")


@lru_cache(maxsize=64)
def _compiled(topology: str, team_size: int) -> Any:
    """Graphs depend only on the team's shape; prompts and limits arrive via the run context."""
    probe = TeamSpec(topology=topology, roles={}, team_size=team_size)
    return TEAMS[topology].build(probe)


async def run_team(
    spec: TeamSpec,
    problem: Problem,
    client: ChatClient,
    *,
    decoding: Decoding,
    seed: int = 0,
    limits: TeamLimits | None = None,
    active: Collection[str] | None = None,
) -> Trajectory:
    """Run one team on one problem.

    Never raises for model or infrastructure errors: they land in ``Trajectory.error`` /
    ``error_kind`` (``INFRASTRUCTURE`` means: retry the rollout, uncharged), and the best program
    the answering roles wrote so far is still salvaged. A spec no team can run raises
    ``LayoutError``.

    ``active`` masks the team: only the named agents (``team_roster`` names) act, the others are
    removed — a masked sequential stage passes its input through, a masked worker is not offered
    to the manager, masked replicas neither answer nor vote; with no active agent a replica team
    abstains without any model call. ``extras["active_agents"]`` records who was active.
    """
    validate_spec(spec)
    spec = spec if isinstance(spec.communication, CommunicationFormat) else _with_format(spec)
    team = TEAMS[spec.topology]
    roster = team_roster(spec.topology, spec.team_size)
    mask = None if active is None else check_mask(roster, active)
    ctx = RunContext(spec=spec, problem=problem, client=client, decoding=decoding, seed=seed,
                     limits=limits or TeamLimits(), active=mask)
    started = time.perf_counter()
    try:
        # One routing session per team run: every role and turn reaches the same model server
        # (while it is not overloaded), where the conversation's prefix is already cached.
        with routing_session(problem.id):
            state = await _compiled(spec.topology, spec.team_size).ainvoke(
                {}, context=ctx, config={"recursion_limit": team.recursion_limit(spec)})
        result: TeamResult = state["result"]
    except ModelCallError as exc:
        found, text = ctx.salvage(team.answer_roles(spec))
        source = "salvaged" if found.code is not None else None
        result = TeamResult(text, found, {"code_source": source}, f"{type(exc).__name__}: {exc}", exc.kind)
    extras = {
        **result.extras,
        "calls_by_role": ctx.calls_by_role(),
        "active_agents": [name for name in roster.names if ctx.is_active(name)],
        "masked": mask is not None,
        "format": ctx.metrics.to_dict(),
        "team": {"topology": spec.topology, "team_size": spec.team_size, "rounds": spec.rounds,
                 "communication": spec.communication.value, "seed": seed},
        "wall_s": round(time.perf_counter() - started, 4),
    }
    return Trajectory(
        problem_id=problem.id,
        messages=tuple(ctx.messages),
        answer_text=result.answer_text,
        code=result.extraction.code,
        extraction_rule=result.extraction.rule,
        usage_by_role=dict(ctx.usage),
        error=result.error,
        error_kind=result.error_kind,
        extras=extras,
    )


def _with_format(spec: TeamSpec) -> TeamSpec:
    from dataclasses import replace

    return replace(spec, communication=CommunicationFormat(spec.communication))
