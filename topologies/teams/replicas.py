"""Shared pieces of the replica teams (independent, decentralized): guarded turns and the vote."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lcb.extract import Extraction
from topologies.teams.session import TeamResult, TurnResult
from topologies.teams.voting import majority_vote
from topologies.types import ErrorKind, ModelCallError


@dataclass(frozen=True, slots=True)
class Standing:
    """An agent's current answer (or why it has none)."""

    index: int
    seed: int | None
    text: str = ""
    extraction: Extraction = Extraction(None, "none")
    status: str = "ok"  # "ok" | "timeout" | "model_error" | "not_run"
    error: str | None = None
    source: str | None = None  # "final" | "salvaged" | None

    @property
    def code(self) -> str | None:
        return self.extraction.code

    def as_record(self, label: str) -> dict[str, Any]:
        return {"agent": label, "seed": self.seed, "code": self.code, "status": self.status,
                "code_source": self.source, "error": self.error}


async def guarded_turn(
    turn: Awaitable[TurnResult], *, index: int, seed: int | None, timeout_s: float | None,
    previous: Standing | None = None,
) -> Standing:
    """Run one agent turn; a timeout or a model error makes the agent abstain (or keep its
    previous answer). Infrastructure errors propagate: the whole run must be retried."""
    fallback = previous or Standing(index, seed)
    try:
        # asyncio.timeout, not wait_for: no extra task per turn (3.11's wait_for makes one)
        async with asyncio.timeout(timeout_s or None):
            result = await turn
    except TimeoutError:
        return Standing(index, seed, fallback.text, fallback.extraction, "timeout",
                        f"turn timed out after {timeout_s:g}s", fallback.source)
    except ModelCallError as exc:
        if exc.kind is ErrorKind.INFRASTRUCTURE:
            raise
        return Standing(index, seed, fallback.text, fallback.extraction, "model_error", str(exc),
                        fallback.source)
    return Standing(index, seed, result.text, result.extraction, "ok", None, result.source)


@dataclass(frozen=True, slots=True)
class Selection:
    winner: int | None
    votes: int
    buckets: int
    error: str | None
    error_kind: ErrorKind | None


def select(standings: Sequence[Standing]) -> Selection:
    """Vote over the standings' programs. If no agent produced anything because every one of
    them timed out, the run is an infrastructure failure (retried uncharged)."""
    vote = majority_vote([s.code for s in standings])
    error: str | None = None
    kind: ErrorKind | None = None
    if vote.winner is None and standings and all(s.status == "timeout" for s in standings):
        error, kind = "every agent timed out", ErrorKind.INFRASTRUCTURE
    elif vote.winner is None and standings and all(s.status == "model_error" for s in standings):
        error, kind = f"every agent failed: {standings[0].error}", ErrorKind.MODEL
    return Selection(vote.winner, vote.votes, vote.buckets, error, kind)


def vote_result(
    standings: Sequence[Standing], label: Callable[[int], str], **extras: Any
) -> TeamResult:
    """The voting teams' submission: the majority program, with the vote and every agent's
    program recorded (``extras`` adds team-specific fields such as the debate rounds)."""
    chosen = select(standings)
    winner = standings[chosen.winner] if chosen.winner is not None else None
    record = {
        "winner": chosen.winner,
        "votes": chosen.votes,
        "distinct_programs": chosen.buckets,
        **extras,
        "per_agent": [s.as_record(label(s.index)) for s in standings],
        "code_source": winner.source if winner else None,
    }
    return TeamResult(winner.text if winner else "",
                      winner.extraction if winner else Extraction(None, "none"),
                      record, chosen.error, chosen.error_kind)
