"""The budgeted evaluator with an in-process system (a deterministic stand-in for a team run)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from optimizers.budget import Budget, Outcome
from optimizers.candidate import Candidate
from optimizers.evaluator import AttemptResult, BudgetedEvaluator
from optimizers.journal import read_jsonl


class CountingSystem:
    """Solves a problem iff the coder prompt contains GOOD; fails transport as scripted."""

    def __init__(self, infra_failures: dict[str, int] | None = None, delay: float = 0.0) -> None:
        self.calls: list[tuple[str, str, int]] = []
        self.infra_failures = dict(infra_failures or {})
        self.delay = delay
        self.running = 0
        self.max_running = 0

    async def run(self, candidate: Candidate, problem_id: str, *, seed: int, mode: str) -> AttemptResult:
        self.calls.append((candidate.id, problem_id, seed))
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.running -= 1
        if self.infra_failures.get(problem_id, 0) > 0:
            self.infra_failures[problem_id] -= 1
            return AttemptResult(score=0.0, feedback="", infrastructure_error="HTTP 503")
        good = "GOOD" in candidate.roles()["coder"]
        return AttemptResult(score=1.0 if good else 0.0, feedback="passed" if good else "wrong answer",
                             verdict={"outcome": "passed" if good else "wrong_answer"}, answer="print(1)",
                             usage={"calls": 1, "prompt_tokens": 10, "completion_tokens": 5})


SEED = Candidate({"role/coder": "write code"})
GOOD = SEED.with_component("role/coder", "GOOD code")
IDS = [f"p{i}" for i in range(10)]


def seed_for(phase: str, candidate_id: str, problem_id: str, sample: int) -> int:
    return hash((phase, candidate_id, problem_id, sample)) % 1000


def make(system: CountingSystem, budget: int, tmp: Path | None = None, **kw) -> BudgetedEvaluator:
    return BudgetedEvaluator(system, Budget(budget), seed_for=seed_for, allowed_ids=IDS + ["v0"],
                             journal_dir=tmp, retry_delay_s=0.0, **kw)


def test_scores_in_request_order_and_concurrency_is_bounded() -> None:
    system = CountingSystem(delay=0.02)
    evaluator = make(system, 100, concurrency=3)
    rollouts = asyncio.run(evaluator.evaluate(GOOD, IDS))
    assert [r.problem_id for r in rollouts] == IDS
    assert all(r.score == 1.0 and r.charged and r.status is Outcome.SUCCESS for r in rollouts)
    assert system.max_running == 3
    assert evaluator.budget.charged == 10


def test_budget_never_exceeded_and_past_budget_requests_are_not_run() -> None:
    system = CountingSystem()
    evaluator = make(system, 6, concurrency=8)

    async def go():
        first = await evaluator.evaluate(SEED, IDS[:4])
        second = await evaluator.evaluate(GOOD, IDS[:4])
        return first, second

    first, second = asyncio.run(go())
    assert all(r.charged for r in first)
    assert [r.charged for r in second] == [True, True, False, False]
    assert [r.budget_exhausted for r in second] == [False, False, True, True]
    assert second[3].score == 0.0 and second[3].attempts == 0
    assert len(system.calls) == 6 and evaluator.budget.charged == 6


def test_infrastructure_failures_are_retried_with_the_same_seed_and_not_charged() -> None:
    system = CountingSystem(infra_failures={"p0": 2, "p1": 5})
    evaluator = make(system, 10, max_infrastructure_retries=2)
    p0, p1 = asyncio.run(evaluator.evaluate(GOOD, ["p0", "p1"]))
    assert p0.usable and p0.charged and p0.attempts == 3
    assert {seed for _, pid, seed in system.calls if pid == "p0"} == {p0.seed}
    assert not p1.usable and not p1.charged and p1.status is Outcome.INFRASTRUCTURE_FAILURE and p1.attempts == 3
    snap = evaluator.budget.snapshot()
    assert snap["charged"] == 1 and snap["infrastructure_failures"] == 5 and snap["retries"] == 4
    assert snap["unusable_rollouts"] == 1 and snap["reserved"] == 0


def test_repeated_requests_are_served_from_cache_uncharged() -> None:
    system = CountingSystem(delay=0.01)
    evaluator = make(system, 10)

    async def go():
        together = await asyncio.gather(evaluator.evaluate(GOOD, ["p0"]), evaluator.evaluate(GOOD, ["p0"]))
        again = await evaluator.evaluate(GOOD, ["p0"])
        other_sample = await evaluator.evaluate(GOOD, ["p0"], sample=1)
        return together, again, other_sample

    (a, b), again, other = asyncio.run(go())
    assert a[0].charged and not b[0].charged and b[0].cached
    assert not again[0].charged and again[0].cached and again[0].score == 1.0
    assert other[0].charged and other[0].seed != a[0].seed
    assert len(system.calls) == 2 and evaluator.budget.charged == 2


def test_refuses_unknown_and_duplicate_ids() -> None:
    evaluator = make(CountingSystem(), 10)
    with pytest.raises(ValueError, match="not available"):
        asyncio.run(evaluator.evaluate(SEED, ["t_secret"]))
    with pytest.raises(ValueError, match="duplicate"):
        asyncio.run(evaluator.evaluate(SEED, ["p0", "p0"]))


def test_journal_replay_serves_finished_rollouts_and_recharges_in_order(tmp_path: Path) -> None:
    first_system = CountingSystem(infra_failures={"p2": 1})
    first = make(first_system, 7, tmp_path)

    async def schedule(evaluator: BudgetedEvaluator):
        a = await evaluator.evaluate(SEED, IDS[:5])
        b = await evaluator.evaluate(GOOD, IDS[:5])
        return a + b

    uninterrupted = asyncio.run(schedule(first))
    snapshot = first.budget.snapshot()
    assert snapshot["charged"] == 7

    # A restart: a new evaluator on the same journal runs nothing it already finished.
    second_system = CountingSystem()
    second = make(second_system, 7, tmp_path)
    assert second.resumed_rollouts == 7
    replayed = asyncio.run(schedule(second))
    assert second_system.calls == []
    assert [r.to_dict() for r in replayed] == [r.to_dict() for r in uninterrupted]
    assert second.budget.snapshot() == snapshot
    candidates = [r["id"] for r in read_jsonl(tmp_path / "candidates.jsonl")]
    assert candidates == [SEED.id, GOOD.id]


def test_resume_after_a_kill_mid_journal(tmp_path: Path) -> None:
    evaluator = make(CountingSystem(), 10, tmp_path)
    asyncio.run(evaluator.evaluate(SEED, IDS[:3]))
    # Simulate a kill: p2's final attempt line never made it (its rollout line did), and the
    # process died half-way through writing p3's rollout line.
    attempts = (tmp_path / "attempts.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "attempts.jsonl").write_text("".join(attempts[:2]))
    with (tmp_path / "rollouts.jsonl").open("a") as handle:
        handle.write('{"candidate_id": "trunc')
    system = CountingSystem()
    resumed = make(system, 10, tmp_path)
    assert resumed.resumed_rollouts == 3
    repaired = list(read_jsonl(tmp_path / "attempts.jsonl"))
    assert len(repaired) == 3 and repaired[-1]["repaired"] and repaired[-1]["charged"]
    out = asyncio.run(resumed.evaluate(SEED, IDS[:4]))
    assert [c[1] for c in system.calls] == ["p3"]
    assert [r.charged for r in out] == [True] * 4 and resumed.budget.charged == 4
    attempts = list(read_jsonl(tmp_path / "attempts.jsonl"))
    charged_keys = [(a["candidate_id"], a["problem_id"]) for a in attempts if a["charged"]]
    assert len(charged_keys) == len(set(charged_keys)) == 4
    assert all(json.loads(line) for line in (tmp_path / "rollouts.jsonl").read_text().splitlines())
    assert len(list(read_jsonl(tmp_path / "rollouts.jsonl"))) == 4


def test_failed_attempts_before_a_kill_count_toward_retries(tmp_path: Path) -> None:
    class HangsOnRetry(CountingSystem):
        async def run(self, candidate, problem_id, *, seed, mode):
            if self.calls:
                self.calls.append((candidate.id, problem_id, seed))
                await asyncio.sleep(3600)
            return await super().run(candidate, problem_id, seed=seed, mode=mode)

    system = HangsOnRetry(infra_failures={"p0": 99})
    evaluator = make(system, 10, tmp_path, max_infrastructure_retries=2)

    async def killed_during_the_retry():
        asyncio.ensure_future(evaluator.evaluate(GOOD, ["p0"]))
        while len(system.calls) < 2:
            await asyncio.sleep(0.001)
        # returning now makes asyncio.run cancel the hanging retry, as a kill would stop it

    asyncio.run(killed_during_the_retry())
    assert evaluator.budget.reserved == 0 and evaluator.budget.charged == 0
    logged = list(read_jsonl(tmp_path / "attempts.jsonl"))
    assert len(logged) == 1 and not logged[0]["final"]
    resumed_system = CountingSystem(infra_failures={"p0": 99})
    resumed = make(resumed_system, 10, tmp_path, max_infrastructure_retries=2)
    (rollout,) = asyncio.run(resumed.evaluate(GOOD, ["p0"]))
    assert rollout.status is Outcome.INFRASTRUCTURE_FAILURE and rollout.attempts == 3
    assert len(resumed_system.calls) == 2
    assert [a["attempt_index"] for a in read_jsonl(tmp_path / "attempts.jsonl")] == [0, 1, 2]
    assert resumed.budget.snapshot()["infrastructure_failures"] == 3


def test_paired_runs_share_seeds_and_a_new_pairing_is_a_fresh_charged_run(tmp_path: Path) -> None:
    async def scenario(evaluator: BudgetedEvaluator) -> list:
        parent = await evaluator.evaluate(SEED, ["p0", "p1"], pairing="step1")
        child = await evaluator.evaluate(GOOD, ["p0", "p1"], pairing="step1")
        again = await evaluator.evaluate(SEED, ["p0"], pairing="step1")  # same key: served from cache
        fresh = await evaluator.evaluate(SEED, ["p0"], pairing="step2")  # new seeds: run and charged
        plain = await evaluator.evaluate(SEED, ["p0"])  # unpaired: seeded by the candidate
        return [parent, child, again, fresh, plain]

    system = CountingSystem()
    evaluator = make(system, 100, tmp_path)
    parent, child, again, fresh, plain = asyncio.run(scenario(evaluator))
    assert [p.seed for p in parent] == [c.seed for c in child]  # paired row by row
    assert parent[0].seed != parent[1].seed
    assert again[0].cached and not again[0].charged
    assert fresh[0].charged and fresh[0].seed != parent[0].seed and fresh[0].pairing == "step2"
    assert plain[0].charged and plain[0].seed == seed_for("train", SEED.id, "p0", 0)
    assert evaluator.budget.charged == 6 and len(system.calls) == 6
    # The pairing is journaled: a restarted evaluator replays every one of them without running.
    replay_system = CountingSystem()
    resumed = make(replay_system, 100, tmp_path)
    asyncio.run(scenario(resumed))
    assert replay_system.calls == [] and resumed.budget.charged == 6
    assert {r.get("pairing") for r in read_jsonl(tmp_path / "rollouts.jsonl")} == {"step1", "step2", None}
