"""GEPA: end to end through the Hydra app and run_job on the scripted world, plus its stop logic."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from optimizers.budget import Budget
from optimizers.candidate import Candidate
from optimizers.gepa.adapter import CandidateBook, GEPAWatch
from optimizers.journal import read_jsonl, read_sealed
from optimizers.protocol.job.errors import JobError
from optimizers.protocol.job.engine import run_job
from scripted_world import MARKER, fast_runtime, run_cli, start_world, world_job_config


@pytest.fixture(scope="module")
def useful() -> Any:
    server = start_world(world="useful")
    yield server
    server.stop()


def figures(out: Path) -> dict[str, Any]:
    optimization = read_sealed(out / "optimization.json")
    reflection = optimization["metadata"]["reflection"]
    return {"charged": optimization["budget"]["charged"], "reflection_calls": reflection["calls"],
            "reflection_tokens": reflection["total_tokens"], "stop": optimization["stop_reason"]}


def test_gepa_cli_improves_validation_and_deploys(tmp_path: Path, useful: Any) -> None:
    out = tmp_path / "job"
    done = run_cli(useful.base_url, out, "gepa", "method.reflection_minibatch_size=2", budget=30)
    assert done.returncode == 0, done.stderr[-3000:]
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line["status"] == "completed" and line["fallback_reason"] is None
    assert line["deployed_mean"] > line["baseline_mean"]
    selection = read_sealed(out / "selection.json")
    assert selection["selected_candidate"] == "incumbent"
    assert selection["incumbent_validation_score"] > selection["baseline_validation_score"]
    assert MARKER in selection["deployed_candidate"]["components"]["role/solver"]
    optimization = read_sealed(out / "optimization.json")
    assert optimization["metadata"]["params"]["reflection_minibatch_size"] == 2  # the override arrived
    # 4 (seed on validation) + 2 + 2 (parent and child minibatches) + 4 (the child on validation)
    # + 2 + 2 (the child's other first-epoch minibatches: perfect, skipped); later minibatches are
    # cache hits (free) while the engine's calls, cache hits included, reach 5 x 10 = 50
    assert optimization["budget"]["charged"] == 16 and optimization["stop_reason"] == "max_full_evals"
    curve = list(read_jsonl(out / "optimization" / "learning_curve.jsonl"))
    stop = next(row for row in curve if row["reason"] == "stop")
    assert curve[0]["reason"] == "initial_state" and curve[-1]["charged_rollouts"] == 30  # carried to B
    assert stop["incumbent_candidate_id"] == selection["incumbent_candidate"]["id"]
    # The curve shows GEPA's committed incumbents (validation means), never a minibatch mean.
    assert stop["commits"] >= 1 and stop["incumbent_score"] == optimization["metadata"]["incumbent_val_score"]
    history = optimization["history"]
    assert history[0]["event"] == "seed_validation" and history[-1]["incumbent_val_score"] == 1.0
    # The reflection model saw our grader feedback, not only a score.
    prompts = [r["prompt"] for r in read_jsonl(out / "optimization" / "native" / "reflection.jsonl")]
    assert prompts and all("hidden tests" in p and "wrong_answer" in p for p in prompts)
    numbers = figures(out)
    assert numbers["reflection_calls"] >= 1 and numbers["reflection_tokens"] > 0
    print(f"\n[gepa figure] {numbers}")


def test_gepa_keeps_the_seed_when_reflection_proposes_nothing_useful(tmp_path: Path) -> None:
    server = start_world(world="useless")
    try:
        result = run_job(world_job_config(tmp_path / "job", server.base_url, method="gepa", budget=24),
                         fast_runtime())
    finally:
        server.stop()
    assert result["selection"]["selected_candidate"] == "seed"
    assert result["test"]["delta_pp"] == 0.0
    optimization = read_sealed(tmp_path / "job" / "optimization.json")
    # Derived from the schedule. GEPA's cap is in engine calls: max_full_evals x (6 train + 4 val)
    # = 50. The seed runs on validation (4 calls); each iteration then runs the parent (always
    # the seed: no child ever wins) and the child (the useless world proposes the same text every
    # time, so always the same child) on a minibatch of 3: 6 calls. Charged are only the first
    # runs of each (candidate, problem): the 2 minibatches of epoch 1 for both, 4 + 2 x 6 = 16;
    # from epoch 2 on every call is a cache hit. 4 + 6k reaches 50 at k = 8 iterations, one
    # proposal each.
    iterations = -(-(5 * (6 + 4) - 4) // 6)
    assert optimization["metadata"]["proposals"] == iterations == 8  # it did try
    assert optimization["budget"]["charged"] == 4 + 2 * 6 == 16 and optimization["stop_reason"] == "max_full_evals"
    assert optimization["incumbent_candidate"]["id"] == optimization["seed_candidate"]["id"]


def test_gepa_by_default_edits_role_prompts_only(tmp_path: Path, useful: Any) -> None:
    # The decentralized team has an editable protocol text (protocol/handoff); as in the
    # reference (spec 2.2), default GEPA never proposes a change to it.
    config = world_job_config(tmp_path / "job", useful.base_url, method="gepa", topology="decentralized",
                              team_size=2, budget=40, method_params={"use_merge": False})
    result = run_job(config, fast_runtime())
    optimization = read_sealed(tmp_path / "job" / "optimization.json")
    seed = optimization["seed_candidate"]
    assert "protocol/handoff" in seed["components"]
    assert optimization["metadata"]["components"] == ["role/debater"]
    candidates = list(read_jsonl(tmp_path / "job" / "optimization" / "candidates.jsonl"))
    assert len(candidates) == 2  # the seed and the proposal that won
    # 4 (seed on validation) + 3 + 3 (parent and child) + 4 (child on validation) + 3 (the child's
    # other train minibatch, perfect: skipped); then only cache hits until 5 x 10 engine calls
    assert optimization["budget"]["charged"] == 17 and optimization["stop_reason"] == "max_full_evals"
    for candidate in candidates:
        changed = {k for k, v in candidate["components"].items() if seed["components"].get(k) != v}
        assert all(k.startswith("role/") for k in changed), changed
        assert candidate["settings"] == seed["settings"]
    assert MARKER in optimization["incumbent_candidate"]["components"]["role/debater"]
    assert result["selection"]["selected_candidate"] == "incumbent"
    assert "components" not in result["cell"].get("method_variant", {})


def test_gepa_protocol_editing_is_an_explicit_knob_and_its_own_cell(tmp_path: Path, useful: Any) -> None:
    config = world_job_config(tmp_path / "job", useful.base_url, method="gepa", topology="decentralized",
                              team_size=2, budget=40, method_params={"use_merge": False, "components": "all"})
    result = run_job(config, fast_runtime())
    optimization = read_sealed(tmp_path / "job" / "optimization.json")
    assert optimization["metadata"]["components"] == ["protocol/handoff", "role/debater"]
    assert MARKER in optimization["incumbent_candidate"]["components"]["role/debater"]
    assert result["selection"]["selected_candidate"] == "incumbent"
    # Derived from the schedule (round robin: protocol/handoff first, then role/debater): the seed
    # on validation (4); iteration 1: the seed and its protocol child on a minibatch (3 + 3), no
    # gain; iteration 2: the seed and its debater child, with the marker, on the next minibatch
    # (3 + 3), the child wins and runs on validation (4): 20; iteration 3: the child draws epoch
    # 2's first minibatch, rows it never ran (3 charged, 23), perfect, skipped. Every later draw
    # is rows it ran: cache hits, free, 3 engine calls each, until the engine's calls reach
    # 5 x (6 + 4) = 50 (20 + 10 x 3): stop max_full_evals with 23 charged.
    assert optimization["budget"]["charged"] == 4 + (3 + 3) + (3 + 3 + 4) + 3 == 23
    assert optimization["stop_reason"] == "max_full_evals" and optimization["metadata"]["proposals"] == 2
    assert result["cell"]["method_variant"]["components"] == "all"


def test_a_validation_pass_cut_by_the_budget_never_makes_an_incumbent(tmp_path: Path, useful: Any) -> None:
    # seed on val (4) + parent and child minibatches (3 + 3) = 10; the winning child's validation
    # pass gets 3 of its 4 rollouts: it is incomplete, so the seed stays the incumbent.
    result = run_job(world_job_config(tmp_path / "job", useful.base_url, method="gepa", budget=13),
                     fast_runtime())
    optimization = read_sealed(tmp_path / "job" / "optimization.json")
    assert optimization["budget"]["charged"] == 13 and optimization["budget"]["exhausted_requests"] == 1
    assert optimization["stop_reason"] == "rollout_budget_spent"
    assert optimization["incumbent_candidate"]["id"] == optimization["seed_candidate"]["id"]
    assert optimization["history"][-1]["complete"] is False
    assert result["selection"]["selected_candidate"] == "seed"


def test_unknown_gepa_parameter_is_a_one_line_job_error(tmp_path: Path, useful: Any) -> None:
    config = world_job_config(tmp_path / "job", useful.base_url, method="gepa", method_params={"minibatch": 3})
    with pytest.raises(JobError, match="unknown parameter"):
        run_job(config, fast_runtime())


# ------------------------------------------------------------------------------------------------
# Stop logic and incumbent choice (pure)


class _State:
    def __init__(self, evals: int) -> None:
        self.total_num_evals = evals


def _watch(budget: Budget, **overrides: Any) -> GEPAWatch:
    values = {"budget": budget, "min_budget_for_iteration": 6, "plateau_patience": 2, "metric_call_cap": 100,
              "max_idle_iterations": 3}
    values.update(overrides)
    return GEPAWatch(**values)


def test_watch_stops_for_budget_plateau_cap_and_idling() -> None:
    budget = Budget(10)
    watch = _watch(budget)
    assert not watch(_State(0))
    for _ in range(5):
        reservation = budget.reserve()
        assert reservation is not None
        budget.cancel(reservation)  # reservations alone never stop it
    assert not watch(_State(0))

    watch.note_full_eval(0.5, seed=True)
    watch.note_full_eval(0.5, seed=False)  # no new best
    assert not watch(_State(0))
    watch.note_full_eval(0.75, seed=False)  # new best resets the count
    watch.note_full_eval(0.25, seed=False)
    assert not watch(_State(0))
    watch.note_full_eval(0.75, seed=False)
    assert watch(_State(0)) and watch.stop_reason == "full_eval_plateau"

    assert _watch(Budget(5))(_State(0))  # cannot pay parent + child minibatches
    capped = _watch(Budget(100))
    assert capped(_State(100)) and capped.stop_reason == "max_full_evals"
    idle = _watch(Budget(100))
    for _ in range(3):
        idle.on_iteration_start({})
        idle.on_iteration_end({})
    assert idle(_State(0)) and idle.stop_reason == "stalled_without_rollouts"
    exhausted = _watch(Budget(100))
    exhausted.exhausted = True
    assert exhausted(_State(0)) and exhausted.stop_reason == "rollout_budget_spent"


def test_incumbent_is_best_complete_validation_with_seed_winning_ties() -> None:
    seed = Candidate({"role/a": "seed", "protocol/p": "x"})
    book = CandidateBook(seed=seed, keys=("role/a",))
    assert book.candidate({"role/a": "seed"}) is seed
    tie = book.candidate({"role/a": "tie"})
    better = book.candidate({"role/a": "better"})
    cut = book.candidate({"role/a": "cut"})
    assert tie.parent == seed.id and tie.components["protocol/p"] == "x"
    val = ["v1", "v2"]
    book.val_scores = {seed.id: {"v1": 1.0, "v2": 0.0}, tie.id: {"v1": 0.0, "v2": 1.0},
                       better.id: {"v1": 1.0}, cut.id: {"v1": 1.0, "v2": 1.0}}
    book.val_incomplete = {cut.id}
    assert book.best(val) == (seed, 0.5)  # better's evaluation is partial, cut's was cut by budget
    book.val_scores[better.id]["v2"] = 1.0
    assert book.best(val) == (better, 1.0)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("size", [4, 5])
def test_a_train_set_that_is_not_a_multiple_of_the_minibatch_runs(tmp_path: Path, useful: Any, seed: int,
                                                                  size: int) -> None:
    # gepa's epoch sampler pads an epoch's last minibatch with ids it already holds (6 train
    # problems, minibatches of 4 or 5): each distinct problem runs once, its result fills every
    # slot. Before the fix these jobs failed: "duplicate problem ids in one evaluate call".
    config = world_job_config(tmp_path / "job", useful.base_url, method="gepa", seed=seed,
                              method_params={"reflection_minibatch_size": size})
    result = run_job(config, fast_runtime())
    optimization = read_sealed(tmp_path / "job" / "optimization.json")
    assert result["status"] == "completed" and optimization["status"] == "completed"
    assert optimization["stop_reason"] != "error" and MARKER in optimization["incumbent_candidate"]["components"]["role/solver"]
    charged = [row for row in read_jsonl(tmp_path / "job" / "optimization" / "rollouts.jsonl") if row.get("charged")]
    keys = [(row["candidate_id"], row["problem_id"], row.get("sample", 0)) for row in charged]
    assert keys and len(keys) == len(set(keys))  # no problem ran twice for one candidate
