"""Grading semantics on small handwritten problems (real sandbox, no mocks)."""

from __future__ import annotations

import asyncio

import pytest

from lcb.errors import DataError
from lcb.grading import agrade, grade, grade_many, largest_first
from lcb.problem import Problem, TestCase
from lcb.problem import TestKind as Kind
from lcb.verdict import Outcome


def stdin_problem(pairs, public=(), pid="s1") -> Problem:
    return Problem(pid, "t", "statement", "atcoder", "easy", "2024-01-01", "", None,
                   tuple(TestCase(i, o, Kind.STDIN) for i, o in public),
                   tuple(TestCase(i, o, Kind.STDIN) for i, o in pairs))


def functional_problem(pairs, fn_name="f", public=(), pid="f1") -> Problem:
    starter = f"class Solution:\n    def {fn_name}(self, x):\n        "
    return Problem(pid, "t", "statement", "leetcode", "easy", "2024-01-01", starter, fn_name,
                   tuple(TestCase(i, o, Kind.FUNCTIONAL) for i, o in public),
                   tuple(TestCase(i, o, Kind.FUNCTIONAL) for i, o in pairs))


ADD = stdin_problem([("1 2\n", "3\n"), ("10 20\n", "30"), ("-1 1\n", "0\n")])


def test_stdin_pass_and_wrong_answer():
    ok = grade(ADD, "a, b = map(int, input().split())\nprint(a + b)\n")
    assert (ok.outcome, ok.passed, ok.total, ok.solved) == (Outcome.PASSED, 3, 3, True)
    wrong = grade(ADD, "a, b = map(int, input().split())\nprint(a + b if a > 0 else 7)\n")
    assert (wrong.outcome, wrong.passed) == (Outcome.WRONG_ANSWER, 2)
    assert wrong.tests[2].outcome is Outcome.WRONG_ANSWER
    assert "wrong_answer on test 3" in wrong.feedback


def test_all_tests_graded_after_a_wrong_answer():
    verdict = grade(ADD, "a, b = map(int, input().split())\nprint(a + b if a != 1 else 0)\n")
    assert [t.outcome for t in verdict.tests] == [Outcome.WRONG_ANSWER, Outcome.PASSED, Outcome.PASSED]
    assert verdict.outcome is Outcome.WRONG_ANSWER and verdict.passed == 2


@pytest.mark.parametrize(("got", "expected", "solved"), [
    ("1.50 2", "1.5 2", True),
    ("0.333", "0.3333", False),
    ("1e3", "1000", True),
    ("  \n\n 3 \n 4  \n\n", "3\n4", True),
    ("3\n\n4", "3\n4", False),
    ("YES", "yes", False),
])
def test_official_comparator(got, expected, solved):
    problem = stdin_problem([("", expected)])
    verdict = grade(problem, f"print({got!r}, end='')\n")
    assert verdict.solved is solved


def test_exit_before_output_and_sys_exit_zero():
    problem = stdin_problem([("", "")])
    assert grade(problem, "exit(0)\nprint('never')\n").solved
    assert grade(stdin_problem([("", "5")]), "import sys\nprint(5)\nsys.exit(0)\n").solved
    failing = grade(stdin_problem([("", "5")]), "import sys\nprint(5)\nsys.exit(3)\n")
    assert failing.outcome is Outcome.RUNTIME_ERROR


def test_real_script_semantics_buffer_main_guard_global():
    problem = stdin_problem([("3\n1 2 3\n", "6\n")])
    buffered = ("import sys\nn = int(sys.stdin.buffer.readline())\n"
                "xs = list(map(int, sys.stdin.buffer.readline().split()))\n"
                "sys.stdout.buffer.write(str(sum(xs)).encode() + b'\\n')\n")
    assert grade(problem, buffered).solved
    guard_not_last = ("total = 0\ndef add(v):\n    global total\n    total += v\n"
                      "if __name__ == '__main__':\n    input()\n    for v in map(int, input().split()):\n"
                      "        add(v)\n    report()\n"
                      "def report():\n    print(total)\n")
    # the guard block runs before report() is defined: a real script fails with NameError
    assert grade(problem, guard_not_last).outcome is Outcome.RUNTIME_ERROR
    global_ok = ("total = 0\ndef add(v):\n    global total\n    total += v\n"
                 "def main():\n    input()\n    for v in map(int, input().split()):\n        add(v)\n"
                 "    print(total)\nif __name__ == '__main__':\n    main()\n")
    assert grade(problem, global_ok).solved


def test_compile_error_detected_once_for_all_tests():
    verdict = grade(ADD, "def broken(:\n    pass\n")
    assert verdict.outcome is Outcome.COMPILE_ERROR
    assert all(t.outcome is Outcome.COMPILE_ERROR for t in verdict.tests) and verdict.passed == 0
    assert "SyntaxError" in verdict.feedback


def test_runtime_error_feedback_names_type_only_for_hidden():
    verdict = grade(ADD, "raise ValueError('secret-ish message')\n")
    assert verdict.outcome is Outcome.RUNTIME_ERROR
    assert "[ValueError]" in verdict.feedback and "secret-ish" not in verdict.feedback
    assert "ValueError" in verdict.tests[0].detail


def test_max_tests_uses_first_k():
    verdict = grade(ADD, "a, b = map(int, input().split())\nprint(a + b)\n", max_tests=2)
    assert (verdict.total, verdict.passed) == (2, 2)


def test_no_code():
    for code in (None, "", "  \n"):
        verdict = grade(ADD, code)
        assert (verdict.outcome, verdict.passed, verdict.total) == (Outcome.NO_CODE, 0, 3)


def test_feedback_never_contains_hidden_content_but_shows_public():
    hidden_in, hidden_out = "zq_hidden_input_7781\n", "zq_hidden_expected_9932"
    problem = stdin_problem([(hidden_in, hidden_out)], public=[("pub_in_1234\n", "pub_out_5678")])
    code = "s = input()\nprint(s + '_got_marker')\n"
    hidden = grade(problem, code, tests="hidden")
    assert hidden.outcome is Outcome.WRONG_ANSWER
    for secret in ("zq_hidden_input_7781", "zq_hidden_expected_9932", "_got_marker"):
        assert secret not in hidden.feedback
    public = grade(problem, code, tests="public")
    assert "pub_in_1234" in public.feedback and "pub_out_5678" in public.feedback
    assert "_got_marker" in public.feedback
    both = grade(problem, code, tests="all")
    assert both.total == 2 and "zq_hidden" not in both.feedback


def test_functional_multi_arg_single_list_tuple_and_prelude():
    multi = functional_problem([("[4, 3, 2]\n[2, 5]", "14"), ("[]\n[1]", "1")], fn_name="total")
    code = ("class Solution:\n    def total(self, a: List[int], b: List[int]) -> int:\n"
            "        return sum(a) + sum(b) - (2 if a else 0)\n")
    assert grade(multi, code).solved
    single = functional_problem([("[2, 3, 1, 4]", "4"), ("[7]", "1")], fn_name="count")
    assert grade(single, "class Solution:\n    def count(self, nums: List[int]) -> int:\n"
                         "        return len(nums)\n").solved
    pair = functional_problem([("[1, 2]", "[2, 1]")], fn_name="swap")
    assert grade(pair, "class Solution:\n    def swap(self, p):\n        return (p[1], p[0])\n").solved
    nested = functional_problem([("[1, 2]", "[[2, 1]]")], fn_name="swap")
    # official: tuple -> list at the top level only, so a nested tuple is a wrong answer
    assert grade(nested, "class Solution:\n    def swap(self, p):\n        return [(p[1], p[0])]\n"
                 ).outcome is Outcome.WRONG_ANSWER


def test_functional_top_level_function_and_missing_method():
    problem = functional_problem([("3", "9"), ("4", "16")], fn_name="square")
    assert grade(problem, "def square(x):\n    return x * x\n").solved
    missing = grade(problem, "class Solution:\n    def other(self, x):\n        return x\n")
    assert missing.outcome is Outcome.RUNTIME_ERROR and missing.passed == 0
    assert "square" in missing.tests[0].detail


def test_functional_fresh_instance_per_test():
    # Each test runs in its own process (no process holds another test's input), so unlike the
    # official harness state does not carry over from one test to the next.
    problem = functional_problem([("1", "1"), ("1", "1"), ("1", "1")], fn_name="bump")
    code = ("class Solution:\n    def __init__(self):\n        self.calls = 0\n"
            "    def bump(self, x):\n        self.calls += x\n        return self.calls\n")
    assert grade(problem, code).solved


def test_functional_crash_mid_run_continues_with_fresh_process():
    problem = functional_problem([("1", "1"), ("0", "0"), ("2", "2")], fn_name="f")
    code = ("import ctypes\nclass Solution:\n    def f(self, x):\n"
            "        if x == 0:\n            ctypes.string_at(0)\n        return x\n")
    verdict = grade(problem, code)
    assert [t.outcome for t in verdict.tests] == [Outcome.PASSED, Outcome.RUNTIME_ERROR, Outcome.PASSED]
    assert "SIGSEGV" in verdict.tests[1].detail


def test_functional_missing_fn_name_is_a_data_error():
    problem = Problem("x", "t", "s", "leetcode", "easy", "", "class Solution: ...", None, (),
                      (TestCase("1", "1", Kind.FUNCTIONAL),))
    with pytest.raises(DataError):
        grade(problem, "class Solution:\n    pass\n")


def test_time_limit_stops_remaining_tests():
    problem = stdin_problem([("1", "1"), ("0", "0"), ("1", "1"), ("1", "1")])
    code = "x = int(input())\nwhile x == 0:\n    pass\nprint(x)\n"
    verdict = grade(problem, code, timeout_s=1.0)
    assert [t.outcome for t in verdict.tests] == [Outcome.PASSED] + [Outcome.TIME_LIMIT] * 3
    assert verdict.outcome is Outcome.TIME_LIMIT and verdict.passed == 1
    assert "not run" in verdict.tests[3].detail


def test_grade_many_keeps_order_and_agrade_works():
    codes = ["print(int(input().split()[0]) + int(input().split()[0]) if False else 0)",
             "a, b = map(int, input().split())\nprint(a + b)\n", None]
    verdicts = grade_many([(ADD, c) for c in codes], workers=2)
    assert [v.outcome for v in verdicts] == [Outcome.WRONG_ANSWER, Outcome.PASSED, Outcome.NO_CODE]

    async def both():
        return await asyncio.gather(agrade(ADD, codes[1]), agrade(ADD, "print(0)"))
    first, second = asyncio.run(both())
    assert first.solved and not second.solved


def test_grade_many_starts_the_most_work_first_and_answers_in_input_order(monkeypatch):
    one = stdin_problem([("1 2", "3")], pid="one")
    three = stdin_problem([("1 2", "3"), ("2 2", "4"), ("5 5", "10")], pid="three")
    three_long = stdin_problem([("1 2", "3"), ("2 2", "4"), ("5 5" + " " * 50, "10")], pid="three_long")
    two = stdin_problem([("1 2", "3"), ("2 2", "4")], pid="two")
    pairs = [(one, "x"), (three, "x"), (two, "x"), (three_long, "x"), (one, "y")]
    # most selected tests first, then most input bytes; ties keep the listed order
    assert largest_first(pairs) == [3, 1, 2, 0, 4]
    assert largest_first(pairs, max_tests=2) == [1, 2, 3, 0, 4]  # the first two tests count: equal bytes
    assert largest_first(pairs, tests="public") == [0, 1, 2, 3, 4]  # no public tests anywhere: listed order
    # grade_many starts them in that order (one worker: one at a time; the per-program grader
    # replaced by a recorder: the scheduling is what is tested here)
    import lcb.grading as grading
    started = []
    real = grading.grade
    monkeypatch.setattr(grading, "grade", lambda problem, code, **_: started.append((problem.id, code)) or real(problem, None))
    grading.grade_many(pairs, workers=1)
    monkeypatch.undo()
    assert started == [(pairs[i][0].id, pairs[i][1]) for i in [3, 1, 2, 0, 4]]
    # the verdicts still come back in input order although they started in another
    add = "a, b = map(int, input().split())\nprint(a + b)\n"
    codes = [add, "print(0)", add, "print(0)", None]
    verdicts = grade_many([(p, c) for (p, _), c in zip(pairs, codes, strict=True)], workers=2)
    assert [(v.problem_id, v.outcome) for v in verdicts] == [
        ("one", Outcome.PASSED), ("three", Outcome.WRONG_ANSWER), ("two", Outcome.PASSED),
        ("three_long", Outcome.WRONG_ANSWER), ("one", Outcome.NO_CODE)]


def test_functional_cpu_budget_is_per_test_not_per_process():
    # nine tests of 0.5 s CPU each share one process; a per-process CPU limit of
    # ceil(timeout) + 1 = 4 s would kill the ninth test
    problem = functional_problem([(str(i), str(i)) for i in range(9)], fn_name="spin")
    code = ("import time\nclass Solution:\n    def spin(self, x):\n        end = time.process_time() + 0.5\n"
            "        while time.process_time() < end:\n            pass\n        return x\n")
    verdict = grade(problem, code, timeout_s=3.0)
    assert verdict.solved, verdict.tests
