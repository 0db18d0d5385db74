"""independent: N ReAct coders solve alone in parallel; the most common program is submitted."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from lcb.extract import Extraction
from topologies.teams import notes
from topologies.teams.replicas import Standing, guarded_turn, select
from topologies.teams.session import (
    RunContext,
    TeamResult,
    format_contract_for,
    output_contract_for,
    react,
)
from topologies.teams.tools import python_exec_tool, toolbox
from topologies.types import TeamSpec

ROLE = "coder"


class State(TypedDict, total=False):
    index: int
    standings: Annotated[list[Standing], operator.add]
    result: TeamResult


def label(index: int) -> str:
    return f"{ROLE}#{index}"


def fan_out(state: State, runtime: Any) -> list[Any]:
    from langgraph.types import Send

    ctx: RunContext = runtime.context
    return [Send("coder", {"index": i}) for i in range(ctx.spec.team_size)]


async def coder(state: State, runtime: Any) -> State:
    ctx: RunContext = runtime.context
    index = state["index"]
    limits = ctx.limits
    decoding = ctx.agent_decoding(index, replica=True)
    system = notes.compose(ctx.role_prompt(ROLE), notes.independent_note(ctx.spec.team_size, limits.coder_calls),
                           format_contract_for(ctx), output_contract_for(ctx))
    session = ctx.session(ROLE, agent=label(index), system_prompt=system, decoding=decoding)
    session.add_user(ctx.question)
    tools = toolbox(python_exec_tool(limits.tool_timeout_s))
    standing = await guarded_turn(react(session, tools, limits.coder_calls), index=index,
                                  seed=decoding.seed, timeout_s=limits.agent_timeout_s)
    if standing.status == "ok":
        ctx.metrics.observe(label(index), standing.text)
    return {"standings": [standing]}


async def vote(state: State, runtime: Any) -> State:
    standings = sorted(state.get("standings", []), key=lambda s: s.index)
    chosen = select(standings)
    winner = standings[chosen.winner] if chosen.winner is not None else None
    extras = {
        "winner": chosen.winner,
        "votes": chosen.votes,
        "distinct_programs": chosen.buckets,
        "per_agent": [s.as_record(label(s.index)) for s in standings],
        "code_source": winner.source if winner else None,
    }
    result = TeamResult(winner.text if winner else "",
                        winner.extraction if winner else Extraction(None, "none"),
                        extras, chosen.error, chosen.error_kind)
    return {"result": result}


def build(spec: TeamSpec) -> Any:
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(State, context_schema=RunContext)
    graph.add_node("coder", coder)
    graph.add_node("vote", vote)
    graph.add_conditional_edges(START, fan_out, ["coder"])
    graph.add_edge("coder", "vote")
    graph.add_edge("vote", END)
    return graph.compile()


def answer_roles(spec: TeamSpec) -> tuple[str, ...]:
    return (ROLE,)
