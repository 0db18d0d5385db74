"""The built-in problems: reproducible LCB rows whose tests the reference programs confirm."""

from __future__ import annotations

import json
import re

import pytest

from lcb.builtin import PROBLEMS_FILE, load_solutions
from lcb.builtin.build import ALL_PROBLEMS, main as build_main, stale_files
from lcb.data import DEMO_IDS, load_problems
from lcb.rows import decode_test_blob

FIELDS = ("question_title", "question_content", "platform", "question_id", "contest_id",
          "contest_date", "starter_code", "difficulty", "public_test_cases",
          "private_test_cases", "metadata")
# Shapes of real LCB ids: LeetCode numbers, Codeforces 1873_A, AtCoder abc301_a / arc189_d.
LCB_ID = re.compile(r"^(\d+|\d+_[A-Z]\d?|(abc|arc|agc)\d+_[a-z])$")


def rows() -> list[dict]:
    return [json.loads(line) for line in PROBLEMS_FILE.read_text(encoding="utf-8").splitlines()]


def test_files_are_reproducible_from_definitions():
    # Content, not bytes: zlib builds may compress the hidden-test blobs differently.
    assert stale_files() == []
    assert build_main(["--check"]) == 0


def test_check_detects_an_edited_file(tmp_path, monkeypatch):
    import lcb.builtin.build as build

    edited = tmp_path / "problems.jsonl"
    edited.write_text(PROBLEMS_FILE.read_text(encoding="utf-8").replace("Stacked Crates", "Crates"))
    monkeypatch.setattr(build, "PROBLEMS_FILE", edited)
    monkeypatch.setattr(build, "SOLUTIONS_FILE", tmp_path / "missing.json")
    assert stale_files() == ["problems.jsonl", "missing.json"]
    assert build_main(["--check"]) == 1


def test_rows_are_real_lcb_rows():
    for row in rows():
        assert tuple(row) == FIELDS and all(isinstance(v, str) for v in row.values())
        qid = row["question_id"]
        public = json.loads(row["public_test_cases"])
        assert public and all(set(t) == {"input", "output", "testtype"} for t in public)
        blob = row["private_test_cases"]
        with pytest.raises(json.JSONDecodeError):
            json.loads(blob)  # compressed, as in newer LCB rows
        hidden = decode_test_blob(blob)
        assert len(hidden) >= 4, qid
        meta = json.loads(row["metadata"])
        functional = bool(row["starter_code"].strip())
        kinds = {t["testtype"] for t in public + hidden}
        assert kinds == {"functional" if functional else "stdin"}, qid
        if functional:
            assert meta == {"func_name": meta["func_name"]} and f"def {meta['func_name']}(" in row["starter_code"]
            assert row["platform"] == "leetcode" and "import" not in row["starter_code"]
        else:
            assert meta == {} and row["platform"] in {"atcoder", "codeforces"}
        assert row["difficulty"] in {"easy", "medium", "hard"}
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}", row["contest_date"])
        assert not LCB_ID.match(qid), qid


def test_coverage_of_modes_difficulties_and_platforms():
    all_rows = rows()
    assert len(all_rows) >= 14
    assert [r["question_id"] for r in all_rows if r["question_id"] in DEMO_IDS] == ["demo_stdin", "demo_functional"]
    assert {r["difficulty"] for r in all_rows} == {"easy", "medium", "hard"}
    assert {r["platform"] for r in all_rows} == {"atcoder", "codeforces", "leetcode"}
    for mode in (True, False):
        tiers = {r["difficulty"] for r in all_rows if bool(r["starter_code"].strip()) is mode}
        assert tiers == {"easy", "medium", "hard"}
    multi_arg = [r for r in all_rows if r["starter_code"] and
                 "\n" in json.loads(r["public_test_cases"])[0]["input"]]
    assert len(multi_arg) >= 3


def test_demo_functional_matches_the_brief():
    (row,) = [r for r in rows() if r["question_id"] == "demo_functional"]
    assert row["starter_code"].startswith("class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:")
    assert json.loads(row["metadata"]) == {"func_name": "twoSum"}


def test_statement_examples_are_the_public_tests():
    for problem in load_problems().problems:
        for test in problem.public_tests:
            if problem.is_functional:
                assert json.dumps(json.loads(test.output), separators=(",", ":")) in problem.statement
            else:
                assert test.input.strip() in problem.statement and test.output.strip() in problem.statement


def test_solutions_file_covers_every_problem():
    sols = load_solutions()
    assert set(sols) == {p.id for p in ALL_PROBLEMS}
    assert all(s["correct"] != s["wrong"] for s in sols.values())
    assert any("slow" in s for s in sols.values())


@pytest.fixture(scope="module")
def graded():
    grading = pytest.importorskip("lcb.grading")
    problems = load_problems().problems
    sols = load_solutions()
    correct = grading.grade_many([(p, sols[p.id]["correct"]) for p in problems], tests="all", workers=2)
    wrong = grading.grade_many([(p, sols[p.id]["wrong"]) for p in problems], tests="hidden", workers=2)
    return problems, correct, wrong


def test_every_correct_solution_passes_every_test(graded):
    problems, correct, _ = graded
    failures = {p.id: (v.outcome.value, v.feedback) for p, v in zip(problems, correct) if not v.solved}
    assert failures == {}
    assert all(v.total == len(p.public_tests) + len(p.private_tests) for p, v in zip(problems, correct))


def test_every_wrong_solution_fails_a_hidden_test(graded):
    problems, _, wrong = graded
    assert [p.id for p, v in zip(problems, wrong) if v.solved] == []
    assert {v.outcome.value for v in wrong} == {"wrong_answer"}


def test_slow_solution_times_out_on_a_hidden_test():
    grading = pytest.importorskip("lcb.grading")
    sols = load_solutions()
    slow_ids = [pid for pid, s in sols.items() if "slow" in s]
    for problem in load_problems(only=slow_ids).problems:
        fast = grading.grade(problem, sols[problem.id]["correct"], timeout_s=1.0)
        assert fast.solved, fast.feedback
        slow = grading.grade(problem, sols[problem.id]["slow"], timeout_s=1.0)
        assert slow.outcome.value == "time_limit" and slow.passed >= 1
