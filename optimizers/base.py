"""The optimizer seam: what every method receives (``OptimizeContext``) and returns.

All methods share one signature::

    async def optimize(self, seed: Candidate, *, train, val, ctx) -> OptimizationResult

``train`` and ``val`` are problem-id sequences; test ids never reach a method. The only way to
spend budget is ``ctx.evaluator.evaluate``. Methods that keep state between steps save it as
JSON under ``ctx.workdir`` (``ctx.save_state`` / ``ctx.load_state``), so a killed job resumes.
"""

from __future__ import annotations

import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from optimizers.budget import Budget
from optimizers.candidate import Candidate
from optimizers.evaluator import Evaluator
from optimizers.journal import JsonlJournal, read_json, write_json_atomic


class OptimizerInfrastructureError(RuntimeError):
    """A method cannot go on because rollouts keep failing for infrastructure reasons.

    The job then reports the optimization as ``infrastructure_invalid`` and deploys the seed
    (fallback ``infrastructure_invalid_optimization``) instead of crashing.
    """


@runtime_checkable
class Tracker(Protocol):
    """Live reporting for one job (JSONL always, W&B optionally). Methods never import wandb."""

    def log(self, step: int, metrics: Mapping[str, Any]) -> None: ...

    def log_candidate(self, candidate: Candidate, **info: Any) -> None: ...

    def summary(self, metrics: Mapping[str, Any]) -> None: ...

    def finish(self, status: str) -> None: ...


class NullTracker:
    """Discards everything."""

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        return None

    def log_candidate(self, candidate: Candidate, **info: Any) -> None:
        return None

    def summary(self, metrics: Mapping[str, Any]) -> None:
        return None

    def finish(self, status: str) -> None:
        return None


class JsonlTracker:
    """Appends every call as one JSON line (the always-on, offline tracker)."""

    def __init__(self, path: Path) -> None:
        self._journal = JsonlJournal(path)

    def _write(self, kind: str, **payload: Any) -> None:
        self._journal.append({"kind": kind, "time": time.time(), **payload})

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        self._write("log", step=step, metrics=dict(metrics))

    def log_candidate(self, candidate: Candidate, **info: Any) -> None:
        self._write("candidate", candidate_id=candidate.id, parent=candidate.parent, info=info)

    def summary(self, metrics: Mapping[str, Any]) -> None:
        self._write("summary", metrics=dict(metrics))

    def finish(self, status: str) -> None:
        self._write("finish", status=status)


class FanoutTracker:
    """Sends every call to several trackers (e.g. JSONL + W&B)."""

    def __init__(self, *trackers: Tracker) -> None:
        self.trackers = trackers

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        for tracker in self.trackers:
            tracker.log(step, metrics)

    def log_candidate(self, candidate: Candidate, **info: Any) -> None:
        for tracker in self.trackers:
            tracker.log_candidate(candidate, **info)

    def summary(self, metrics: Mapping[str, Any]) -> None:
        for tracker in self.trackers:
            tracker.summary(metrics)

    def finish(self, status: str) -> None:
        for tracker in self.trackers:
            tracker.finish(status)


@dataclass(frozen=True, slots=True)
class OptimizeContext:
    """Everything a method may use besides the seed and the problem ids."""

    evaluator: Evaluator
    budget: Budget
    seed: int
    workdir: Path
    reflection: Any | None = None  # a ChatClient-like model for proposals/reflection, or None
    tracker: Tracker = field(default_factory=NullTracker)
    method_params: Mapping[str, Any] = field(default_factory=dict)
    reflection_decoding: Any | None = None  # a topologies.types.Decoding; None: the method's default
    # Receives every committed incumbent (candidate, the method's own score of it, charged
    # rollouts at commit); the job's learning curve listens. None: nobody listens.
    on_incumbent: Callable[[Candidate, float | None, int], None] | None = None
    team: Any | None = None  # a topologies.types.TeamRoster: the agents (for masked runs); None: unknown
    task_model: Any | None = None  # the task model's ChatClient, for uncharged judge/probe calls
    rng: random.Random = field(init=False, repr=False)  # seeded by ``seed``; the method's only RNG

    def __post_init__(self) -> None:
        object.__setattr__(self, "rng", random.Random(self.seed))

    def commit_incumbent(self, candidate: Candidate, score: float | None, *, charged: int | None = None) -> None:
        """Report the method's incumbent after a step (what it would return if stopped now) and
        the score it judged it by. The learning curve plots exactly these commits (spec 1.13)."""
        if self.on_incumbent is not None:
            self.on_incumbent(candidate, score, self.budget.charged if charged is None else charged)

    def state_path(self, name: str) -> Path:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"bad state name {name!r}")
        return self.workdir / f"{name}.json"

    def save_state(self, name: str, state: Any) -> None:
        """Persist JSON-safe method state atomically (never pickle)."""
        write_json_atomic(self.state_path(name), state)

    def load_state(self, name: str) -> Any | None:
        path = self.state_path(name)
        return read_json(path) if path.exists() else None


@dataclass(frozen=True, slots=True)
class OptimizationResult:
    """What a method returns. ``history`` rows and ``metadata`` must be JSON-safe."""

    best: Candidate
    stop_reason: str
    history: Sequence[Mapping[str, Any]] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)


class Optimizer(ABC):
    """A prompt/protocol optimization method. Construct with no arguments; knobs come in ctx."""

    name: ClassVar[str] = ""
    needs_reflection: ClassVar[bool] = True  # False: the job never builds a reflection client
    # The implementation's behaviour version: part of every job id of the method. Bump it when a
    # change can alter what the method proposes or spends, so an interrupted job never resumes
    # under different code (the job refuses unless --force-resume).
    version: ClassVar[str] = "1"

    @abstractmethod
    async def optimize(
        self, seed: Candidate, *, train: Sequence[str], val: Sequence[str], ctx: OptimizeContext
    ) -> OptimizationResult:
        """Search from ``seed`` within ``ctx.budget``; return the incumbent (never mutate ``seed``)."""
