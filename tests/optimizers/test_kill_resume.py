"""SIGKILL a job process during optimize, validate and test; the same command must then finish
with the result of an uninterrupted run, without charging any rollout twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from job_support import team_script
from optimizers.journal import read_jsonl, read_sealed, without_keys

ENTRY = Path(__file__).resolve().parent / "job_entry.py"
REPO = Path(__file__).resolve().parents[2]
# A method that spends 18 charged rollouts (seed + 2 variants on 6 train problems).
OVERRIDES = {"method": "scripted_search", "budget": 18, "method_params": {"variants": 2}, "concurrency": 2}
VOLATILE = {"sha256", "elapsed_seconds", "optimization_sha256"}


def stable(value: Any) -> Any:
    return without_keys(value, VOLATILE)


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    from topologies.scripted import ScriptedServer

    # Latency keeps each phase running long enough to be killed in the middle of it.
    with ScriptedServer(team_script(latency_s=0.15)) as srv:
        yield srv


def launch(out: Path, base_url: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, str(ENTRY), str(out), base_url, json.dumps(OVERRIDES)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def finish(out: Path, base_url: str) -> dict[str, Any]:
    proc = launch(out, base_url)
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr[-3000:]
    line = json.loads(stdout.strip().splitlines()[-1])
    assert line["status"] == "completed"
    return read_sealed(out / "result.json")


@pytest.fixture(scope="module")
def uninterrupted(server: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return finish(tmp_path_factory.mktemp("reference") / "job", server.base_url)


def lines(paths: Iterator[Path], needle: str = "") -> int:
    return sum(1 for path in paths for line in path.read_text().splitlines() if needle in line)


def in_optimize(out: Path) -> bool:
    attempts = out / "optimization" / "attempts.jsonl"
    return attempts.exists() and lines(iter([attempts])) >= 5


def in_validate(out: Path) -> bool:
    return (out / "optimization.json").exists() and lines((out / "evaluations").glob("*.attempts.jsonl"),
                                                           '"phase": "val"') >= 2


def in_test(out: Path) -> bool:
    return (out / "selection.json").exists() and lines((out / "evaluations").glob("*.attempts.jsonl"),
                                                        '"phase": "test"') >= 2


KILL_POINTS: dict[str, tuple[Callable[[Path], bool], str]] = {
    "optimize": (in_optimize, "optimization.json"),
    "validate": (in_validate, "selection.json"),
    "test": (in_test, "test.json"),
}


@pytest.mark.parametrize("phase", list(KILL_POINTS))
def test_kill_and_resume(phase: str, server: Any, uninterrupted: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "job"
    reached, not_yet_sealed = KILL_POINTS[phase]
    proc = launch(out, server.base_url)
    deadline = time.monotonic() + 180
    try:
        while not reached(out):
            assert proc.poll() is None, f"the job ended before reaching {phase}: {proc.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, f"never reached the middle of {phase}"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate()
    assert not (out / not_yet_sealed).exists(), f"killed too late: {not_yet_sealed} was already sealed"
    assert not (out / "result.json").exists()

    resumed = finish(out, server.base_url)
    assert stable(resumed) == stable(uninterrupted)
    charged = [
        (a["candidate_id"], a["problem_id"], a["phase"], a["sample"])
        for a in read_jsonl(out / "optimization" / "attempts.jsonl")
        if a["charged"]
    ]
    assert len(charged) == len(set(charged)) == OVERRIDES["budget"]
    rollouts = [(r["candidate_id"], r["problem_id"]) for r in read_jsonl(out / "optimization" / "rollouts.jsonl")]
    assert len(rollouts) == len(set(rollouts)) == OVERRIDES["budget"]
    curve = [(r["reason"], r["charged_rollouts"]) for r in read_jsonl(out / "optimization" / "learning_curve.jsonl")]
    assert curve == [("initial_state", 0), ("grid", 10), ("stop", 18)]
    for evaluation in (out / "evaluations").glob("*.attempts.jsonl"):
        finals = [a["problem_id"] for a in read_jsonl(evaluation) if a["final"]]
        assert len(finals) == len(set(finals))  # no evaluation item run to the end twice
