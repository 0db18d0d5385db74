"""Evaluations with samples: n rolls per problem, distinct seeds, resumable from the journal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from optimizers.candidate import Candidate
from optimizers.evaluator import AttemptResult
from optimizers.journal import read_sealed
from optimizers.protocol.job.evaluation import EvaluationCache, collapse_samples, problem_means, sample_scores
from optimizers.protocol.job.seeds import evaluation_seed
from topologies import aio


class SeedParity:
    """Passes when the request seed is even; the first attempt of ('p1', odd seeds) fails on infrastructure
    once when ``flaky`` (a killed or failed attempt the journal must not lose)."""

    def __init__(self, flaky: bool = False) -> None:
        self.calls: list[tuple[str, int]] = []
        self.flaky = flaky

    async def run(self, candidate: Candidate, problem_id: str, *, seed: int, mode: str, **_: Any) -> AttemptResult:
        self.calls.append((problem_id, seed))
        if self.flaky and problem_id == "p1" and self.calls.count((problem_id, seed)) == 1 and seed % 2:
            return AttemptResult(score=0.0, feedback="", infrastructure_error="connection reset")
        return AttemptResult(score=1.0 if seed % 2 == 0 else 0.0, feedback="", verdict={"outcome": "passed"})


def cache(tmp_path: Path, system: Any) -> EvaluationCache:
    return EvaluationCache(tmp_path, system, condition_id="c",
                           seed_for=lambda split, pid, sample=0: evaluation_seed("c", split, pid, 0, sample),
                           concurrency=2, retry_delay_s=0.0)


def test_samples_roll_each_problem_n_times_with_distinct_seeds(tmp_path: Path) -> None:
    candidate = Candidate({"role/solver": "x"})
    system = SeedParity(flaky=True)
    evaluation = aio.run(cache(tmp_path, system).evaluate(candidate, "test", ["p0", "p1"], evaluation_seed=0, samples=5))
    assert len(evaluation.rollouts) == 10 and evaluation.valid
    assert [(r.problem_id, r.sample) for r in evaluation.rollouts] == [(p, s) for p in ("p0", "p1") for s in range(5)]
    assert len({r.seed for r in evaluation.rollouts}) == 10
    assert evaluation.identity["samples"] == 5
    # Sample 0 keeps the single-sample seed (one-sample evaluations are unchanged).
    assert evaluation.rollouts[0].seed == evaluation_seed("c", "test", "p0", 0)
    scores = sample_scores(evaluation.rollouts)
    assert problem_means(evaluation.rollouts) == [sum(s) / 5 for s in scores]
    collapsed = collapse_samples(evaluation.rollouts)
    assert [r.problem_id for r in collapsed] == ["p0", "p1"] and collapsed[1].score == sum(scores[1]) / 5
    # A one-sample evaluation of the same problems is another evaluation (and keeps its old identity).
    single = aio.run(cache(tmp_path, SeedParity()).evaluate(candidate, "test", ["p0", "p1"], evaluation_seed=0))
    assert single.evaluation_id != evaluation.evaluation_id and "samples" not in single.identity
    # Sealed: the same request again is read back, no model call.
    again = SeedParity()
    reread = aio.run(cache(tmp_path, again).evaluate(candidate, "test", ["p0", "p1"], evaluation_seed=0, samples=5))
    assert reread.reused and not again.calls
    assert read_sealed(tmp_path / f"{evaluation.evaluation_id}.json")["identity"]["samples"] == 5


def test_a_killed_sampled_evaluation_resumes_per_sample(tmp_path: Path) -> None:
    """Journal records are keyed by (problem, sample): finished samples are not rolled again."""
    candidate = Candidate({"role/solver": "x"})
    evaluations = cache(tmp_path, SeedParity())
    identity = evaluations.identity(candidate, "test", ["p0"], 0, 3)
    from optimizers.journal import short_hash

    evaluation_id = short_hash(identity, 24)
    first = SeedParity()
    rollouts = aio.run(cache(tmp_path, first)._run(candidate, "test", ["p0"], evaluation_id, 3))
    assert len(first.calls) == 3 and len(rollouts) == 3
    # As if killed before sealing: the journal holds every sample; a rerun makes no call.
    second = SeedParity()
    resumed = aio.run(cache(tmp_path, second).evaluate(candidate, "test", ["p0"], evaluation_seed=0, samples=3))
    assert not second.calls and [r.sample for r in resumed.rollouts] == [0, 1, 2]
