"""What each role saw in one of the incumbent's transcripts: the input its candidate prompts are
probed on and judged against (MAPRO step 2a). As in the reference, the messages a role saw go in
whole, as source-tagged JSON (a downstream probe sees the whole program it is to review); only
the task header and the manager's delegations are cut (1500 / 700 characters, as there). Which
messages count depends on how the team talks:

- ``chain`` (sequential): every message before the role first speaks (the task message included);
- ``star`` (centralized): the manager gets the task; a worker gets the task plus the manager's
  instructions to it (its last two ``delegate_to_<worker>`` calls, else the manager's last message
  before the worker spoke);
- ``shared`` with peers (decentralized): all messages of the run (the task message included);
- ``shared`` without peers (single, independent): none (an empty list).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from optimizers.reflection import tagged_message
from optimizers.team_graph import TeamGraph

Trace = Sequence[Mapping[str, Any]]

TASK_CHARS = 1500
DELEGATION_CHARS = 700
NO_DELEGATION = "(the manager did not delegate to you in this run; respond according to your role)"


def head(text: str | None, limit: int) -> str:
    """``text`` stripped and cut after ``limit`` characters (the reference's clip)."""
    text = (text or "").strip()
    return text if len(text) <= limit else text[:limit] + "…"


def task_of(trace: Trace) -> str:
    return next((str(m.get("content", "")) for m in trace if m.get("kind") == "user"), "")


def _team_messages(trace: Trace) -> list[Mapping[str, Any]]:
    """Messages after the task, system prompts left out."""
    first_user = next((m for m in trace if m.get("kind") == "user"), None)
    return [m for m in trace if m.get("kind") != "system" and m is not first_user]


def _visible(trace: Trace, messages: Sequence[Mapping[str, Any]] | None) -> str:
    """The task header, then the visible messages whole as JSON: the run from its start (the
    task message first) up to what ``messages`` lists; None: nothing visible (``[]``)."""
    task = f"TASK:\n{head(task_of(trace), TASK_CHARS)}"
    first_user = [m for m in trace if m.get("kind") == "user"][:1]
    shown = [] if messages is None else [tagged_message(m) for m in (*first_user, *messages)]
    return f"{task}\n\nSOURCE-TAGGED CONTEXT:\n{json.dumps(shown, ensure_ascii=False, default=str)}"


def _before_first_turn(trace: Trace, role: str) -> list[Mapping[str, Any]]:
    messages = _team_messages(trace)
    first = next((i for i, m in enumerate(messages) if m.get("kind") == "ai" and m.get("source") == role),
                 len(messages))
    return messages[:first]


def delegations(trace: Trace, hub: str, worker: str) -> list[str]:
    """The hub's instructions to ``worker``: its ``delegate_to_<worker>`` calls, else its last
    message before the worker first spoke."""
    found: list[str] = []
    for message in trace:
        if message.get("source") != hub:
            continue
        for call in message.get("tool_calls") or ():
            if isinstance(call, Mapping) and call.get("name") == f"delegate_to_{worker}":
                args = call.get("args")
                text = args.get("instructions") if isinstance(args, Mapping) else None
                found.append(str(text) if text else json.dumps(args, default=str))
    if found:
        return found
    before = _before_first_turn(trace, worker)
    if len(before) == len(_team_messages(trace)):  # the worker never spoke
        return []
    said = [str(m.get("content", "")) for m in before if m.get("source") == hub and m.get("content")]
    return said[-1:]


def _star(graph: TeamGraph, trace: Trace, role: str) -> str:
    hub = graph.roles[0]
    task = f"TASK:\n{head(task_of(trace), TASK_CHARS)}"
    if role == hub:
        return task
    given = delegations(trace, hub, role)
    block = "\n---\n".join(head(text, DELEGATION_CHARS) for text in given[-2:]) if given else NO_DELEGATION
    return f"{task}\n\nMANAGER INSTRUCTIONS TO {role}:\n{block}"


def _chain(graph: TeamGraph, trace: Trace, role: str) -> str:
    return _visible(trace, _before_first_turn(trace, role))


def _shared(graph: TeamGraph, trace: Trace, role: str) -> str:
    return _visible(trace, _team_messages(trace) if graph.peers else None)


CONTEXT_BY_KIND: Mapping[str, Callable[[TeamGraph, Trace, str], str]] = {
    "star": _star,
    "chain": _chain,
    "shared": _shared,
}


def probe_context(graph: TeamGraph, trace: Trace, role: str) -> str:
    """``role``'s input in ``trace`` as MAPRO probes it (see the module docstring)."""
    return CONTEXT_BY_KIND[graph.kind](graph, trace, role)


def outputs_of(trace: Trace, role: str) -> list[str]:
    """Everything ``role``'s agents wrote in ``trace`` (non-empty replies, in order)."""
    return [str(m.get("content", "")) for m in trace
            if m.get("kind") == "ai" and m.get("source") == role and m.get("content")]
