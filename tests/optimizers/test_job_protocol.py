"""Protocol pieces on their own: selection rule, split lock, seeds, sealed store, learning curve."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from optimizers.budget import Budget, Outcome
from optimizers.evaluator import Rollout
from optimizers.journal import SealError, read_jsonl, read_sealed, write_sealed
from optimizers.protocol.job.errors import JobError, JobMismatch, TestLockedError
from optimizers.protocol.job.learning_curve import LearningCurve
from optimizers.protocol.job.seeds import evaluation_seed, request_seed
from optimizers.protocol.job.selection import decide, find_forbidden_keys
from optimizers.protocol.job.splits import SplitData, SplitIds
from optimizers.protocol.job.store import JobStore

VAL = ["a", "b", "c", "d"]


def rollouts(scores: list[float], ids: list[str] = VAL, status: Outcome | None = None) -> list[Rollout]:
    return [
        Rollout("cand", pid, "val", 0, 1, status or (Outcome.SUCCESS if s > 0 else Outcome.SEMANTIC_FAILURE), s, "")
        for pid, s in zip(ids, scores, strict=True)
    ]


def test_deploys_only_when_strictly_better() -> None:
    better = decide(VAL, rollouts([1, 0, 0, 0]), rollouts([1, 1, 0, 0]))
    assert better.deploy_incumbent and better.fallback_reason is None and better.validation_delta == 0.25
    tie = decide(VAL, rollouts([1, 0, 0, 0]), rollouts([0, 1, 0, 0]))
    assert not tie.deploy_incumbent and tie.fallback_reason == "validation_tie"
    worse = decide(VAL, rollouts([1, 1, 0, 0]), rollouts([1, 0, 0, 0]))
    assert worse.fallback_reason == "validation_regression"


def test_untrustworthy_records_keep_the_seed() -> None:
    broken = rollouts([1, 1, 1, 0])
    broken[3] = Rollout("cand", "d", "val", 0, 1, Outcome.INFRASTRUCTURE_FAILURE, 0.0, "")
    assert decide(VAL, rollouts([0, 0, 0, 0]), broken).fallback_reason == "invalid_record:d:infrastructure_failure"
    dup = rollouts([1, 1, 1, 1], ["a", "b", "c", "c"])
    assert decide(VAL, rollouts([0, 0, 0, 0]), dup).fallback_reason == "duplicate_example:c"
    short = rollouts([1, 1, 1], ["a", "b", "c"])
    assert decide(VAL, rollouts([0, 0, 0, 0]), short).fallback_reason == "unpaired_validation_ids"
    assert decide(VAL, [], rollouts([1, 1, 1, 1])).fallback_reason == "empty_validation"
    forced = decide(VAL, rollouts([0, 0, 0, 0]), None, forced_reason="infrastructure_invalid_optimization")
    assert forced.selected_candidate == "seed" and forced.baseline_score == 0.0
    assert list(find_forbidden_keys({"a": [{"test_ids": [1]}]})) == ["a[0].test_ids"]


def test_test_problems_stay_locked_until_a_sealed_selection(tmp_path: Path) -> None:
    ids = SplitIds(("t1",), ("v1",), ("x1",))
    loaded: list[list[str]] = []
    data = SplitData(ids, lambda wanted: loaded.append(list(wanted)) or [])
    with pytest.raises(TestLockedError):
        data.test_problems()
    with pytest.raises(TestLockedError):
        data.problem("x1")
    with pytest.raises(TestLockedError):
        data.unlock_test({"selection_id": "s", "validation_ids": ["v1"], "test_exposed": False})  # not sealed
    sealed = write_sealed(tmp_path / "selection.json",
                          {"selection_id": "s", "validation_ids": ["v1"], "test_exposed": False})
    data.unlock_test(sealed)
    with pytest.raises(KeyError):  # the stand-in loader returned nothing: the id is unknown
        data.test_problems()
    assert loaded == [["x1"]]


def test_split_ids_must_be_disjoint() -> None:
    with pytest.raises(JobError, match="both"):
        SplitIds(("a",), ("a",), ("b",))
    assert SplitIds(("a",), ("b",), ("c",)).split_hash != SplitIds(("a",), ("c",), ("b",)).split_hash


def test_seeds_are_stable_and_evaluation_seeds_ignore_the_candidate() -> None:
    assert request_seed("job", "train", "c1", "p", 0) == request_seed("job", "train", "c1", "p", 0)
    assert request_seed("job", "train", "c1", "p", 0) != request_seed("job", "train", "c2", "p", 0)
    assert 0 <= evaluation_seed("cond", "val", "p", 0) < 2**31 - 1
    assert evaluation_seed("cond", "val", "p", 0) != evaluation_seed("cond", "val", "p", 1)


def test_sealed_files_detect_edits(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    write_sealed(path, {"a": 1})
    assert read_sealed(path)["a"] == 1
    data = json.loads(path.read_text())
    data["a"] = 2
    path.write_text(json.dumps(data))
    with pytest.raises(SealError):
        read_sealed(path)


def test_store_refuses_another_job_and_a_second_process(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "job")
    store.ensure_job({"job_id": "one", "spec": {"seed": 0, "method": "identity"}})
    store.ensure_job({"job_id": "one", "spec": {"seed": 0, "method": "identity"}})
    with pytest.raises(JobMismatch, match="differs in seed"):
        store.ensure_job({"job_id": "two", "spec": {"seed": 1, "method": "identity"}})
    with store.lock():
        with pytest.raises(JobError, match="in use"):
            with JobStore(tmp_path / "job").lock():
                pass


def test_learning_curve_plots_the_committed_incumbent_and_writes_nothing_twice_on_resume(tmp_path: Path) -> None:
    path = tmp_path / "curve.jsonl"

    def run() -> None:
        budget = Budget(35)
        curve = LearningCurve(path, maximum=35, seed_candidate_id="seed")
        curve.start()
        for index in range(23):
            reservation = budget.reserve()
            assert reservation is not None
            # A candidate that scores perfectly on its minibatch but is never committed: the curve
            # must not show it (it is not the method's incumbent).
            lucky = index >= 12
            budget.commit(reservation, Outcome.SUCCESS if lucky else Outcome.SEMANTIC_FAILURE)
            curve(Rollout("lucky" if lucky else "seed", f"p{index}", "train", 0, 1,
                          Outcome.SUCCESS if lucky else Outcome.SEMANTIC_FAILURE, float(lucky), "",
                          charged=True), budget)
            if index == 11:
                curve.commit("seed", 0.25, budget.charged)  # charged 12
            if index == 15:
                curve.commit("good", 0.5, budget.charged)  # charged 16
        curve.finish(charged=23, final_candidate_id="good", final_score=0.5, stop_reason="done")

    run()
    run()  # a resumed run replays the same rollouts and commits: nothing is written twice
    rows = list(read_jsonl(path))
    assert [(r["reason"], r["charged_rollouts"], r["incumbent_candidate_id"], r["incumbent_score"],
             r["staleness"], r["post_stop_carried_forward"]) for r in rows] == [
        ("initial_state", 0, "seed", None, 0, False),
        ("grid", 10, "seed", None, 10, False),
        ("grid", 20, "good", 0.5, 4, False),
        ("stop", 23, "good", 0.5, 7, False),
        ("grid", 30, "good", 0.5, 14, True),  # carried forward to the budget
    ]


def test_core_imports_no_lcb_langgraph_or_wandb() -> None:
    code = (
        "import sys, optimizers, optimizers.identity, optimizers.evaluator, optimizers.registry;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('lcb', 'langgraph', 'langchain_core', 'wandb',"
        " 'topologies')]; print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_registry_and_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from optimizers.base import OptimizeContext
    from optimizers.candidate import Candidate
    from optimizers.evaluator import BudgetedEvaluator
    from optimizers.registry import (
        BUILTIN_METHODS,
        MethodUnavailable,
        UnknownMethod,
        available_methods,
        create_optimizer,
    )

    assert {"identity", "gepa", "mipro", "mapro", "maspo", "hivemind", "mamut_gepa", "maspob",
            "tavo"} <= set(available_methods())
    with pytest.raises(UnknownMethod, match="available: .*identity"):
        create_optimizer("nope")
    monkeypatch.setitem(BUILTIN_METHODS, "ghost", "optimizers.ghost_method:Ghost")
    with pytest.raises(MethodUnavailable, match="method ghost is not available in this build"):
        create_optimizer("ghost")
    monkeypatch.setitem(BUILTIN_METHODS, "needs_dep", "optimizers.identity_needs_dep:X")
    monkeypatch.setitem(sys.modules, "optimizers.identity_needs_dep", None)  # import fails like a missing dep
    with pytest.raises(MethodUnavailable):
        create_optimizer("needs_dep")

    class NeverRun:
        async def run(self, *args, **kwargs):  # pragma: no cover - identity must not call it
            raise AssertionError("identity spent budget")

    budget = Budget(5)
    evaluator = BudgetedEvaluator(NeverRun(), budget, seed_for=lambda *a: 0, allowed_ids=["p"])
    seed = Candidate({"role/solver": "solve it"})
    ctx = OptimizeContext(evaluator=evaluator, budget=budget, seed=0, workdir=Path("."))
    result = asyncio.run(create_optimizer("identity").optimize(seed, train=["p"], val=[], ctx=ctx))
    assert result.best is seed and result.stop_reason == "identity" and budget.charged == 0
