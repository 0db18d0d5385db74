"""Scripted team players: a model stand-in that plays every role of every team.

Used by the tests, the throughput benchmark and smoke runs against the scripted server
(``topologies.scripted``). The player reads what any real model would read — the system prompt
(its format contract, output contract, team note) and the offered tools — and answers
deterministically:

- a manager offered ``delegate_to_*`` tools delegates once to every worker (in one reply, the
  program passed verbatim), then finishes with the program;
- an agent offered ``python_exec`` runs the program once, then answers;
- an agent without tools answers at once.

Answers follow the requested communication format (unless ``follow_format`` is off) and carry the
program only where the output contract asks for one. The program comes from ``code_for(request)``;
by default the built-in problems' reference solutions, recognised from the statement.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from topologies.scripted.script import ChatRequest, FunctionRule, Reply, Script, ToolCall

CodeFor = Callable[[ChatRequest], "str | None"]

_SOLUTIONS_FILE = Path(__file__).resolve().parents[2] / "lcb" / "builtin" / "solutions.json"
_STATEMENT_KEY_CHARS = 160


def builtin_solutions(kind: str = "correct") -> dict[str, str]:
    """``{statement excerpt: program}`` for the built-in problems (``kind``: correct or wrong)."""
    from lcb.data import load_problems

    solutions = json.loads(_SOLUTIONS_FILE.read_text(encoding="utf-8"))
    return {p.statement[:_STATEMENT_KEY_CHARS]: solutions[p.id][kind]
            for p in load_problems("builtin").problems if p.id in solutions}


def code_from_statement(solutions: Mapping[str, str]) -> CodeFor:
    """Pick the program whose statement excerpt appears in the request (longest key wins)."""
    keys = sorted(solutions, key=len, reverse=True)

    def code_for(request: ChatRequest) -> str | None:
        text = request.all_text
        return next((solutions[k] for k in keys if k in text), None)

    return code_for


_SAMPLE = re.compile(r"Sample Input 1\s*\n(.*?)\n\s*Sample Output 1", re.DOTALL)


def sample_input(request: ChatRequest) -> str:
    """The statement's first sample input (empty when there is none, e.g. LeetCode style)."""
    found = _SAMPLE.search(request.all_text)
    return found.group(1).strip() + "\n" if found else ""


def request_format(system: str) -> str:
    if "Report format (semi-structured)" in system:
        return "semi_structured"
    if "Report format (structured)" in system:
        return "structured_soft"
    return "freeform"


def report(fmt: str, summary: str) -> str:
    if fmt == "semi_structured":
        return (f"[STATUS] completed\n[SUMMARY] {summary}\n[EVIDENCE_OR_TESTS] ran the samples\n"
                "[CONFIDENCE] high - samples pass\n[NEXT] submit")
    if fmt == "structured_soft":
        body = {"status": "completed", "summary": summary, "confidence": "high", "next": "submit",
                "payload": {"approach": "direct", "code_status": "tested"}}
        return f"JSON_REPORT: {json.dumps(body)}\nEND_JSON_REPORT"
    return summary


def wants_program(system: str) -> bool:
    return "## Required final output" in system or "## Required program hand-off" in system


def _last_role(request: ChatRequest) -> str:
    messages = request.messages
    return str(messages[-1].get("role", "")) if messages else ""


_AGENT = re.compile(r"You are (stage \d+ of \d+ \((\w+)\)|(\w+), a worker)")


def speaker(request: ChatRequest) -> str:
    """A readable name for who is asking (for summaries in replies)."""
    if any(name.startswith("delegate_to_") for name in request.tool_names):
        return "manager"
    found = _AGENT.search(request.system)
    if found:
        return found.group(2) or found.group(3)
    return "agent"


def team_player(
    code_for: CodeFor | None = None,
    *,
    follow_format: bool = True,
    use_tools: bool = True,
    delegate: bool | None = None,
    name: str = "team_player",
) -> FunctionRule:
    """The rule that plays every role (see module docstring). ``use_tools=False`` never calls a
    tool; ``delegate`` (default: ``use_tools``) decides the manager's delegations on its own, so
    the centralized flow can be kept without running programs."""
    pick = code_for or code_from_statement(builtin_solutions())
    delegates_work = use_tools if delegate is None else delegate

    def play(request: ChatRequest) -> Reply:
        code = pick(request)
        fmt = request_format(request.system) if follow_format else "freeform"
        after_tool = _last_role(request) == "tool"
        delegates = [t for t in request.tool_names if t.startswith("delegate_to_")]
        if delegates_work and delegates and not after_tool and code is not None:
            calls = tuple(ToolCall(t, {"instructions": "Check this program on the samples.", "code": code})
                          for t in delegates)
            return Reply(content="Delegating.", tool_calls=calls)
        if use_tools and "python_exec" in request.tool_names and not after_tool and code is not None:
            return Reply(content="Running it.", tool_calls=(ToolCall("python_exec", {"code": code, "stdin": sample_input(request)}),))
        text = report(fmt, f"{speaker(request)} done")
        if code is not None and wants_program(request.system):
            text += f"\n\n```python\n{code.strip()}\n```"
        return Reply(content=text)

    return FunctionRule(name, play)


def team_script(code_for: CodeFor | None = None, *, follow_format: bool = True, use_tools: bool = True,
                delegate: bool | None = None, latency_s: float = 0.0, rules: tuple[Any, ...] = ()) -> Script:
    """A Script whose ``rules`` (if any) come first, then the team player."""
    player = team_player(code_for, follow_format=follow_format, use_tools=use_tools, delegate=delegate)
    return Script([*rules, player], latency_s=latency_s)
