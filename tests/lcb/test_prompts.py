from __future__ import annotations

import json
from pathlib import Path

import pytest

from lcb.problem import Problem
from lcb.prompts import PLACEHOLDER, STARTER_FORMAT, STDIN_FORMAT, SYSTEM_MESSAGE, build_messages, format_question
from lcb.rows import problem_from_row

SHARED = Path(__file__).resolve().parents[2].parent / "shared"


def make_problem(statement: str = "Add two numbers.", starter: str = "", fn: str | None = None) -> Problem:
    return Problem(
        id="p1", title="t", statement=statement, platform="atcoder", difficulty="easy",
        contest_date="2024-01-01T00:00:00", starter_code=starter, fn_name=fn,
        public_tests=(), private_tests=(),
    )


def test_stdin_layout_in_order():
    text = format_question(make_problem())
    order = ["### Question:", "Add two numbers.", "### Format:", STDIN_FORMAT,
             "```python\n" + PLACEHOLDER + "\n```", "### Answer:"]
    positions = [text.index(part) for part in order]
    assert positions == sorted(positions)
    assert STARTER_FORMAT not in text


def test_stdin_instruction_content():
    lowered = STDIN_FORMAT.lower()
    for phrase in ("standard input", "standard output", "sample inputs", "delimiters", "stdout"):
        assert phrase in lowered


def test_functional_uses_starter_code_verbatim_and_no_placeholder():
    starter = "class Solution:\n    def f(self, nums: List[int]) -> int:"
    text = format_question(make_problem(starter=starter, fn="f"))
    assert "### Format: " + STARTER_FORMAT + "\n```python\n" + starter + "\n```" in text
    assert PLACEHOLDER not in text
    assert STDIN_FORMAT not in text


def test_braces_in_statement_and_starter_are_safe():
    starter = "class Solution:\n    def g(self, d: Dict[str, int]) -> str:  # returns '{}'.format(x)"
    statement = "Print {n} and {0} literally; also }{ and {{ }}."
    text = format_question(make_problem(statement=statement, starter=starter, fn="g"))
    assert statement in text and starter in text


def test_mode_follows_starter_code_only():
    # Whitespace-only starter code is not starter code.
    assert PLACEHOLDER in format_question(make_problem(starter="   \n"))


def test_build_messages_roles():
    messages = build_messages(make_problem())
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == SYSTEM_MESSAGE
    assert "expert Python programmer" in SYSTEM_MESSAGE
    assert messages[1]["content"] == format_question(make_problem())


def test_real_leetcode_row_prompt():
    path = SHARED / "lcb-real" / "release_v1_rows.jsonl"
    if not path.is_file():
        pytest.skip("shared LCB rows not available")
    with path.open(encoding="utf-8") as handle:
        rows = [json.loads(line) for _, line in zip(range(12), handle)]
    row = next(r for r in rows if r["question_id"] == "2727")
    problem = problem_from_row(row)
    text = format_question(problem)
    assert problem.starter_code in text and PLACEHOLDER not in text
    assert text.startswith("### Question:\n" + problem.statement)
