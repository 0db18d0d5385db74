"""A zero-cost learning curve: every ``every`` charged rollouts, the best candidate seen so far.

"Best" is the candidate with the highest mean score over its charged rollouts (any phase), ties
broken by more rollouts, then by who came first. The curve never triggers an evaluation. Rows go
to ``learning_curve.jsonl``; on resume, grid points already written are not written again, and
the replayed journal re-feeds the statistics, so the curve is identical to an uninterrupted run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optimizers.budget import Budget
from optimizers.evaluator import Rollout
from optimizers.journal import JsonlJournal, read_jsonl


@dataclass(slots=True)
class _Stats:
    order: int
    total: float = 0.0
    count: int = 0

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0


class LearningCurve:
    def __init__(self, path: Path, *, maximum: int, seed_candidate_id: str, every: int = 10) -> None:
        if every < 1:
            raise ValueError("learning-curve spacing must be >= 1")
        self._journal = JsonlJournal(path)
        self._maximum = maximum
        self._every = every
        self._seed_id = seed_candidate_id
        self._stats: dict[str, _Stats] = {}
        self._written = {(row.get("reason"), row.get("charged_rollouts")) for row in read_jsonl(path)}
        self._next_point = 0

    def best(self) -> tuple[str, float | None, int]:
        """(candidate id, mean score or None, rollouts behind it)."""
        if not self._stats:
            return self._seed_id, None, 0
        best_id, stats = max(self._stats.items(), key=lambda kv: (kv[1].mean, kv[1].count, -kv[1].order))
        return best_id, stats.mean, stats.count

    def start(self) -> None:
        self._emit(0, "initial_state")
        self._next_point = self._every

    def __call__(self, rollout: Rollout, budget: Budget) -> None:
        if not rollout.charged:
            return
        if rollout.active is None:  # a masked run scores part of a team, not the candidate
            stats = self._stats.setdefault(rollout.candidate_id, _Stats(order=len(self._stats)))
            stats.total += rollout.score
            stats.count += 1
        charged = budget.charged
        while self._next_point <= charged:
            self._emit(self._next_point, "grid")
            self._next_point += self._every

    def finish(self, *, charged: int, final_candidate_id: str, stop_reason: str) -> None:
        """The method's own incumbent at the end (which may differ from the curve's best)."""
        self._emit(charged, "stop", final_candidate_id=final_candidate_id, stop_reason=stop_reason)

    def _emit(self, charged: int, reason: str, **extra: Any) -> None:
        if (reason, charged) in self._written:
            return
        best_id, best_score, n = self.best()
        row = {
            "schema": 1,
            "reason": reason,
            "charged_rollouts": charged,
            "budget": self._maximum,
            "best_candidate_id": best_id,
            "best_score": best_score,
            "best_rollouts": n,
            "candidates_seen": len(self._stats),
            **extra,
        }
        self._journal.append(row)
        self._written.add((reason, charged))
