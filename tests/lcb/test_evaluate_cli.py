"""`python -m lcb.evaluate` as a user runs it: a subprocess, real files, the real grader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lcb.builtin import PROBLEMS_FILE, load_solutions

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str, env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lcb.evaluate", *args],
        cwd=REPO, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})},
    )


def write_lines(path: Path, objs: list, extra: tuple[str, ...] = ()) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs) + "".join(x + "\n" for x in extra))
    return path


def assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def builtin_row(qid: str) -> dict:
    for line in PROBLEMS_FILE.read_text().splitlines():
        row = json.loads(line)
        if row["question_id"] == qid:
            return row
    raise KeyError(qid)


# --------------------------------------------------------------------------- bad input


def test_help_is_instant_and_light():
    start = time.monotonic()
    proc = run_cli("--help")
    assert proc.returncode == 0 and "--data" in proc.stdout and "--tests" in proc.stdout
    assert time.monotonic() - start < 5
    probe = subprocess.run(
        [sys.executable, "-c",
         "import sys, lcb.evaluate as e; e._parser();"
         "print(sorted(m for m in ('huggingface_hub', 'pyarrow', 'lcb.grading', 'lcb.data') if m in sys.modules))"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert probe.stdout.strip() == "[]", probe.stdout + probe.stderr


def test_missing_predictions_file(tmp_path):
    assert_one_line_error(run_cli(str(tmp_path / "nope.jsonl")), "not found", "nope.jsonl")


def test_malformed_prediction_line(tmp_path):
    path = write_lines(tmp_path / "p.jsonl", [{"id": "demo_stdin", "code": "print(1)"}], ("{oops",))
    assert_one_line_error(run_cli(str(path)), "line 2", "not valid JSON")


@pytest.mark.parametrize(
    "obj, fragment",
    [({"code": "x"}, "'id'"), ({"id": "demo_stdin"}, "'code' or an 'output'"),
     ({"id": "demo_stdin", "code": 5}, "'code' must be"), ([1, 2], "JSON object")],
)
def test_bad_prediction_objects(tmp_path, obj, fragment):
    path = write_lines(tmp_path / "p.jsonl", [obj])
    assert_one_line_error(run_cli(str(path)), "line 1", fragment)


def test_duplicate_and_empty_predictions(tmp_path):
    dup = write_lines(tmp_path / "d.jsonl", [{"id": "demo_stdin", "code": "a"}] * 2)
    assert_one_line_error(run_cli(str(dup)), "duplicate id", "line 2")
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n")
    assert_one_line_error(run_cli(str(empty)), "no predictions")


def test_unknown_id(tmp_path):
    path = write_lines(tmp_path / "p.jsonl", [{"id": "demo_stdin", "code": "x"}, {"id": "9999_Z", "code": "x"}])
    assert_one_line_error(run_cli(str(path)), "9999_Z", "not in")


def test_missing_data_file(tmp_path):
    path = write_lines(tmp_path / "p.jsonl", [{"id": "demo_stdin", "code": "x"}])
    assert_one_line_error(run_cli(str(path), "--data", str(tmp_path / "rows.jsonl")), "not found")


def test_malformed_data_line(tmp_path):
    data = write_lines(tmp_path / "rows.jsonl", [builtin_row("demo_stdin")], ("not json at all",))
    path = write_lines(tmp_path / "p.jsonl", [{"id": "never_there", "code": "x"}])
    assert_one_line_error(run_cli(str(path), "--data", str(data)), "line 2", "rows.jsonl")


def test_undecodable_blob(tmp_path):
    row = builtin_row("demo_stdin")
    row["private_test_cases"] = "eJz!!!corrupt###"
    data = write_lines(tmp_path / "rows.jsonl", [row])
    path = write_lines(tmp_path / "p.jsonl", [{"id": "demo_stdin", "code": "x"}])
    assert_one_line_error(run_cli(str(path), "--data", str(data)), "demo_stdin", "undecodable")


def test_missing_func_name(tmp_path):
    row = builtin_row("demo_functional")
    row["metadata"] = "{}"
    data = write_lines(tmp_path / "rows.jsonl", [row])
    path = write_lines(tmp_path / "p.jsonl", [{"id": "demo_functional", "code": "x"}])
    assert_one_line_error(run_cli(str(path), "--data", str(data)), "func_name")


def test_hub_unreachable(tmp_path):
    path = write_lines(tmp_path / "p.jsonl", [{"id": "1873_A", "code": "x"}])
    proc = run_cli(str(path), "--data", "hf", env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})
    assert_one_line_error(proc, "cannot be reached", "--data PATH", "--data builtin")


def test_unknown_release(tmp_path):
    path = write_lines(tmp_path / "p.jsonl", [{"id": "1873_A", "code": "x"}])
    assert_one_line_error(run_cli(str(path), "--data", "hf", "--release", "v9"), "unknown release")


def test_no_hidden_tests_points_to_public(tmp_path):
    row = builtin_row("demo_stdin")
    row["private_test_cases"] = ""
    data = write_lines(tmp_path / "rows.jsonl", [row])
    path = write_lines(tmp_path / "p.jsonl", [{"id": "demo_stdin", "code": "x"}])
    assert_one_line_error(run_cli(str(path), "--data", str(data)), "no hidden tests", "--tests public")


def test_bad_workers(tmp_path):
    path = write_lines(tmp_path / "p.jsonl", [{"id": "demo_stdin", "code": "x"}])
    assert_one_line_error(run_cli(str(path), "--workers", "0"), "--workers")


# --------------------------------------------------------------------------- grading runs


def test_grades_builtin_predictions(tmp_path):
    pytest.importorskip("lcb.grading")
    sols = load_solutions()
    predictions = [
        {"id": "demo_stdin", "code": sols["demo_stdin"]["correct"], "latency_s": 2.5},
        {"id": "demo_functional", "output": "Sure:\n```python\n" + sols["demo_functional"]["correct"] + "```\n"},
        {"id": "builtin_kth_distinct", "code": sols["builtin_kth_distinct"]["wrong"]},
        {"id": "builtin_trapped_water", "output": "I don't know."},
        {"id": "builtin_count_prefixed", "code": None},
    ]
    pred = write_lines(tmp_path / "p.jsonl", predictions)
    out = tmp_path / "out" / "records.jsonl"
    proc = run_cli(str(pred), "--out", str(out), "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    stdout_lines = proc.stdout.strip().splitlines()
    assert len(stdout_lines) == 1
    summary = json.loads(stdout_lines[0])
    assert summary["n"] == 5 and summary["solved"] == 2 and summary["pass@1"] == pytest.approx(0.4)
    assert summary["n_with_code"] == 3 and summary["pass@1_with_code"] == pytest.approx(2 / 3)
    assert summary["tests"] == "hidden" and summary["data"] == "builtin"
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["id"] for r in records] == [p["id"] for p in predictions]
    assert [r["em"] for r in records] == [1, 1, 0, 0, 0]
    assert records[0]["latency_s"] == 2.5 and "extraction_rule" not in records[0]
    assert records[1]["extraction_rule"] == "labelled"
    assert records[2]["outcome"] == "wrong_answer" and records[2]["pass"] < records[2]["total"]
    assert records[3]["extraction_rule"] == "none" and records[3]["predicted_code"] is None
    # the sandbox layers each graded program ran under: in its record, and once in the summary
    layers = {r["isolation"] for r in records if r["predicted_code"]}
    assert len(layers) == 1 and "seccomp" in next(iter(layers)) and "isolation" not in records[4]
    assert summary["isolation"] == next(iter(layers)) and f"sandbox: {summary['isolation']}" in proc.stderr
    assert "pass@1 0.4000 (2/5)" in proc.stderr


def test_public_tests_on_real_rows(tmp_path):
    pytest.importorskip("lcb.grading")
    real = REPO.parent / "shared" / "lcb-real" / "release_v1_rows.jsonl"
    if not real.is_file():
        pytest.skip("shared LCB rows not available")
    code = (
        "t = int(input())\n"
        "for _ in range(t):\n"
        "    s = input().strip()\n"
        "    print('YES' if sum(a != b for a, b in zip(s, 'abc')) in (0, 2) else 'NO')\n"
    )
    pred = write_lines(tmp_path / "p.jsonl", [{"id": "1873_A", "code": code}])
    proc = run_cli(str(pred), "--data", str(real), "--tests", "public")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["pass@1"] == 1.0


def test_eval_ids_public_verdicts_match_official(tmp_path):
    """Recorded o1-mini answers to the 50 eval ids, graded end to end (extraction, loading,
    grading) on public tests, give LiveCodeBench's own public-test verdicts."""
    pytest.importorskip("lcb.grading")
    shared = REPO.parent / "shared" / "lcb-real"
    rows = shared / "release_v1_rows.jsonl"
    answers = shared / "submissions_O1-Mini-2024-09-12_eval_all.v1.jsonl"
    verdicts = shared / "official_public_verdicts.jsonl"
    if not (rows.is_file() and answers.is_file() and verdicts.is_file()):
        pytest.skip("shared LCB files not available")
    from lcb.data import load_eval_ids

    eval_ids = set(load_eval_ids())
    records = [json.loads(x) for x in answers.read_text().splitlines()]
    preds = [{"id": r["question_id"], "output": r["output_list"][0]} for r in records
             if r["question_id"] in eval_ids]
    official = {
        v["question_id"]: bool(v["official_public_pass"])
        for v in map(json.loads, verdicts.read_text().splitlines()) if "Mini" in v["model"]
    }
    out = tmp_path / "records.jsonl"
    proc = run_cli(str(write_lines(tmp_path / "p.jsonl", preds)), "--data", str(rows),
                   "--tests", "public", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    ours = {r["id"]: bool(r["em"]) for r in map(json.loads, out.read_text().splitlines())}
    assert len(ours) == 50
    assert {i: v for i, v in ours.items() if v != official[i]} == {}
