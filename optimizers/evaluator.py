"""Rollouts and the budgeted evaluator: the only way an optimizer spends budget.

The evaluator is generic. A ``System`` runs one attempt of one candidate on one problem (for LCB:
a team run plus grading, see ``optimizers.protocol.job.lcb_system``); the evaluator adds everything
the protocol promises around it:

- exact budget accounting (a usable rollout is charged once; infrastructure failures are free
  and retried with the same request seed; requests past the maximum come back as
  never-executed ``budget_exhausted`` rollouts so a method can finish its schedule);
- concurrency bounded by a semaphore owned by this evaluator (no process-global state);
- a write-ahead journal (``attempts.jsonl``, ``rollouts.jsonl``, ``candidates.jsonl``) from which
  a restarted job rebuilds its cache: a finished rollout is never run again, and the budget is
  re-charged in request order as the (deterministic) optimizer asks for it again, so the resumed
  run spends and ends exactly like an uninterrupted one;
- masked runs (``active=``: only some of the team's agents act, e.g. for Shapley coalitions) are
  charged rollouts like any other; the mask is part of the rollout key and of every journal line,
  so a masked and an unmasked run of the same candidate never share a cache entry. The request
  seed does not depend on the mask: coalitions of one candidate on one problem share their
  randomness (common random numbers), so their value differences measure the agents.
- paired runs (``pairing=``): by default a rollout's seed depends on the candidate; requests that
  name a pairing key get a seed from that key instead, so different candidates on the same problem
  share their randomness (a parent and its children compared row by row, as the reference's
  session seeds do). The key is part of the rollout key and of every journal line: the same
  candidate under another pairing key is a fresh, charged rollout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from optimizers.budget import Budget, Outcome, Reservation
from optimizers.candidate import Candidate
from optimizers.journal import JsonlJournal, read_jsonl

MODE_OPTIMIZE = "optimize"  # sampled decoding, cheap scoring (e.g. the first hidden tests)
MODE_EVALUATE = "evaluate"  # greedy decoding, full scoring (validation and test)
JOURNAL_SCHEMA = 1


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """What a ``System`` reports for one attempt.

    ``infrastructure_error`` set means the attempt produced no usable observation (transport
    failure): it is retried and never charged. Everything else, including a team that answered
    nothing useful, is a usable observation with a score.
    """

    score: float
    feedback: str
    verdict: Mapping[str, Any] = field(default_factory=dict)  # summary: outcome, passed, total
    answer: str | None = None  # the submission (code), if any
    trace: tuple[Mapping[str, Any], ...] = ()  # source-tagged messages, for reflective methods
    usage: Mapping[str, int] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)
    infrastructure_error: str | None = None


@runtime_checkable
class System(Protocol):
    """Runs one attempt; must not raise for model or transport errors (report them instead).

    A system that can run masked teams sets ``supports_masks = True`` and accepts
    ``active=<sorted agent names>`` (passed only for masked runs).
    """

    async def run(self, candidate: Candidate, problem_id: str, *, seed: int, mode: str) -> AttemptResult: ...


Mask = tuple[str, ...]  # the active agents of a masked run, sorted; None everywhere means "whole team"


def normalize_mask(active: Collection[str] | None) -> Mask | None:
    if active is None:
        return None
    if isinstance(active, str):
        raise TypeError("active must be a collection of agent names, not one string")
    return tuple(sorted(set(active)))


@dataclass(frozen=True, slots=True)
class Rollout:
    """One (candidate, problem, phase, sample) request and how it ended."""

    candidate_id: str
    problem_id: str
    phase: str
    sample: int
    seed: int
    status: Outcome
    score: float
    feedback: str
    verdict: Mapping[str, Any] = field(default_factory=dict)
    answer: str | None = None
    trace: tuple[Mapping[str, Any], ...] = ()
    usage: Mapping[str, int] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)
    charged: bool = False
    attempts: int = 0
    cached: bool = False  # served again from this run's cache (never charged)
    latency_s: float = 0.0
    active: Mask | None = None  # the agents that acted (a masked run); None: the whole team
    pairing: str | None = None  # the seed-pairing key of a paired run; None: seeded by candidate

    @property
    def usable(self) -> bool:
        return self.status.charged

    @property
    def budget_exhausted(self) -> bool:
        return self.status is Outcome.BUDGET_EXHAUSTED

    @property
    def key(self) -> RolloutKey:
        return RolloutKey(self.candidate_id, self.problem_id, self.phase, self.sample, self.active, self.pairing)

    def to_dict(self, *, with_trace: bool = True) -> dict[str, Any]:
        return {
            "candidate_id": self.candidate_id,
            "problem_id": self.problem_id,
            "phase": self.phase,
            "sample": self.sample,
            "seed": self.seed,
            "status": self.status.value,
            "score": self.score,
            "feedback": self.feedback,
            "verdict": dict(self.verdict),
            "answer": self.answer,
            "trace": [dict(m) for m in self.trace] if with_trace else [],
            "usage": dict(self.usage),
            "details": dict(self.details),
            "charged": self.charged,
            "attempts": self.attempts,
            "latency_s": round(self.latency_s, 4),
            **({"active": list(self.active)} if self.active is not None else {}),
            **({"pairing": self.pairing} if self.pairing is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Rollout:
        return cls(
            candidate_id=data["candidate_id"],
            problem_id=data["problem_id"],
            phase=data["phase"],
            sample=int(data["sample"]),
            seed=int(data["seed"]),
            status=Outcome(data["status"]),
            score=float(data["score"]),
            feedback=data.get("feedback", ""),
            verdict=data.get("verdict", {}),
            answer=data.get("answer"),
            trace=tuple(data.get("trace", ())),
            usage=data.get("usage", {}),
            details=data.get("details", {}),
            charged=bool(data.get("charged", False)),
            attempts=int(data.get("attempts", 0)),
            latency_s=float(data.get("latency_s", 0.0)),
            active=_mask_from(data),
            pairing=data.get("pairing"),
        )


def _mask_from(record: Mapping[str, Any]) -> Mask | None:
    active = record.get("active")
    return None if active is None else tuple(active)


@dataclass(frozen=True, slots=True)
class RolloutKey:
    candidate_id: str
    problem_id: str
    phase: str
    sample: int
    active: Mask | None = None
    pairing: str | None = None

    @property
    def seed_owner(self) -> str:
        """What the request seed is derived from in place of the candidate id."""
        return self.candidate_id if self.pairing is None else f"pairing:{self.pairing}"


class Evaluator(Protocol):
    """What an optimizer sees: score a candidate on problems (by id), spending budget."""

    budget: Budget

    async def evaluate(
        self, candidate: Candidate, problem_ids: Sequence[str], *, phase: str = "train", sample: int = 0,
        active: Collection[str] | None = None, pairing: str | None = None,
    ) -> list[Rollout]: ...


SeedFunction = Callable[[str, str, str, int], int]  # (phase, candidate_id, problem_id, sample) -> seed


def outcome_of(result: AttemptResult) -> Outcome:
    if result.infrastructure_error is not None:
        return Outcome.INFRASTRUCTURE_FAILURE
    return Outcome.SUCCESS if result.score > 0 else Outcome.SEMANTIC_FAILURE


def rollout_from_attempt(
    key: RolloutKey, seed: int, result: AttemptResult, *, attempts: int, latency_s: float, chargeable: bool = True
) -> Rollout:
    outcome = outcome_of(result)
    feedback = result.feedback
    if outcome is Outcome.INFRASTRUCTURE_FAILURE:
        feedback = f"not scored: infrastructure failure after {attempts} attempt(s)"
    return Rollout(
        candidate_id=key.candidate_id,
        problem_id=key.problem_id,
        phase=key.phase,
        sample=key.sample,
        seed=seed,
        active=key.active,
        pairing=key.pairing,
        status=outcome,
        score=float(result.score) if outcome.charged else 0.0,
        feedback=feedback,
        verdict=result.verdict,
        answer=result.answer,
        trace=result.trace,
        usage=result.usage,
        details={**result.details, **({"infrastructure_error": result.infrastructure_error}
                                      if result.infrastructure_error else {})},
        charged=chargeable and outcome.charged,
        attempts=attempts,
        latency_s=latency_s,
    )


AttemptHook = Callable[[dict[str, Any]], None]


async def run_with_retries(
    system: System,
    candidate: Candidate,
    key: RolloutKey,
    *,
    seed: int,
    mode: str,
    max_retries: int,
    first_attempt: int = 0,
    retry_delay_s: float = 0.0,
    chargeable: bool = True,
    on_attempt: AttemptHook | None = None,
    on_final: Callable[[Rollout, dict[str, Any]], None] | None = None,
    on_failed_attempt: Callable[[bool], None] | None = None,
) -> Rollout:
    """Attempt until usable or out of retries; every attempt (same seed) is journaled.

    Non-final attempts go to ``on_attempt``. The final one goes to ``on_final(rollout, record)``
    when given (the caller journals the rollout first, then the record), else to ``on_attempt``
    with the finished rollout embedded, so that one journal alone can rebuild it after a kill.
    """
    attempt = first_attempt
    latency_total = 0.0
    while True:
        started = time.monotonic()
        masked = {"active": key.active} if key.active is not None else {}
        result = await system.run(candidate, key.problem_id, seed=seed, mode=mode, **masked)
        latency = time.monotonic() - started
        latency_total += latency
        outcome = outcome_of(result)
        final = outcome is not Outcome.INFRASTRUCTURE_FAILURE or attempt >= max_retries
        if outcome is Outcome.INFRASTRUCTURE_FAILURE and on_failed_attempt is not None:
            on_failed_attempt(not final)
        rollout = rollout_from_attempt(
            key, seed, result, attempts=attempt + 1, latency_s=latency_total, chargeable=chargeable
        )
        if on_attempt is not None or on_final is not None:
            record = {
                "schema": JOURNAL_SCHEMA,
                "candidate_id": key.candidate_id,
                "problem_id": key.problem_id,
                "phase": key.phase,
                "sample": key.sample,
                **({"active": list(key.active)} if key.active is not None else {}),
                **({"pairing": key.pairing} if key.pairing is not None else {}),
                "seed": seed,
                "mode": mode,
                "attempt_index": attempt,
                "outcome": outcome.value,
                "charged": chargeable and outcome.charged,
                "final": final,
                "latency_s": round(latency, 4),
                "usage": dict(result.usage),
                "error": result.infrastructure_error,
                "rollout": rollout.to_dict() if final and on_final is None else None,
                "time": time.time(),
            }
            if final and on_final is not None:
                on_final(rollout, record)
            elif on_attempt is not None:
                on_attempt(record)
        if final:
            return rollout
        attempt += 1
        if retry_delay_s:
            await asyncio.sleep(retry_delay_s * attempt)


def final_attempt_record(rollout: Rollout, mode: str, *, repaired: bool = False) -> dict[str, Any]:
    """The final attempt line of a finished rollout (to repair a log cut short by a kill)."""
    return {
        "schema": JOURNAL_SCHEMA,
        "candidate_id": rollout.candidate_id,
        "problem_id": rollout.problem_id,
        "phase": rollout.phase,
        "sample": rollout.sample,
        **({"active": list(rollout.active)} if rollout.active is not None else {}),
        **({"pairing": rollout.pairing} if rollout.pairing is not None else {}),
        "seed": rollout.seed,
        "mode": mode,
        "attempt_index": rollout.attempts - 1,
        "outcome": rollout.status.value,
        "charged": rollout.charged,
        "final": True,
        "latency_s": rollout.latency_s,
        "usage": dict(rollout.usage),
        "error": rollout.details.get("infrastructure_error"),
        "rollout": None,
        "repaired": repaired,
        "time": time.time(),
    }


@dataclass(frozen=True, slots=True)
class EvaluatorJournal:
    """The three optimization journals of a job (or of a test)."""

    directory: Path

    @property
    def attempts(self) -> Path:
        return self.directory / "attempts.jsonl"

    @property
    def rollouts(self) -> Path:
        return self.directory / "rollouts.jsonl"

    @property
    def candidates(self) -> Path:
        return self.directory / "candidates.jsonl"


RolloutObserver = Callable[[Rollout, Budget], None]


class BudgetedEvaluator:
    """The optimizer-facing evaluator: budgeted, concurrent, journaled, resumable."""

    def __init__(
        self,
        system: System,
        budget: Budget,
        *,
        seed_for: SeedFunction,
        allowed_ids: Collection[str],
        journal_dir: Path | None = None,
        concurrency: int = 8,
        max_infrastructure_retries: int = 2,
        retry_delay_s: float = 0.5,
        mode: str = MODE_OPTIMIZE,
        observers: Sequence[RolloutObserver] = (),
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.system = system
        self.budget = budget
        self._seed_for = seed_for
        self._allowed = frozenset(allowed_ids)
        self._mode = mode
        self._max_retries = max_infrastructure_retries
        self._retry_delay_s = retry_delay_s
        self._concurrency = concurrency
        self._semaphore: asyncio.Semaphore | None = None  # bound to the running loop lazily
        self._observers = list(observers)
        self._served: dict[RolloutKey, Rollout] = {}  # finished in this run
        self._inflight: dict[RolloutKey, asyncio.Future[Rollout]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._journaled: dict[RolloutKey, Rollout] = {}  # finished before a restart, not yet replayed
        self._journaled_failures: dict[RolloutKey, int] = {}  # failed attempts per key before restart
        self._known_candidates: set[str] = set()
        self._candidates: dict[str, Candidate] = {}
        self.journal = EvaluatorJournal(journal_dir) if journal_dir is not None else None
        self._attempts_log = JsonlJournal(self.journal.attempts) if self.journal else None
        self._rollouts_log = JsonlJournal(self.journal.rollouts) if self.journal else None
        self._candidates_log = JsonlJournal(self.journal.candidates) if self.journal else None
        if self.journal is not None:
            self._load_journal()

    # ---------------------------------------------------------------- resume

    def _load_journal(self) -> None:
        """Rebuild the cache: rollouts.jsonl holds finished rollouts (written before their final
        attempt line), attempts.jsonl the failed attempts of rollouts that may be unfinished."""
        assert self.journal is not None and self._attempts_log is not None
        for row in read_jsonl(self.journal.rollouts):
            rollout = Rollout.from_dict(row)
            self._journaled[rollout.key] = rollout
        finals: set[RolloutKey] = set()
        for record in read_jsonl(self.journal.attempts):
            key = RolloutKey(record["candidate_id"], record["problem_id"], record["phase"], int(record["sample"]),
                             _mask_from(record), record.get("pairing"))
            if record.get("final"):
                finals.add(key)
            elif record.get("outcome") == Outcome.INFRASTRUCTURE_FAILURE.value:
                self._journaled_failures[key] = self._journaled_failures.get(key, 0) + 1
        for key, rollout in self._journaled.items():
            if key not in finals:
                # Killed between the two writes: complete the attempt log from the rollout.
                self._attempts_log.append(final_attempt_record(rollout, self._mode, repaired=True))
        for record in read_jsonl(self.journal.candidates):
            self._known_candidates.add(record["id"])
            self._candidates[record["id"]] = Candidate.from_dict(record)

    @property
    def resumed_rollouts(self) -> int:
        """Finished rollouts found in the journal and not yet asked for again."""
        return len(self._journaled)

    # ---------------------------------------------------------------- public API

    def candidate(self, candidate_id: str) -> Candidate | None:
        """A candidate this evaluator has seen (this run or journaled), by id."""
        return self._candidates.get(candidate_id)

    async def drain(self) -> int:
        """Wait for rollouts still running (a method that returned without awaiting them)."""
        pending = list(self._tasks)
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        return len(pending)

    def note_candidate(self, candidate: Candidate) -> None:
        """Journal a candidate (e.g. the final incumbent) even if it was never evaluated."""
        self._note_candidate(candidate)

    def add_observer(self, observer: RolloutObserver) -> None:
        self._observers.append(observer)

    async def evaluate(
        self, candidate: Candidate, problem_ids: Sequence[str], *, phase: str = "train", sample: int = 0,
        active: Collection[str] | None = None, pairing: str | None = None,
    ) -> list[Rollout]:
        """Score ``candidate`` on each problem; results in the order of ``problem_ids``.

        Budget slots are reserved in request order before anything runs, so which requests get
        executed when the budget runs out is deterministic. ``active`` runs the team masked: only
        those agents act (charged like any rollout; its own cache entry). ``pairing`` seeds the
        runs by that key instead of by the candidate (see the module docstring).
        """
        mask = normalize_mask(active)
        if mask is not None and not getattr(self.system, "supports_masks", False):
            raise ValueError(f"{type(self.system).__name__} cannot run masked teams")
        ids = [str(i) for i in problem_ids]
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate problem ids in one evaluate call")
        outside = [i for i in ids if i not in self._allowed]
        if outside:
            raise ValueError(f"problem(s) not available to the optimizer: {', '.join(outside[:5])}")
        self._note_candidate(candidate)
        waits: list[asyncio.Future[Rollout] | Rollout] = []
        for problem_id in ids:
            waits.append(self._request(candidate, RolloutKey(candidate.id, problem_id, phase, sample, mask, pairing)))
        results: list[Rollout] = []
        for item in waits:
            results.append(await item if isinstance(item, asyncio.Future) else item)
        return results

    # ---------------------------------------------------------------- internals

    def _note_candidate(self, candidate: Candidate) -> None:
        if candidate.id in self._known_candidates:
            return
        self._known_candidates.add(candidate.id)
        self._candidates[candidate.id] = candidate
        if self._candidates_log is not None:
            self._candidates_log.append({**candidate.to_dict(), "time": time.time()})

    def _request(self, candidate: Candidate, key: RolloutKey) -> asyncio.Future[Rollout] | Rollout:
        """Synchronously decide how a request is served; start execution when needed."""
        if key in self._served:
            return replace(self._served[key], charged=False, cached=True)
        if key in self._inflight:
            return self._as_cached(self._inflight[key])
        if key in self._journaled:
            return self._replay(key)
        reservation = self.budget.reserve()
        if reservation is None:
            return self._exhausted(key)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Rollout] = loop.create_future()
        self._inflight[key] = future
        task = loop.create_task(self._execute(candidate, key, reservation, future))
        self._tasks.add(task)  # the loop only holds tasks weakly
        task.add_done_callback(self._tasks.discard)
        return future

    def _as_cached(self, inflight: asyncio.Future[Rollout]) -> asyncio.Future[Rollout]:
        loop = asyncio.get_running_loop()
        mirror: asyncio.Future[Rollout] = loop.create_future()

        def copy(done: asyncio.Future[Rollout]) -> None:
            if mirror.done():
                return
            if done.cancelled():
                mirror.cancel()
            elif done.exception() is not None:
                mirror.set_exception(done.exception())  # type: ignore[arg-type]
            else:
                mirror.set_result(replace(done.result(), charged=False, cached=True))

        inflight.add_done_callback(copy)
        return mirror

    def _replay(self, key: RolloutKey) -> Rollout:
        """Serve a rollout finished before a restart, charging the budget as the first run did."""
        rollout = self._journaled.pop(key)
        failures = self._journaled_failures.pop(key, 0)
        for index in range(failures):
            self.budget.note_infrastructure_failure(will_retry=True)
        if rollout.status is Outcome.INFRASTRUCTURE_FAILURE:
            self.budget.note_infrastructure_failure(will_retry=False)
        reservation = self.budget.reserve()
        if reservation is None:
            # Only possible if the budget changed since the journal was written; job.json
            # identity prevents that, so treat it as a contract breach.
            raise RuntimeError("journal replay needs more budget than the job has")
        self.budget.commit(reservation, rollout.status)
        self._served[key] = rollout
        self._notify(rollout)
        return rollout

    def _exhausted(self, key: RolloutKey) -> Rollout:
        return Rollout(
            candidate_id=key.candidate_id,
            problem_id=key.problem_id,
            phase=key.phase,
            sample=key.sample,
            seed=self._seed_for(key.phase, key.seed_owner, key.problem_id, key.sample),
            active=key.active,
            pairing=key.pairing,
            status=Outcome.BUDGET_EXHAUSTED,
            score=0.0,
            feedback="not run: the rollout budget is exhausted",
            details={"budget_exhausted": True},
        )

    async def _execute(
        self,
        candidate: Candidate,
        key: RolloutKey,
        reservation: Reservation,
        future: asyncio.Future[Rollout],
    ) -> None:
        committed = False
        try:
            if self._semaphore is None:
                self._semaphore = asyncio.Semaphore(self._concurrency)
            async with self._semaphore:
                seed = self._seed_for(key.phase, key.seed_owner, key.problem_id, key.sample)
                # Failed attempts journaled before a restart count toward this rollout's retries.
                prior = self._journaled_failures.pop(key, 0)
                for _ in range(prior):
                    self.budget.note_infrastructure_failure(will_retry=True)
                rollout = await run_with_retries(
                    self.system,
                    candidate,
                    key,
                    seed=seed,
                    mode=self._mode,
                    max_retries=self._max_retries,
                    first_attempt=prior,
                    retry_delay_s=self._retry_delay_s,
                    on_attempt=self._attempts_log.append if self._attempts_log else None,
                    on_final=self._journal_final if self.journal else None,
                    on_failed_attempt=lambda retry: self.budget.note_infrastructure_failure(will_retry=retry),
                )
            self.budget.commit(reservation, rollout.status)
            committed = True
            self._served[key] = rollout
            self._notify(rollout)
            if not future.done():
                future.set_result(rollout)
        except BaseException as exc:
            if not committed:
                self.budget.cancel(reservation)
            if not future.done():
                if isinstance(exc, asyncio.CancelledError):
                    future.cancel()
                else:
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._inflight.pop(key, None)

    def _journal_final(self, rollout: Rollout, record: dict[str, Any]) -> None:
        assert self._rollouts_log is not None and self._attempts_log is not None
        self._rollouts_log.append(rollout.to_dict())  # first: the rollout is what resume trusts
        self._attempts_log.append(record)

    def _notify(self, rollout: Rollout) -> None:
        for observer in self._observers:
            observer(rollout, self.budget)
