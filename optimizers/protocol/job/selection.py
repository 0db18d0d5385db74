"""Keep-or-reject: deploy the optimized candidate only if it is strictly better on validation.

Both candidates are scored on the whole validation split with greedy decoding and paired seeds.
Anything that makes the comparison untrustworthy (an infrastructure-failed record after retries,
a missing or duplicate id, a score outside [0, 1]) keeps the seed, with the reason recorded.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optimizers.evaluator import Rollout

SEED = "seed"
INCUMBENT = "incumbent"

# Keys whose presence in optimizer output would mean test data leaked into the search.
FORBIDDEN_KEYS = frozenset(
    {"test_ids", "test_examples", "test_score", "held_out_test", "test_predictions", "official_evaluation_ids"}
)


@dataclass(frozen=True, slots=True)
class Decision:
    selected_candidate: str  # SEED or INCUMBENT
    fallback_reason: str | None
    baseline_score: float | None
    incumbent_score: float | None

    @property
    def deploy_incumbent(self) -> bool:
        return self.selected_candidate == INCUMBENT

    @property
    def validation_delta(self) -> float | None:
        if self.baseline_score is None or self.incumbent_score is None:
            return None
        return self.incumbent_score - self.baseline_score


def record_problem(ids: Sequence[str], rollouts: Sequence[Rollout]) -> str | None:
    """Why a set of validation records cannot be compared, or None when it can."""
    if not ids or not rollouts:
        return "empty_validation"
    seen: set[str] = set()
    for rollout in rollouts:
        if rollout.problem_id in seen:
            return f"duplicate_example:{rollout.problem_id}"
        seen.add(rollout.problem_id)
        if not rollout.usable:
            return f"invalid_record:{rollout.problem_id}:{rollout.status.value}"
        if not 0.0 <= rollout.score <= 1.0:
            return f"score_out_of_range:{rollout.problem_id}"
    if seen != set(ids):
        return "unpaired_validation_ids"
    return None


def mean_score(rollouts: Sequence[Rollout]) -> float:
    return sum(r.score for r in rollouts) / len(rollouts)


def decide(
    ids: Sequence[str],
    baseline: Sequence[Rollout],
    incumbent: Sequence[Rollout] | None,
    *,
    forced_reason: str | None = None,
) -> Decision:
    """The deployment decision; ``incumbent=None`` only together with a ``forced_reason``."""
    baseline_problem = record_problem(ids, baseline)
    baseline_score = None if baseline_problem else mean_score(baseline)
    if forced_reason is not None or incumbent is None:
        incumbent_score = None
        if incumbent is not None and record_problem(ids, incumbent) is None:
            incumbent_score = mean_score(incumbent)
        return Decision(SEED, forced_reason or "no_incumbent", baseline_score, incumbent_score)
    incumbent_problem = record_problem(ids, incumbent)
    incumbent_score = None if incumbent_problem else mean_score(incumbent)
    problem = baseline_problem or incumbent_problem
    if problem is not None:
        return Decision(SEED, problem, baseline_score, incumbent_score)
    assert baseline_score is not None and incumbent_score is not None
    if incumbent_score > baseline_score:
        return Decision(INCUMBENT, None, baseline_score, incumbent_score)
    reason = "validation_tie" if incumbent_score == baseline_score else "validation_regression"
    return Decision(SEED, reason, baseline_score, incumbent_score)


def find_forbidden_keys(value: Any, path: str = "") -> Iterator[str]:
    """Paths of keys in ``value`` (nested dicts/lists) that would leak test information."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if key in FORBIDDEN_KEYS:
                yield where
            yield from find_forbidden_keys(item, where)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from find_forbidden_keys(item, f"{path}[{index}]")
