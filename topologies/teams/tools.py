"""Tools offered to agents: ``python_exec`` and the centralized manager's delegation tools.

Schemas are OpenAI function-tool dicts (what ``ChatClient.complete(tools=...)`` accepts).
Handlers are async and never raise for bad arguments: the model gets an error text back and can
try again, as it would from any tool.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Handler = Callable[[Mapping[str, Any]], Awaitable[str]]

PYTHON_EXEC = "python_exec"


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    parameters: Mapping[str, Any]
    handler: Handler

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


@dataclass(frozen=True, slots=True)
class ToolBox:
    tools: tuple[Tool, ...] = ()

    def schemas(self) -> tuple[dict[str, Any], ...]:
        return tuple(tool.schema() for tool in self.tools)

    def __bool__(self) -> bool:
        return bool(self.tools)

    async def run(self, name: str, args: Any) -> str:
        tool = next((t for t in self.tools if t.name == name), None)
        if tool is None:
            known = ", ".join(t.name for t in self.tools) or "none"
            return f"error: unknown tool {name!r} (available: {known})"
        if not isinstance(args, Mapping):
            return f"error: arguments of {name} must be a JSON object"
        return await tool.handler(args)


def _string_arg(args: Mapping[str, Any], key: str, *, required: bool) -> str | None:
    value = args.get(key)
    if value is None:
        return None if required else ""
    return value if isinstance(value, str) else None


def python_exec_tool(timeout_s: float) -> Tool:
    """Run model code through LCB's sandboxed executor (async, one subprocess per call)."""

    async def handler(args: Mapping[str, Any]) -> str:
        code = _string_arg(args, "code", required=True)
        stdin = _string_arg(args, "stdin", required=False)
        if code is None or stdin is None:
            return "error: python_exec needs a string 'code' and an optional string 'stdin'"
        from lcb.tools import apython_exec

        try:
            result = await apython_exec(code, stdin, timeout_s)
        except Exception as exc:  # noqa: BLE001 - our harness failed, not the agent
            # Not the team's fault: classify like a transport failure so the rollout is retried.
            from topologies.types import ErrorKind, ModelCallError

            raise ModelCallError(f"python_exec sandbox failed: {type(exc).__name__}: {exc}",
                                 ErrorKind.INFRASTRUCTURE) from exc
        return result.render()

    return Tool(
        name=PYTHON_EXEC,
        description=(
            "Run a Python 3 program in a fresh sandboxed subprocess (the same sandbox that grades "
            "submissions) with the given stdin, and return its exit status, stdout and stderr. "
            f"The program is killed after {timeout_s:g} seconds. Nothing persists between calls: "
            "include all definitions every time."
        ),
        parameters={
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": "the complete Python program to run"},
                "stdin": {"type": "string", "description": "text fed to standard input", "default": ""},
            },
            "required": ["code"],
        },
        handler=handler,
    )


def delegate_tool(name: str, description: str, handler: Handler) -> Tool:
    """``delegate_to_<worker>(instructions, code="")``: the worker's reply is the tool result."""
    return Tool(
        name=name,
        description=description,
        parameters={
            "type": "object",
            "properties": {
                "instructions": {
                    "type": "string",
                    "description": "what the worker should do; it sees only this and the problem",
                },
                "code": {
                    "type": "string",
                    "description": "optional program for the worker to use (passed verbatim)",
                    "default": "",
                },
            },
            "required": ["instructions"],
        },
        handler=handler,
    )


def toolbox(*tools: Tool) -> ToolBox:
    return ToolBox(tuple(tools))


def tool_names(tools: Sequence[Tool]) -> tuple[str, ...]:
    return tuple(t.name for t in tools)
