"""A zero-cost learning curve: the committed incumbent's score after each step (spec 1.13).

Methods commit their incumbent after every step (``OptimizeContext.commit_incumbent``: the
candidate they would return if stopped now, with the score they chose it by). On the grid of
charged rollouts 0, ``every``, 2 x ``every``, ... each point shows the latest commit made at or
before that charge, with its ``staleness`` (rollouts since that commit). Before the first commit
the incumbent is the seed (score unknown). At stop the method's final incumbent is written and
carried forward to the budget (``post_stop_carried_forward``).

The curve never triggers an evaluation, and its scores are the methods' own (a minibatch mean,
a validation mean, ...), so curves compare a method's progress, not methods with each other.
On resume, points already written are skipped; the replayed journals re-create the same commits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optimizers.budget import Budget
from optimizers.evaluator import Rollout
from optimizers.journal import JsonlJournal, read_jsonl

SCHEMA = 2


@dataclass(frozen=True, slots=True)
class Commit:
    candidate_id: str
    score: float | None
    charged: int  # charged rollouts when the method committed it


class LearningCurve:
    def __init__(self, path: Path, *, maximum: int, seed_candidate_id: str, every: int = 10) -> None:
        if every < 1:
            raise ValueError("learning-curve spacing must be >= 1")
        self._journal = JsonlJournal(path)
        self._maximum = maximum
        self._every = every
        self._incumbent = Commit(seed_candidate_id, None, 0)
        self._commits = 0
        self._written = {(row.get("reason"), row.get("charged_rollouts")) for row in read_jsonl(path)}
        self._next_point = 0

    @property
    def incumbent(self) -> Commit:
        return self._incumbent

    def start(self) -> None:
        self._emit(0, "initial_state")
        self._next_point = self._every

    def commit(self, candidate_id: str, score: float | None, charged: int) -> None:
        """The method's incumbent after a step (``OptimizeContext.on_incumbent``)."""
        self._advance(charged - 1)  # grid points before this commit show the previous incumbent
        self._incumbent = Commit(candidate_id, None if score is None else float(score), charged)
        self._commits += 1

    def __call__(self, rollout: Rollout, budget: Budget) -> None:
        # A commit made now carries the current charge, so every point below it is final.
        if rollout.charged:
            self._advance(budget.charged - 1)

    def _advance(self, charged: int) -> None:
        while self._next_point <= charged:
            self._emit(self._next_point, "grid")
            self._next_point += self._every

    def finish(self, *, charged: int, final_candidate_id: str, final_score: float | None, stop_reason: str) -> None:
        """The method's final incumbent at stop, carried forward to the budget."""
        self._advance(charged - 1)
        if final_candidate_id != self._incumbent.candidate_id:
            self._incumbent = Commit(final_candidate_id, final_score, charged)
        self._emit(charged, "stop", stop_reason=stop_reason)
        while self._next_point <= self._maximum:
            self._emit(self._next_point, "grid", post_stop_carried_forward=self._next_point > charged)
            self._next_point += self._every

    def _emit(self, charged: int, reason: str, **extra: Any) -> None:
        if (reason, charged) in self._written:
            return
        current = self._incumbent
        row = {
            "schema": SCHEMA,
            "reason": reason,
            "charged_rollouts": charged,
            "budget": self._maximum,
            "incumbent_candidate_id": current.candidate_id,
            "incumbent_score": current.score,
            "committed_at": current.charged,
            "staleness": charged - current.charged,
            "commits": self._commits,
            "post_stop_carried_forward": False,
            **extra,
        }
        self._journal.append(row)
        self._written.add((reason, charged))
