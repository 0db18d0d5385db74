"""The behavioural vote and the examples check pick programs by what they do, in the sandbox."""

from __future__ import annotations

import pytest

from lcb.data import load_problems
from lcb.vote import behaviour, behavioural_vote, examples_check


@pytest.fixture(scope="module")
def problems():
    return {p.id: p for p in load_problems("builtin").problems}


# Three texts that print the same thing (a loop, a formula, a different name and layout) and two
# texts that read almost like the formula but print something else.
SUM_LOOP = "n = int(input())\ntotal = 0\nfor i in range(1, n + 1):\n    total += i\nprint(total)\n"
SUM_FORMULA = "n = int(input())\nprint(n * (n + 1) // 2)\n"
SUM_RENAMED = "# triangular number\nk=int(input());print((k*k+k)//2)\n"
OFF_BY_ONE = "n = int(input())\nprint(n * (n - 1) // 2)\n"
DOUBLED = "n = int(input())\nprint(n * (n + 1))\n"


def test_vote_picks_the_output_majority_even_when_texts_differ(problems) -> None:
    problem = problems["demo_stdin"]
    # Text-level majority would be OFF_BY_ONE (it appears twice, verbatim); behaviour says otherwise.
    programs = [OFF_BY_ONE, SUM_LOOP, OFF_BY_ONE, SUM_FORMULA, DOUBLED, SUM_RENAMED]
    vote = behavioural_vote(problem, programs)
    assert vote.groups[0] == (1, 3, 5)  # the three different texts that agree on outputs
    assert vote.chosen == 1
    assert set(vote.groups[1]) == {0, 2}


def test_vote_ignores_whitespace_noise_in_outputs(problems) -> None:
    problem = problems["demo_stdin"]
    padded = "n = int(input())\nprint('  ' + str(n * (n + 1) // 2) + '   ')\nprint()\n"
    assert behaviour(problem, padded) == behaviour(problem, SUM_FORMULA)


def test_a_crashing_majority_never_outvotes_a_program_that_runs(problems) -> None:
    problem = problems["demo_stdin"]
    crash = "raise SystemExit(3)\n"
    vote = behavioural_vote(problem, [crash, crash + "# b\n", crash + "# c\n", OFF_BY_ONE, None])
    assert vote.chosen == 3 and vote.runnable == (False, False, False, True, False)


def test_functional_programs_are_grouped_by_return_values(problems) -> None:
    problem = problems["demo_functional"]
    dict_way = ("class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n"
                "        for j, x in enumerate(nums):\n            if target - x in seen:\n"
                "                return [seen[target - x], j]\n            seen[x] = j\n")
    brute = ("class Solution:\n    def twoSum(self, nums, target):\n        for i in range(len(nums)):\n"
             "            for j in range(i + 1, len(nums)):\n                if nums[i] + nums[j] == target:\n"
             "                    return [i, j]\n")
    wrong = "class Solution:\n    def twoSum(self, nums, target):\n        return [0, 0]\n"
    vote = behavioural_vote(problem, [wrong, dict_way, brute])
    assert vote.groups[0] == (1, 2) and vote.chosen == 1


def test_no_program_at_all_submits_nothing(problems) -> None:
    vote = behavioural_vote(problems["demo_stdin"], [None, "   "])
    assert vote.chosen is None and vote.groups == ()


def test_examples_check_prefers_the_program_that_passes_the_statement_examples(problems) -> None:
    problem = problems["demo_stdin"]
    # The majority is wrong on the examples; best-of-N by the examples submits the minority.
    vote = examples_check(problem, [OFF_BY_ONE, OFF_BY_ONE + "# 2\n", SUM_FORMULA])
    assert vote.chosen == 2
    assert vote.examples_passed == (0, 0, 2) and vote.examples_total == 2
    assert behavioural_vote(problem, [OFF_BY_ONE, OFF_BY_ONE + "# 2\n", SUM_FORMULA]).chosen == 0


TWO_SUM_RIGHT = ("class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n"
                 "        for j, x in enumerate(nums):\n            if target - x in seen:\n"
                 "                return [seen[target - x], j]\n            seen[x] = j\n")
TWO_SUM_FIRST_TWO = "class Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]\n"


def test_examples_check_on_a_leetcode_style_problem(problems) -> None:
    problem = problems["demo_functional"]
    # [0, 1] is right on the first example only; the majority says so twice, in two texts.
    programs = [TWO_SUM_FIRST_TWO, TWO_SUM_FIRST_TWO + "# again\n", TWO_SUM_RIGHT]
    vote = examples_check(problem, programs)
    assert vote.examples_passed == (1, 1, 2) and vote.examples_total == 2 and vote.chosen == 2
    assert behavioural_vote(problem, programs).chosen == 0


def test_examples_check_runs_the_agents_own_python_exec_tool(problems, monkeypatch) -> None:
    """The check is the agent's tool (lcb.tools.python_exec), one call per distinct program and
    example, not the grader: when the tool says a program failed, it has passed nothing."""
    from lcb import tools

    problem = problems["demo_stdin"]
    real = tools.python_exec
    calls: list[tuple[str, str]] = []

    def counted(code: str, stdin: str = "", timeout_s: float = 10.0, **kw):
        calls.append((code, stdin))
        return real(code, stdin, timeout_s, **kw)

    monkeypatch.setattr(tools, "python_exec", counted)
    vote = examples_check(problem, [SUM_FORMULA, SUM_FORMULA, OFF_BY_ONE])
    assert vote.examples_passed == (2, 2, 0)
    assert sorted(calls) == sorted((code, case.input) for code in (SUM_FORMULA, OFF_BY_ONE)
                                   for case in problem.public_tests)

    def broken(code: str, stdin: str = "", timeout_s: float = 10.0, **kw):
        return tools.ExecResult("", "sandbox error: test", 1, False, 0.0, False)

    monkeypatch.setattr(tools, "python_exec", broken)
    assert examples_check(problem, [SUM_FORMULA, OFF_BY_ONE]).examples_passed == (0, 0)
