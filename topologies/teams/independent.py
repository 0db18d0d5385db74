"""independent: N ReAct coders solve alone in parallel; the most common program is submitted.

The coders run concurrently inside one node (so an infrastructure failure of one cancels the
others at once instead of letting them spend calls on a run that will be retried anyway).
"""

from __future__ import annotations

from typing import Any, TypedDict

from topologies.teams import notes
from topologies.teams.layouts import replica_label
from topologies.teams.replicas import Standing, guarded_turn, vote_result
from topologies.teams.session import (
    RunContext,
    TeamResult,
    format_contract_for,
    gather_or_cancel,
    output_contract_for,
    react,
)
from topologies.teams.tools import python_exec_tool, toolbox
from topologies.types import TeamSpec

ROLE = "coder"


class State(TypedDict, total=False):
    standings: tuple[Standing, ...]
    result: TeamResult


def label(index: int) -> str:
    return replica_label("independent", index)


def active_indices(ctx: RunContext) -> tuple[int, ...]:
    """The coders that act in this run (all of them unless the run is masked)."""
    return tuple(i for i in range(ctx.spec.team_size) if ctx.is_active(label(i)))


async def coder(ctx: RunContext, index: int) -> Standing:
    limits = ctx.limits
    decoding = ctx.agent_decoding(index, replica=True)
    note = notes.independent_note(len(active_indices(ctx)), limits.coder_calls)
    system = notes.compose(ctx.role_prompt(ROLE), note, format_contract_for(ctx), output_contract_for(ctx))
    session = ctx.session(ROLE, agent=label(index), system_prompt=system, decoding=decoding)
    session.add_user(ctx.question)
    tools = toolbox(python_exec_tool(limits.tool_timeout_s))
    standing = await guarded_turn(react(session, tools, limits.coder_calls), index=index,
                                  seed=decoding.seed, timeout_s=limits.agent_timeout_s)
    if standing.status == "ok":
        ctx.metrics.observe(label(index), standing.text)
    return standing


async def coders(state: State, runtime: Any) -> State:
    ctx: RunContext = runtime.context
    standings = await gather_or_cancel(*(coder(ctx, i) for i in active_indices(ctx)))
    return {"standings": tuple(standings)}


async def vote(state: State, runtime: Any) -> State:
    return {"result": vote_result(state.get("standings", ()), label)}


def build(spec: TeamSpec) -> Any:
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(State, context_schema=RunContext)
    graph.add_node("coders", coders)
    graph.add_node("vote", vote)
    graph.add_edge(START, "coders")
    graph.add_edge("coders", "vote")
    graph.add_edge("vote", END)
    return graph.compile()


def answer_roles(spec: TeamSpec) -> tuple[str, ...]:
    return (ROLE,)
