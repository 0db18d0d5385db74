"""Contest-date windows: lcb.data's after/before filters and the team runner's --after/--before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lcb.data import DateWindow, load_problems
from lcb.errors import DataError
from lcb.rows import encode_test_blob

SHARED = Path(__file__).resolve().parents[2].parent / "shared"


def row(qid: str, date: str) -> dict:
    tests = [{"input": "1\n", "output": "1\n", "testtype": "stdin"}]
    return {"question_title": qid, "question_content": "echo", "platform": "atcoder", "question_id": qid,
            "contest_id": "c", "contest_date": date, "starter_code": "", "difficulty": "easy",
            "public_test_cases": json.dumps(tests), "private_test_cases": encode_test_blob(tests), "metadata": "{}"}


@pytest.fixture
def rows_file(tmp_path: Path) -> Path:
    path = tmp_path / "rows.jsonl"
    dates = {"a": "2023-05-01T00:00:00", "b": "2023-12-31T00:00:00", "c": "2024-01-01T00:00:00",
             "d": "2024-03-15T00:00:00", "e": ""}
    path.write_text("\n".join(json.dumps(row(q, d)) for q, d in dates.items()) + "\n", encoding="utf-8")
    return path


def test_after_and_before_are_strict_days(rows_file: Path, tmp_path: Path) -> None:
    assert load_problems(str(rows_file), after="2023-12-31", cache_dir=tmp_path).ids == ("c", "d")
    assert load_problems(str(rows_file), before="2024-01-01", cache_dir=tmp_path).ids == ("a", "b")
    assert load_problems(str(rows_file), after="2023-05-01", before="2024-03-15", cache_dir=tmp_path).ids == ("b", "c")
    # No window: every row, also the undated one.
    assert load_problems(str(rows_file), cache_dir=tmp_path).ids == ("a", "b", "c", "d", "e")
    # Requested ids outside the window are dropped like other filtered rows.
    assert load_problems(str(rows_file), only=["a", "d"], after="2024-01-01", cache_dir=tmp_path).ids == ("d",)


def test_bad_dates_are_one_line_errors(rows_file: Path) -> None:
    with pytest.raises(DataError, match="ISO date"):
        load_problems(str(rows_file), after="March 2024")
    assert DateWindow(after="2024-01-01").contains("2024-01-02T00:00:00")
    assert not DateWindow(after="2024-01-01").contains("not a date")


def test_runner_after_before_parity(rows_file: Path) -> None:
    from topologies import runner

    args = runner.build_parser("single").parse_args(["--data", str(rows_file), "--after", "2023-12-31",
                                                     "--before", "2024-03-15"])
    assert runner.is_batch(args)
    assert runner.load(args).ids == ("c",)


def test_real_rows_window_by_contest_date(tmp_path: Path) -> None:
    path = SHARED / "lcb-real" / "release_v1_rows.jsonl"
    if not path.is_file():
        pytest.skip("shared LCB rows not available")
    every = load_problems(str(path), cache_dir=tmp_path)
    late = load_problems(str(path), after="2023-12-31", cache_dir=tmp_path)
    assert 0 < len(late.ids) < len(every.ids)
    assert all(p.contest_date[:10] > "2023-12-31" for p in late.problems)
    assert {p.id for p in every.problems if p.contest_date[:10] > "2023-12-31"} == set(late.ids)
