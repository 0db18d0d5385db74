"""Gold-free selection for the replica teams: a vote over programs, equal when they are the
same program.

The reference collapsed every whitespace run and compared the texts. In Python that merges
programs that differ in behaviour (``if c:\\n    a\\n    b`` vs ``if c:\\n    a\\nb``; string
literals ``"a  b"`` vs ``"a b"``) and still splits programs that differ only in comments or
formatting. Here two programs vote together iff their syntax trees are equal (formatting,
comments, quote style and redundant parentheses do not count; indentation structure and
literal contents do). A program that does not parse is keyed by its whitespace-collapsed text,
so identical broken programs still agree with each other, never with a parsing one.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache


# A pure function of the text. Replicas often submit the very same program (and a scripted model
# in the gym always does), and parsing plus dumping a tree is most of a replica team's vote.
@lru_cache(maxsize=256)
def normalize_program(code: str) -> str:
    """The vote key: the program's syntax tree (no positions), or its collapsed text if it
    does not parse."""
    try:
        return "ast:" + ast.dump(ast.parse(code))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "text:" + " ".join(code.split())


@dataclass(frozen=True, slots=True)
class VoteResult:
    winner: int | None  # index into the candidates; None when every candidate abstained
    votes: int  # size of the winning bucket
    buckets: int  # number of distinct programs


def majority_vote(codes: Sequence[str | None]) -> VoteResult:
    """The most common program; ties go to the bucket holding the lowest index.

    ``None`` and blank entries abstain. The winner is the lowest index inside the winning bucket.
    """
    first_index: dict[str, int] = {}
    counts: dict[str, int] = {}
    for index, code in enumerate(codes):
        if code is None or not code.strip():
            continue
        key = normalize_program(code)
        first_index.setdefault(key, index)
        counts[key] = counts.get(key, 0) + 1
    if not counts:
        return VoteResult(None, 0, 0)
    best = min(counts, key=lambda key: (-counts[key], first_index[key]))
    return VoteResult(first_index[best], counts[best], len(counts))
