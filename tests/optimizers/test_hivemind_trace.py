"""HiveMind step by step against a trace worked out by hand (issue 21, item 14).

World: the scripted useful world on built-in data, an independent team of two coders sharing one
prompt, job seed 0, budget 62; the team's seed prompt solves only ``builtin_travel_time``, the
lessons carry the marker that solves everything.

Worked out from the spec (reference optimizers/hivemind):
- players coder#0, coder#1: 2^2 = 4 <= 40, so the exact plan {}, {coder#0}, {coder#1}, {both};
- batches fixed once: coalition batch min(5, 6 train) = 5, acceptance min(5, 4 val, 6 train) = 4;
  one cycle costs 4 x 5 + 2 x 4 = 28;
- row orders: ``random.Random(100003 * 0 + 0)`` shuffles the train split, then the validation
  split (the same RNG), exactly as the reference does;
- cycle 1 (charged 0 -> 28): train rows 1-5 of the order; only travel_time is solved, by any
  non-empty coalition: worth {} 0, others 0.2; Shapley 0.1 each, the coder prompt 0.2; cases: 4
  losing, 1 winning; the lesson block makes a candidate that solves all 4 validation rows where
  the current prompt solves none: 1.0 > 0.0, accepted, committed to the learning curve;
- cycle 2 (28 -> 56): train rows 6, 1, 2, 3, 4 (round robin); the incumbent solves everything:
  worth 1.0 for every non-empty coalition, Shapley 0.5 each, coder 1.0; the candidate (seed +
  both blocks) ties the current prompt on the same 4 validation rows (the order wraps): 1.0 vs
  1.0, rejected;
- 62 - 56 = 6 < 28: no third cycle, and no shrunken one; stop ``budget`` at 56 charged.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from optimizers.hivemind.lessons import LESSONS_HEADER
from optimizers.journal import read_jsonl, read_sealed
from optimizers.protocol.job.engine import run_job
from scripted_world import MARKER, fast_runtime, start_world, world_job_config

TRAIN_ORDER = ["builtin_longest_climb", "builtin_travel_time", "builtin_count_prefixed",
               "builtin_temperature_swing", "builtin_job_scheduling", "builtin_merge_intervals"]
VAL_ORDER = ["builtin_kth_distinct", "builtin_max_window_sum", "builtin_binary_strings", "builtin_shortest_route"]
PLAN = ["{}", "{coder#0}", "{coder#1}", "{coder#0,coder#1}"]

# (cycle, train rows, worth per coalition, prompt Shapley, target, validation rows,
#  current vs candidate validation mean, accepted, charged after the cycle)
TRACE = [
    (1, TRAIN_ORDER[:5], {"{}": 0.0, "{coder#0}": 0.2, "{coder#1}": 0.2, "{coder#0,coder#1}": 0.2},
     {"coder": 0.2}, "coder", VAL_ORDER, (0.0, 1.0), True, 28),
    (2, TRAIN_ORDER[5:] + TRAIN_ORDER[:4], {"{}": 0.0, "{coder#0}": 1.0, "{coder#1}": 1.0, "{coder#0,coder#1}": 1.0},
     {"coder": 1.0}, "coder", VAL_ORDER, (1.0, 1.0), False, 56),
]
# Charged rollouts per (phase, sample, mask, candidate): every coalition has its own sample, so
# its own request seeds; the gate's two candidates share the cycle's validation sample.
ROLLOUTS = {
    ("train", 0, "[]", "seed"): TRAIN_ORDER[:5],
    ("train", 1, "['coder#0']", "seed"): TRAIN_ORDER[:5],
    ("train", 2, "['coder#1']", "seed"): TRAIN_ORDER[:5],
    ("train", 3, "None", "seed"): TRAIN_ORDER[:5],
    ("val", 0, "None", "seed"): VAL_ORDER,
    ("val", 0, "None", "block1"): VAL_ORDER,
    ("train", 4, "[]", "block1"): TRAIN_ORDER[5:] + TRAIN_ORDER[:4],
    ("train", 5, "['coder#0']", "block1"): TRAIN_ORDER[5:] + TRAIN_ORDER[:4],
    ("train", 6, "['coder#1']", "block1"): TRAIN_ORDER[5:] + TRAIN_ORDER[:4],
    ("train", 7, "None", "block1"): TRAIN_ORDER[5:] + TRAIN_ORDER[:4],
    ("val", 1, "None", "block1"): VAL_ORDER,
    ("val", 1, "None", "blocks12"): VAL_ORDER,
}


def _run(out: Path, **overrides: Any) -> dict[str, Any]:
    server = start_world(world="useful", seed_solves={"builtin_travel_time"})
    try:
        config = {"method": "hivemind", "topology": "independent", "team_size": 2, "budget": 62, **overrides}
        run_job(world_job_config(out, server.base_url, **config), fast_runtime())
    finally:
        server.stop()
    return read_sealed(out / "optimization.json")


def test_two_cycles_follow_the_hand_worked_trace(tmp_path: Path) -> None:
    out = tmp_path / "job"
    optimization = _run(out)
    metadata = optimization["metadata"]
    assert metadata["train_order"] == TRAIN_ORDER and metadata["validation_order"] == VAL_ORDER
    assert metadata["coalition_plan"] == PLAN and metadata["plan"] == "exact"
    assert (metadata["coalition_batch"], metadata["acceptance_batch"], metadata["cycle_cost"]) == (5, 4, 28)
    steps = [(row["cycle"], row["train_ids"], row["worth"], row["prompt_shapley"], row["target"], row["val_ids"],
              (row["current_val_score"], row["candidate_val_score"]), row["accepted"], row["charged"])
             for row in optimization["history"]]
    assert steps == TRACE
    assert optimization["stop_reason"] == "budget" and optimization["budget"]["charged"] == 56
    assert optimization["budget"]["remaining"] == 6  # less than a whole cycle: no shrunken third one

    # Which candidate ran which rows, with which sample (so which request seeds), each charged once.
    seed_id = optimization["seed_candidate"]["id"]
    incumbent = optimization["incumbent_candidate"]
    names = {seed_id: "seed", incumbent["id"]: "block1",
             optimization["history"][1]["candidate_id"]: "blocks12"}
    assert len(names) == 3
    charged: dict[tuple[str, int, str, str], list[str]] = defaultdict(list)
    seeds: dict[tuple[str, int], set[int]] = defaultdict(set)
    for rollout in read_jsonl(out / "optimization" / "rollouts.jsonl"):
        assert rollout["charged"]
        key = (rollout["phase"], rollout["sample"], str(rollout.get("active")), names[rollout["candidate_id"]])
        charged[key].append(rollout["problem_id"])
        if rollout["phase"] == "train" and rollout["sample"] < 4:
            seeds[(rollout["problem_id"], 0)].add(rollout["seed"])
    assert {key: sorted(ids) for key, ids in charged.items()} == {key: sorted(ids) for key, ids in ROLLOUTS.items()}
    assert all(len(found) == 4 for found in seeds.values())  # the 4 coalitions draw 4 different seeds

    # The curve starts at the seed's measured score: the whole team's worth in cycle 1, 0.2 (1 of
    # its 5 rows), committed once its 4 x 5 = 20 coalition rollouts are in (so from grid point 20);
    # the incumbent is the seed prompt plus the one accepted block; the curve shows it from 28 on.
    coder = incumbent["components"]["role/coder"]
    seed_coder = optimization["seed_candidate"]["components"]["role/coder"]
    assert coder.startswith(seed_coder.rstrip() + f"\n\n{LESSONS_HEADER}\n- ") and coder.count(MARKER) == 1
    assert metadata["lessons"]["coder"] == [coder.split(f"{LESSONS_HEADER}\n", 1)[1]]
    curve = [(row["reason"], row["charged_rollouts"], row["incumbent_candidate_id"], row["incumbent_score"])
             for row in read_jsonl(out / "optimization" / "learning_curve.jsonl")]
    assert curve[:4] == [("initial_state", 0, seed_id, None), ("grid", 10, seed_id, None),
                         ("grid", 20, seed_id, 0.2), ("grid", 30, incumbent["id"], 1.0)]
    assert ("stop", 56, incumbent["id"], 1.0) in curve

    # What the reflection model read: the target's Shapley value and the cases, losing then winning.
    prompts = [r["prompt"] for r in read_jsonl(out / "optimization" / "native" / "reflection.jsonl")]
    assert len(prompts) == 2
    assert "(Shapley value over the team's score): 0.2000" in prompts[0]
    assert "(Shapley value over the team's score): 1.0000" in prompts[1]
    losing, winning = prompts[0].split("WINNING runs", 1)
    assert losing.count("[case ") == 4 and winning.count("[case ") == 1
    assert "Revision 1." in prompts[0] and "Revision 2." in prompts[1]


def test_shared_coalition_seeds_is_a_knob(tmp_path: Path) -> None:
    out = tmp_path / "job"
    optimization = _run(out, budget=28, method_params={"shared_coalition_seeds": True})
    assert optimization["budget"]["charged"] == 28
    seeds: dict[str, set[int]] = defaultdict(set)
    for rollout in read_jsonl(out / "optimization" / "rollouts.jsonl"):
        if rollout["phase"] == "train":
            assert rollout["sample"] == 0
            seeds[rollout["problem_id"]].add(rollout["seed"])
    assert len(seeds) == 5 and all(len(found) == 1 for found in seeds.values())  # common random numbers


def test_a_reply_without_lessons_skips_the_gate(tmp_path: Path) -> None:
    # single agent: 2 coalitions ({} and {solver}) x 5 + a gate of 2 x 4 = 18 per cycle; a reply
    # with no lesson makes no candidate, so the gate's 8 rollouts are never spent
    from optimizers.reflection import REFLECTION_SYSTEM
    from scripted_world import world_script
    from topologies.scripted import FunctionRule, Script, ScriptedServer

    def prose(request: Any) -> str | None:
        if REFLECTION_SYSTEM in request.system and "Task: hivemind/lessons." in request.system:
            return "The role did fine; I have nothing to add."
        return None

    server = ScriptedServer(Script([FunctionRule("prose", prose), *world_script(world="useful").rules],
                                   default=None)).start()
    out = tmp_path / "job"
    try:
        run_job(world_job_config(out, server.base_url, method="hivemind", budget=26), fast_runtime())
    finally:
        server.stop()
    optimization = read_sealed(out / "optimization.json")
    steps = [(row["cycle"], row["new_lessons"], row["accepted"], row.get("reason"), row["charged"], "val_ids" in row)
             for row in optimization["history"]]
    assert steps == [(1, "", False, "no_new_lessons", 10, False)]  # 26 - 10 = 16 < 18: no second cycle
    assert optimization["stop_reason"] == "budget" and optimization["budget"]["charged"] == 10
    assert {r["phase"] for r in read_jsonl(out / "optimization" / "rollouts.jsonl")} == {"train"}
