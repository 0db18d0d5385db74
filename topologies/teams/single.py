"""single: one ReAct solver with python_exec."""

from __future__ import annotations

from typing import Any, TypedDict

from lcb.extract import Extraction
from topologies.teams import notes
from topologies.teams.session import (
    RunContext,
    TeamResult,
    format_contract_for,
    output_contract_for,
    react,
)
from topologies.teams.tools import python_exec_tool, toolbox
from topologies.types import TeamSpec

ROLE = "solver"


class State(TypedDict, total=False):
    result: TeamResult


async def solve(state: State, runtime: Any) -> State:
    ctx: RunContext = runtime.context
    if not ctx.is_active(ROLE):  # masked out: the team abstains without a model call
        return {"result": TeamResult("", Extraction(None, "none"), {"code_source": None, "capped": False})}
    limits = ctx.limits
    system = notes.compose(ctx.role_prompt(ROLE), notes.single_note(limits.solver_calls),
                           format_contract_for(ctx), output_contract_for(ctx))
    session = ctx.session(ROLE, agent=ROLE, system_prompt=system, decoding=ctx.agent_decoding(0))
    session.add_user(ctx.question)
    turn = await react(session, toolbox(python_exec_tool(limits.tool_timeout_s)), limits.solver_calls)
    ctx.metrics.observe(ROLE, turn.text)
    extras = {"code_source": turn.source, "capped": turn.capped}
    return {"result": TeamResult(turn.text, turn.extraction, extras)}


def build(spec: TeamSpec) -> Any:
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(State, context_schema=RunContext)
    graph.add_node("solver", solve)
    graph.add_edge(START, "solver")
    graph.add_edge("solver", END)
    return graph.compile()


def answer_roles(spec: TeamSpec) -> tuple[str, ...]:
    return (ROLE,)
