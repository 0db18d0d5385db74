"""MASPO's pieces that need no model: beam nodes, the joint score with its fallbacks, the paired
win rate, misalignment mining and minibatch composition, each as the reference computes it."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

TIE_TOLERANCE = 1e-9  # exact-metric scores closer than this are a tie
UPDATE_MARGIN = 1e-6  # a role's best changes only on a cumulative gain above this


@dataclass(frozen=True, slots=True)
class BeamNode:
    prompt: str
    cumulative: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return {"prompt": self.prompt, "cumulative": self.cumulative}


@dataclass(frozen=True, slots=True)
class Weights:
    """The joint score: ``local*L + lookahead*N + global*G - offset``; without a lookahead
    signal ``fallback_local*L + fallback_global*G - offset``; a terminal role ``G - offset``."""

    local: float = 0.4
    lookahead: float = 0.4
    global_: float = 0.2
    fallback_local: float = 0.7
    fallback_global: float = 0.3
    offset: float = 0.5

    def joint(self, *, local: float | None, lookahead: float | None, global_: float, terminal: bool) -> float:
        if terminal or local is None:
            return global_ - self.offset
        if lookahead is None:
            return self.fallback_local * local + self.fallback_global * global_ - self.offset
        return self.local * local + self.lookahead * lookahead + self.global_ * global_ - self.offset


def win_rate(candidate: Sequence[float], parent: Sequence[float]) -> float:
    """Paired exact-metric win rate of the candidate over the parent (a tie counts 0.5)."""
    if not candidate:
        return 0.5
    wins = [1.0 if c > p + TIE_TOLERANCE else 0.5 if abs(c - p) <= TIE_TOLERANCE else 0.0
            for c, p in zip(candidate, parent, strict=True)]
    return sum(wins) / len(wins)


@dataclass(frozen=True, slots=True)
class Case:
    """A misalignment case: the role's own output won, but its successor or the team lost.
    ``priority``: 0 both lost, 1 the successor lost, 2 the team lost (lower is harder)."""

    problem_id: str
    priority: int

    def to_dict(self) -> dict[str, object]:
        return {"problem_id": self.problem_id, "priority": self.priority}


def mine_misalignment(
    rows: Sequence[str], local: Sequence[float], lookahead: Mapping[int, float],
    candidate: Sequence[float], parent: Sequence[float], *, cap: int,
) -> list[Case]:
    """Rows whose local verdict is a clear win (1.0) while the successor's verdict is a loss
    (0.0) and/or the candidate's exact score is below the parent's; hardest first (then row
    order), at most ``cap``."""
    cases = []
    for index, problem_id in enumerate(rows):
        if local[index] != 1.0:
            continue
        team_lost = candidate[index] < parent[index] - TIE_TOLERANCE
        successor_lost = lookahead.get(index) == 0.0
        if successor_lost or team_lost:
            cases.append(Case(problem_id, 0 if successor_lost and team_lost else 1 if successor_lost else 2))
    return sorted(cases, key=lambda case: case.priority)[:cap]


def compose_minibatch(
    train: Sequence[str], size: int, buffers: Mapping[str, Sequence[Case]], predecessors: Sequence[str], *,
    injection: int, rng: random.Random,
) -> tuple[list[str], list[str]]:
    """``(minibatch, injected)`` as the reference draws it: the union of the predecessors' cases
    (in predecessor and buffer order, each row once), all of it when it has at most ``injection``
    rows, else ``injection`` of them sampled; then a random fill from the train rows outside that
    whole union."""
    union: list[str] = []
    for role in predecessors:
        for case in buffers.get(role, ()):
            if case.problem_id not in union:
                union.append(case.problem_id)
    injected = rng.sample(union, injection) if len(union) > injection else list(union)
    excluded = set(union) if predecessors else set(injected)
    pool = [row for row in train if row not in excluded]
    fill = rng.sample(pool, min(max(0, size - len(injected)), len(pool)))
    return (injected + fill)[:size], injected


def top_beam(nodes: Sequence[BeamNode], width: int) -> list[BeamNode]:
    """The ``width`` best nodes by cumulative score (earlier nodes win ties; a prompt may appear
    twice, as in the reference, where a parent carried by two children fills two slots)."""
    return sorted(nodes, key=lambda node: -node.cumulative)[:width]
