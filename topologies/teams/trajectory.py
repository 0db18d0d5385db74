"""Trajectory <-> JSON (traces, caches): plain dicts, lossless for everything a Trajectory holds."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from topologies.types import ErrorKind, Message, Trajectory, Usage


def usage_to_dict(usage: Usage) -> dict[str, int]:
    return {"calls": usage.calls, "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens, "tool_calls": usage.tool_calls,
            "total_tokens": usage.total_tokens}


def usage_from_dict(data: Mapping[str, Any]) -> Usage:
    return Usage(int(data.get("calls", 0)), int(data.get("prompt_tokens", 0)),
                 int(data.get("completion_tokens", 0)), int(data.get("tool_calls", 0)))


def _jsonable(value: Any) -> Any:
    """Extras are plain data by construction; anything else becomes its string form."""
    return json.loads(json.dumps(value, default=str))


def trajectory_to_dict(trajectory: Trajectory) -> dict[str, Any]:
    return {
        "problem_id": trajectory.problem_id,
        "code": trajectory.code,
        "extraction_rule": trajectory.extraction_rule,
        "answer_text": trajectory.answer_text,
        "error": trajectory.error,
        "error_kind": trajectory.error_kind.value if trajectory.error_kind else None,
        "usage": usage_to_dict(trajectory.usage),
        "usage_by_role": {role: usage_to_dict(u) for role, u in trajectory.usage_by_role.items()},
        "extras": _jsonable(dict(trajectory.extras)),
        "messages": [
            {"source": m.source, "agent": m.agent, "kind": m.kind, "content": m.content,
             "tool_calls": _jsonable(list(m.tool_calls)),
             **({"finish_reason": m.finish_reason} if m.finish_reason else {})}
            for m in trajectory.messages
        ],
    }


def trajectory_from_dict(data: Mapping[str, Any]) -> Trajectory:
    kind = data.get("error_kind")
    return Trajectory(
        problem_id=data["problem_id"],
        messages=tuple(Message(source=m["source"], kind=m["kind"], content=m["content"],
                               tool_calls=tuple(m.get("tool_calls", ())), agent=m.get("agent", ""),
                               finish_reason=m.get("finish_reason"))
                       for m in data.get("messages", ())),
        answer_text=data.get("answer_text", ""),
        code=data.get("code"),
        extraction_rule=data.get("extraction_rule", "none"),
        usage_by_role={role: usage_from_dict(u) for role, u in data.get("usage_by_role", {}).items()},
        error=data.get("error"),
        error_kind=ErrorKind(kind) if kind else None,
        extras=dict(data.get("extras", {})),
    )
