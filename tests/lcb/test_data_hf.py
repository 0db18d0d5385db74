"""The hub source, with the network stood in for by local files (monkeypatched download)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import lcb.data as data
from lcb.data import RELEASE_FILES, load_problems, release_files
from lcb.errors import DataError
from lcb.rows import encode_test_blob

REPO = Path(__file__).resolve().parents[2]


def row(qid: str) -> dict:
    tests = [{"input": "1\n", "output": "1\n", "testtype": "stdin"}]
    return {
        "question_title": qid, "question_content": "echo", "platform": "atcoder", "question_id": qid,
        "contest_id": "c", "contest_date": "2024-01-01T00:00:00", "starter_code": "",
        "difficulty": "easy", "public_test_cases": json.dumps(tests),
        "private_test_cases": encode_test_blob(tests * 4), "metadata": "{}",
    }


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    """Release file k holds rows r{k}_0, r{k}_1; records which files were 'downloaded'."""
    files = {}
    for k, name in enumerate(RELEASE_FILES, 1):
        path = tmp_path / "hub" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text("".join(json.dumps(row(f"r{k}_{i}")) + "\n" for i in range(2)))
        files[name] = path
    calls: list[str] = []

    def download(filename: str) -> Path:
        calls.append(filename)
        return files[filename]

    monkeypatch.setattr(data, "_download_release_file", download)
    return calls


def test_release_table():
    assert release_files("release_v1") == ("test.jsonl",)
    assert release_files("release_v3") == ("test.jsonl", "test2.jsonl", "test3.jsonl")
    assert release_files("release_latest") == RELEASE_FILES and len(RELEASE_FILES) == 6
    assert release_files("v4") == ("test4.jsonl",)
    assert release_files("v2_v4") == ("test2.jsonl", "test3.jsonl", "test4.jsonl")


@pytest.mark.parametrize("tag", ["release_v7", "v0", "v3_v2", "latest", "v1_v1", ""])
def test_unknown_release_is_one_line_error(tag):
    with pytest.raises(DataError) as info:
        load_problems("hf", release=tag)
    message = str(info.value)
    assert "\n" not in message and "release_latest" in message and "vA_vB" in message


def test_cumulative_release_reads_files_in_order(fake_hub, tmp_path):
    result = load_problems("hf", release="release_v2", cache_dir=tmp_path / "c")
    assert result.ids == ("r1_0", "r1_1", "r2_0", "r2_1")
    assert fake_hub == ["test.jsonl", "test2.jsonl"]
    assert "release_v2" in result.source_description
    assert (tmp_path / "c" / "release_v2" / "r2_1.json").is_file()  # cache keyed by release


def test_single_increment_and_range(fake_hub, tmp_path):
    assert load_problems("hf", release="v3", cache_dir=tmp_path).ids == ("r3_0", "r3_1")
    assert load_problems("hf", release="v5_v6", cache_dir=tmp_path).ids == ("r5_0", "r5_1", "r6_0", "r6_1")


def test_later_files_not_downloaded_when_window_is_full(fake_hub, tmp_path):
    result = load_problems("hf", release="release_latest", limit=2, cache_dir=tmp_path)
    assert result.ids == ("r1_0", "r1_1") and fake_hub == ["test.jsonl"]


def test_only_stops_downloading_once_found(fake_hub, tmp_path):
    result = load_problems("hf", release="release_latest", only=["r2_1", "r1_0"], cache_dir=tmp_path)
    assert result.ids == ("r2_1", "r1_0") and fake_hub == ["test.jsonl", "test2.jsonl"]


def test_only_unknown_id_in_hub(fake_hub, tmp_path):
    with pytest.raises(DataError, match="r9_9"):
        load_problems("hf", release="release_v1", only=["r9_9"], cache_dir=tmp_path)


def test_real_download_offline_is_a_clear_error(tmp_path):
    # The real huggingface_hub with no network allowed and an empty cache (subprocess, so the
    # hub library reads these variables at import).
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    code = (
        "from lcb.data import load_problems\n"
        "from lcb.errors import DataError\n"
        "try:\n"
        "    load_problems('hf', release='release_v1', limit=1)\n"
        "except DataError as exc:\n"
        "    print(exc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "cannot be reached" in proc.stdout and "--data" in proc.stdout
