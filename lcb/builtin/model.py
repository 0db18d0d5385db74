"""How a built-in problem is defined, and how it becomes an LCB row.

A definition holds the statement body, the sample cases (public tests, also shown in the
statement), a seeded generator of hidden cases, a reference solver that computes expected
outputs, and three programs: a correct one, a wrong one (wrong answer on some hidden test) and
optionally a slow one (correct but too slow for a hidden test).
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lcb.rows import encode_test_blob

# stdin: whatever the problem's render/solve functions agree on; functional: a tuple of args.
Case = Any


@dataclass(frozen=True)
class BuiltinProblem:
    id: str
    title: str
    body: str  # statement without the examples (they are rendered from public_cases)
    platform: str
    difficulty: str
    contest_date: str
    public_cases: tuple[Case, ...]
    hidden_cases: Callable[[random.Random], list[Case]]
    render_input: Callable[[Case], str]
    expected_output: Callable[[Case], str]
    correct: str
    wrong: str
    slow: str | None = None
    starter_code: str = ""
    func_name: str | None = None
    params: tuple[str, ...] = ()  # functional argument names, for the examples

    @property
    def functional(self) -> bool:
        return self.func_name is not None

    def rng(self) -> random.Random:
        # A string seed is hashed deterministically, so the file is the same on every run.
        return random.Random(f"lcb-grid builtin {self.id}")


def functional_io(solver: Callable[..., Any]) -> dict[str, Callable[[Case], str]]:
    """LCB's functional encoding: one JSON value per argument per line; the return as JSON."""

    def render(case: Sequence[Any]) -> str:
        return "\n".join(json.dumps(arg) for arg in case)

    def expected(case: Sequence[Any]) -> str:
        result = solver(*copy.deepcopy(list(case)))
        return json.dumps(list(result) if isinstance(result, tuple) else result)

    return {"render_input": render, "expected_output": expected}


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _examples(problem: BuiltinProblem, tests: list[dict[str, str]]) -> str:
    parts = []
    for n, (case, test) in enumerate(zip(problem.public_cases, tests), 1):
        if problem.functional:
            args = ", ".join(f"{name} = {_compact(arg)}" for name, arg in zip(problem.params, case))
            shown = _compact(json.loads(test["output"]))
            parts.append(f"Example {n}:\n\nInput: {args}\nOutput: {shown}\n")
        else:
            parts.append(
                f"Sample Input {n}\n\n{test['input'].rstrip()}\n\n"
                f"Sample Output {n}\n\n{test['output'].rstrip()}\n"
            )
    return "\n".join(parts)


def make_tests(problem: BuiltinProblem, cases: Sequence[Case]) -> list[dict[str, str]]:
    kind = "functional" if problem.functional else "stdin"
    return [
        {"input": problem.render_input(c), "output": problem.expected_output(c), "testtype": kind}
        for c in cases
    ]


def to_row(problem: BuiltinProblem) -> dict[str, str]:
    """An LCB row: the 11 hub fields, all strings, hidden tests in LCB's compressed encoding."""
    public = make_tests(problem, problem.public_cases)
    hidden = make_tests(problem, problem.hidden_cases(problem.rng()))
    if len(hidden) < 4:
        raise ValueError(f"{problem.id}: needs at least 4 hidden tests")
    statement = problem.body.strip() + "\n\n" + _examples(problem, public)
    metadata = {"func_name": problem.func_name} if problem.functional else {}
    return {
        "question_title": problem.title,
        "question_content": statement.strip(),
        "platform": problem.platform,
        "question_id": problem.id,
        "contest_id": "lcb-grid-builtin",
        "contest_date": problem.contest_date,
        "starter_code": problem.starter_code,
        "difficulty": problem.difficulty,
        "public_test_cases": json.dumps(public),
        "private_test_cases": encode_test_blob(hidden),
        "metadata": json.dumps(metadata),
    }


def starter(signature: str) -> str:
    """LeetCode-style starter code as LCB stores it (no typing import, body left open)."""
    return "class Solution:\n    def " + signature + ":\n        "
