"""The test phase of a matched-compute baseline job (``self_consistency``, ``best_of_n``).

Two arms on the job's test problems, paired per problem:

* ``baseline`` — the cell's seed *team*, greedy, exactly the shared seed evaluation every other
  method's job of this condition tests against (same content-addressed evaluation id);
* ``deployed`` — the condition's *single agent* (seed prompt of ``single``, same model and
  communication format) sampled N times per problem with the sampled decoding, at no less than
  the replica teams' temperature floor (``TeamLimits.replica_temperature``): the independent team
  votes over replicas sampled at that floor, because a vote over near-greedy copies buys nothing,
  and the baseline's vote must get the same diversity; one program per problem is chosen by the
  method's rule (``lcb.vote``) and graded on all hidden tests.

N: ``match: fixed`` uses ``n``; ``match: tokens`` first draws one sample per problem, then picks
N so N × (mean sample tokens) is nearest the team's mean tokens per problem
(``optimizers.matched.matched_sample_count``), and draws the rest. Samples are journaled
(``baseline/samples.jsonl``), so a killed job resumes without asking the model again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lcb.problem import Problem
from optimizers.journal import JsonlJournal, read_jsonl
from optimizers.matched import MatchPlan, matched_sample_count, sample_seed
from optimizers.protocol.job.errors import JobError
from topologies.types import Decoding, ErrorKind, TeamSpec

SAMPLES_FILE = "samples.jsonl"
SINGLE_AGENT = "single"


def tokens_of(usage: Mapping[str, Any]) -> int:
    return int(usage.get("prompt_tokens", 0) or 0) + int(usage.get("completion_tokens", 0) or 0)


@dataclass(frozen=True, slots=True)
class Sample:
    problem_id: str
    sample: int
    code: str | None
    tokens: int
    usage: Mapping[str, int]
    infrastructure_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"problem_id": self.problem_id, "sample": self.sample, "code": self.code,
                "tokens": self.tokens, "usage": dict(self.usage),
                "infrastructure_error": self.infrastructure_error}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Sample:
        return cls(str(data["problem_id"]), int(data["sample"]), data.get("code"), int(data["tokens"]),
                   dict(data.get("usage") or {}), data.get("infrastructure_error"))


class SampleBook:
    """The journaled samples of one job: (problem, sample) -> Sample; appends atomically."""

    def __init__(self, path: Any) -> None:
        self.journal = JsonlJournal(path)
        self.samples: dict[tuple[str, int], Sample] = {}
        for record in read_jsonl(path):
            sample = Sample.from_dict(record)
            if sample.infrastructure_error is None:
                self.samples[(sample.problem_id, sample.sample)] = sample

    def add(self, sample: Sample) -> None:
        self.journal.append(sample.to_dict())
        if sample.infrastructure_error is None:
            self.samples[(sample.problem_id, sample.sample)] = sample


@dataclass(frozen=True, slots=True)
class SingleAgent:
    """The condition's single agent and how one sample of it is drawn."""

    spec: TeamSpec
    client: Any
    decoding: Decoding
    retries: int

    async def draw(self, problem: Problem, problem_id: str, seed: int, sample: int) -> Sample:
        from dataclasses import replace

        from topologies.teams import run_team

        error = None
        for _ in range(self.retries + 1):
            trajectory = await run_team(self.spec, problem, self.client,
                                        decoding=replace(self.decoding, seed=seed), seed=seed)
            usage = trajectory.usage
            counts = {"calls": usage.calls, "prompt_tokens": usage.prompt_tokens,
                      "completion_tokens": usage.completion_tokens, "tool_calls": usage.tool_calls}
            if trajectory.error_kind is not ErrorKind.INFRASTRUCTURE:
                return Sample(problem_id, sample, trajectory.code, tokens_of(counts), counts)
            error = trajectory.error or "infrastructure failure"
        return Sample(problem_id, sample, None, 0, {}, infrastructure_error=error)


def sample_decoding(decoding: Decoding) -> Decoding:
    """The single agent's sampled decoding: the optimize phase's, raised to the replica teams'
    temperature floor when it is below it (the same diversity the independent team votes over)."""
    from dataclasses import replace

    from topologies.teams.limits import TeamLimits

    floor = TeamLimits().replica_temperature
    if floor is not None and decoding.temperature < floor:
        return replace(decoding, temperature=floor)
    return decoding


def single_agent_spec(cfg: Any) -> TeamSpec:
    from optimizers.protocol.job.lcb_system import base_team_spec

    return base_team_spec(SINGLE_AGENT, team_size=1, communication=cfg.communication, rounds=cfg.rounds)


async def _draw_all(agent: SingleAgent, book: SampleBook, data: Any, ids: Sequence[str], wanted: Mapping[str, int],
                    evaluation_seed: int, concurrency: int) -> None:
    semaphore = asyncio.Semaphore(concurrency)

    async def one(index: int, problem_id: str, sample: int) -> None:
        if (problem_id, sample) in book.samples:
            return
        async with semaphore:
            drawn = await agent.draw(data.problem(problem_id), problem_id,
                                     sample_seed(evaluation_seed, index, sample), sample)
        book.add(drawn)

    await asyncio.gather(*(one(index, pid, s) for index, pid in enumerate(ids) for s in range(wanted[pid])))


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


async def _choose_and_grade(problem: Problem, programs: list[str | None], rule: str) -> tuple[Any, float, str]:
    from lcb.grading import agrade
    from lcb.vote import SELECTION_RULES

    loop = asyncio.get_running_loop()
    vote = await loop.run_in_executor(None, lambda: SELECTION_RULES[rule](problem, programs))
    code = programs[vote.chosen] if vote.chosen is not None else None
    verdict = await agrade(problem, code, tests="hidden")
    return vote, (1.0 if verdict.solved else 0.0), verdict.outcome.value


async def run_matched_test(job: Any, *, rule: str) -> dict[str, Any]:
    """The two arms' per-problem scores and the matching record (the test.json payload's body)."""
    cfg = job.cfg
    plan = MatchPlan.from_params(cfg.method_params)
    ids = list(job.split_ids.test)
    team = await job.evaluations.evaluate(job.seed_candidate, "test", ids, evaluation_seed=cfg.seed)
    team_tokens = [tokens_of(r.usage) for r in team.rollouts]
    team_per_problem = _mean(team_tokens) or 0.0
    folder = job.store.root / "baseline"
    folder.mkdir(parents=True, exist_ok=True)
    book = SampleBook(folder / SAMPLES_FILE)
    agent = SingleAgent(single_agent_spec(cfg), job.client, sample_decoding(cfg.optimize_decoding),
                        cfg.max_infrastructure_retries)
    # First sample everywhere: it measures what one sample costs (and is sample 0 of every N).
    await _draw_all(agent, book, job.data, ids, {pid: 1 for pid in ids}, cfg.seed, cfg.concurrency)
    first = [book.samples.get((pid, 0)) for pid in ids]
    if any(s is None for s in first):
        raise JobError("the single agent's first samples failed after their retries; rerun to resume")
    sample_per_problem = _mean([s.tokens for s in first if s is not None]) or 0.0
    n = plan.n if plan.match == "fixed" else matched_sample_count(team_per_problem, sample_per_problem,
                                                                  max_n=plan.max_n)
    await _draw_all(agent, book, job.data, ids, {pid: n for pid in ids}, cfg.seed, cfg.concurrency)
    missing = [(pid, s) for pid in ids for s in range(n) if (pid, s) not in book.samples]
    if missing:
        raise JobError(f"{len(missing)} single-agent sample(s) failed after their retries; rerun to resume")
    per_problem = []
    for pid in ids:
        samples = [book.samples[(pid, s)] for s in range(n)]
        vote, score, outcome = await _choose_and_grade(job.data.problem(pid), [s.code for s in samples], rule)
        per_problem.append({"problem_id": pid, "score": score, "outcome": outcome,
                            "tokens": sum(s.tokens for s in samples), "vote": vote.as_dict()})
    single_tokens = [row["tokens"] for row in per_problem]
    return {
        "team": team,
        "single_scores": [row["score"] for row in per_problem],
        "matched": {
            "method": cfg.method,
            "selection_rule": rule,
            "match": plan.match,
            "n": n,
            "sample_temperature": agent.decoding.temperature,
            "team_tokens_per_problem": round(team_per_problem, 3),
            "sample_tokens_per_problem": round(sample_per_problem, 3),
            "single_tokens_per_problem": round(_mean(single_tokens) or 0.0, 3),
            "tokens_gap_in_samples": round((n * sample_per_problem - team_per_problem) / sample_per_problem, 3)
            if sample_per_problem else None,
            "single_agent_candidate_id": _single_candidate_id(agent.spec),
            "problems": per_problem,
        },
    }


def _single_candidate_id(spec: TeamSpec) -> str:
    from optimizers.protocol.job.lcb_system import seed_candidate

    return seed_candidate(spec).id
