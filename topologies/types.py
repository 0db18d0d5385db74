"""Seams between the model layer, the teams and the optimizers.

The model layer (``topologies.models``) implements ``ChatClient``; teams (``topologies.teams``)
consume it and produce a ``Trajectory``; the optimizer protocol only sees ``TeamSpec``,
``Trajectory`` and ``Usage``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class Decoding:
    """Sampling settings, passed explicitly with every call (never via environment variables)."""

    temperature: float = 0.0
    top_p: float = 0.95
    max_tokens: int = 4096
    seed: int | None = 0


@dataclass(frozen=True, slots=True)
class Usage:
    """Token and call counts; add them with ``+``."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tool_calls: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.calls + other.calls,
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.tool_calls + other.tool_calls,
        )

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class ErrorKind(StrEnum):
    """Infrastructure failures are retried and never charged; model errors are the team's fault."""

    INFRASTRUCTURE = "infrastructure"
    MODEL = "model"


class ModelCallError(Exception):
    """A model call that failed for good (after retries). ``kind`` says whose fault it was."""

    def __init__(self, message: str, kind: ErrorKind) -> None:
        super().__init__(message)
        self.kind = kind


class ChatClient(Protocol):
    """What a team needs from the model layer.

    ``complete`` returns a LangChain ``AIMessage`` whose content has everything up to a final
    ``</think>`` removed, with ``usage_metadata`` filled when the server reports it. Retries on
    transport errors happen inside; a final failure raises ``ModelCallError``.
    """

    model_id: str

    async def complete(
        self,
        role: str,
        messages: Sequence[Any],
        *,
        decoding: Decoding,
        tools: Sequence[Any] = (),
        tool_choice: str | None = None,
        extra_body: Mapping[str, Any] | None = None,  # request fields of this call (optional to honour)
    ) -> Any: ...


class CommunicationFormat(StrEnum):
    FREEFORM = "freeform"
    SEMI_STRUCTURED = "semi_structured"
    STRUCTURED_SOFT = "structured_soft"


@dataclass(frozen=True, slots=True)
class TeamSpec:
    """Everything that defines a team run except the model.

    ``roles`` maps role name -> editable prompt text (what optimizers change). ``protocol`` maps
    editable protocol parts (e.g. ``handoff``) -> text. The output contract is not in here: the
    team adds it to the answering role at run time, so no edit can remove it.
    """

    topology: str
    roles: Mapping[str, str]
    communication: CommunicationFormat = CommunicationFormat.FREEFORM
    team_size: int = 4
    rounds: int = 2
    max_turns: int = 26
    protocol: Mapping[str, str] = field(default_factory=dict)


# The OpenAI ``finish_reason`` of a reply cut at its token limit (``max_tokens``).
TRUNCATED = "length"


def finish_reason_of(reply: Any) -> str | None:
    """A model reply's ``finish_reason`` (``stop``, ``length``, ``tool_calls``), None if unknown."""
    metadata = getattr(reply, "response_metadata", None) or {}
    reason = metadata.get("finish_reason") if isinstance(metadata, Mapping) else None
    return str(reason) if reason else None


@dataclass(frozen=True, slots=True)
class Agent:
    """One agent of a team: its name in traces and masks, and the role prompt it runs with.

    Role-based teams have one agent per role (``analyzer``, ``manager``); replica teams run one
    shared role prompt in several agents (``coder#0`` ... of role ``coder``).
    """

    name: str
    role: str


@dataclass(frozen=True, slots=True)
class TeamRoster:
    """Who is on a team, in acting order, and which agents a mask may leave out.

    A masked run (``run_team(..., active=...)``) runs only the named agents; the agents in
    ``always_active`` (the centralized manager) cannot be masked, because the team does not exist
    without them.
    """

    topology: str
    team_size: int
    agents: tuple[Agent, ...]
    always_active: frozenset[str] = frozenset()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(agent.name for agent in self.agents)

    @property
    def maskable(self) -> tuple[Agent, ...]:
        return tuple(agent for agent in self.agents if agent.name not in self.always_active)

    def role_of(self, name: str) -> str:
        for agent in self.agents:
            if agent.name == name:
                return agent.role
        raise KeyError(f"no agent {name!r} on this {self.topology} team; agents: {', '.join(self.names)}")


@dataclass(frozen=True, slots=True)
class Message:
    """One source-tagged message of a trajectory (for traces and reflective optimizers)."""

    source: str  # role name, "user", "tool:<name>", or "system"
    kind: str  # "system" | "user" | "ai" | "tool"
    content: str
    tool_calls: tuple[dict[str, Any], ...] = ()
    agent: str = ""  # e.g. "coder#2" or "peer1@round0"; empty for single-agent roles
    finish_reason: str | None = None  # model replies: how the reply ended ("length" = cut)

    @property
    def truncated(self) -> bool:
        return self.finish_reason == TRUNCATED


@dataclass(frozen=True, slots=True)
class Trajectory:
    """The result of one team run on one problem. ``code`` is the submission (or None)."""

    problem_id: str
    messages: tuple[Message, ...]
    answer_text: str
    code: str | None
    extraction_rule: str
    usage_by_role: Mapping[str, Usage]
    error: str | None = None
    error_kind: ErrorKind | None = None
    extras: Mapping[str, Any] = field(default_factory=dict)  # winner, per_agent codes, ...

    @property
    def usage(self) -> Usage:
        total = Usage()
        for usage in self.usage_by_role.values():
            total = total + usage
        return total
