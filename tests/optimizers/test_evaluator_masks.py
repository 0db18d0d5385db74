"""Masked runs through the budgeted evaluator: charged, keyed and journaled with their mask,
replayed after a restart, seeded like the unmasked run (common random numbers), and refused by a
system that cannot mask. The system is an in-process stand-in for a team run."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from pathlib import Path

import pytest

from optimizers.budget import Budget
from optimizers.candidate import Candidate
from optimizers.evaluator import AttemptResult, BudgetedEvaluator
from optimizers.journal import read_jsonl

SEED = Candidate({"role/coder": "write code"})
IDS = ["p0", "p1"]


class MaskingSystem:
    """Scores the share of agents a and b that are active; records what it was asked to run."""

    supports_masks = True

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, tuple[str, ...] | None]] = []

    async def run(self, candidate: Candidate, problem_id: str, *, seed: int, mode: str,
                  active: Collection[str] | None = None) -> AttemptResult:
        self.calls.append((problem_id, seed, None if active is None else tuple(active)))
        acting = ["a", "b"] if active is None else sorted(active)
        return AttemptResult(score=len(acting) / 2, feedback="", details={"active_agents": acting})


class PlainSystem:
    async def run(self, candidate: Candidate, problem_id: str, *, seed: int, mode: str) -> AttemptResult:
        return AttemptResult(score=1.0, feedback="")


def seed_for(phase: str, candidate_id: str, problem_id: str, sample: int) -> int:
    return sum(map(ord, phase + candidate_id + problem_id)) + sample


def make(system: object, tmp: Path, budget: int = 20) -> BudgetedEvaluator:
    return BudgetedEvaluator(system, Budget(budget), seed_for=seed_for, allowed_ids=IDS, journal_dir=tmp,
                             retry_delay_s=0.0)


async def three_masks(evaluator: BudgetedEvaluator) -> list[list[float]]:
    runs = [await evaluator.evaluate(SEED, IDS),
            await evaluator.evaluate(SEED, IDS, active={"b", "a"}),
            await evaluator.evaluate(SEED, IDS, active=["a"]),
            await evaluator.evaluate(SEED, IDS, active=())]
    return [[r.score for r in rollouts] for rollouts in runs]


def test_masked_runs_are_charged_keyed_and_journaled_with_their_mask(tmp_path: Path) -> None:
    system = MaskingSystem()
    evaluator = make(system, tmp_path)
    scores = asyncio.run(three_masks(evaluator))
    assert scores == [[1.0, 1.0], [1.0, 1.0], [0.5, 0.5], [0.0, 0.0]]
    # the full mask {a, b} is its own key (no collision with the unmasked run), all charged once
    assert evaluator.budget.charged == 8 and len(system.calls) == 8
    assert [c[2] for c in system.calls[::2]] == [None, ("a", "b"), ("a",), ()]
    # the request seed does not depend on the mask: coalitions share their randomness
    assert len({seed for problem, seed, _ in system.calls if problem == "p0"}) == 1
    masks = [r.get("active") for r in read_jsonl(tmp_path / "rollouts.jsonl")]
    assert masks.count(None) == 2 and masks.count(["a"]) == 2 and masks.count([]) == 2
    assert all(a.get("active") == r.get("active") for a, r in
               zip(read_jsonl(tmp_path / "attempts.jsonl"), read_jsonl(tmp_path / "rollouts.jsonl"), strict=True))
    again = asyncio.run(evaluator.evaluate(SEED, IDS, active=["a"]))
    assert all(r.cached and not r.charged and r.active == ("a",) for r in again)


def test_a_restarted_evaluator_replays_masked_rollouts_without_running_them(tmp_path: Path) -> None:
    asyncio.run(three_masks(make(MaskingSystem(), tmp_path)))
    system = MaskingSystem()
    resumed = make(system, tmp_path)
    assert asyncio.run(three_masks(resumed)) == [[1.0, 1.0], [1.0, 1.0], [0.5, 0.5], [0.0, 0.0]]
    assert system.calls == [] and resumed.budget.charged == 8


def test_a_system_that_cannot_mask_refuses_masked_runs(tmp_path: Path) -> None:
    evaluator = make(PlainSystem(), tmp_path)
    with pytest.raises(ValueError, match="cannot run masked teams"):
        asyncio.run(evaluator.evaluate(SEED, IDS, active=["a"]))
    with pytest.raises(TypeError, match="not one string"):
        asyncio.run(make(MaskingSystem(), tmp_path / "x").evaluate(SEED, IDS, active="a"))
    assert [r.score for r in asyncio.run(evaluator.evaluate(SEED, IDS))] == [1.0, 1.0]
