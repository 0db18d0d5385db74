"""MASPO's pieces that need no model: beam nodes, the joint score with its fallbacks,
misalignment mining and minibatch composition."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


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
    wins = [1.0 if c > p else 0.0 if c < p else 0.5 for c, p in zip(candidate, parent, strict=True)]
    return sum(wins) / len(wins)


@dataclass(frozen=True, slots=True)
class Case:
    """A misalignment case: the role's own output won, but its successor or the team lost."""

    problem_id: str
    priority: int  # 2: successor and team lost; 1: one of them

    def to_dict(self) -> dict[str, object]:
        return {"problem_id": self.problem_id, "priority": self.priority}


def mine_misalignment(
    rows: Sequence[str], local: Sequence[float | None], lookahead: Sequence[float | None],
    candidate: Sequence[float], parent: Sequence[float], *, cap: int,
) -> list[Case]:
    """Rows where the local verdict is a win but the successor's verdict and/or the exact
    metric is a loss, most severe first (then by row order), at most ``cap``."""
    cases = []
    for index, problem_id in enumerate(rows):
        if local[index] is None or local[index] <= 0.5:  # type: ignore[operator]
            continue
        downstream_loss = lookahead[index] is not None and lookahead[index] < 0.5  # type: ignore[operator]
        global_loss = candidate[index] < parent[index]
        severity = int(downstream_loss) + int(global_loss)
        if severity:
            cases.append((-severity, index, Case(problem_id, severity)))
    return [case for _, _, case in sorted(cases, key=lambda item: item[:2])][:cap]


def compose_minibatch(
    train: Sequence[str], size: int, hard: Sequence[Case], *, injection: int, rng: random.Random
) -> tuple[list[str], list[str]]:
    """``(minibatch, injected)``: up to ``injection`` hard cases (most severe first), the rest
    drawn at random from the train rows that are not hard cases."""
    size = min(size, len(train))
    ordered: list[str] = []
    for case in sorted(hard, key=lambda c: -c.priority):
        if case.problem_id in train and case.problem_id not in ordered:
            ordered.append(case.problem_id)
    injected = ordered[: min(injection, size)]
    rest = [row for row in train if row not in ordered]
    drawn = rng.sample(rest, min(len(rest), size - len(injected)))
    return injected + drawn, injected


def top_beam(nodes: Sequence[BeamNode], width: int) -> list[BeamNode]:
    """The ``width`` best distinct prompts by cumulative score (earlier nodes win ties)."""
    ranked = sorted(enumerate(nodes), key=lambda item: (-item[1].cumulative, item[0]))
    out: list[BeamNode] = []
    for _, node in ranked:
        if all(node.prompt != kept.prompt for kept in out):
            out.append(node)
        if len(out) == width:
            break
    return out


def union_cases(buffers: Mapping[str, Sequence[Case]], roles: Sequence[str]) -> list[Case]:
    return [case for role in roles for case in buffers.get(role, ())]
