"""HiveMind from the command line (centralized, end to end, W&B) and killed mid-cycle (resume)."""

from __future__ import annotations

import json
from pathlib import Path

from optimizers.journal import read_jsonl, read_sealed
from scripted_world import REFLECTION_ID, run_and_kill, run_cli, start_world
from test_hivemind import pair_job


def test_cli_centralized_end_to_end(tmp_path: Path) -> None:
    from optimizers.protocol.report.tracking import offline_run_dirs, read_offline_run

    server = start_world(world="useful")
    try:
        out = tmp_path / "job"
        done = run_cli(server.base_url, out, "hivemind", "--dataset", "lcb", "--tracker", "wandb",
                       "method.manager_every_k=1", topology="centralized", budget=30)
        lessons_requests = [r for r in server.requests if "Task: hivemind/lessons." in r.messages[0]["content"]]
    finally:
        server.stop()
    # --reflection-model is the model the lessons are asked of
    assert [r.body["model"] for r in lessons_requests] == [REFLECTION_ID]
    assert done.returncode == 0, done.stderr[-3000:]
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line["status"] == "completed"
    result = read_sealed(out / "result.json")
    optimization = result["optimization"]
    assert optimization["budget"]["charged"] == 30 and optimization["stop_reason"] == "budget"
    reflection = optimization["usage"]["reflection"]
    assert reflection["calls"] == 1 and reflection["prompt_tokens"] > 0 and reflection["completion_tokens"] > 0
    assert read_sealed(out / "optimization.json")["history"][0]["target"] == "manager"  # manager_every_k=1: every cycle targets the manager
    assert line["deployed_mean"] > line["baseline_mean"]  # in this world only the manager's prompt matters
    run = read_offline_run(offline_run_dirs(out)[0])
    assert run.summary["budget/charged"] == 30
    assert run.summary["usage/reflection/calls"] == 1 and run.summary["usage/reflection/prompt_tokens"] > 0
    assert run.summary["hivemind/masked_rollouts"] > 0


def test_killed_during_coalition_runs_resumes_to_the_same_cycle(tmp_path: Path) -> None:
    config = {"method": "hivemind", "topology": "independent", "team_size": 2, "budget": 28}
    reference = tmp_path / "uninterrupted"
    pair_job(reference, start_world(world="useful"))
    slow = start_world(world="useful", latency_s=0.03)
    try:
        out = tmp_path / "killed"
        assert 0 < run_and_kill(out, slow.base_url, config, kill_after_charged=8) < 20  # mid coalitions
    finally:
        slow.stop()
    pair_job(out, start_world(world="useful"))
    resumed, uninterrupted = read_sealed(out / "optimization.json"), read_sealed(reference / "optimization.json")
    assert resumed["history"] == uninterrupted["history"]
    assert resumed["incumbent_candidate"] == uninterrupted["incumbent_candidate"]
    assert resumed["budget"] == uninterrupted["budget"]
    charged = [(a["candidate_id"], a["problem_id"], a["phase"], a["sample"], json.dumps(a.get("active")))
               for a in read_jsonl(out / "optimization" / "attempts.jsonl") if a["charged"]]
    assert len(charged) == len(set(charged)) == 28  # no masked or unmasked rollout paid twice
