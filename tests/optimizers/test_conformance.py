"""Conformance of every registered method: real jobs (run_job) on built-in data, scripted models.

For each method of the registry that this build can load: the budget is never exceeded, the seed
candidate is never mutated, the incumbent has exactly the seed's roles, a fixed seed gives the
same run twice, a budget smaller than one validation pass ends cleanly with a stop reason, and a
job killed mid-optimization resumes to the same result without paying for anything twice.
Also the shared reflection helper (optimizers/reflection.py) the reflective methods rely on.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from optimizers.journal import read_jsonl, read_sealed, without_keys
from optimizers.protocol.job.engine import Job, run_job
from optimizers.protocol.job.lcb_system import base_team_spec, seed_candidate
from optimizers.protocol.job.optimize import without_process_history
from optimizers.reflection import ReflectionModel, extract_fenced, extract_json
from optimizers.registry import BUILTIN_METHODS, MethodUnavailable, get_optimizer_class
from scripted_world import fast_runtime, run_and_kill, start_world, world_job_config

# The product's methods: not the toy methods other test modules register in the same process
# (tests/gym registers a few), whose order of import depends on how pytest shares the files out.
METHODS = sorted(BUILTIN_METHODS)
BUDGET = 20
# Not the outcome's ids: a killed and resumed job must come to the same ones.
VOLATILE = {"sha256", "elapsed_seconds", "time", "latency_s", "code_version", "optimization_sha256"}


def _loadable(method: str) -> None:
    try:
        get_optimizer_class(method)
    except MethodUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def world() -> Any:
    server = start_world()
    yield server
    server.stop()


def stable(value: Any) -> Any:
    return without_keys(value, VOLATILE)


def charged_keys(out: Path) -> list[tuple[str, str, str, int, str, str]]:
    # A masked run (only some agents active) is a rollout of its own: the mask is part of the key;
    # so is the pairing key of a paired run (the same candidate under new seeds is a fresh rollout).
    return [(a["candidate_id"], a["problem_id"], a["phase"], a["sample"], json.dumps(a.get("active")),
             json.dumps(a.get("pairing"))) for a in read_jsonl(out / "optimization" / "attempts.jsonl") if a["charged"]]


def reflection_records(out: Path) -> list[tuple[str, str, int, str]]:
    return sorted((r["purpose"], r["prompt_sha256"], r["occurrence"], json.dumps(r["reply"]))
                  for r in read_jsonl(out / "optimization" / "native" / "reflection.jsonl"))


def run_one(out: Path, base_url: str, method: str, budget: int) -> tuple[Job, dict[str, Any]]:
    job = Job(world_job_config(out, base_url, method=method, budget=budget), fast_runtime())
    before = job.seed_candidate.to_dict()
    result = asyncio.run(job.run())
    assert job.seed_candidate.to_dict() == before, "the method mutated the seed candidate"
    return job, result


@pytest.mark.parametrize("method", METHODS)
def test_budget_seed_roles_and_determinism(method: str, tmp_path: Path, world: Any) -> None:
    _loadable(method)
    fresh_seed = seed_candidate(base_team_spec("single", team_size=1, communication="freeform", rounds=2))
    runs = []
    for name in ("first", "second"):
        out = tmp_path / name
        job, result = run_one(out, world.base_url, method, BUDGET)
        optimization = read_sealed(out / "optimization.json")
        charged = optimization["budget"]["charged"]
        assert charged <= BUDGET
        keys = charged_keys(out)
        assert len(keys) == len(set(keys)) == charged, "a rollout was charged twice or not journaled"
        assert optimization["seed_candidate"] == fresh_seed.to_dict() == job.seed_candidate.to_dict()
        incumbent = optimization["incumbent_candidate"]
        roles = sorted(k for k in incumbent["components"] if k.startswith("role/"))
        assert roles == sorted(k for k in fresh_seed.components if k.startswith("role/"))
        assert isinstance(optimization["stop_reason"], str) and optimization["stop_reason"]
        assert result["status"] == "completed"
        runs.append((optimization, result, sorted(keys), out))
    (opt_a, result_a, keys_a, out_a), (opt_b, result_b, keys_b, out_b) = runs
    assert stable(opt_a) == stable(opt_b)
    assert stable(result_a) == stable(result_b)
    assert keys_a == keys_b
    if (out_a / "optimization" / "native" / "reflection.jsonl").exists():
        assert reflection_records(out_a) == reflection_records(out_b)


@pytest.mark.parametrize("method", METHODS)
def test_budget_below_one_validation_pass_ends_cleanly(method: str, tmp_path: Path, world: Any) -> None:
    _loadable(method)
    out = tmp_path / "tiny"
    result = run_job(world_job_config(out, world.base_url, method=method, budget=2), fast_runtime())
    optimization = read_sealed(out / "optimization.json")
    assert optimization["budget"]["charged"] <= 2
    assert optimization["status"] == "completed"
    assert optimization["stop_reason"]
    if method in ("gepa", "mipro", "tavo"):
        assert optimization["stop_reason"] == "rollout_budget_spent"
        assert optimization["incumbent_candidate"]["id"] == optimization["seed_candidate"]["id"]
    if method == "maspob":
        # As its reference, MASPOB spends what is left on a cut minibatch: one random warm-up pull of
        # 2 rows, whose combination is then its incumbent and goes to validation like any other.
        assert optimization["budget"]["charged"] == 2 and optimization["metadata"]["pulls"] == 1
        # That incumbent is a pool variant, not the seed, so keep-or-reject really compares the two:
        # on this world no variant helps, both score 0 on validation and the tie keeps the seed.
        assert optimization["incumbent_candidate"]["id"] != optimization["seed_candidate"]["id"]
        assert result["selection"]["fallback_reason"] == "validation_tie"
        assert result["selection"]["incumbent_validation_score"] == result["selection"]["baseline_validation_score"]
    assert result["selection"]["selected_candidate"] == "seed"


@pytest.mark.parametrize("method", METHODS)
def test_killed_job_resumes_to_the_same_result(method: str, tmp_path: Path, world: Any) -> None:
    _loadable(method)
    reference_out = tmp_path / "uninterrupted"
    reference = run_job(world_job_config(reference_out, world.base_url, method=method, budget=BUDGET),
                        fast_runtime())
    total = reference["optimization"]["budget"]["charged"]
    if total < 4:
        pytest.skip(f"{method} spends too little budget ({total}) to be killed mid-way")
    slow = start_world(latency_s=0.03)  # same answers, slower, so the kill lands mid-optimization
    try:
        out = tmp_path / "killed"
        at_kill = run_and_kill(out, slow.base_url, {"method": method, "budget": BUDGET},
                               kill_after_charged=total // 2)
        assert 0 < at_kill < total + 1
        resumed = run_job(world_job_config(out, slow.base_url, method=method, budget=BUDGET), fast_runtime())
    finally:
        slow.stop()
    # The job's client-side reflection usage counts only this process's live calls; the method's
    # own reflection totals (metadata) include replayed calls and must match.
    def comparable(result: dict[str, Any], folder: Path) -> tuple[Any, Any]:
        summary = {k: v for k, v in result["optimization"].items() if k != "usage"}
        optimization = read_sealed(folder / "optimization.json")
        full = {k: v for k, v in optimization.items() if k != "usage"}
        return stable(summary), without_process_history(stable(full))

    assert comparable(resumed, out) == comparable(reference, reference_out)
    assert resumed["optimization"]["usage"]["task"] == reference["optimization"]["usage"]["task"]
    assert stable(resumed["selection"]) == stable(reference["selection"])
    assert resumed["test"] == reference["test"]
    keys = charged_keys(out)
    assert len(keys) == len(set(keys)) == total, "the resumed job paid for a rollout twice"
    if (reference_out / "optimization" / "native" / "reflection.jsonl").exists():
        # Every logical reflection call is journaled exactly once, killed or not.
        assert reflection_records(out) == reflection_records(reference_out)


SEARCHERS = [m for m in METHODS if m not in ("identity", "best_of_n", "self_consistency")]  # test-only: no search


@pytest.mark.parametrize("method", SEARCHERS)
def test_the_learning_curve_starts_at_the_seeds_measured_score(method: str, tmp_path: Path) -> None:
    # On a world where no proposal ever wins, the incumbent never leaves the seed; the curve must
    # still show it with the score the method measured for it, not an empty curve.
    _loadable(method)
    server = start_world(world="useless")
    try:
        run_job(world_job_config(tmp_path / "job", server.base_url, method=method, budget=BUDGET), fast_runtime())
    finally:
        server.stop()
    optimization = read_sealed(tmp_path / "job" / "optimization.json")
    seed_id = optimization["seed_candidate"]["id"]
    curve = list(read_jsonl(tmp_path / "job" / "optimization" / "learning_curve.jsonl"))
    committed = [row for row in curve if row["commits"] > 0]
    assert committed, f"{method} committed nothing to its learning curve"
    first = committed[0]
    assert first["incumbent_candidate_id"] == seed_id and isinstance(first["incumbent_score"], float)


@pytest.mark.parametrize("method", ["gepa", "mipro", "tavo", "mamut_gepa"])
def test_a_dead_reflection_model_invalidates_the_optimization(method: str, tmp_path: Path) -> None:
    server = start_world(world="broken")
    try:
        result = run_job(world_job_config(tmp_path / "job", server.base_url, method=method, budget=BUDGET),
                         fast_runtime())
    finally:
        server.stop()
    optimization = read_sealed(tmp_path / "job" / "optimization.json")
    assert optimization["status"] == "failed" and optimization["failure_kind"] == "infrastructure_invalid"
    assert "reflection model failed" in optimization["error"]
    assert optimization["budget"]["charged"] <= BUDGET
    assert result["selection"]["fallback_reason"] == "infrastructure_invalid_optimization"


# ------------------------------------------------------------------------------------------------
# The shared reflection helper


class _Client:
    """A ChatClient stand-in for helper tests only (jobs use the real client and server)."""

    def __init__(self, replies: list[Any]) -> None:
        self.replies = replies
        self.calls: list[Any] = []

    async def complete(self, role: str, messages: Any, *, decoding: Any, **_: Any) -> Any:
        self.calls.append((role, messages, decoding))
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply

        class Message:
            content = reply
            usage_metadata = {"input_tokens": 10, "output_tokens": 3}

        return Message()


def test_reflection_journal_replays_and_counts(tmp_path: Path) -> None:
    client = _Client(["one", "two", "three"])
    model = ReflectionModel(client, method="m", workdir=tmp_path, seed=7)

    async def calls(m: ReflectionModel) -> list[str | None]:
        return [await m.ask("same", purpose="p"), await m.ask("same", purpose="p"), await m.ask("x", purpose="q")]

    assert asyncio.run(calls(model)) == ["one", "two", "three"]
    seeds = [c[2].seed for c in client.calls]
    assert len(set(seeds)) == 3  # occurrence and prompt make the logical seed
    usage = model.usage()
    assert (usage["calls"], usage["live_calls"], usage["prompt_tokens"], usage["completion_tokens"]) == (3, 3, 30, 9)

    again = ReflectionModel(_Client([]), method="m", workdir=tmp_path, seed=7)  # a restarted job
    assert asyncio.run(calls(again)) == ["one", "two", "three"]
    assert again.usage()["replayed_calls"] == 3 and again.usage()["live_calls"] == 0
    assert again.usage()["total_tokens"] == 39


def test_reflection_failures_fall_back_then_stop_the_method(tmp_path: Path) -> None:
    from optimizers.base import OptimizerInfrastructureError
    from topologies.types import ErrorKind, ModelCallError

    down = ModelCallError("connection refused", ErrorKind.INFRASTRUCTURE)
    model = ReflectionModel(_Client([down, "ok", down, down]), method="m", workdir=tmp_path, seed=0,
                            max_consecutive_failures=2)

    async def go() -> list[str | None]:
        return [await model.ask("a", purpose="p"), await model.ask("b", purpose="p"), await model.ask("c", purpose="p")]

    assert asyncio.run(go()) == [None, "ok", None]
    with pytest.raises(OptimizerInfrastructureError):
        asyncio.run(model.ask("d", purpose="p"))


def test_reply_parsing() -> None:
    assert extract_json('Sure:\n```json\n{"a": [1, 2]}\n```') == {"a": [1, 2]}
    assert extract_json('noise {"rules": ["x"]} trailing') == {"rules": ["x"]}
    assert extract_json("no json here") is None
    assert extract_fenced("text\n```\nshort\n```\nmore\n```markdown\nthe longer block\n```") == "the longer block"
    assert extract_fenced("plain") is None
