"""centralized: a manager with python_exec and one ``delegate_to_<worker>`` tool per worker.

A worker starts fresh for every delegation and sees only the problem statement and the manager's
call (instructions + optional code, verbatim) — never the manager's transcript. Its reply comes
back as the tool result, re-rendered by the communication format. The run ends explicitly: a
manager reply without tool calls (with the final program, or saying TERMINATE). ``max_turns``
bounds manager calls; the last one is made without tools. If the manager ends without a program
its latest program from its own replies is salvaged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from lcb.extract import extract_code
from topologies.contracts import program_handoff_contract
from topologies.formats import render_handoffs
from topologies.teams import notes
from topologies.teams.layouts import Worker, centralized_workers
from topologies.teams.session import (
    AgentSession,
    RunContext,
    TeamResult,
    format_contract_for,
    message_text,
    output_contract_for,
    program_report,
    react,
    refuse_tool_calls,
    run_tool_calls,
    strip_terminate,
)
from topologies.teams.tools import ToolBox, delegate_tool, python_exec_tool, toolbox
from topologies.types import ErrorKind, ModelCallError, TeamSpec

MANAGER = "manager"

FINISHING_NOTE = (
    "To finish, reply WITHOUT calling any tool: that reply is the team's answer and must end with "
    "the final program block. (Writing TERMINATE in a reply without tool calls also ends the run.)"
)
LAST_TURN_NOTE = (
    "This is your last turn: no more tool calls are possible. Reply now with the team's final "
    "program in the required format."
)
NUDGE = (
    "Your last reply neither called a tool nor ended with the final program. Either delegate or "
    "run code with a tool call, or finish with the complete final program in a python block."
)


class State(TypedDict, total=False):
    manager: AgentSession
    tools: ToolBox
    delegations: dict[str, int]
    turns: int
    nudges: int
    pending_tools: bool
    stop: str
    result: TeamResult


def worker_prompt(ctx: RunContext, worker: Worker) -> str:
    contract = program_handoff_contract(ctx.problem) if worker.writes_program else ""
    return notes.compose(ctx.role_prompt(worker.role), notes.worker_note(worker, ctx.limits.worker_calls),
                         format_contract_for(ctx), contract)


def delegation_text(ctx: RunContext, instructions: str, code: str) -> str:
    parts = [ctx.question, "## Instructions from the manager", instructions.strip() or "(none)"]
    if code.strip():
        parts += ["## Code from the manager", f"```python\n{code.rstrip()}\n```"]
    return "\n\n".join(parts)


def make_delegate(ctx: RunContext, worker: Worker, worker_index: int, counts: dict[str, int]) -> Any:
    async def delegate(args: Mapping[str, Any]) -> str:
        instructions, code = args.get("instructions", ""), args.get("code", "") or ""
        if not isinstance(instructions, str) or not isinstance(code, str):
            return f"error: {worker.tool_name} needs a string 'instructions' and an optional string 'code'"
        counts[worker.role] = counts.get(worker.role, 0) + 1
        agent = f"{worker.role}#{counts[worker.role]}"
        session = ctx.session(worker.role, agent=agent, system_prompt=worker_prompt(ctx, worker),
                              decoding=ctx.agent_decoding(1 + worker_index))
        session.add_user(delegation_text(ctx, instructions, code), source=MANAGER)
        try:
            turn = await react(session, toolbox(python_exec_tool(ctx.limits.tool_timeout_s)),
                               ctx.limits.worker_calls)
        except ModelCallError as exc:
            if exc.kind is ErrorKind.INFRASTRUCTURE:
                raise
            return f"error: {worker.role} could not complete the task: {exc}"
        ctx.metrics.observe(agent, turn.text)
        ctx.metrics.handoffs += 1
        report = program_report(turn) if worker.writes_program else turn.text
        return render_handoffs(ctx.spec.communication, [(worker.role, report)],
                               instruction=ctx.handoff_instruction())

    return delegate


def active_workers(ctx: RunContext) -> tuple[tuple[int, Worker], ...]:
    """(team index, worker) of the workers in this run; masked workers do not exist for it."""
    return tuple((i, w) for i, w in enumerate(centralized_workers(ctx.spec.team_size)) if ctx.is_active(w.role))


def manager_tools(ctx: RunContext, counts: dict[str, int]) -> ToolBox:
    delegates = [
        delegate_tool(w.tool_name, f"Delegate a task to {w.role}, who {w.job}. Returns its report.",
                      make_delegate(ctx, w, i, counts))
        for i, w in active_workers(ctx)
    ]
    return toolbox(python_exec_tool(ctx.limits.tool_timeout_s), *delegates)


def manager_prompt(ctx: RunContext) -> str:
    note = notes.manager_note([w for _, w in active_workers(ctx)], ctx.spec.max_turns)
    return notes.compose(ctx.role_prompt(MANAGER), note, format_contract_for(ctx),
                         output_contract_for(ctx, finishing_note=FINISHING_NOTE))


async def manager(state: State, runtime: Any) -> State:
    ctx: RunContext = runtime.context
    session = state.get("manager")
    update: State = {}
    if session is None:
        counts: dict[str, int] = {}
        session = ctx.session(MANAGER, agent=MANAGER, system_prompt=manager_prompt(ctx),
                              decoding=ctx.agent_decoding(0))
        session.add_user(ctx.question)
        update = {"manager": session, "tools": manager_tools(ctx, counts), "delegations": counts}
    tools = update.get("tools") or state["tools"]
    turns = state.get("turns", 0)
    last_turn = turns > 0 and turns >= ctx.spec.max_turns - 1
    if last_turn:
        session.add_user(LAST_TURN_NOTE, source="runtime")
    reply = await session.step(None if last_turn else tools)
    wants_tools = bool(reply.tool_calls or reply.invalid_tool_calls)
    if wants_tools and last_turn:
        refuse_tool_calls(session, reply)
    return {**update, "turns": turns + 1, "pending_tools": wants_tools and not last_turn}


def _last_reply_text(session: AgentSession) -> str:
    from langchain_core.messages import AIMessage

    for message in reversed(session.history):
        if isinstance(message, AIMessage):
            return message_text(message)
    return ""


def is_final(text: str) -> bool:
    return "TERMINATE" in text or extract_code(strip_terminate(text)).code is not None


# Routers are coroutines although they never wait: LangGraph runs a plain-function router in a
# worker thread, a thread hop per decision that costs milliseconds under load (the GIL hand-off).
async def after_manager(state: State, runtime: Any) -> str:
    ctx: RunContext = runtime.context
    if state.get("pending_tools"):
        return "tools"
    if is_final(_last_reply_text(state["manager"])):
        return "finish"
    if state.get("nudges", 0) < ctx.limits.manager_nudges and state.get("turns", 0) < ctx.spec.max_turns:
        return "nudge"
    return "finish"


async def tools_node(state: State, runtime: Any) -> State:
    from langchain_core.messages import AIMessage

    session = state["manager"]
    reply = session.history[-1]
    assert isinstance(reply, AIMessage)
    await run_tool_calls(session, reply, state["tools"])
    return {"pending_tools": False}


async def after_tools(state: State, runtime: Any) -> str:
    ctx: RunContext = runtime.context
    return "finish" if state.get("turns", 0) >= ctx.spec.max_turns else "manager"


async def nudge(state: State, runtime: Any) -> State:
    state["manager"].add_user(NUDGE, source="runtime")
    return {"nudges": state.get("nudges", 0) + 1}


async def finish(state: State, runtime: Any) -> State:
    ctx: RunContext = runtime.context
    session = state["manager"]
    text = _last_reply_text(session)
    found = extract_code(strip_terminate(text))
    salvaged = False
    if found.code is None:
        found = session.latest_program()
        salvaged = found.code is not None
    ends_cleanly = not state.get("pending_tools") and is_final(text)
    stop = ("terminate" if "TERMINATE" in text else "final") if ends_cleanly else (
        "max_turns" if state.get("turns", 0) >= ctx.spec.max_turns else "no_final_program")
    ctx.metrics.observe(MANAGER, text)
    extras = {
        "turns": state.get("turns", 0),
        "stop": stop,
        "nudges": state.get("nudges", 0),
        "delegations": dict(state.get("delegations", {})),
        "code_source": None if found.code is None else ("salvaged" if salvaged else "final"),
    }
    return {"result": TeamResult(text, found, extras), "stop": stop}


def build(spec: TeamSpec) -> Any:
    from langgraph.graph import END, START, StateGraph

    centralized_workers(spec.team_size)  # validates the size
    graph = StateGraph(State, context_schema=RunContext)
    graph.add_node("manager", manager)
    graph.add_node("tools", tools_node)
    graph.add_node("nudge", nudge)
    graph.add_node("finish", finish)
    graph.add_edge(START, "manager")
    graph.add_conditional_edges("manager", after_manager, ["tools", "nudge", "finish"])
    graph.add_conditional_edges("tools", after_tools, ["manager", "finish"])
    graph.add_edge("nudge", "manager")
    graph.add_edge("finish", END)
    return graph.compile()


def answer_roles(spec: TeamSpec) -> tuple[str, ...]:
    return (MANAGER,)


def recursion_limit(spec: TeamSpec) -> int:
    # manager + tools per turn, plus nudges and the finish step
    return 3 * spec.max_turns + 10
