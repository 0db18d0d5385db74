"""Our grader vs LiveCodeBench's own verdicts on real release_v1 rows (shared data, skipped if absent).

Every solution the official harness accepted on the public tests must pass here, and every one
it rejected must fail here, except the explicit, explained differences below.
"""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path

import pytest

from lcb.grading import grade, grade_many
from lcb.rows import problem_from_row
from lcb.verdict import Outcome

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "lcb-real"
MODELS = {"O1-Mini": "submissions_O1-Mini-2024-09-12_eval_all.v1.jsonl",
          "O1-Preview": "submissions_O1-Preview-2024-09-12_eval_all.v1.jsonl"}

# Official rejects, we accept: artefacts of the official in-process stdin emulation, which we
# deliberately do not reproduce (we run real scripts; see lcb/grading.py).
KNOWN_DIFFERENCES = {
    ("abc301_b", "O1-Preview"): "reads input with open(0); the official harness mocks sys.stdin "
                                "and open() but the prelude bound the real open, so it reads an "
                                "empty stdin and crashes",
    ("abc303_d", "O1-Mini"): "calls sys.stdin.readline() then sys.stdin.read(); the official mock "
                             "returns the WHOLE input from read() (no shared position), so the "
                             "first line is read twice",
    ("abc342_d", "O1-Preview"): "prints from a threading.Thread started at module level; the "
                                "official capture ends when the wrapped function returns, before "
                                "the thread prints",
}
SLOW_RETRY_TIMEOUT_S = 40.0


def _jsonl(name: str) -> list[dict]:
    with open(SHARED / name, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@pytest.fixture(scope="module")
def data():
    if not (SHARED / "official_public_verdicts.jsonl").exists():
        pytest.skip("shared lcb-real data not available")
    problems = {r["question_id"]: problem_from_row(r, decode_private=False)
                for r in _jsonl("release_v1_rows.jsonl")}
    codes = {(r["question_id"], model): r["code_list"][0]
             for model, name in MODELS.items() for r in _jsonl(name)}
    return problems, codes, _jsonl("official_public_verdicts.jsonl")


def test_public_verdicts_match_official(data):
    problems, codes, official = data
    items = [(problems[o["question_id"]], codes[(o["question_id"], o["model"])]) for o in official]
    verdicts = grade_many(items, workers=os.cpu_count(), tests="public")
    agreement = collections.Counter()
    unexplained, explained, slow = [], set(), []
    for record, verdict in zip(official, verdicts):
        key = (record["question_id"], record["model"])
        ours, theirs = verdict.solved, bool(record["official_public_pass"])
        agreement[(record["platform"], ours == theirs)] += 1
        if ours == theirs:
            continue
        if key in KNOWN_DIFFERENCES and ours and not theirs:
            explained.add(key)
        elif theirs and verdict.outcome is Outcome.TIME_LIMIT:
            slow.append(key)  # a hardware-speed question, settled below without load
        else:
            unexplained.append((key, theirs, verdict.outcome.value, verdict.feedback[:300]))
    for key in slow:  # accepted officially, too slow here under load: its output must be right
        retry = grade(problems[key[0]], codes[key], tests="public", timeout_s=SLOW_RETRY_TIMEOUT_S)
        if not retry.solved:
            unexplained.append((key, True, retry.outcome.value, retry.feedback[:300]))
    summary = {f"{platform} {'agree' if same else 'differ'}": n for (platform, same), n in sorted(agreement.items())}
    print(f"\nparity on public tests: {summary}; known differences {sorted(explained)}; slow here {slow}")
    assert not unexplained, f"disagreements with the official harness: {unexplained}"
    assert explained == set(KNOWN_DIFFERENCES), "a documented difference no longer occurs: update the list"
    assert sum(agreement.values()) == len(official) == 540


def test_1873_A_hidden_tests_end_to_end(data):
    _problems, codes, _official = data
    rows = _jsonl("release_v1_rows_with_private_tests.jsonl")
    problem = problem_from_row(rows[0])  # decodes the base64/zlib/pickle private tests
    assert problem.id == "1873_A" and len(problem.private_tests) == 4
    verdicts = grade_many([(problem, codes[("1873_A", m)]) for m in MODELS], workers=2)
    assert all(v.solved and v.total == 4 for v in verdicts), [v.feedback for v in verdicts]
    wrong = grade(problem, "t = int(input())\nfor _ in range(t):\n    input()\n    print('YES')\n")
    assert wrong.outcome is Outcome.WRONG_ANSWER and "hidden" in wrong.feedback
