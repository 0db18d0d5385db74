"""Matched-compute single-agent baselines: the seam the ``self_consistency`` and ``best_of_n``
methods share (no search; test only).

A baseline answers "is the team better than one agent given the same compute?". It spends no
optimization budget: its ``optimize`` returns the seed unchanged. At test time the job samples
the condition's *single agent* N times per problem and submits one program, chosen by the
method's ``selection_rule`` (``lcb.vote``: ``vote`` = behavioural majority, ``examples`` = most of
the statement's examples passed). N is either fixed (``match: fixed``, ``n: K``) or matched to the
cell's team: ``match: tokens`` picks the N whose mean tokens per problem come closest to the
team's (``matched_sample_count``), so the two arms differ by less than one sample's tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from optimizers.base import OptimizationResult, OptimizeContext, Optimizer
from optimizers.candidate import Candidate

MATCH_MODES = ("tokens", "fixed")
DEFAULT_MAX_N = 64


class BaselineParamsError(ValueError):
    """The baseline's knobs (conf/method/<name>.yaml) are not usable."""


@dataclass(frozen=True, slots=True)
class MatchPlan:
    """How many samples per problem: ``fixed`` uses ``n``; ``tokens`` matches the team's tokens."""

    match: str = "tokens"
    n: int | None = None
    max_n: int = DEFAULT_MAX_N

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> MatchPlan:
        match = str(params.get("match", "tokens"))
        if match not in MATCH_MODES:
            raise BaselineParamsError(f"match must be one of {', '.join(MATCH_MODES)}, not {match!r}")
        n = params.get("n")
        max_n = int(params.get("max_n", DEFAULT_MAX_N))
        if max_n < 1:
            raise BaselineParamsError(f"max_n must be >= 1, not {max_n}")
        if match == "fixed":
            if n is None or int(n) < 1:
                raise BaselineParamsError("match=fixed needs n >= 1 (e.g. method.n=5)")
            return cls(match, int(n), max_n)
        return cls(match, None, max_n)


def matched_sample_count(team_tokens_per_problem: float, sample_tokens_per_problem: float, *,
                         max_n: int = DEFAULT_MAX_N) -> int:
    """The N (1..max_n) whose N × sample tokens is nearest the team's tokens per problem.

    Rounding to the nearest integer keeps |N·s − T| ≤ s/2 whenever T ≥ s/2 and N is not capped:
    the single agent then spends the team's tokens to within one sample."""
    if sample_tokens_per_problem <= 0:
        return 1
    return max(1, min(max_n, round(team_tokens_per_problem / sample_tokens_per_problem)))


def sample_seed(evaluation_seed: int, problem_index: int, sample: int) -> int:
    """Decoding seed of one sample: paired across baselines and jobs of the same seed."""
    return (evaluation_seed * 1_000_003 + problem_index * 1009 + sample) % (2**31 - 1)


class MatchedSingleAgent(Optimizer):
    """Base of the test-only baselines; subclasses name their ``selection_rule``."""

    needs_reflection = False
    test_only: ClassVar[bool] = True  # the job skips search and selection and runs ``matched_test``
    selection_rule: ClassVar[str] = ""

    @classmethod
    def check_params(cls, params: Mapping[str, Any]) -> None:
        """Refuse bad knobs before the job folder exists (the app calls this)."""
        MatchPlan.from_params(params)

    async def optimize(
        self, seed: Candidate, *, train: Sequence[str], val: Sequence[str], ctx: OptimizeContext
    ) -> OptimizationResult:
        MatchPlan.from_params(ctx.method_params)  # refuse bad knobs before any test rollout
        return OptimizationResult(best=seed, stop_reason="test_only_baseline",
                                  metadata={"searched": False, "selection_rule": self.selection_rule})


def is_test_only(method_cls: type[Optimizer]) -> bool:
    return bool(getattr(method_cls, "test_only", False))
