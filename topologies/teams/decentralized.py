"""decentralized: N peers debate for R rounds; the most common final program is submitted.

Round 1: every peer solves alone (ReAct with python_exec). Each later round: every peer receives
the OTHER peers' previous-round answers in full (re-rendered by the communication format, code
verbatim) and revises. Peers of a round run in parallel (they only read the previous round). A
peer that times out or hits a model error keeps its previous answer and sits out later rounds.
"""

from __future__ import annotations

from typing import Any, TypedDict

from topologies.formats import render_handoffs
from topologies.teams import notes
from topologies.teams.layouts import replica_label
from topologies.teams.replicas import Standing, guarded_turn, vote_result
from topologies.teams.session import (
    AgentSession,
    RunContext,
    TeamResult,
    format_contract_for,
    gather_or_cancel,
    output_contract_for,
    react,
)
from topologies.teams.tools import python_exec_tool, toolbox
from topologies.types import TeamSpec

ROLE = "debater"
NO_PEER_ANSWERS = "No other peer gave an answer in the previous round. Re-check your own answer."


class State(TypedDict, total=False):
    round: int
    sessions: tuple[AgentSession, ...]
    standings: tuple[Standing, ...]
    history: list[list[dict[str, Any]]]
    result: TeamResult


def label(index: int) -> str:
    return replica_label("decentralized", index)


def active_indices(ctx: RunContext) -> tuple[int, ...]:
    """The peers that debate in this run (all of them unless the run is masked)."""
    return tuple(i for i in range(ctx.spec.team_size) if ctx.is_active(label(i)))


def new_session(ctx: RunContext, index: int) -> AgentSession:
    limits = ctx.limits
    note = notes.debater_note(len(active_indices(ctx)), ctx.spec.rounds, limits.peer_calls)
    system = notes.compose(ctx.role_prompt(ROLE), note, format_contract_for(ctx), output_contract_for(ctx))
    session = ctx.session(ROLE, agent=label(index), system_prompt=system,
                          decoding=ctx.agent_decoding(index, replica=True))
    session.add_user(ctx.question)
    return session


def peer_answers(ctx: RunContext, standings: tuple[Standing, ...], index: int) -> str:
    others = [(label(s.index), s.text) for s in standings if s.index != index and s.text.strip()]
    if not others:
        return NO_PEER_ANSWERS
    ctx.metrics.handoffs += len(others)
    return render_handoffs(ctx.spec.communication, others, instruction=ctx.handoff_instruction())


async def debate_round(state: State, runtime: Any) -> State:
    ctx: RunContext = runtime.context
    number = state.get("round", 0)
    # One session per active peer; ``sessions``, ``standings`` and ``previous`` are aligned by
    # position, while ``Standing.index`` keeps the peer's team index (its seed and label).
    sessions = state.get("sessions")
    if sessions is None:
        sessions = tuple(new_session(ctx, i) for i in active_indices(ctx))
    previous = state.get("standings")
    tools = toolbox(python_exec_tool(ctx.limits.tool_timeout_s))
    indices = active_indices(ctx)

    async def turn(position: int) -> Standing:
        session, index = sessions[position], indices[position]
        before = previous[position] if previous else None
        if before is not None and before.status in ("timeout", "model_error"):
            return before  # sat out: keeps its last answer
        if previous is not None:
            session.add_user(peer_answers(ctx, previous, index), source="peers")
        standing = await guarded_turn(react(session, tools, ctx.limits.peer_calls), index=index,
                                      seed=session.decoding.seed, timeout_s=ctx.limits.agent_timeout_s,
                                      previous=before)
        if standing.status == "ok":
            ctx.metrics.observe(f"{label(index)}@round{number}", standing.text)
        return standing

    standings = tuple(await gather_or_cancel(*(turn(i) for i in range(len(sessions)))))
    summary = [{"agent": label(s.index), "has_code": s.code is not None, "status": s.status}
               for s in standings]
    return {"round": number + 1, "sessions": sessions, "standings": standings,
            "history": [*state.get("history", []), summary]}


async def after_round(state: State, runtime: Any) -> str:
    """A coroutine (it never waits) so LangGraph routes inline, not via a worker thread."""
    ctx: RunContext = runtime.context
    return "debate_round" if state.get("round", 0) < ctx.spec.rounds else "vote"


async def vote(state: State, runtime: Any) -> State:
    return {"result": vote_result(state.get("standings", ()), label, rounds=state.get("history", []))}


def build(spec: TeamSpec) -> Any:
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(State, context_schema=RunContext)
    graph.add_node("debate_round", debate_round)
    graph.add_node("vote", vote)
    graph.add_edge(START, "debate_round")
    graph.add_conditional_edges("debate_round", after_round, ["debate_round", "vote"])
    graph.add_edge("vote", END)
    return graph.compile()


def answer_roles(spec: TeamSpec) -> tuple[str, ...]:
    return (ROLE,)


def recursion_limit(spec: TeamSpec) -> int:
    return spec.rounds + 10
