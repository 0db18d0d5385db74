"""One team run's shared state (RunContext) and one agent's conversation (AgentSession).

Every message an agent sees or writes is recorded, source-tagged, in run order; usage is
counted per role from the replies' ``usage_metadata`` (the shared client's own counters mix
concurrent runs). ``react`` is the bounded tool loop all tool-using agents share.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from lcb.extract import Extraction, extract_code
from lcb.problem import Problem
from lcb.prompts import format_question
from topologies.formats import FormatMetrics
from topologies.teams.limits import TeamLimits
from topologies.teams.tools import ToolBox
from topologies.types import ChatClient, Decoding, ErrorKind, Message, TeamSpec, Usage, finish_reason_of

BUDGET_NOTE = (
    "Your tool budget for this turn is used up: no more tool calls are possible. Reply now with "
    "your final answer in the required format."
)

_KINDS: Mapping[type, str] = {
    SystemMessage: "system",
    HumanMessage: "user",
    AIMessage: "ai",
    ToolMessage: "tool",
}


def message_text(message: BaseMessage) -> str:
    """Plain text of a message (content blocks joined)."""
    content = message.content
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, Mapping) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return "".join(parts)


def tool_requests(message: AIMessage) -> list[dict[str, Any]]:
    """Valid and malformed tool calls of a reply, in order, as ``{name, args, id, error}``."""
    calls = [{"name": c["name"], "args": c.get("args", {}), "id": c.get("id") or "", "error": None}
             for c in message.tool_calls]
    calls += [{"name": c.get("name") or "", "args": c.get("args"), "id": c.get("id") or "",
               "error": c.get("error") or "arguments are not valid JSON"}
              for c in message.invalid_tool_calls]
    return calls


def _usage_of(message: AIMessage) -> Usage:
    meta = message.usage_metadata or {}
    return Usage(
        calls=1,
        prompt_tokens=int(meta.get("input_tokens", 0) or 0),
        completion_tokens=int(meta.get("output_tokens", 0) or 0),
        tool_calls=len(message.tool_calls) + len(message.invalid_tool_calls),
    )


@dataclass(slots=True)
class RunContext:
    """Per-run state shared by the nodes of a team graph (passed as LangGraph's context)."""

    spec: TeamSpec
    problem: Problem
    client: ChatClient
    decoding: Decoding
    seed: int
    limits: TeamLimits
    messages: list[Message] = field(default_factory=list)
    usage: dict[str, Usage] = field(default_factory=dict)
    metrics: FormatMetrics | None = None
    question: str = ""
    active: frozenset[str] | None = None  # a masked run: only these agents act (None: everyone)

    def __post_init__(self) -> None:
        if self.metrics is None:
            self.metrics = FormatMetrics(self.spec.communication)
        if not self.question:
            self.question = format_question(self.problem)

    def agent_decoding(self, agent_index: int, *, replica: bool = False) -> Decoding:
        """Per-agent seed (``seed * 1000 + agent_index``) so replicas differ; replica floor."""
        decoding = replace(self.decoding, seed=self.seed * 1000 + agent_index)
        floor = self.limits.replica_temperature
        if replica and floor is not None and decoding.temperature < floor:
            decoding = replace(decoding, temperature=floor)
        return decoding

    def is_active(self, agent: str) -> bool:
        """Whether ``agent`` takes part in this run (a masked-out agent makes no model call)."""
        return self.active is None or agent in self.active

    def role_prompt(self, role: str) -> str:
        return self.spec.roles.get(role, "")

    def handoff_instruction(self) -> str:
        return self.spec.protocol.get("handoff", "")

    def record(self, message: BaseMessage, *, source: str, agent: str) -> None:
        calls: tuple[dict[str, Any], ...] = ()
        finish: str | None = None
        if isinstance(message, AIMessage):
            calls = tuple({"name": c["name"], "args": c["args"], "id": c["id"]}
                          for c in tool_requests(message))
            finish = finish_reason_of(message)  # a reply cut at max_tokens stays visible as such
        self.messages.append(Message(source=source, kind=_KINDS.get(type(message), "user"),
                                     content=message_text(message), tool_calls=calls, agent=agent,
                                     finish_reason=finish))

    def add_usage(self, role: str, usage: Usage) -> None:
        self.usage[role] = self.usage.get(role, Usage()) + usage

    def calls_by_role(self) -> dict[str, int]:
        return {role: usage.calls for role, usage in self.usage.items()}

    def session(self, role: str, *, agent: str, system_prompt: str, decoding: Decoding) -> AgentSession:
        session = AgentSession(self, role, agent, decoding)
        session.add(SystemMessage(system_prompt), source="system")
        return session

    def salvage(self, roles: Iterable[str]) -> tuple[Extraction, str]:
        """Newest extractable program among the AI messages of ``roles`` (never user/tool text)."""
        wanted = set(roles)
        for message in reversed(self.messages):
            if message.kind == "ai" and message.source in wanted:
                found = extract_code(strip_terminate(message.content))
                if found.code is not None:
                    return found, message.content
        return Extraction(None, "none"), ""


def strip_terminate(text: str) -> str:
    """The centralized manager may write TERMINATE after its program; it is not code."""
    return text.replace("TERMINATE", "")


@dataclass(slots=True)
class AgentSession:
    """One agent's message history; everything added is recorded in the run."""

    ctx: RunContext
    role: str
    agent: str
    decoding: Decoding
    history: list[BaseMessage] = field(default_factory=list)
    calls: int = 0

    def add(self, message: BaseMessage, *, source: str | None = None) -> None:
        self.history.append(message)
        self.ctx.record(message, source=source or self.role, agent=self.agent)

    def add_user(self, text: str, *, source: str = "user") -> None:
        self.add(HumanMessage(text), source=source)

    async def step(self, toolbox: ToolBox | None = None) -> AIMessage:
        """One model call; raises ``ModelCallError`` when the model layer gives up."""
        tools = toolbox.schemas() if toolbox else ()
        reply = await self.ctx.client.complete(self.role, list(self.history), decoding=self.decoding,
                                               tools=tools)
        self.calls += 1
        self.ctx.add_usage(self.role, _usage_of(reply))
        self.add(reply, source=self.role)
        return reply

    def ai_texts(self, since: int = 0) -> list[str]:
        return [message_text(m) for m in self.history[since:] if isinstance(m, AIMessage)]

    def final_text(self, since: int = 0) -> str:
        """The last non-empty text this agent wrote (from history position ``since`` on)."""
        for text in reversed(self.ai_texts(since)):
            if text.strip():
                return text
        return ""

    def latest_program(self) -> Extraction:
        """Newest extractable program in this agent's own replies."""
        for text in reversed(self.ai_texts()):
            found = extract_code(strip_terminate(text))
            if found.code is not None:
                return found
        return Extraction(None, "none")


@dataclass(frozen=True, slots=True)
class TurnResult:
    """One agent turn: its final text, the program in it (or salvaged), and how it ended."""

    text: str
    extraction: Extraction
    salvaged: bool
    calls: int
    capped: bool

    @property
    def code(self) -> str | None:
        return self.extraction.code

    @property
    def source(self) -> str | None:
        """Where the program came from: the turn's final reply, an earlier own reply, or none."""
        if self.code is None:
            return None
        return "salvaged" if self.salvaged else "final"


def finish_turn(session: AgentSession, *, since: int, calls: int, capped: bool) -> TurnResult:
    """Take the program from the turn's final text, else from the agent's own earlier replies."""
    text = session.final_text(since)
    found = extract_code(strip_terminate(text))
    salvaged = False
    if found.code is None:
        found = session.latest_program()
        salvaged = found.code is not None
    return TurnResult(text, found, salvaged, calls, capped)


async def gather_or_cancel(*awaitables: Awaitable[Any]) -> list[Any]:
    """``asyncio.gather`` that cancels the siblings when one fails (plain gather leaves them
    running: an infrastructure error would otherwise leave agents calling the model after the
    run has already been reported as failed)."""
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def run_tool_calls(session: AgentSession, reply: AIMessage, toolbox: ToolBox) -> None:
    """Execute all tool calls of a reply concurrently; answer each in order."""
    requests = tool_requests(reply)

    async def one(request: dict[str, Any]) -> str:
        if request["error"] is not None:
            return f"error: could not read the call to {request['name'] or 'a tool'}: {request['error']}"
        return await toolbox.run(request["name"], request["args"])

    outputs = await gather_or_cancel(*(one(r) for r in requests))
    for request, output in zip(requests, outputs, strict=True):
        name = request["name"] or "unknown"
        session.add(ToolMessage(content=output, tool_call_id=request["id"], name=name),
                    source=f"tool:{name}")


async def react(session: AgentSession, toolbox: ToolBox, max_calls: int) -> TurnResult:
    """Call the model, run its tool calls, repeat until a reply without tool calls or the budget.

    The last allowed call offers no tools (after a budget note), so a budget-exhausted agent
    still answers instead of ending on an unanswered tool call.
    """
    start, since = session.calls, len(session.history)
    capped = False
    for index in range(max_calls):
        last = index == max_calls - 1
        if last and index > 0 and toolbox:
            session.add_user(BUDGET_NOTE, source="runtime")
            capped = True
        reply = await session.step(None if last else toolbox)
        if not (reply.tool_calls or reply.invalid_tool_calls):
            break
        if last:
            # Tool calls that were not offered stay unanswered otherwise, which makes the
            # history invalid for a later turn of the same agent (decentralized rounds).
            refuse_tool_calls(session, reply)
            break
        await run_tool_calls(session, reply, toolbox)
    return finish_turn(session, since=since, calls=session.calls - start, capped=capped)


def refuse_tool_calls(session: AgentSession, reply: AIMessage) -> None:
    for request in tool_requests(reply):
        name = request["name"] or "unknown"
        session.add(ToolMessage(content="error: tool budget used up; this call was not run",
                                tool_call_id=request["id"], name=name), source=f"tool:{name}")


async def single_call(session: AgentSession) -> TurnResult:
    """A role without tools: one model call."""
    since = len(session.history)
    reply = await session.step(None)
    if reply.tool_calls or reply.invalid_tool_calls:
        refuse_tool_calls(session, reply)
    return finish_turn(session, since=since, calls=1, capped=False)


def program_report(turn: TurnResult) -> str:
    """An agent's hand-off text; a program it wrote earlier but left out of its last reply is
    appended so the receiver is not handed a program-less report by accident."""
    if turn.salvaged and turn.code is not None:
        return f"{turn.text.rstrip()}\n\nLatest complete program written by this agent:\n```python\n{turn.code}\n```"
    return turn.text


@dataclass(frozen=True, slots=True)
class TeamResult:
    """What a team graph hands back: the submission and topology-specific extras."""

    answer_text: str
    extraction: Extraction
    extras: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None
    error_kind: ErrorKind | None = None


def output_contract_for(ctx: RunContext, *, finishing_note: str = "") -> str:
    from topologies.contracts import output_contract

    return output_contract(ctx.problem, finishing_note=finishing_note)


def format_contract_for(ctx: RunContext) -> str:
    from topologies.formats import contract_text

    return contract_text(ctx.spec.communication)
