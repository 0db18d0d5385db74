from __future__ import annotations

import json
import os
import stat

import pytest

from lcb.problem import Problem
from lcb.records import format_table, make_record, summarize, write_jsonl_atomic, write_text_atomic
from lcb.verdict import Outcome, TestResult, Verdict


def problem(pid: str, difficulty: str = "easy", platform: str = "atcoder") -> Problem:
    return Problem(pid, "t", "s", platform, difficulty, "2024-01-01", "", None, (), ())


def verdict(pid: str, passed: int, total: int, outcome: Outcome = Outcome.PASSED) -> Verdict:
    tests = [TestResult(i, Outcome.PASSED, 0.01) for i in range(passed)]
    if passed < total:
        tests.append(TestResult(passed, outcome, 0.02, "expected 3 got 4 " + "x" * 1000))
    return Verdict(pid, outcome if passed < total else Outcome.PASSED, passed, total, tuple(tests), "")


def test_record_fields_and_em():
    rec = make_record(problem("a"), code="print(1)", verdict=verdict("a", 3, 3), latency_s=1.23456,
                      extraction_rule="labelled", attempt=2)
    assert list(rec)[:10] == ["id", "predicted_code", "pass", "total", "pass_rate", "em", "outcome",
                              "difficulty", "platform", "latency_s"]
    assert rec["em"] == 1 and rec["pass_rate"] == 1.0 and rec["outcome"] == "passed"
    assert rec["latency_s"] == 1.235 and rec["extraction_rule"] == "labelled" and rec["attempt"] == 2
    assert rec["first_failure"] is None
    json.dumps(rec)


def test_failed_record_keeps_truncated_first_failure():
    rec = make_record(problem("b"), code="x", verdict=verdict("b", 1, 4, Outcome.WRONG_ANSWER), latency_s=0)
    assert rec["em"] == 0 and rec["pass"] == 1 and rec["total"] == 4 and rec["pass_rate"] == 0.25
    assert rec["outcome"] == "wrong_answer"
    assert rec["first_failure"]["index"] == 1 and rec["first_failure"]["outcome"] == "wrong_answer"
    assert len(rec["first_failure"]["detail"]) <= 300
    assert "extraction_rule" not in rec


@pytest.mark.parametrize("code", [None, "", "   "])
def test_no_code_is_never_em(code):
    # Even a verdict that says "passed" cannot count without a program.
    rec = make_record(problem("c"), code=code, verdict=verdict("c", 2, 2), latency_s=0)
    assert rec["em"] == 0


def test_summary_math_and_groups():
    records = [
        make_record(problem("a", "easy", "atcoder"), code="x", verdict=verdict("a", 2, 2), latency_s=0),
        make_record(problem("b", "easy", "leetcode"), code="x", verdict=verdict("b", 0, 2, Outcome.RUNTIME_ERROR), latency_s=0),
        make_record(problem("c", "hard", "leetcode"), code=None, verdict=verdict("c", 0, 2, Outcome.NO_CODE), latency_s=0),
        make_record(problem("d", "", "leetcode"), code="x", verdict=verdict("d", 5, 5), latency_s=0),
    ]
    s = summarize(records)
    assert s["n"] == 4 and s["solved"] == 2 and s["pass@1"] == 0.5
    assert s["n_with_code"] == 3 and s["pass@1_with_code"] == pytest.approx(2 / 3)
    assert s["by_difficulty"] == {"easy": {"n": 2, "pass@1": 0.5}, "hard": {"n": 1, "pass@1": 0.0},
                                  "unknown": {"n": 1, "pass@1": 1.0}}
    assert s["by_platform"]["leetcode"] == {"n": 3, "pass@1": pytest.approx(1 / 3)}
    table = format_table(records, s)
    assert "pass@1 0.5000 (2/4)" in table and "no_code" in table
    assert table.count("\n") >= 4 + 2


def test_summary_of_nothing():
    s = summarize([])
    assert s["n"] == 0 and s["pass@1"] == 0.0 and s["pass@1_with_code"] == 0.0
    format_table([], s)


def test_atomic_writes(tmp_path):
    target = tmp_path / "deep" / "out.jsonl"
    write_jsonl_atomic(target, [{"a": 1}, {"b": "ü"}])
    assert [json.loads(x) for x in target.read_text(encoding="utf-8").splitlines()] == [{"a": 1}, {"b": "ü"}]
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o644
    write_text_atomic(target, "new")
    assert target.read_text() == "new"
    assert [p.name for p in target.parent.iterdir()] == ["out.jsonl"]  # no temp files left


def test_atomic_write_failure_leaves_old_file(tmp_path):
    target = tmp_path / "x.txt"
    target.write_text("old")

    class Boom:
        def __str__(self):
            raise RuntimeError("boom")

    with pytest.raises(TypeError):
        write_text_atomic(target, Boom())  # type: ignore[arg-type]
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.txt"]
