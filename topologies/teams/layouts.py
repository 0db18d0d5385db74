"""Who is on each team at each size: stage lists, workers, tools, answering roles.

This is the single source of truth for team composition (reference spec §5.2). It is pure data
(no LangGraph, no LangChain) so prompt loading and the optimizers can import it cheaply.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import lru_cache

from topologies.types import Agent, TeamRoster

TOPOLOGIES: tuple[str, ...] = ("single", "independent", "sequential", "centralized", "decentralized")

# Sizes at which the role-based teams are defined; replica teams accept any size >= 1.
ROLE_TEAM_SIZES: tuple[int, ...] = (2, 4, 8, 10)


@dataclass(frozen=True, slots=True)
class Stage:
    """One step of the sequential pipeline."""

    role: str
    has_tools: bool  # python_exec offered (a ReAct stage) or a single model call
    writes_program: bool  # the stage's job is to hand over a complete program (output contract)


@dataclass(frozen=True, slots=True)
class Worker:
    """One worker of the centralized team; the manager reaches it via ``delegate_to_<role>``."""

    role: str
    job: str  # one line shown to the manager (tool description and worker list)
    writes_program: bool

    @property
    def tool_name(self) -> str:
        return f"delegate_to_{self.role}"


def _stage(role: str, *, tools: bool = False, program: bool = False) -> Stage:
    return Stage(role, tools, program)


_REQ = _stage("requirements_parser")
_ANALYZER = _stage("analyzer")
_DESIGNER = _stage("algorithm_designer")
_CODER = _stage("coder", program=True)
_COMPLEXITY = _stage("complexity_analyzer")
_EDGES = _stage("edge_case_thinker")
_TESTER = _stage("tester", tools=True)
_DEBUGGER = _stage("debugger", tools=True, program=True)
_OPTIMIZER = _stage("optimizer", tools=True, program=True)
_REVIEWER = _stage("code_reviewer", program=True)

SEQUENTIAL_STAGES: Mapping[int, tuple[Stage, ...]] = {
    2: (_CODER, _DEBUGGER),
    4: (_ANALYZER, _CODER, _TESTER, _DEBUGGER),
    8: (_REQ, _ANALYZER, _DESIGNER, _CODER, _EDGES, _TESTER, _DEBUGGER, _REVIEWER),
    10: (_REQ, _ANALYZER, _DESIGNER, _CODER, _COMPLEXITY, _EDGES, _TESTER, _DEBUGGER, _OPTIMIZER,
         _REVIEWER),
}

_W_ANALYZER = Worker("analyzer_worker", "analyses the problem: algorithm, complexity, edge cases, "
                     "pseudocode", False)
_W_CODER = Worker("coder_worker", "writes and runs a complete program from your instructions", True)
_W_TESTER = Worker("tester_worker", "runs a program you pass on inputs you name or it designs, and "
                   "reports the observed results", False)
_W_DESIGN = Worker("design_worker", "designs the algorithm and data structures in detail", False)
_W_EDGE = Worker("edge_case_worker", "finds and executes tricky edge cases against a program", False)
_W_DEBUG = Worker("debug_worker", "finds the root cause of a failure and returns fixed code", True)
_W_REVIEW = Worker("review_worker", "reviews a program, tests it, and approves or requests changes",
                   False)
_W_COMPLEXITY = Worker("complexity_analyzer_worker", "estimates time/space complexity and whether it "
                       "fits the limits", False)
_W_OPTIMIZER = Worker("optimizer_worker", "speeds up a correct program and re-validates it", True)

CENTRALIZED_WORKERS: Mapping[int, tuple[Worker, ...]] = {
    2: (_W_CODER,),
    4: (_W_ANALYZER, _W_CODER, _W_TESTER),
    8: (_W_ANALYZER, _W_CODER, _W_TESTER, _W_DESIGN, _W_EDGE, _W_DEBUG, _W_REVIEW),
    10: (_W_ANALYZER, _W_CODER, _W_TESTER, _W_DESIGN, _W_EDGE, _W_DEBUG, _W_REVIEW, _W_COMPLEXITY,
         _W_OPTIMIZER),
}

def default_max_turns(team_size: int) -> int:
    """Manager turns: the reference's budgets (13 for the two-agent team, 26 otherwise)."""
    return 13 if team_size <= 2 else 26


# The one role of each replica/single topology.
_SOLO_ROLE: Mapping[str, str] = {"single": "solver", "independent": "coder", "decentralized": "debater"}

# Topologies whose hand-offs use an editable protocol text (TeamSpec.protocol["handoff"]).
HANDOFF_TOPOLOGIES: tuple[str, ...] = ("sequential", "centralized", "decentralized")


# How a replica team names its agents in traces and masks (index from 0).
_REPLICA_LABELS: Mapping[str, str] = {"independent": "coder#{}", "decentralized": "peer{}"}
MANAGER_ROLE = "manager"


class LayoutError(ValueError):
    """A topology or team size that no team is defined for."""


def check_topology(topology: str) -> None:
    if topology not in TOPOLOGIES:
        raise LayoutError(f"unknown topology {topology!r}; expected one of {', '.join(TOPOLOGIES)}")


def sequential_stages(team_size: int) -> tuple[Stage, ...]:
    try:
        return SEQUENTIAL_STAGES[team_size]
    except KeyError:
        raise LayoutError(_size_message("sequential", team_size)) from None


def centralized_workers(team_size: int) -> tuple[Worker, ...]:
    try:
        return CENTRALIZED_WORKERS[team_size]
    except KeyError:
        raise LayoutError(_size_message("centralized", team_size)) from None


def _size_message(topology: str, team_size: int) -> str:
    sizes = ", ".join(map(str, ROLE_TEAM_SIZES))
    return f"{topology} teams are defined for team sizes {sizes}, not {team_size}"


def role_names(topology: str, team_size: int) -> tuple[str, ...]:
    """The editable roles of a team, in the order they act."""
    check_topology(topology)
    if topology in _SOLO_ROLE:
        if topology != "single" and team_size < 1:
            raise LayoutError(f"{topology} needs a team size >= 1, not {team_size}")
        return (_SOLO_ROLE[topology],)
    if topology == "sequential":
        return tuple(stage.role for stage in sequential_stages(team_size))
    return ("manager",) + tuple(worker.role for worker in centralized_workers(team_size))


def all_role_names(topology: str) -> tuple[str, ...]:
    """Every role of a topology across all sizes (the seed prompt files that must exist)."""
    check_topology(topology)
    if topology in _SOLO_ROLE:
        return (_SOLO_ROLE[topology],)
    seen: dict[str, None] = {}
    for size in ROLE_TEAM_SIZES:
        for role in role_names(topology, size):
            seen.setdefault(role, None)
    return tuple(seen)


def answering_roles(topology: str, team_size: int) -> tuple[str, ...]:
    """Roles whose reply may become the submission (they get the protected output contract).

    Centralized workers that write code get a program hand-off contract instead: their code goes
    to the manager, never straight to the submission.
    """
    check_topology(topology)
    if topology in _SOLO_ROLE:
        return (_SOLO_ROLE[topology],)
    if topology == "sequential":
        return tuple(s.role for s in sequential_stages(team_size) if s.writes_program)
    centralized_workers(team_size)  # validates the size
    return ("manager",)


def replica_label(topology: str, index: int) -> str:
    """The agent name of replica ``index`` of a replica team (``coder#2``, ``peer0``)."""
    return _REPLICA_LABELS[topology].format(index)


@lru_cache(maxsize=64)
def team_roster(topology: str, team_size: int) -> TeamRoster:
    """Every agent of a team, in acting order (the names masks and traces use)."""
    check_topology(topology)
    if topology == "single":
        return TeamRoster(topology, 1, (Agent(_SOLO_ROLE["single"], _SOLO_ROLE["single"]),))
    if topology in _REPLICA_LABELS:
        role = role_names(topology, team_size)[0]
        agents = tuple(Agent(replica_label(topology, i), role) for i in range(team_size))
        return TeamRoster(topology, team_size, agents)
    roles = role_names(topology, team_size)
    fixed = frozenset({MANAGER_ROLE}) if topology == "centralized" else frozenset()
    return TeamRoster(topology, team_size, tuple(Agent(role, role) for role in roles), fixed)


def check_mask(roster: TeamRoster, active: Collection[str]) -> frozenset[str]:
    """The active set of a masked run, validated against the team (``LayoutError`` if not valid)."""
    if isinstance(active, str):
        raise LayoutError("a mask is a collection of agent names, not one string")
    chosen = frozenset(active)
    unknown = sorted(chosen - set(roster.names))
    if unknown:
        raise LayoutError(f"mask names agents the {roster.topology} team does not have: {', '.join(unknown)}; "
                          f"agents: {', '.join(roster.names)}")
    missing = sorted(roster.always_active - chosen)
    if missing:
        raise LayoutError(f"the {roster.topology} team cannot run without {', '.join(missing)}")
    return chosen
