"""End-to-end jobs: real teams + OpenAI client + scripted server + real grader, built-in data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from job_support import SOLVE_ALL, fast_runtime, job_config
from optimizers.journal import read_jsonl, read_sealed, without_keys
from optimizers.protocol.job.errors import JobError, JobMismatch, PhaseOrderError
from optimizers.protocol.job.engine import Job, run_job, summary_line
from optimizers.protocol.job.store import JobStore
from topologies.scripted import Fault

VOLATILE = {"sha256", "elapsed_seconds"}


def stable(value: Any) -> Any:
    return without_keys(value, VOLATILE)


def charged_attempt_keys(out: Path) -> list[tuple[str, str, str, int]]:
    return [
        (a["candidate_id"], a["problem_id"], a["phase"], a["sample"])
        for a in read_jsonl(out / "optimization" / "attempts.jsonl")
        if a["charged"]
    ]


def test_identity_job_end_to_end(tmp_path: Path, scripted_server) -> None:
    server = scripted_server()
    out = tmp_path / "job"
    result = run_job(job_config(out, server.base_url), fast_runtime())

    for name in ("job", "optimization", "selection", "test", "result"):
        read_sealed(out / f"{name}.json")  # present and untampered
    assert (out / "optimization" / "learning_curve.jsonl").exists()
    curve = read_jsonl(out / "optimization" / "learning_curve.jsonl")
    # The seed is the incumbent from start to stop, then carried forward to the budget (12).
    assert [(r["reason"], r["charged_rollouts"], r["post_stop_carried_forward"]) for r in curve] == [
        ("initial_state", 0, False), ("stop", 0, False), ("grid", 10, True)]
    assert not (out / "optimization" / "attempts.jsonl").exists()  # identity spends nothing
    evaluations = sorted(p.name for p in (out / "evaluations").glob("*.json"))
    assert len(evaluations) == 2  # seed on val, seed on test (deployed == seed: same object)

    assert result["status"] == "completed" and result["seed"] == 0
    assert result["optimization"]["status"] == "completed"
    assert result["optimization"]["stop_reason"] == "identity"
    assert result["optimization"]["budget"]["charged"] == 0
    assert result["selection"]["selected_candidate"] == "seed"
    assert result["selection"]["fallback_reason"] == "identical_candidate"
    assert result["selection"]["baseline_validation_score"] == 0.5
    test = result["test"]
    assert test["example_ids"] == ["demo_stdin", "demo_functional", "builtin_palindrome_anagram",
                                   "builtin_trapped_water"]
    assert test["baseline_scores"] == [1.0, 1.0, 0.0, 0.0] == test["deployed_scores"]
    assert test["baseline_mean"] == test["deployed_mean"] == 0.5 and test["delta_pp"] == 0.0
    assert result["conformant"] is False  # builtin data, tiny budget
    line = summary_line(result)
    assert line == {"status": "completed", "cell_id": result["cell_id"], "baseline_mean": 0.5,
                    "deployed_mean": 0.5, "delta_pp": 0.0, "valid_for_aggregation": True,
                    "fallback_reason": "identical_candidate"}
    job = read_sealed(out / "job.json")
    assert job["spec"]["method"] == "identity" and job["job_id"] == result["job_id"]

    # The same call again returns the saved result at once, without a model request.
    requests = server.request_count
    again = run_job(job_config(out, server.base_url), fast_runtime())
    assert again == result and server.request_count == requests


def test_searching_job_deploys_a_strictly_better_candidate(tmp_path: Path, scripted_server) -> None:
    server = scripted_server()
    out = tmp_path / "job"
    result = run_job(job_config(out, server.base_url, method="scripted_search", budget=12), fast_runtime())
    assert result["optimization"]["budget"]["charged"] == 12
    assert result["optimization"]["stop_reason"] == "schedule_done"
    assert result["selection"]["selected_candidate"] == "incumbent"
    assert result["selection"]["fallback_reason"] is None
    assert result["selection"]["baseline_validation_score"] == 0.5
    assert result["selection"]["incumbent_validation_score"] == 1.0
    assert result["test"]["deployed_mean"] == 1.0 and result["test"]["delta_pp"] == 50.0
    keys = charged_attempt_keys(out)
    assert len(keys) == len(set(keys)) == 12
    rollouts = list(read_jsonl(out / "optimization" / "rollouts.jsonl"))
    assert len(rollouts) == 12 and all("hidden" in r["feedback"] for r in rollouts)
    candidates = list(read_jsonl(out / "optimization" / "candidates.jsonl"))
    assert any(SOLVE_ALL in c["components"]["role/solver"] for c in candidates)
    curve = list(read_jsonl(out / "optimization" / "learning_curve.jsonl"))
    assert [(r["reason"], r["charged_rollouts"]) for r in curve] == [
        ("initial_state", 0), ("grid", 10), ("stop", 12)]
    assert curve[-1]["incumbent_candidate_id"] == result["optimization"]["incumbent_candidate_id"]
    # Optimization rollouts are graded on the first 3 hidden tests, evaluations on all of them.
    assert {r["verdict"]["total"] for r in rollouts} == {3}
    selection = read_sealed(out / "selection.json")
    evaluation = read_sealed(out / "evaluations" / f"{selection['baseline_validation_id']}.json")
    assert all(r["verdict"]["total"] > 3 for r in evaluation["records"])


def test_budget_is_never_exceeded(tmp_path: Path, scripted_server) -> None:
    server = scripted_server()
    out = tmp_path / "job"
    result = run_job(job_config(out, server.base_url, method="scripted_search", budget=10,
                                method_params={"variants": 2}), fast_runtime())
    assert result["optimization"]["budget"]["charged"] == 10
    assert result["optimization"]["stop_reason"] == "budget"
    assert len(charged_attempt_keys(out)) == 10
    optimization = read_sealed(out / "optimization.json")
    assert optimization["budget"]["exhausted_requests"] == 2 + 6  # rest of variant 1, all of variant 2
    # 6 seed rollouts + 4 of the first variant: the variant saw only those 4 problems.
    assert optimization["history"][1]["n"] == 4


def test_phases_one_by_one_equal_phase_all(tmp_path: Path, scripted_server) -> None:
    server = scripted_server()
    stepwise = tmp_path / "stepwise"
    records = {}
    for phase in ("optimize", "validate", "test"):
        records[phase] = run_job(job_config(stepwise, server.base_url, method="scripted_search", phase=phase),
                                 fast_runtime())
    assert records["optimize"]["out"] == "optimization.json"
    assert records["validate"]["selected_candidate"] == "incumbent"
    whole = run_job(job_config(tmp_path / "whole", server.base_url, method="scripted_search"), fast_runtime())
    assert stable(records["test"]) == stable(whole)


def test_infrastructure_failures_are_retried_uncharged_with_the_same_seed(tmp_path: Path, scripted_server) -> None:
    server = scripted_server(faults=[Fault(status=503, first=2)])
    out = tmp_path / "job"
    result = run_job(job_config(out, server.base_url, method="scripted_search", concurrency=1), fast_runtime())
    budget = result["optimization"]["budget"]
    assert budget["charged"] == 12 and budget["infrastructure_failures"] == 2 and budget["unusable_rollouts"] == 0
    attempts = list(read_jsonl(out / "optimization" / "attempts.jsonl"))
    first = [a for a in attempts if a["problem_id"] == attempts[0]["problem_id"]
             and a["candidate_id"] == attempts[0]["candidate_id"]]
    assert [(a["attempt_index"], a["outcome"], a["charged"]) for a in first] == [
        (0, "infrastructure_failure", False), (1, "infrastructure_failure", False), (2, "success", True)]
    assert len({a["seed"] for a in first}) == 1
    # The model saw the same request (same seed) on every attempt of that rollout.
    seeds = [r.body.get("seed") for r in server.requests[:4]]
    assert seeds[0] is not None and seeds[0] == seeds[1] == seeds[2] != seeds[3]
    assert result["test"]["delta_pp"] == 50.0


def test_optimization_that_cannot_get_usable_rollouts_keeps_the_seed(tmp_path: Path, scripted_server) -> None:
    server = scripted_server(faults=[Fault(status=503, first=3)])
    out = tmp_path / "job"
    result = run_job(job_config(out, server.base_url, method="scripted_search", concurrency=1,
                                method_params={"fail_on_unusable": True}), fast_runtime())
    assert result["optimization"]["status"] == "failed"
    assert result["optimization"]["failure_kind"] == "infrastructure_invalid"
    assert result["selection"]["fallback_reason"] == "infrastructure_invalid_optimization"
    assert result["test"]["delta_pp"] == 0.0


def test_a_folder_holding_another_job_is_refused(tmp_path: Path, scripted_server) -> None:
    server = scripted_server()
    out = tmp_path / "job"
    run_job(job_config(out, server.base_url), fast_runtime())
    with pytest.raises(JobMismatch, match="seed"):
        run_job(job_config(out, server.base_url, seed=1), fast_runtime())


def test_bad_requests_are_one_line_job_errors(tmp_path: Path, scripted_server, monkeypatch) -> None:
    from optimizers.registry import BUILTIN_METHODS

    monkeypatch.setitem(BUILTIN_METHODS, "ghost", "optimizers.ghost_method:Ghost")
    server = scripted_server()
    with pytest.raises(JobError, match="unknown method 'nope'"):
        Job(job_config(tmp_path / "a", server.base_url, method="nope"))
    with pytest.raises(JobError, match="not available in this build"):
        Job(job_config(tmp_path / "a", server.base_url, method="ghost"))
    with pytest.raises(PhaseOrderError, match="run phase=optimize first"):
        run_job(job_config(tmp_path / "b", server.base_url, phase="test"), fast_runtime())
    with pytest.raises(JobError, match="no model endpoint is reachable"):
        run_job(job_config(tmp_path / "c", "http://127.0.0.1:9/v1"), fast_runtime())


def test_seed_evaluations_are_shared_across_methods(tmp_path: Path, scripted_server) -> None:
    server = scripted_server()
    cache = tmp_path / "shared-evaluations"
    identity = run_job(job_config(tmp_path / "identity", server.base_url, evaluation_cache=cache), fast_runtime())
    before = server.request_count
    searched = run_job(job_config(tmp_path / "search", server.base_url, method="scripted_search",
                                  evaluation_cache=cache), fast_runtime())
    assert searched["test"]["baseline_scores"] == identity["test"]["baseline_scores"]
    # The search job ran its 12 rollouts plus only the incumbent's val and test evaluations.
    assert server.request_count - before == 12 + 4 + 4
    assert len(list(cache.glob("*.json"))) == 4


def test_store_writes_config_and_detects_tampering(tmp_path: Path, scripted_server) -> None:
    server = scripted_server()
    out = tmp_path / "job"
    store = JobStore(out)
    store.write_config({"method": "identity", "out": out, "decoding": {"eval": {"temperature": 0.0}}})
    assert "method: identity" in (out / "config.yaml").read_text()
    run_job(job_config(out, server.base_url), fast_runtime())
    data = json.loads((out / "result.json").read_text())
    data["test"]["delta_pp"] = 99.0
    (out / "result.json").write_text(json.dumps(data))
    with pytest.raises(JobError, match="modified after it was sealed"):
        run_job(job_config(out, server.base_url), fast_runtime())
