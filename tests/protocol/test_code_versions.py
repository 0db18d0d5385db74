"""Behaviour versions keep cached evaluations and job ids honest.

Every job id and the shared evaluation cache's keys contain ``lcb.version.SCORER_VERSION`` and
``topologies.version.TEAM_RUNTIME_VERSION``. These tests pin the behaviour behind each version
with a golden digest: grading a fixed set of programs, and every team's trajectory against a
scripted model. If a digest changes while its version does not, the test fails: bump the version
(so old caches and interrupted jobs are not reused), then record the new digest with

    LCB_GRID_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/protocol/test_code_versions.py
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

GOLDEN = Path(__file__).with_name("golden") / "code_versions.json"
UPDATE = os.environ.get("LCB_GRID_UPDATE_GOLDEN") == "1"
TEAM_PROBLEMS = ("demo_stdin", "demo_functional")
TOPOLOGIES = (("single", 1), ("independent", 2), ("sequential", 4), ("centralized", 2), ("decentralized", 2))


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def scorer_fingerprint() -> list[dict[str, Any]]:
    """Verdicts of every built-in problem's correct and wrong program, and of no program."""
    from lcb.builtin import load_solutions
    from lcb.data import load_problems
    from lcb.grading import grade_many

    problems = {p.id: p for p in load_problems("builtin").problems}
    solutions = load_solutions()
    items = [(problems[pid], solutions[pid][kind]) for pid in sorted(solutions) for kind in ("correct", "wrong")]
    items.append((problems[sorted(problems)[0]], None))
    verdicts = grade_many(items, workers=2)
    return [{"problem": v.problem_id, "outcome": v.outcome.value, "passed": v.passed, "total": v.total,
             "feedback": v.feedback} for v in verdicts]


def _trajectory_view(trajectory: Any) -> dict[str, Any]:
    """What a team run produced, without timings and with concurrent agents' messages in a
    canonical order (agents of one round may finish in any order)."""
    from topologies.teams.trajectory import trajectory_to_dict

    data = trajectory_to_dict(trajectory)
    data["extras"] = {k: v for k, v in data["extras"].items() if k != "wall_s"}
    for message in data["messages"]:
        message["tool_calls"] = [{k: v for k, v in c.items() if k != "id"} for c in message["tool_calls"]]
    data["messages"] = sorted(data["messages"], key=lambda m: json.dumps(m, sort_keys=True))
    return data


def team_fingerprint() -> list[dict[str, Any]]:
    """Every topology's trajectories on two built-in problems against a scripted model."""
    from lcb.data import load_problems
    from topologies.models import ModelConfig, make_client
    from topologies.prompts import default_team_spec
    from topologies.scripted import FunctionRule, Script, ScriptedServer, builtin_answers
    from topologies.teams import run_team
    from topologies.types import Decoding

    problems = {p.id: p for p in load_problems("builtin").problems}
    answer = builtin_answers(lambda request, problem_id: problem_id == "demo_stdin")
    server = ScriptedServer(Script([FunctionRule("solve", answer)], default="I cannot help.")).start()
    try:
        client = make_client(ModelConfig(id="scripted/golden", endpoints=(server.base_url,), max_retries=0))

        async def run_all() -> list[dict[str, Any]]:
            out = []
            for topology, size in TOPOLOGIES:
                spec = default_team_spec(topology, team_size=size)
                for pid in TEAM_PROBLEMS:
                    trajectory = await run_team(spec, problems[pid], client, decoding=Decoding(seed=0), seed=0)
                    out.append({"topology": topology, "problem": pid, "trajectory": _trajectory_view(trajectory)})
            await client.aclose()
            return out

        return asyncio.run(run_all())
    finally:
        server.stop()


def _check(kind: str, version: str, digest: str, where: str) -> None:
    golden = json.loads(GOLDEN.read_text(encoding="utf-8")) if GOLDEN.is_file() else {}
    if UPDATE:
        golden[kind] = {"version": version, "digest": digest}
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(golden, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        pytest.skip(f"recorded the {kind} golden digest for version {version}")
    recorded = golden.get(kind)
    assert recorded is not None, f"no golden {kind} digest: run with LCB_GRID_UPDATE_GOLDEN=1"
    if digest != recorded["digest"]:
        assert version != recorded["version"], (
            f"the {kind} behaviour changed but its version is still {version!r}: bump it in {where} "
            "(stale caches and interrupted jobs must not be reused), then run with LCB_GRID_UPDATE_GOLDEN=1")
        pytest.fail(f"{kind} version bumped to {version!r}: record the new digest with LCB_GRID_UPDATE_GOLDEN=1")
    assert version == recorded["version"], (
        f"{kind} version changed to {version!r} without a behaviour change; record it with LCB_GRID_UPDATE_GOLDEN=1")


def test_scorer_behaviour_is_pinned_to_its_version() -> None:
    from lcb.version import SCORER_VERSION

    _check("scorer", SCORER_VERSION, _digest(scorer_fingerprint()), "lcb/version.py")


def test_team_runtime_behaviour_is_pinned_to_its_version() -> None:
    from topologies.version import TEAM_RUNTIME_VERSION

    _check("team_runtime", TEAM_RUNTIME_VERSION, _digest(team_fingerprint()), "topologies/version.py")


def test_team_fingerprint_is_deterministic() -> None:
    assert _digest(team_fingerprint()) == _digest(team_fingerprint())


@pytest.mark.skipif(UPDATE, reason="recording golden digests")
def test_a_behaviour_change_without_a_version_bump_fails() -> None:
    recorded = json.loads(GOLDEN.read_text(encoding="utf-8"))["scorer"]
    with pytest.raises(AssertionError, match="bump it in lcb/version.py"):
        _check("scorer", recorded["version"], "0" * 64, "lcb/version.py")
    with pytest.raises(pytest.fail.Exception, match="record the new digest"):
        _check("scorer", recorded["version"] + "-next", "0" * 64, "lcb/version.py")
