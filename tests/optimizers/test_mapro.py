"""MAPRO on the scripted world: it finds and deploys the marker prompt, keeps the seed when
nothing helps, its MAP step picks exactly the combination the judge rates highest, and its
judge/probe calls reach result.json, W&B and the report."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from optimizers.journal import read_jsonl, read_sealed
from optimizers.protocol.job.engine import JobRuntime, run_job
from optimizers.team_graph import infer_team_graph, role_context, role_output
from scripted_world import (
    MARKER,
    MODEL_ID,
    REFLECTION_ID,
    fast_runtime,
    judge_sections,
    models_by_surface,
    start_world,
    world_job_config,
)


@pytest.fixture(scope="module")
def useful() -> Any:
    server = start_world(world="useful")
    yield server
    server.stop()


def test_mapro_finds_the_marker_prompt_deploys_it_and_reports_judge_cost(tmp_path: Path, useful: Any,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from optimizers.protocol.grid.config import TrackerSpec
    from optimizers.protocol.report.page import summary_rows
    from optimizers.protocol.report.data import load
    from optimizers.protocol.report.tracking import make_tracker, offline_run_dirs, read_offline_run

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    out = tmp_path / "runs" / "job"
    cfg = world_job_config(out, useful.base_url, method="mapro", budget=20,
                           tracker=TrackerSpec(kind="wandb", project="lcb-grid-test"))
    tracker = make_tracker(cfg, {"method": {"name": "mapro"}, "seed": 0})
    runtime = JobRuntime(tracker=tracker, retry_delay_s=0.0, client_max_retries=0, client_backoff_s=0.0,
                         in_grid=False)
    try:
        result = run_job(cfg, runtime)
    finally:
        tracker.finish("completed")
    optimization = read_sealed(out / "optimization.json")
    assert MARKER in optimization["incumbent_candidate"]["components"]["role/solver"]
    assert result["selection"]["selected_candidate"] == "incumbent"
    assert result["test"]["deployed_mean"] > result["test"]["baseline_mean"]
    rounds = [row for row in optimization["history"] if row["event"] == "round"]
    # Pool index 3 is the reworded variant that carries the marker (scripted_world._variants).
    assert rounds[0]["assignment"] == {"solver": 3} and rounds[0]["improved"] is True
    assert optimization["stop_reason"] == "patience"
    assert optimization["budget"]["charged"] == 12  # the seed and one new assignment on all 6 train rows
    # Judge and probe calls: not charged, counted from their journal, reported everywhere.
    judged = list(read_jsonl(out / "optimization" / "native" / "judge.jsonl"))
    calls = result["uncharged_calls"]
    assert set(calls) == {"judge", "probe"}
    for purpose in ("judge", "probe"):
        rows = [r for r in judged if r["purpose"] == purpose]
        assert calls[purpose]["calls"] == len(rows) > 0
        assert calls[purpose]["prompt_tokens"] == sum(r["usage"]["prompt_tokens"] for r in rows) > 0
        assert calls[purpose]["completion_tokens"] > 0 and calls[purpose]["failed"] == 0
    assert optimization["uncharged_calls"] == calls
    (path,) = offline_run_dirs(out)
    summary = read_offline_run(path).summary
    assert summary["uncharged/judge/calls"] == calls["judge"]["calls"]
    assert summary["uncharged/probe/prompt_tokens"] == calls["probe"]["prompt_tokens"]
    (row,) = summary_rows(load([tmp_path / "runs"], include_nonconformant=True, replicates=50))
    assert row["uncharged_calls"] == calls["judge"]["calls"] + calls["probe"]["calls"]
    assert row["uncharged_tokens"] == sum(c["prompt_tokens"] + c["completion_tokens"] for c in calls.values())


def test_mapro_keeps_the_seed_when_nothing_helps_and_the_judge_prefers_nothing(tmp_path: Path) -> None:
    server = start_world(world="useless")
    try:
        result = run_job(world_job_config(tmp_path / "job", server.base_url, method="mapro", budget=20),
                         fast_runtime())
    finally:
        server.stop()
    # Pools, blame and mutations go to the job's reflection model; judge and probe calls to the task model.
    models = models_by_surface(server.requests)
    assert models["reflection"] == {REFLECTION_ID} and models["judge"] == models["probe"] == {MODEL_ID}
    optimization = read_sealed(tmp_path / "job" / "optimization.json")
    rounds = [row for row in optimization["history"] if row["event"] == "round"]
    assert len(rounds) == 3 and all(row["assignment"] == {"solver": 0} for row in rounds)  # ties keep the incumbent
    assert optimization["stop_reason"] == "patience"
    assert optimization["budget"]["charged"] == 6  # the seed only: the incumbent is never paid for twice
    assert optimization["incumbent_candidate"]["id"] == optimization["seed_candidate"]["id"]
    assert result["selection"]["selected_candidate"] == "seed"
    assert result["uncharged_calls"]["judge"]["calls"] > 0
    # Failed runs are blamed (a lone prompt critiques itself) and the blame reaches every rewrite,
    # which cycles the three mutation operators.
    assert [row.get("blamed_roles") for row in rounds] == [["solver"], ["solver"], None]  # no rewrite after the stop
    reflection = list(read_jsonl(tmp_path / "job" / "optimization" / "native" / "reflection.jsonl"))
    mutations = [r["prompt"] for r in reflection if r["purpose"] == "mutate"]
    assert len(mutations) == 2 * 4  # two rounds of rewrites, pool size 5 = best + 4
    operators = [m.split("Operator: ", 1)[1].split(".", 1)[0] for m in mutations[:4]]
    assert sorted(operators) == ["adding", "adding", "reorganization", "replacement"]
    assert all("- Write clean code." in m for m in mutations)  # the scripted blame line


# ------------------------------------------------------------------------------------------------
# The MAP step picks exactly the combination the judge rates highest

_TAG = re.compile(r"TAG (\w+)-(\d)")
# Node rewards alone prefer coder 1 with debugger 1; the edge reward of (coder 2, debugger 3) is
# high enough that the joint optimum is that pair: 0.6 * 0.5 * 0.9 > 0.9 * 0.9 * 0.2.
NODE = {("coder", 1): 0.9, ("coder", 2): 0.6, ("debugger", 1): 0.9, ("debugger", 3): 0.5}
EDGE = {(2, 3): 0.9}


def _tagged_world() -> Any:
    from optimizers.judge import JUDGE_SYSTEM
    from optimizers.reflection import REFLECTION_SYSTEM
    from topologies.scripted import FunctionRule, Script, ScriptedServer, builtin_answers

    program = builtin_answers(lambda request, problem_id: False)

    def reflect(request: Any) -> str | None:
        if REFLECTION_SYSTEM not in request.system:
            return None
        if "Task: mapro/pool." in request.system:
            role = re.search(r"prompt of the `(\w+)` agent", request.last_user).group(1)  # type: ignore[union-attr]
            return "\n".join(f"VARIANT:\nYou are the {role}. TAG {role}-{k}" for k in range(1, 5))
        return "```\nno change\n```"

    def judge(request: Any) -> str | None:
        if JUDGE_SYSTEM not in request.system:
            return None
        sections = judge_sections(request.last_user)
        tags = {role: int(k) for name, text in sections.items() if "REPLY" in name
                for role, k in _TAG.findall(text)}
        if "REPLY" in sections:  # node prompt; the seed's replies carry no tag
            return str(next((NODE.get(pair, 0.1) for pair in tags.items()), 0.1))
        return str(EDGE.get((tags.get("coder", 0), tags.get("debugger", 0)), 0.2))

    def team(request: Any) -> str | None:
        answer = program(request)
        tag = _TAG.search(request.system)
        return f"{answer}\n{tag.group(0)}" if answer and tag else answer

    rules = [FunctionRule("reflect", reflect), FunctionRule("judge", judge), FunctionRule("team", team)]
    return ScriptedServer(Script(rules, default=None)).start()


def test_the_map_step_picks_the_combination_the_judge_rates_highest(tmp_path: Path) -> None:
    server = _tagged_world()
    try:
        run_job(world_job_config(tmp_path / "job", server.base_url, method="mapro", topology="sequential",
                                 team_size=2, budget=20, method_params={"max_iterations": 1}), fast_runtime())
    finally:
        server.stop()
    optimization = read_sealed(tmp_path / "job" / "optimization.json")
    assert optimization["metadata"]["graph"]["edges"] == [["coder", "debugger"]]
    (round_row,) = [row for row in optimization["history"] if row["event"] == "round"]
    assert round_row["assignment"] == {"coder": 2, "debugger": 3}
    assert round_row["node_rewards"]["coder"][1] == 0.9  # node rewards alone would have picked 1
    evaluated = [c for c in read_jsonl(tmp_path / "job" / "optimization" / "candidates.jsonl")
                 if c["id"] == round_row["candidate_id"]]
    (candidate,) = evaluated
    assert "TAG coder-2" in candidate["components"]["role/coder"]
    assert "TAG debugger-3" in candidate["components"]["role/debugger"]
    assert optimization["stop_reason"] == "max_iters"


# ------------------------------------------------------------------------------------------------
# Pure pieces


def _m(source: str, kind: str, content: str = "x", agent: str = "") -> dict[str, Any]:
    return {"source": source, "kind": kind, "content": content, "agent": agent or source}


def test_team_graph_follows_the_roles_and_who_speaks_first() -> None:
    chain = infer_team_graph(["tester", "coder", "analyzer"],
                             [[_m("user", "user"), _m("analyzer", "ai"), _m("coder", "ai"), _m("tester", "ai")]])
    assert chain.kind == "chain" and chain.edges == (("analyzer", "coder"), ("coder", "tester"))
    assert chain.successor("coder") == "tester" and chain.predecessors("coder") == ["analyzer"]
    assert chain.blame_targets("tester") == ["coder"]
    star = infer_team_graph(["coder_worker", "manager", "tester_worker"],
                            [[_m("manager", "ai"), _m("tester_worker", "ai"), _m("coder_worker", "ai")]])
    assert star.roles == ("manager", "tester_worker", "coder_worker")
    assert star.sweep_order() == ["tester_worker", "coder_worker", "manager"]
    assert star.successor("coder_worker") == "manager" and star.blame_targets("manager") == ["tester_worker",
                                                                                               "coder_worker"]
    peers = infer_team_graph(["debater"], [[_m("debater", "ai", agent="peer1"), _m("debater", "ai", agent="peer2")]],
                             has_handoff=True)
    assert (peers.kind, peers.replicas, peers.peers, peers.blame_targets("debater")) == ("shared", 2, True,
                                                                                           ["debater"])


def test_role_context_is_what_the_role_saw_before_it_spoke() -> None:
    trace = [_m("system", "system", "sys"), _m("user", "user", "THE TASK"), _m("analyzer", "ai", "plan A"),
             _m("coder", "ai", "code B"), _m("coder", "ai", "code C")]
    assert role_context(trace, "analyzer") == "THE TASK"
    assert "plan A" in role_context(trace, "coder") and "code B" not in role_context(trace, "coder")
    assert role_output(trace, "coder") == "code B\n\ncode C"


def test_critic_keeps_bounded_preference_demos() -> None:
    from optimizers.mapro.rewards import Demos, Rewards, critic_update

    demos: dict[str, Demos] = {}
    rewards = Rewards({"solver": [0.9, 0.3]}, {}, {}, {"solver": [["good"], ["bad"]]})
    notes = critic_update(demos, rewards, {"solver": 0}, 0.5, positive_threshold=0.75, negative_threshold=0.4,
                          keep=2)
    assert [n["polarity"] for n in notes] == ["positive", "negative"]
    assert critic_update(demos, rewards, {"solver": 0}, 0.4, positive_threshold=0.75, negative_threshold=0.4,
                         keep=2) == []  # under half solved: no positive; the negative is known already
    for text in ("a", "b", "c"):
        demos["solver"].add("positive", text, 2)
    assert demos["solver"].positive == ["b", "c"]
    assert demos["solver"].shown(3) == [("GOOD", "c"), ("BAD", "bad"), ("GOOD", "b")]
