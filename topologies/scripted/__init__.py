"""Scripted OpenAI-compatible model server for tests and benchmarks (a stand-in for the model only)."""

from __future__ import annotations

from topologies.scripted.script import (
    ChatRequest,
    Fault,
    FaultKind,
    FunctionRule,
    Hit,
    Match,
    Reply,
    Rule,
    Script,
    ScriptError,
    ToolCall,
    builtin_answers,
    fenced_python,
    load_script,
    script_from_dict,
    solve_builtin,
)


def __getattr__(name: str) -> object:
    # Lazy, so ``python -m topologies.scripted.server`` does not import the module twice.
    if name in ("LoggedRequest", "ScriptedServer"):
        from topologies.scripted import server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "ChatRequest",
    "Fault",
    "FaultKind",
    "FunctionRule",
    "Hit",
    "LoggedRequest",
    "Match",
    "Reply",
    "Rule",
    "Script",
    "ScriptError",
    "ScriptedServer",
    "ToolCall",
    "builtin_answers",
    "fenced_python",
    "load_script",
    "script_from_dict",
    "solve_builtin",
]
