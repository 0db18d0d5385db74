"""Who hands work to whom in a team, read from its role names and its transcripts.

MAPRO's prompt graph and MASPO's successor wiring both need the team's structure, while the
optimizer seam only hands methods a candidate (role prompts) and rollouts. The structure is
read once from the seed's first transcripts:

- one role prompt -> ``shared``: one prompt variable used by every agent (``replicas`` of them;
  ``peers`` when they talk to each other, i.e. the team has an editable hand-off protocol);
- a ``manager`` role -> ``star``: the manager first, an edge manager -> each worker;
- otherwise -> ``chain`` in the order the roles first speak (roles that never spoke go last,
  by name), an edge from each stage to the next.

It is also the methods' one window on the teams' own layouts (``topologies.teams``): the roster a
masked run acts on (``TeamRoster``) and the acting order of a sequential layout
(``sequential_role_order``). A method imports team structure from here, never from ``topologies``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from topologies.teams.layouts import ROLE_TEAM_SIZES, LayoutError, role_names
from topologies.types import TeamRoster  # re-exported: the roster methods' masks act on

HUB_ROLE = "manager"
KINDS = ("shared", "star", "chain")


@dataclass(frozen=True, slots=True)
class TeamGraph:
    kind: str
    roles: tuple[str, ...]  # hub first (star) / stage order (chain)
    edges: tuple[tuple[str, str], ...]  # (parent, child)
    replicas: int = 1  # agents sharing the one prompt (shared only)
    peers: bool = False  # shared agents that read each other's messages

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"team graph kind must be one of {KINDS}, not {self.kind!r}")

    def parents(self, role: str) -> list[str]:
        return [p for p, c in self.edges if c == role]

    def children(self, role: str) -> list[str]:
        return [c for p, c in self.edges if p == role]

    def successor(self, role: str) -> str | None:
        """The role that consumes ``role``'s output (MASPO lookahead); None for the terminal one."""
        if self.kind == "star":
            return None if role == self.roles[0] else self.roles[0]
        if self.kind == "chain":
            index = self.roles.index(role)
            return self.roles[index + 1] if index + 1 < len(self.roles) else None
        return None

    def predecessors(self, role: str) -> list[str]:
        return [r for r in self.roles if self.successor(r) == role]

    def sweep_order(self) -> list[str]:
        """Producers before consumers: workers then the manager; chain stages in order."""
        if self.kind == "star":
            return [*self.roles[1:], self.roles[0]]
        return list(self.roles)

    def blame_targets(self, role: str) -> list[str]:
        """Whom ``role`` critiques after a failed run: its parents (in a star also the hub its
        report went to, and the hub critiques the workers); a lone prompt critiques itself."""
        if self.kind == "shared":
            return [role]
        if self.kind == "star" and role == self.roles[0]:
            return self.children(role)
        return self.parents(role)


def speaking_order(traces: Sequence[Sequence[Mapping[str, Any]]]) -> list[str]:
    order: list[str] = []
    for trace in traces:
        for message in trace:
            source = str(message.get("source", ""))
            if message.get("kind") == "ai" and source not in order:
                order.append(source)
    return order


def agent_count(traces: Sequence[Sequence[Mapping[str, Any]]]) -> int:
    """The most distinct agents (source, agent) that spoke in one trace."""
    best = 1
    for trace in traces:
        agents = {(m.get("source"), m.get("agent")) for m in trace if m.get("kind") == "ai"}
        best = max(best, len(agents))
    return best


def infer_team_graph(
    roles: Sequence[str], traces: Sequence[Sequence[Mapping[str, Any]]], *, has_handoff: bool = False
) -> TeamGraph:
    roles = sorted(roles)
    if not roles:
        raise ValueError("a team needs at least one role")
    if len(roles) == 1:
        replicas = agent_count(traces)
        return TeamGraph("shared", tuple(roles), (), replicas=replicas, peers=has_handoff and replicas > 1)
    spoken = [r for r in speaking_order(traces) if r in roles]
    ordered = spoken + [r for r in roles if r not in spoken]
    if HUB_ROLE in roles:
        workers = [r for r in ordered if r != HUB_ROLE]
        return TeamGraph("star", (HUB_ROLE, *workers), tuple((HUB_ROLE, w) for w in workers))
    return TeamGraph("chain", tuple(ordered), tuple(zip(ordered, ordered[1:], strict=False)))


# ------------------------------------------------------------------------------------------------
# What one role saw and said in a transcript


def role_context(trace: Sequence[Mapping[str, Any]], role: str, *, limit: int = 4000) -> str:
    """The task plus every team message before ``role`` first speaks (its input in that run)."""
    from optimizers.reflection import clip, render_message, task_text

    task = task_text(trace, limit=limit // 2)
    first_user = next((m for m in trace if m.get("kind") == "user"), None)
    before: list[str] = []
    for message in trace:
        if message.get("kind") == "ai" and message.get("source") == role:
            break
        if message.get("kind") == "system" or message is first_user:
            continue
        before.append(render_message(message, 1200))
    if not before:
        return task
    return f"{task}\n\n--- Team messages so far ---\n{clip(chr(10).join(before), limit // 2)}"


def role_output(trace: Sequence[Mapping[str, Any]], role: str, *, limit: int = 3000) -> str:
    """Everything ``role`` wrote in a transcript (all its turns, tool calls noted)."""
    from optimizers.reflection import clip

    parts = []
    for message in trace:
        if message.get("kind") == "ai" and message.get("source") == role:
            calls = message.get("tool_calls") or ()
            suffix = f"\n[calls tools: {', '.join(map(str, calls))}]" if calls else ""
            parts.append(f"{message.get('content', '')}{suffix}")
    return clip("\n\n".join(parts), limit)


def sequential_role_order(roles: Iterable[str]) -> tuple[str, ...] | None:
    """The acting order of the sequential layout whose roles are exactly ``roles``; None if no
    sequential team has that role set."""
    wanted = frozenset(roles)
    for size in ROLE_TEAM_SIZES:
        try:
            names = role_names("sequential", size)
        except LayoutError:
            continue
        if frozenset(names) == wanted:
            return tuple(names)
    return None
