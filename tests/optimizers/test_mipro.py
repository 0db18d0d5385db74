"""MIPRO: end to end on the scripted world; bootstrapped demos are rendered and listed consistently."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from optimizers.candidate import Candidate
from optimizers.journal import read_jsonl, read_sealed
from optimizers.mipro.demos import DEMO_HEADER, Demo, demo_sets, render
from optimizers.protocol.job.engine import run_job
from scripted_world import MARKER, fast_runtime, run_cli, start_world, world_job_config

TRAIN_SOLVED = ("builtin_temperature_swing", "builtin_count_prefixed", "builtin_travel_time")


@pytest.fixture(scope="module")
def useful() -> Any:
    server = start_world(world="useful")
    yield server
    server.stop()


def test_mipro_cli_improves_validation_and_deploys(tmp_path: Path, useful: Any) -> None:
    out = tmp_path / "job"
    done = run_cli(useful.base_url, out, "mipro", "method.num_trials=2", budget=30)
    assert done.returncode == 0, done.stderr[-3000:]
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line["fallback_reason"] is None and line["deployed_mean"] > line["baseline_mean"]
    optimization = read_sealed(out / "optimization.json")
    assert optimization["metadata"]["params"]["num_trials"] == 2
    assert optimization["stop_reason"] == "num_trials_complete"
    assert MARKER in optimization["incumbent_candidate"]["components"]["role/solver"]
    events = [row["event"] for row in optimization["history"]]
    assert events[:3] == ["bootstrap", "proposals", "default"] and events.count("trial") == 2
    purposes = {r["purpose"] for r in read_jsonl(out / "optimization" / "native" / "reflection.jsonl")}
    assert purposes == {"summary", "propose"}
    reflection = optimization["metadata"]["reflection"]
    assert (out / "optimization" / "learning_curve.jsonl").exists()
    print(f"\n[mipro figure] charged={optimization['budget']['charged']} reflection_calls={reflection['calls']} "
          f"reflection_tokens={reflection['total_tokens']} stop={optimization['stop_reason']}")


def test_mipro_keeps_the_seed_when_proposals_are_useless(tmp_path: Path) -> None:
    server = start_world(world="useless")
    try:
        result = run_job(world_job_config(tmp_path / "job", server.base_url, method="mipro", budget=30),
                         fast_runtime())
    finally:
        server.stop()
    assert result["selection"]["selected_candidate"] == "seed"
    assert result["test"]["delta_pp"] == 0.0


def test_bootstrapped_demos_are_rendered_into_prompts_and_listed(tmp_path: Path) -> None:
    """The seed solves some training problems: their solving turns become demos. Every candidate
    the search evaluates lists exactly the demos its prompt shows."""
    server = start_world(world="useless", seed_solves=TRAIN_SOLVED)
    try:
        run_job(world_job_config(tmp_path / "job", server.base_url, method="mipro", budget=40,
                                 method_params={"num_trials": 4, "max_bootstrapped_demos": 2}), fast_runtime())
    finally:
        server.stop()
    optimization = read_sealed(tmp_path / "job" / "optimization.json")
    boot = optimization["history"][0]
    assert boot["event"] == "bootstrap" and boot["solved"] >= 2
    sets = optimization["metadata"]["demo_sets"]
    assert sets[0] == [] and len(sets) >= 2 and all(set(s) <= set(TRAIN_SOLVED) for s in sets)
    candidates = list(read_jsonl(tmp_path / "job" / "optimization" / "candidates.jsonl"))
    with_demos = [c for c in candidates if c["demos"]]
    assert with_demos, "no evaluated candidate used demos"
    for record in candidates:
        candidate = Candidate.from_dict(record)
        text = candidate.components["role/solver"]
        assert (DEMO_HEADER in text) == bool(candidate.demos)
        for demo in candidate.demos:
            assert demo["role"] == "solver" and demo["problem_id"] in TRAIN_SOLVED
            assert demo["output"] in text and demo["input"] in text


def test_minibatch_mode_scores_trials_on_a_subset_and_fully_evaluates_the_best(tmp_path: Path, useful: Any) -> None:
    run_job(world_job_config(tmp_path / "job", useful.base_url, method="mipro", budget=40,
                             method_params={"minibatch": True, "minibatch_size": 2, "num_trials": 3,
                                            "minibatch_full_eval_steps": 2}), fast_runtime())
    optimization = read_sealed(tmp_path / "job" / "optimization.json")
    events = [row["event"] for row in optimization["history"]]
    assert events.count("full_eval") >= 1
    trials = [row for row in optimization["history"] if row["event"] == "trial"]
    assert all(row["full"] is False for row in trials)
    assert optimization["metadata"]["incumbent_val_score"] == 1.0


def test_demo_sets_and_rendering() -> None:
    sets = demo_sets(["a", "b", "c"], count=3, size=2, rng=random.Random(0))
    assert sets[0] == () and all(len(s) == 2 for s in sets[1:])
    assert demo_sets([], count=3, size=2, rng=random.Random(0)) == [()]
    demos = [Demo("solver", "a", "Problem A", "reply A")]
    text = render("Instruction.", demos)
    assert text.startswith("Instruction.") and DEMO_HEADER in text and "reply A" in text
    assert render("Instruction.", []) == "Instruction."
