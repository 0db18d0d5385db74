"""Uncharged, content-addressed evaluations (validation and test), shareable across jobs.

An evaluation is (condition, candidate, split, ids, evaluation seed) -> one record per problem,
scored with greedy decoding on all hidden tests and paired per-problem seeds that do not depend
on the candidate or the method. Its id is the hash of that identity, so the seed prompts of a
condition are evaluated once and every method's job reuses the same sealed file.

Per-problem attempts are journaled next to the file (``<id>.attempts.jsonl``), so a killed
evaluation resumes from the problems it finished; a file lock serializes concurrent jobs that
need the same evaluation (the second one waits and reads the sealed result).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from optimizers.candidate import Candidate
from optimizers.evaluator import MODE_EVALUATE, Rollout, RolloutKey, System, run_with_retries
from optimizers.journal import JsonlJournal, SealError, read_jsonl, read_sealed, short_hash, write_sealed

SCHEMA = "lcb-grid-evaluation/v1"
ProgressFactory = Callable[[str, int], Any]  # (description, total) -> object with update(n) and close()


def usable_scores(rollouts: Sequence[Rollout]) -> list[float | None]:
    """Per-problem scores as records store them: None where the rollout was not usable."""
    return [r.score if r.usable else None for r in rollouts]


def per_problem(rollouts: Sequence[Rollout]) -> dict[str, list[Rollout]]:
    """Rollouts grouped by problem (first-seen order), each problem's samples in sample order."""
    grouped: dict[str, list[Rollout]] = {}
    for rollout in rollouts:
        grouped.setdefault(rollout.problem_id, []).append(rollout)
    return {pid: sorted(rows, key=lambda r: r.sample) for pid, rows in grouped.items()}


def sample_scores(rollouts: Sequence[Rollout]) -> list[list[float | None]]:
    """Per problem, its samples' scores (None where a sample was not usable)."""
    return [usable_scores(rows) for rows in per_problem(rollouts).values()]


def problem_means(rollouts: Sequence[Rollout]) -> list[float | None]:
    """Per problem, the mean score over its samples (pass@1); None when a sample was not usable."""
    out: list[float | None] = []
    for scores in sample_scores(rollouts):
        out.append(None if None in scores else sum(scores) / len(scores))  # type: ignore[arg-type]
    return out


def collapse_samples(rollouts: Sequence[Rollout]) -> tuple[Rollout, ...]:
    """One rollout per problem whose score is the mean over its samples (keep-or-reject compares
    problems, not samples); an unusable sample makes the problem's record unusable."""
    out = []
    for rows in per_problem(rollouts).values():
        bad = next((r for r in rows if not r.usable), None)
        first = bad or rows[0]
        out.append(replace(first, sample=0, score=sum(r.score for r in rows) / len(rows)))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Evaluation:
    evaluation_id: str
    identity: Mapping[str, Any]
    rollouts: tuple[Rollout, ...]
    reused: bool = False  # found sealed on disk (e.g. computed by another method's job)

    @property
    def scores(self) -> list[float]:
        return [r.score for r in self.rollouts]

    @property
    def valid(self) -> bool:
        return all(r.usable for r in self.rollouts)

    @property
    def mean(self) -> float | None:
        return sum(self.scores) / len(self.rollouts) if self.rollouts and self.valid else None

    def usage(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for rollout in self.rollouts:
            for key, value in rollout.usage.items():
                total[key] = total.get(key, 0) + int(value)
        total["attempts"] = sum(r.attempts for r in self.rollouts)
        total["infrastructure_failures"] = sum(
            r.attempts - (1 if r.usable else 0) for r in self.rollouts
        )
        return total


class EvaluationCache:
    """Runs and stores uncharged evaluations in one (possibly shared) folder."""

    def __init__(
        self,
        directory: Path,
        system: System,
        *,
        condition_id: str,
        seed_for: Callable[..., int],  # (split, problem_id[, sample]) -> paired seed
        concurrency: int = 8,
        max_infrastructure_retries: int = 2,
        retry_delay_s: float = 0.5,
        progress: ProgressFactory | None = None,
    ) -> None:
        self.directory = directory
        self.system = system
        self.condition_id = condition_id
        self._seed_for = seed_for
        self._concurrency = concurrency
        self._max_retries = max_infrastructure_retries
        self._retry_delay_s = retry_delay_s
        self._progress = progress

    def identity(self, candidate: Candidate, split: str, ids: Sequence[str], evaluation_seed: int,
                 samples: int = 1) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "condition_id": self.condition_id,
            "candidate_id": candidate.id,
            "split": split,
            "ordered_ids": list(ids),
            "evaluation_seed": evaluation_seed,
            # Only with samples, so one-sample evaluations keep their ids (and stay shared).
            **({"samples": samples} if samples > 1 else {}),
        }

    def path_of(self, evaluation_id: str) -> Path:
        return self.directory / f"{evaluation_id}.json"

    def load(self, evaluation_id: str) -> Evaluation | None:
        path = self.path_of(evaluation_id)
        if not path.exists():
            return None
        data = read_sealed(path)
        if data.get("evaluation_id") != evaluation_id:
            raise SealError(f"{path} holds evaluation {data.get('evaluation_id')}, not {evaluation_id}")
        rollouts = tuple(Rollout.from_dict(r) for r in data["records"])
        return Evaluation(evaluation_id, data["identity"], rollouts, reused=True)

    async def evaluate(
        self, candidate: Candidate, split: str, ids: Sequence[str], *, evaluation_seed: int, samples: int = 1
    ) -> Evaluation:
        """``samples`` rolls per problem, each with its own request seed (sample 0's is the one a
        single-sample evaluation uses); records are problem-major, samples in order."""
        if samples < 1:
            raise ValueError("samples must be >= 1")
        identity = self.identity(candidate, split, ids, evaluation_seed, samples)
        evaluation_id = short_hash(identity, 24)
        found = self.load(evaluation_id)
        if found is not None:
            return found
        async with self._locked(evaluation_id):
            found = self.load(evaluation_id)  # another job may have finished it while we waited
            if found is not None:
                return found
            rollouts = await self._run(candidate, split, list(ids), evaluation_id, samples)
            payload = {
                "schema": SCHEMA,
                "evaluation_id": evaluation_id,
                "identity": identity,
                "records": [r.to_dict(with_trace=False) for r in rollouts],
                "search_budget_charged": 0,
            }
            write_sealed(self.path_of(evaluation_id), payload)
        return Evaluation(evaluation_id, identity, tuple(rollouts))

    async def _run(self, candidate: Candidate, split: str, ids: list[str], evaluation_id: str,
                   samples: int = 1) -> list[Rollout]:
        journal_path = self.directory / f"{evaluation_id}.attempts.jsonl"
        journal = JsonlJournal(journal_path)
        done: dict[tuple[str, int], Rollout] = {}
        failed_attempts: dict[tuple[str, int], int] = {}
        for record in read_jsonl(journal_path):
            slot = (record["problem_id"], int(record.get("sample", 0) or 0))
            if record.get("final"):
                done[slot] = Rollout.from_dict(record["rollout"])
            else:
                failed_attempts[slot] = failed_attempts.get(slot, 0) + 1
        slots = [(pid, sample) for pid in ids for sample in range(samples)]
        semaphore = asyncio.Semaphore(self._concurrency)
        bar = self._progress(f"evaluate {split} ({candidate.id[:8]})", len(slots)) if self._progress else None
        if bar is not None and done:
            bar.update(len([s for s in slots if s in done]))

        def log_attempt(record: dict[str, Any]) -> None:
            if record.get("rollout"):
                record["rollout"]["trace"] = []  # evaluations keep summaries, not full traces
            journal.append(record)

        async def one(slot: tuple[str, int]) -> Rollout:
            if slot in done:
                return done[slot]
            problem_id, sample = slot
            # Sample 0 keeps the paired seed of a single-sample evaluation; others get their own.
            seed = self._seed_for(split, problem_id) if sample == 0 else self._seed_for(split, problem_id, sample)
            async with semaphore:
                rollout = await run_with_retries(
                    self.system,
                    candidate,
                    RolloutKey(candidate.id, problem_id, split, sample),
                    seed=seed,
                    mode=MODE_EVALUATE,
                    max_retries=self._max_retries,
                    first_attempt=failed_attempts.get(slot, 0),
                    retry_delay_s=self._retry_delay_s,
                    chargeable=False,
                    on_attempt=log_attempt,
                )
            if bar is not None:
                bar.update(1)
            return rollout

        try:
            results = await asyncio.gather(*(one(slot) for slot in slots))
        finally:
            if bar is not None:
                bar.close()
        # Uncharged by definition; traces are dropped so fresh and resumed records are equal.
        return [replace(r, charged=False, trace=(), cached=False) for r in results]

    @contextlib.asynccontextmanager
    async def _locked(self, evaluation_id: str) -> AsyncIterator[None]:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / f"{evaluation_id}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    await asyncio.sleep(0.2)
            yield
        finally:
            os.close(fd)  # closing releases the lock (also when the process is killed)
