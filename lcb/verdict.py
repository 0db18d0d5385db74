"""Grading outcomes: per test and per program."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any


class Outcome(StrEnum):
    """What happened to one test, or (the first failure) to a whole program."""

    PASSED = "passed"
    WRONG_ANSWER = "wrong_answer"
    RUNTIME_ERROR = "runtime_error"
    TIME_LIMIT = "time_limit"
    MEMORY_LIMIT = "memory_limit"
    COMPILE_ERROR = "compile_error"
    NO_CODE = "no_code"
    SANDBOX_ERROR = "sandbox_error"


@dataclass(frozen=True, slots=True)
class TestResult:
    """One test's result. ``detail`` is for humans and never shown to optimizers.

    ``duration_s`` is wall-clock seconds, ``cpu_s`` CPU seconds (what the limit applies to).
    """

    __test__ = False

    index: int
    outcome: Outcome
    duration_s: float
    detail: str = ""
    cpu_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Verdict:
    """A program's grade on one problem.

    ``feedback`` is short text safe to show an optimizer: counts and outcome kinds only,
    never hidden-test inputs or outputs. ``isolation``: the sandbox layers that were in force
    (lcb/sandbox.py ``describe_layers``), empty when nothing ran.
    """

    problem_id: str
    outcome: Outcome
    passed: int
    total: int
    tests: tuple[TestResult, ...]
    feedback: str
    isolation: tuple[str, ...] = ()

    @property
    def solved(self) -> bool:
        return self.outcome is Outcome.PASSED and self.total > 0 and self.passed == self.total

    @property
    def pass_rate(self) -> float:
        return self.passed / self.total if self.total else 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["outcome"] = self.outcome.value
        data["tests"] = [{**asdict(t), "outcome": t.outcome.value} for t in self.tests]
        return data
