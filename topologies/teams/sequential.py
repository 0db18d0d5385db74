"""sequential: a fixed pipeline of stages (e.g. analyzer → coder → tester → debugger).

Each stage sees the problem plus the hand-offs of all earlier stages, re-rendered by the
communication format (code verbatim). Stages with python_exec run a ReAct loop, the others make
one call. The submission is the program of the LAST program-writing stage that produced one.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

from lcb.extract import Extraction
from topologies.formats import render_handoffs
from topologies.teams import notes
from topologies.teams.layouts import Stage, sequential_stages
from topologies.teams.session import (
    RunContext,
    TeamResult,
    TurnResult,
    format_contract_for,
    output_contract_for,
    program_report,
    react,
    single_call,
)
from topologies.teams.tools import python_exec_tool, toolbox
from topologies.types import TeamSpec


@dataclass(frozen=True, slots=True)
class StageOutput:
    index: int
    role: str
    report: str  # what later stages receive (before format rendering)
    turn: TurnResult
    writes_program: bool


class State(TypedDict, total=False):
    outputs: Annotated[list[StageOutput], operator.add]
    result: TeamResult


def stage_prompt(ctx: RunContext, stages: tuple[Stage, ...], index: int) -> str:
    stage = stages[index]
    contract = output_contract_for(ctx) if stage.writes_program else ""
    # A masked run is the pipeline with the masked stages removed, and the note says so.
    acting = tuple(s for s in stages if ctx.is_active(s.role))
    note = notes.sequential_note(acting, acting.index(stage), ctx.limits.stage_calls)
    return notes.compose(ctx.role_prompt(stage.role), note, format_contract_for(ctx), contract)


def stage_input(ctx: RunContext, outputs: list[StageOutput]) -> str:
    if not outputs:
        return ctx.question
    handoffs = render_handoffs(ctx.spec.communication, [(o.role, o.report) for o in outputs],
                               instruction=ctx.handoff_instruction())
    ctx.metrics.handoffs += len(outputs)
    return f"{ctx.question}\n\n{handoffs}"


def make_stage_node(stages: tuple[Stage, ...], index: int) -> Any:
    stage = stages[index]

    async def run_stage(state: State, runtime: Any) -> State:
        ctx: RunContext = runtime.context
        if not ctx.is_active(stage.role):
            return {"outputs": []}  # masked: the stage passes its input through unchanged
        outputs = sorted(state.get("outputs", []), key=lambda o: o.index)
        session = ctx.session(stage.role, agent=stage.role, system_prompt=stage_prompt(ctx, stages, index),
                              decoding=ctx.agent_decoding(index))
        session.add_user(stage_input(ctx, outputs))
        if stage.has_tools:
            turn = await react(session, toolbox(python_exec_tool(ctx.limits.tool_timeout_s)),
                               ctx.limits.stage_calls)
        else:
            turn = await single_call(session)
        ctx.metrics.observe(stage.role, turn.text)
        report = program_report(turn) if stage.writes_program else turn.text
        return {"outputs": [StageOutput(index, stage.role, report, turn, stage.writes_program)]}

    return run_stage


async def submit(state: State, runtime: Any) -> State:
    outputs = sorted(state.get("outputs", []), key=lambda o: o.index)
    chosen = next((o for o in reversed(outputs) if o.writes_program and o.turn.code is not None), None)
    extras = {
        "stages": [{"role": o.role, "calls": o.turn.calls, "has_code": o.turn.code is not None,
                    "capped": o.turn.capped} for o in outputs],
        "submitted_by": chosen.role if chosen else None,
        "code_source": chosen.turn.source if chosen else None,
    }
    if chosen is None:
        return {"result": TeamResult(outputs[-1].turn.text if outputs else "", Extraction(None, "none"), extras)}
    return {"result": TeamResult(chosen.turn.text, chosen.turn.extraction, extras)}


def build(spec: TeamSpec) -> Any:
    from langgraph.graph import END, START, StateGraph

    stages = sequential_stages(spec.team_size)
    graph = StateGraph(State, context_schema=RunContext)
    previous = START
    for index, stage in enumerate(stages):
        name = f"stage{index}_{stage.role}"
        graph.add_node(name, make_stage_node(stages, index))
        graph.add_edge(previous, name)
        previous = name
    graph.add_node("submit", submit)
    graph.add_edge(previous, "submit")
    graph.add_edge("submit", END)
    return graph.compile()


def answer_roles(spec: TeamSpec) -> tuple[str, ...]:
    return tuple(s.role for s in sequential_stages(spec.team_size) if s.writes_program)
