"""Gold-free selection for the replica teams: a vote over whitespace-normalized programs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def normalize_program(code: str) -> str:
    """The vote key: every whitespace run collapsed to one space, ends stripped."""
    return " ".join(code.split())


@dataclass(frozen=True, slots=True)
class VoteResult:
    winner: int | None  # index into the candidates; None when every candidate abstained
    votes: int  # size of the winning bucket
    buckets: int  # number of distinct programs


def majority_vote(codes: Sequence[str | None]) -> VoteResult:
    """The most common program; ties go to the bucket holding the lowest index.

    ``None`` entries abstain. The winner is the lowest index inside the winning bucket.
    """
    first_index: dict[str, int] = {}
    counts: dict[str, int] = {}
    for index, code in enumerate(codes):
        if code is None:
            continue
        key = normalize_program(code)
        first_index.setdefault(key, index)
        counts[key] = counts.get(key, 0) + 1
    if not counts:
        return VoteResult(None, 0, 0)
    best = min(counts, key=lambda key: (-counts[key], first_index[key]))
    return VoteResult(first_index[best], counts[best], len(counts))
