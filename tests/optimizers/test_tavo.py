"""TAVO: end to end on the scripted world in every mode, the credit switch, segmentation, overlays."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from optimizers.journal import read_jsonl, read_sealed
from optimizers.protocol.job.engine import run_job
from optimizers.tavo.credit import Credit, by_frequency, lead_role, segment
from optimizers.tavo.optimizer import BatchPlan, TAVOParams, plan_batches, validation_batch_size
from optimizers.tavo.proposals import OVERLAY_CLOSE, strip_overlay, with_overlay
from scripted_world import MARKER, fast_runtime, run_cli, start_world, world_job_config


@pytest.fixture(scope="module")
def useful() -> Any:
    server = start_world(world="useful")
    yield server
    server.stop()


def purposes(out: Path) -> Counter[str]:
    return Counter(r["purpose"] for r in read_jsonl(out / "optimization" / "native" / "reflection.jsonl"))


def test_tavo_cli_paper_mode_improves_validation_and_deploys(tmp_path: Path, useful: Any) -> None:
    out = tmp_path / "job"
    done = run_cli(useful.base_url, out, "tavo", "method.max_outer_rounds=2", budget=30)
    assert done.returncode == 0, done.stderr[-3000:]
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line["fallback_reason"] is None and line["deployed_mean"] > line["baseline_mean"]
    optimization = read_sealed(out / "optimization.json")
    metadata = optimization["metadata"]
    assert metadata["mode"] == "paper" and metadata["credit"] is True
    assert metadata["params"]["max_outer_rounds"] == 2
    solver = optimization["incumbent_candidate"]["components"]["role/solver"]
    assert MARKER in solver and "TAVO_POLICY" not in solver  # a rewrite, not an overlay
    attempts = [row for row in optimization["history"] if row["event"] == "attempt"]
    assert attempts[0]["adopted"] is True and attempts[0]["val_score"] == 1.0
    assert set(purposes(out)) == {"rate", "credit", "aggregate", "rewrite"}
    # Credit prompts carry our grader feedback.
    credit_prompts = [r["prompt"] for r in read_jsonl(out / "optimization" / "native" / "reflection.jsonl")
                      if r["purpose"] == "credit"]
    assert all("hidden tests" in p for p in credit_prompts)
    reflection = metadata["reflection"]
    print(f"\n[tavo figure] charged={optimization['budget']['charged']} reflection_calls={reflection['calls']} "
          f"reflection_tokens={reflection['total_tokens']} stop={optimization['stop_reason']}")


@pytest.mark.parametrize("mode", ["overlay", "hybrid"])
def test_overlay_modes_append_one_rule_block_to_the_seed(mode: str, tmp_path: Path, useful: Any) -> None:
    out = tmp_path / mode
    result = run_job(world_job_config(out, useful.base_url, method="tavo", budget=30,
                                      method_params={"mode": mode, "max_outer_rounds": 2}), fast_runtime())
    optimization = read_sealed(out / "optimization.json")
    seed = optimization["seed_candidate"]["components"]["role/solver"]
    solver = optimization["incumbent_candidate"]["components"]["role/solver"]
    assert solver.count("<<< TAVO_POLICY id:") == 1 and solver.count(OVERLAY_CLOSE) == 1
    assert MARKER in solver
    if mode == "overlay":
        assert solver.startswith(seed)
    assert "overlay" in purposes(out)
    assert result["selection"]["selected_candidate"] == "incumbent"


def test_credit_switch_turns_step_ratings_off(tmp_path: Path, useful: Any) -> None:
    out = tmp_path / "ablation"
    run_job(world_job_config(out, useful.base_url, method="tavo", budget=30,
                             method_params={"credit": False, "max_outer_rounds": 1}), fast_runtime())
    counts = purposes(out)
    assert counts["rate"] == 0 and counts["credit"] > 0
    assert read_sealed(out / "optimization.json")["metadata"]["credit"] is False


def test_a_budget_below_one_full_attempt_still_proposes_and_tests_a_candidate(tmp_path: Path, useful: Any) -> None:
    out = tmp_path / "small"
    run_job(world_job_config(out, useful.base_url, method="tavo", budget=6), fast_runtime())
    optimization = read_sealed(out / "optimization.json")
    attempts = [row for row in optimization["history"] if row["event"] == "attempt"]
    assert len(attempts) == 1 and attempts[0]["val_score"] is not None
    assert attempts[0]["candidate_id"] != optimization["seed_candidate"]["id"]
    assert optimization["budget"]["charged"] == 6 and optimization["metadata"]["batches_shrunk_for_budget"]
    assert optimization["stop_reason"] == "budget_before_outer_round"


def test_tavo_keeps_the_seed_when_edits_do_not_help(tmp_path: Path) -> None:
    server = start_world(world="useless")
    try:
        result = run_job(world_job_config(tmp_path / "job", server.base_url, method="tavo", budget=40),
                         fast_runtime())
    finally:
        server.stop()
    optimization = read_sealed(tmp_path / "job" / "optimization.json")
    assert optimization["stop_reason"] in ("native_patience", "budget_before_outer_round", "budget_before_retry")
    assert result["selection"]["selected_candidate"] == "seed"
    assert all(not row.get("adopted") for row in optimization["history"])


def test_decentralized_team_gets_credit_per_speaking_role(tmp_path: Path, useful: Any) -> None:
    out = tmp_path / "team"
    result = run_job(world_job_config(out, useful.base_url, method="tavo", topology="decentralized",
                                      team_size=2, budget=30, method_params={"max_outer_rounds": 1}),
                     fast_runtime())
    optimization = read_sealed(out / "optimization.json")
    components = optimization["incumbent_candidate"]["components"]
    assert MARKER in components["role/debater"]
    assert components["protocol/handoff"] == optimization["seed_candidate"]["components"]["protocol/handoff"]
    rate_prompts = [r["prompt"] for r in read_jsonl(out / "optimization" / "native" / "reflection.jsonl")
                    if r["purpose"] == "rate"]
    # Steps follow the peers' turns; each hand-off opens the turn of the peer it was sent to.
    assert rate_prompts and any("### Step 3 - debater (peer1)\n[peers (peer1) | user]" in p for p in rate_prompts)
    assert result["selection"]["selected_candidate"] == "incumbent"


@pytest.mark.parametrize("unit", ["segment", "trajectory"])
def test_paper_mode_credits_each_role_step_and_one_call_per_trajectory_stays_an_option(
    unit: str, tmp_path: Path, useful: Any
) -> None:
    out = tmp_path / unit
    params: dict[str, Any] = {"max_outer_rounds": 1, "attempts_per_round": 1}
    if unit == "trajectory":
        params["credit_unit"] = "trajectory"  # the default in paper mode is "auto" = segment
    run_job(world_job_config(out, useful.base_url, method="tavo", topology="decentralized", team_size=2,
                             budget=30, method_params=params), fast_runtime())
    optimization = read_sealed(out / "optimization.json")
    assert optimization["metadata"]["credit_unit"] == unit
    records = list(read_jsonl(out / "optimization" / "native" / "reflection.jsonl"))
    rated = [r["prompt"] for r in records if r["purpose"] == "rate"]
    credit = [r["prompt"] for r in records if r["purpose"] == "credit"]
    # One trajectory per rated prompt; the debater role acts in every one of its steps.
    steps_per_trajectory = [sorted(set(int(n) for n in re.findall(r"### Step (\d+) - debater", p)))
                            for p in rated]
    attempt = next(row for row in optimization["history"] if row["event"] == "attempt")
    if unit == "segment":
        expected = sum(min(len(steps), 5) for steps in steps_per_trajectory)
        assert expected > len(rated)  # several steps per trajectory: more than one call each
        assert len(credit) == attempt["credit_calls"] == expected
        assert all("The step being credited (step " in p for p in credit)
    else:
        assert len(credit) == attempt["credit_calls"] == len(rated)
        assert all("steps (last 5)" in p for p in credit)


# ------------------------------------------------------------------------------------------------
# Pure pieces


def _m(source: str, kind: str, content: str = "x", agent: str = "") -> dict[str, Any]:
    return {"source": source, "kind": kind, "content": content, "agent": agent or source}


def test_segments_follow_role_turns_and_tool_replies() -> None:
    trace = [_m("system", "system"), _m("user", "user", "the task"),
             _m("coder", "ai", "a"), _m("tool:python_exec", "tool", "out"),
             _m("peers", "user", "handoff", agent="tester"), _m("tester", "ai", "b"), _m("coder", "ai", "c")]
    parts = segment(trace)
    assert [(s.index, s.role) for s in parts] == [(0, "coder"), (1, "tester"), (2, "coder")]
    assert [m["content"] for m in parts[0].messages] == ["a", "out"]
    assert [m["content"] for m in parts[1].messages] == ["handoff", "b"]  # a hand-off opens its agent's step
    assert [s.index for s in segment(trace, limit=2)] == [1, 2]


def test_centralized_segments_run_from_one_manager_turn_to_the_next() -> None:
    trace = [_m("user", "user", "task"), _m("manager", "ai", "plan"), _m("tool:delegate", "tool", "go"),
             _m("coder_worker", "ai", "code"), _m("manager", "ai", "final")]
    lead = lead_role(["coder_worker", "manager"])
    parts = segment(trace, lead=lead)
    assert lead == "manager" and [s.role for s in parts] == ["manager", "manager"]
    assert [m["content"] for m in parts[0].messages] == ["plan", "go", "code"]


def test_overlay_replaces_the_previous_one() -> None:
    first = with_overlay("Seed prompt.", ["rule one"])
    second = with_overlay(first, ["rule two", "rule three"])
    assert second.count("TAVO_POLICY id:") == 1 and "rule one" not in second and "rule three" in second
    assert strip_overlay(second) == "Seed prompt."
    assert with_overlay(first, []) == "Seed prompt."


def test_frequency_fallback_ranks_edits() -> None:
    credits = [Credit("p1", "r", 5, "", {"add": ("x", "y"), "remove": (), "restructure": ()}),
               Credit("p2", "r", 5, "", {"add": ("y",), "remove": ("z",), "restructure": ()})]
    ranked = by_frequency(credits)
    assert ranked.add == ["y", "x"] and ranked.remove == ["z"] and ranked.restructure == []


def test_validation_batch_size_follows_the_budget() -> None:
    params = TAVOParams()
    assert validation_batch_size(params, 600, 50) == 50
    assert validation_batch_size(params, 30, 4) == 3  # the minimum batch
    assert validation_batch_size(TAVOParams(validation_batch=2), 600, 50) == 2
    # The reference's layout v + K (t + v) <= B: v = (B - K t) // (K + 1). With K = 3 rounds of
    # 6 train rows and B = 300: (300 - 18) // 4 = 70 (dividing by t would give 47).
    assert validation_batch_size(TAVOParams(max_outer_rounds=3), 300, 200) == (300 - 3 * 6) // (3 + 1) == 70
    # ... with the train batch actually drawn: a split of 4 rows gives t = 4, (60 - 5 x 4) // 6 = 6.
    assert validation_batch_size(params, 60, 50, train_size=4) == (60 - 5 * 4) // (5 + 1) == 6
    with pytest.raises(ValueError, match="mode"):
        TAVOParams(mode="release").check()


def test_batches_shrink_only_when_the_budget_cannot_pay_one_attempt() -> None:
    params = TAVOParams()
    assert plan_batches(params, 600, 150, 50) == BatchPlan(6, 50)
    assert plan_batches(params, 12, 6, 4) == BatchPlan(6, 3)  # seed val 3 + train 6 + val 3 fits
    assert plan_batches(params, 6, 6, 4) == BatchPlan(2, 2, shrunk=True)
    assert plan_batches(params, 4, 6, 4) == BatchPlan(2, 1, shrunk=True)
    assert plan_batches(params, 2, 6, 4) == BatchPlan(6, 3)  # nothing fits: the run says so itself
