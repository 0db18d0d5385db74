from __future__ import annotations

import json
from pathlib import Path

import pytest

import lcb.data as data
from lcb.builtin import PROBLEMS_FILE
from lcb.data import (
    BUILTIN_SPLITS,
    DEMO_IDS,
    LoadResult,
    default_cache_dir,
    load_eval_ids,
    load_problems,
    load_split_ids,
)
from lcb.errors import DataError
from lcb.rows import encode_test_blob

SHARED = Path(__file__).resolve().parents[2].parent / "shared"


def builtin_rows() -> list[dict]:
    return [json.loads(line) for line in PROBLEMS_FILE.read_text(encoding="utf-8").splitlines()]


def write_jsonl(path: Path, rows: list, extra_lines: tuple[str, ...] = ()) -> Path:
    lines = [json.dumps(r) for r in rows] + list(extra_lines)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def small_row(qid: str, *, difficulty="easy", platform="atcoder", private=None, public=None, **over):
    tests = [{"input": "1\n", "output": "1\n", "testtype": "stdin"}]
    row = {
        "question_title": qid, "question_content": "echo", "platform": platform,
        "question_id": qid, "contest_id": "c", "contest_date": "2024-01-01T00:00:00",
        "starter_code": "", "difficulty": difficulty,
        "public_test_cases": json.dumps(tests if public is None else public),
        "private_test_cases": encode_test_blob(tests * 2) if private is None else private,
        "metadata": "{}",
    }
    row.update(over)
    return row


# --------------------------------------------------------------------------- built-in


def test_builtin_loads_all_in_file_order():
    result = load_problems()
    assert isinstance(result, LoadResult)
    assert result.ids == tuple(r["question_id"] for r in builtin_rows())
    assert len(result.problems) >= 14 and result.skipped == 0
    assert set(DEMO_IDS) <= set(result.ids)
    assert all(len(p.private_tests) >= 4 for p in result.problems)


def test_builtin_splits_are_disjoint_and_exist():
    ids = set(load_problems().ids)
    seen: set[str] = set()
    for name in ("train", "val", "test"):
        split = set(BUILTIN_SPLITS[name])
        assert split <= ids and not (split & seen)
        seen |= split
    assert [len(BUILTIN_SPLITS[k]) for k in ("train", "val", "test")] == [6, 4, 4]


def test_only_keeps_requested_order_and_lifts_limit():
    result = load_problems(only=["demo_functional", "demo_stdin", "demo_functional"], limit=1)
    assert result.ids == ("demo_functional", "demo_stdin")
    assert result.problems[0].fn_name == "twoSum" and result.problems[0].is_functional


def test_empty_only_reads_nothing(tmp_path):
    path = write_jsonl(tmp_path / "r.jsonl", [], ("{broken",))
    assert load_problems(str(path), only=[]).problems == ()


def test_only_unknown_ids_named():
    with pytest.raises(DataError, match=r"2 requested id\(s\).*nope1, nope2"):
        load_problems(only=["demo_stdin", "nope1", "nope2"])


def test_filters_then_window():
    rows = builtin_rows()
    easy = [r["question_id"] for r in rows if r["difficulty"] == "easy"]
    assert load_problems(difficulty="easy").ids == tuple(easy)
    assert load_problems(difficulty="EASY", offset=1, limit=2).ids == tuple(easy[1:3])
    leet = [r["question_id"] for r in rows if r["platform"] == "leetcode"]
    assert load_problems(platform="leetcode").ids == tuple(leet)
    hard_cf = [r["question_id"] for r in rows if r["platform"] == "codeforces" and r["difficulty"] == "hard"]
    assert load_problems(platform="codeforces", difficulty="hard").ids == tuple(hard_cf)
    assert load_problems(limit=0).problems == ()
    assert load_problems(offset=10_000).problems == ()
    with pytest.raises(DataError):
        load_problems(offset=-1)


def test_only_combined_with_filter():
    result = load_problems(only=["demo_stdin", "demo_functional"], platform="leetcode")
    assert result.ids == ("demo_functional",)


# --------------------------------------------------------------------------- local files


def test_local_jsonl_and_parquet_give_same_problems(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = builtin_rows()
    jsonl = write_jsonl(tmp_path / "rows.jsonl", rows)
    parquet = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    a = load_problems(str(jsonl), cache_dir=tmp_path / "cache")
    b = load_problems(str(parquet), cache_dir=tmp_path / "cache2")
    assert a.problems == b.problems == load_problems().problems
    assert "rows.parquet" in b.source_description
    only = load_problems(str(parquet), only=["demo_functional"], cache_dir=tmp_path / "c3")
    assert only.ids == ("demo_functional",)


def test_missing_and_unsupported_files(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_problems(str(tmp_path / "absent.jsonl"))
    other = tmp_path / "rows.csv"
    other.write_text("a,b\n")
    with pytest.raises(DataError, match="expected .jsonl or .parquet"):
        load_problems(str(other))
    bad_parquet = tmp_path / "bad.parquet"
    bad_parquet.write_text("not parquet")
    with pytest.raises(DataError, match="parquet"):
        load_problems(str(bad_parquet))


def test_malformed_line_named(tmp_path):
    path = write_jsonl(tmp_path / "r.jsonl", [small_row("a1"), small_row("a2")], ("{not json",))
    with pytest.raises(DataError, match="line 3 is not valid JSON"):
        load_problems(str(path), cache_dir=tmp_path)
    path2 = write_jsonl(tmp_path / "r2.jsonl", [small_row("a1")], ("[1, 2]",))
    with pytest.raises(DataError, match="line 2 is not a JSON object"):
        load_problems(str(path2), cache_dir=tmp_path)


def test_reading_stops_once_window_or_ids_are_complete(tmp_path):
    # A malformed last line is never reached: proof that rows are streamed, not read up front.
    path = write_jsonl(tmp_path / "r.jsonl", [small_row("a1"), small_row("a2")], ("{broken",))
    assert load_problems(str(path), limit=2, cache_dir=tmp_path).ids == ("a1", "a2")
    assert load_problems(str(path), only=["a1"], cache_dir=tmp_path).ids == ("a1",)


def test_missing_func_name_is_an_error(tmp_path):
    row = small_row("f1", starter_code="class Solution:\n    def f(self):\n        ", platform="leetcode")
    path = write_jsonl(tmp_path / "r.jsonl", [small_row("a1"), row])
    with pytest.raises(DataError, match="func_name"):
        load_problems(str(path), cache_dir=tmp_path)


def test_undecodable_blob_skipped_in_bulk_but_error_by_id(tmp_path):
    rows = [small_row("a1"), small_row("bad", private="!!!not-a-blob@@@"), small_row("a3")]
    path = write_jsonl(tmp_path / "r.jsonl", rows)
    bulk = load_problems(str(path), cache_dir=tmp_path / "c")
    assert bulk.ids == ("a1", "a3") and bulk.skipped == 1
    assert "bad" in bulk.skipped_reasons[0] and "undecodable" in bulk.skipped_reasons[0]
    with pytest.raises(DataError, match="row bad: undecodable"):
        load_problems(str(path), only=["a3", "bad"], cache_dir=tmp_path / "c")


def test_hidden_tests_of_wrong_shape_count_as_undecodable(tmp_path):
    bad = encode_test_blob([{"input": "1\n", "testtype": "stdin"}])
    path = write_jsonl(tmp_path / "r.jsonl", [small_row("a1"), small_row("shape", private=bad)])
    bulk = load_problems(str(path), cache_dir=tmp_path / "c")
    assert bulk.ids == ("a1",) and bulk.skipped == 1 and "hidden test 0" in bulk.skipped_reasons[0]
    with pytest.raises(DataError, match="row shape: undecodable"):
        load_problems(str(path), only=["shape"], cache_dir=tmp_path / "c")


def test_filters_apply_before_decoding(tmp_path):
    rows = [small_row("a1"), small_row("bad", difficulty="hard", private="!!!garbage@@@")]
    path = write_jsonl(tmp_path / "r.jsonl", rows)
    easy = load_problems(str(path), difficulty="easy", cache_dir=tmp_path)
    assert easy.ids == ("a1",) and easy.skipped == 0  # the bad row was never decoded
    assert load_problems(str(path), limit=1, cache_dir=tmp_path).skipped == 0
    assert load_problems(str(path), only=["a1"], cache_dir=tmp_path).skipped == 0


def test_rows_without_tests_are_skipped_and_counted(tmp_path):
    rows = [small_row("none", public=[], private=""), small_row("pub_only", private="")]
    path = write_jsonl(tmp_path / "r.jsonl", rows)
    result = load_problems(str(path), cache_dir=tmp_path)
    assert result.ids == ("pub_only",) and result.skipped == 1
    assert result.skipped_reasons == ("row none: no tests",)
    assert result.problems[0].private_tests == () and len(result.problems[0].public_tests) == 1
    by_id = load_problems(str(path), only=["none", "pub_only"], cache_dir=tmp_path)
    assert by_id.ids == ("pub_only",) and by_id.skipped == 1


def test_decode_private_false_leaves_hidden_tests_alone(tmp_path):
    rows = [small_row("a1", private="!!!garbage@@@")]
    path = write_jsonl(tmp_path / "r.jsonl", rows)
    result = load_problems(str(path), decode_private=False, cache_dir=tmp_path)
    assert result.ids == ("a1",) and result.problems[0].private_tests == ()


def test_plain_json_private_tests(tmp_path):
    tests = [{"input": "2\n", "output": "4\n", "testtype": "stdin"}] * 3
    path = write_jsonl(tmp_path / "r.jsonl", [small_row("p", private=json.dumps(tests))])
    result = load_problems(str(path), cache_dir=tmp_path / "cache")
    assert len(result.problems[0].private_tests) == 3
    assert not (tmp_path / "cache").exists()  # plain JSON is cheap: not cached


# --------------------------------------------------------------------------- cache


def test_decoded_tests_cached_and_checked_against_blob(tmp_path):
    path = write_jsonl(tmp_path / "r.jsonl", [small_row("q/1")])
    cache = tmp_path / "cache"
    first = load_problems(str(path), cache_dir=cache)
    cached = cache / "local" / "q_1.json"
    data_on_disk = json.loads(cached.read_text())
    assert data_on_disk["question_id"] == "q/1" and len(data_on_disk["tests"]) == 2
    # The cache is what a second load reads: edit it (same blob digest) and see the edit.
    data_on_disk["tests"] = data_on_disk["tests"][:1]
    cached.write_text(json.dumps(data_on_disk))
    assert len(load_problems(str(path), cache_dir=cache).problems[0].private_tests) == 1
    # A different blob under the same id is decoded again, not served stale.
    new_blob = encode_test_blob([{"input": "9\n", "output": "9\n", "testtype": "stdin"}] * 5)
    write_jsonl(path, [small_row("q/1", private=new_blob)])
    assert len(load_problems(str(path), cache_dir=cache).problems[0].private_tests) == 5
    assert first.problems[0].private_tests[0].input == "1\n"
    # A corrupt cache file is ignored.
    cached.write_text("{")
    assert len(load_problems(str(path), cache_dir=cache).problems[0].private_tests) == 5


def test_builtin_is_never_cached(tmp_path):
    load_problems(only=["demo_stdin"], cache_dir=tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_cache_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("LCB_GRID_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path / "tests"
    monkeypatch.delenv("LCB_GRID_CACHE")
    assert default_cache_dir() == Path.home() / ".cache" / "lcb-grid" / "tests"


def test_env_cache_used_by_default(monkeypatch, tmp_path):
    monkeypatch.setenv("LCB_GRID_CACHE", str(tmp_path / "root"))
    path = write_jsonl(tmp_path / "r.jsonl", [small_row("z1")])
    load_problems(str(path))
    assert (tmp_path / "root" / "tests" / "local" / "z1.json").is_file()


# --------------------------------------------------------------------------- id manifests


def test_eval_ids_and_splits():
    eval_ids = load_eval_ids()
    assert len(eval_ids) == 50 and eval_ids[0] == "1873_A" and eval_ids[-1] == "2855"
    assert data.EVAL_IDS == eval_ids
    splits = load_split_ids()
    assert {k: len(v) for k, v in splits.items()} == {"train": 150, "val": 50, "test": 50}
    assert tuple(splits["test"]) == eval_ids
    assert not set(splits["train"]) & set(splits["val"])
    assert not (set(splits["train"]) | set(splits["val"])) & set(eval_ids)
    raw = json.loads(data.SPLITS_FILE.read_text())
    assert raw["split_seed"] == 0 and raw["counts"] == {"train": 150, "val": 50, "test": 50}
    assert "abc343_e" in raw["note"] and "arc189_a" in raw["note"]


def test_builtin_ids_not_in_lcb_manifests():
    splits = load_split_ids()
    lcb_ids = set(splits["train"]) | set(splits["val"]) | set(splits["test"])
    assert not lcb_ids & set(load_problems().ids)


def test_bad_manifests(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_split_ids(tmp_path / "none.json")
    bad = tmp_path / "s.json"
    bad.write_text(json.dumps({"train": [], "val": "x", "test": []}))
    with pytest.raises(DataError, match="'val'"):
        load_split_ids(bad)
    with pytest.raises(DataError):
        load_eval_ids(bad)
    with pytest.raises(AttributeError):
        data.NOT_A_THING  # noqa: B018


# --------------------------------------------------------------------------- real rows (shared)


def real_rows_file(name: str) -> Path:
    path = SHARED / "lcb-real" / name
    if not path.is_file():
        pytest.skip(f"shared file {name} not available")
    return path


def test_real_release_v1_rows_keep_file_order(tmp_path):
    path = real_rows_file("release_v1_rows.jsonl")
    with path.open(encoding="utf-8") as handle:
        file_ids = tuple(json.loads(line)["question_id"] for line in handle if line.strip())
    result = load_problems(str(path), cache_dir=tmp_path)
    assert result.ids == file_ids and result.skipped == 0  # public tests only, all usable
    assert result.ids[:50] == load_eval_ids()
    functional = [p for p in result.problems if p.platform == "leetcode"]
    assert functional and all(p.fn_name and p.is_functional for p in functional)
    window = load_problems(str(path), offset=5, limit=3, cache_dir=tmp_path)
    assert window.ids == file_ids[5:8]
    picked = load_problems(str(path), only=["2855", "1873_A"], cache_dir=tmp_path)
    assert picked.ids == ("2855", "1873_A")


def test_real_row_with_compressed_private_tests(tmp_path):
    path = real_rows_file("release_v1_rows_with_private_tests.jsonl")
    result = load_problems(str(path), cache_dir=tmp_path)
    (problem,) = result.problems
    assert problem.id == "1873_A" and len(problem.private_tests) == 4
    assert (tmp_path / "local" / "1873_A.json").is_file()
    again = load_problems(str(path), cache_dir=tmp_path)
    assert again.problems == result.problems
