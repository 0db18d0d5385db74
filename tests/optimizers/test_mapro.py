"""MAPRO on the scripted world: it finds and deploys the marker prompt, keeps the seed when
nothing helps, its MAP step picks exactly the combination the judge rates highest, and its
judge/probe calls reach result.json, W&B and the report."""

from __future__ import annotations

import json

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
    world_script,
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
    # A lone prompt has no upstream agent, so (as in the reference) nobody is blamed; every rewrite
    # gets the global outcome, and the rewrites cycle the three mutation operators.
    assert [row.get("blamed_roles") for row in rounds] == [[], [], None]  # no rewrite after the stop
    reflection = list(read_jsonl(tmp_path / "job" / "optimization" / "native" / "reflection.jsonl"))
    assert not [r for r in reflection if r["purpose"] == "blame"]
    mutations = [r["prompt"] for r in reflection if r["purpose"] == "mutate"]
    assert len(mutations) == 2 * 4  # two rounds of rewrites, pool size 5 = best + 4
    operators = [m.split("Operator ", 1)[1].split(":", 1)[0] for m in mutations[:4]]
    assert sorted(operators) == ["ADDING", "ADDING", "REORGANIZATION", "REPLACEMENT"]
    assert all("Over 3 sampled tasks, 0 succeeded and 3 failed." in m for m in mutations)
    assert all("by the others: (none)" in m for m in mutations)


# ------------------------------------------------------------------------------------------------
# The MAP step picks exactly the combination the judge rates highest

_TAG = re.compile(r"TAG (\w+)-(\d)")
# Node rewards alone prefer coder 1 with debugger 1; the edge reward of (coder 2, debugger 3) is
# high enough that the joint optimum is that pair: 0.6 * 0.5 * 0.9 > 0.9 * 0.9 * 0.2.
NODE = {("coder", 1): 0.9, ("coder", 2): 0.6, ("debugger", 1): 0.9, ("debugger", 3): 0.5}
EDGE = {(2, 3): 0.9}


def _tagged_world() -> Any:
    from optimizers.surfaces import identify
    from topologies.scripted import FunctionRule, Script, ScriptedServer, builtin_answers

    program = builtin_answers(lambda request, problem_id: False)

    def reflect(request: Any) -> str | None:
        task = identify(request.system, request.last_user)
        if task is None or task == ("mapro", "judge"):
            return None
        if task == ("mapro", "pool"):
            found = re.search(r"^Agent role: (\w+)", request.last_user, re.MULTILINE)
            role = found.group(1) if found else "?"
            return "\n".join(f"VARIANT:\nYou are the {role}. TAG {role}-{k}" for k in range(1, 5))
        return "```\nno change\n```"

    def judge(request: Any) -> str | None:
        if identify(request.system, request.last_user) != ("mapro", "judge"):
            return None
        sections = judge_sections(request.last_user)
        if "AGENT RESPONSE" in sections:  # node prompt; the seed's replies carry no tag
            tags = dict((role, int(k)) for role, k in _TAG.findall(sections["AGENT RESPONSE"]))
            return str(next((NODE.get(pair, 0.1) for pair in tags.items()), 0.1))
        # Edge: the coder candidate's output against the debugger candidate's *prompt*.
        coder = dict(_TAG.findall(sections["UPSTREAM OUTPUT"])).get("coder", "0")
        debugger = dict(_TAG.findall(sections["DOWNSTREAM ROLE PROMPT"])).get("debugger", "0")
        return str(EDGE.get((int(coder), int(debugger)), 0.2))

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


def test_critic_follows_the_reference_rules() -> None:
    from optimizers.mapro.rewards import Demos, Rewards, critic_update

    demos: dict[str, Demos] = {}
    pools = {"solver": ["p0", "p1", "p0"]}  # a padded pool: index 2 repeats the seed prompt
    rewards = Rewards({"solver": [0.9, 0.3, 0.8]}, {}, {}, {"solver": [["good", "x"], ["bad"], ["other"]]})
    notes = critic_update(demos, rewards, pools, {"solver": 2}, True, positive_threshold=0.75,
                          negative_threshold=0.4, keep=2)
    # Chosen index 2 is rated by its prompt's first copy (0.9 >= 0.75) and gives its own first output.
    assert notes == [{"role": "solver", "polarity": "positive", "candidate": 2},
                     {"role": "solver", "polarity": "negative", "candidate": 1}]
    assert [d.output for d in demos["solver"].positive] == ["other"]
    assert critic_update(demos, rewards, pools, {"solver": 1}, True, positive_threshold=0.75,
                         negative_threshold=0.4, keep=2) == []  # the worst is the chosen one; 0.3 < 0.75
    critic_update(demos, rewards, pools, {"solver": 0}, False, positive_threshold=0.75, negative_threshold=0.4,
                  keep=2)  # no success: no positive; the same negative is filed again (repeats allowed)
    assert [d.output for d in demos["solver"].negative] == ["bad", "bad"]
    for text in ("a", "b"):
        critic_update(demos, Rewards({"solver": [0.9]}, {}, {}, {"solver": [[text]]}), {"solver": ["p"]},
                      {"solver": 0}, True, positive_threshold=0.75, negative_threshold=0.4, keep=2)
    assert [d.output for d in demos["solver"].positive] == ["a", "b"]  # the newest two
    assert [d.label for d in demos["solver"].shown(3)] == ["+", "-", "+"]  # newest first, good on even slots
    assert demos["solver"].render(1) == "[GOOD] output: b  (why: selected prompt on a solved task)"
    assert Demos().render(3) == "(no demonstrations yet)"


# ------------------------------------------------------------------------------------------------
# Trace: the first rounds, worked out by hand from the reference (docs/methods/mapro.md)

TRAIN = ["builtin_temperature_swing", "builtin_count_prefixed", "builtin_travel_time", "builtin_merge_intervals",
         "builtin_longest_climb", "builtin_job_scheduling"]  # the built-in train split, in its order


def test_mapro_trace_on_the_useful_world(tmp_path: Path) -> None:
    """Single agent, 6 train rows, K=5, scripted world where only the marker prompt solves.

    seed:    the seed runs on all 6 train rows (charged 6), train score 0; the pool is the seed
             plus 4 variants, the third of which (index 3) carries the marker.
    round 1: 5 candidates x 3 contexts = 15 probes and 15 node judgements (one prompt: no edge);
             index 3's probes hold the correct program (0.9, the others 0.2), so MAP picks 3; it
             runs on all 6 rows (charged 12), scores 1.0 > 0: adopted, delta +1.0. Critic: 6/6
             solved, 0.9 >= 0.75 -> positive demo; worst index 0 (0.2 <= 0.4) -> negative demo.
             Blame: the 3 lowest runs of the best all passed -> no critique; the 4 rewrites give
             back the marker prompt itself, so the next pool is that prompt 5 times.
    rounds 2-4: MAP picks index 0 = the best team: nothing charged, its 1.0 reused, delta 0.
    stop:    after round 4 the last three deltas (0, 0, 0) are all <= 0: patience.
    """
    server = start_world(world="useful")
    try:
        result = run_job(world_job_config(tmp_path / "job", server.base_url, method="mapro", budget=30),
                         fast_runtime())
    finally:
        server.stop()
    optimization = read_sealed(tmp_path / "job" / "optimization.json")
    seed_id = optimization["seed_candidate"]["id"]
    best_id = optimization["incumbent_candidate"]["id"]
    trace = [(row["event"], row.get("assignment"), row["candidate_id"], row["rows"], row["charged"],
              row.get("improved"), row.get("delta")) for row in optimization["history"]]
    assert trace == [
        ("seed", None, seed_id, TRAIN, 6, None, None),
        ("round", {"solver": 3}, best_id, TRAIN, 12, True, 1.0),
        ("round", {"solver": 0}, best_id, [], 12, False, 0.0),
        ("round", {"solver": 0}, best_id, [], 12, False, 0.0),
        ("round", {"solver": 0}, best_id, [], 12, False, 0.0),
    ]
    assert optimization["stop_reason"] == "patience" and optimization["budget"]["charged"] == 12
    assert MARKER in optimization["incumbent_candidate"]["components"]["role/solver"]
    rounds = optimization["history"][1:]
    assert rounds[0]["node_rewards"] == {"solver": [0.2, 0.2, 0.2, 0.9, 0.2]}
    assert rounds[0]["demos_added"] == [{"role": "solver", "polarity": "positive", "candidate": 3},
                                        {"role": "solver", "polarity": "negative", "candidate": 0}]
    assert rounds[0]["blamed_runs"] == TRAIN[:3] and rounds[0]["blamed_roles"] == []
    # Uncharged: 15 probes and 15 judgements per round, 4 rounds; none failed or cut.
    calls = result["uncharged_calls"]
    assert (calls["probe"]["calls"], calls["judge"]["calls"]) == (60, 60)
    assert calls["probe"]["failed"] == calls["judge"]["failed"] == calls["probe"]["truncated"] == 0
    # The learning curve follows the search: the seed, then the adopted team at 12 rollouts.
    commits = [(r["committed_at"], r["incumbent_candidate_id"], r["incumbent_score"])
               for r in read_jsonl(tmp_path / "job" / "optimization" / "learning_curve.jsonl")
               if r["reason"] in ("grid", "stop")]
    assert commits[0] == (6, seed_id, 0.0) and (12, best_id, 1.0) in commits


def test_patience_counts_round_over_round_deltas() -> None:
    from optimizers.mapro.optimizer import patience_reached

    # A worse team (-0.2), then the best team again (its score reused: +0.2), then -0.1: the
    # deltas are round over round, so re-picking the best is progress and patience is not reached.
    assert not patience_reached([-0.2, 0.2, -0.1], 3, 0.0)
    assert patience_reached([0.5, 0.0, -0.2, 0.0], 3, 0.0)
    assert not patience_reached([0.0, 0.0], 3, 0.0)
    assert patience_reached([0.01, 0.0, 0.01], 3, 0.05)  # epsilon is the patience threshold


# ------------------------------------------------------------------------------------------------
# Cut replies: probes and judges that stop at their token limit are still used

QWEN3_ID = "scripted/qwen3-team-model"  # a Qwen3-family id: judges and probes ask to skip thinking


def _cut_world() -> Any:
    """The useful world, except that every probe and judge reply stops at its token limit
    (``finish_reason: length``): a probe's program is followed by a cut explanation, a judge's
    score by a cut justification."""
    from optimizers.surfaces import MAPRO_JUDGE_SYSTEM as JUDGE_SYSTEM
    from topologies.scripted import FunctionRule, Script, ScriptedServer

    useful = world_script(world="useful")

    def cut(request: Any) -> Any:
        probe = request.last_user.startswith("TASK:\n") and not request.body.get("tools")
        if JUDGE_SYSTEM not in request.system and not probe:
            return None
        rule = useful.rules[0] if JUDGE_SYSTEM in request.system else useful.rules[1]  # reflect/judge, solve
        reply = rule.function(request)
        text = reply if isinstance(reply, str) else str(reply)
        tail = " because the reply sh" if JUDGE_SYSTEM in request.system else "\n\nHere is why this works: fir"
        return {"content": text + tail, "finish_reason": "length"}

    return ScriptedServer(Script([FunctionRule("cut", cut), *useful.rules], default=None)).start()


def test_mapro_uses_cut_probe_and_judge_replies(tmp_path: Path) -> None:
    from optimizers.protocol.grid.config import ModelSpec
    from optimizers.surfaces import MAPRO_BLAME_SYSTEM, MAPRO_JUDGE_SYSTEM, MAPRO_REWRITER_SYSTEM, identify

    server = _cut_world()
    try:
        result = run_job(world_job_config(tmp_path / "job", server.base_url, method="mapro", budget=30,
                                          model=ModelSpec("scripted", QWEN3_ID, (server.base_url,))),
                         fast_runtime())
        requests = list(server.requests)
    finally:
        server.stop()
    optimization = read_sealed(tmp_path / "job" / "optimization.json")
    assert optimization["status"] == "completed" and optimization["stop_reason"] == "patience"
    calls = result["uncharged_calls"]
    for purpose in ("probe", "judge"):  # every reply was cut, every one was used
        assert calls[purpose]["calls"] == calls[purpose]["truncated"] == 60 and calls[purpose]["failed"] == 0
    rounds = [row for row in optimization["history"] if row["event"] == "round"]
    assert rounds[0]["node_rewards"] == {"solver": [0.2, 0.2, 0.2, 0.9, 0.2]}  # scores read from cut replies
    assert rounds[0]["improved"] is True and MARKER in optimization["incumbent_candidate"]["components"]["role/solver"]
    seed_id = optimization["seed_candidate"]["id"]
    commits = [r for r in read_jsonl(tmp_path / "job" / "optimization" / "learning_curve.jsonl")
               if r["reason"] in ("grid", "stop") and r["incumbent_candidate_id"] != seed_id]
    assert commits and commits[0]["incumbent_score"] == 1.0
    # Judges and probes asked the Qwen3-family endpoint to skip thinking; team rollouts did not.
    surfaces = {"judge": [], "probe": [], "team": []}
    for request in requests:
        system = " ".join(str(m.get("content", "")) for m in request.body["messages"] if m.get("role") == "system")
        user = next(str(m.get("content", "")) for m in request.body["messages"] if m.get("role") == "user")
        task = identify(system, user)
        kind = ("judge" if task == ("mapro", "judge") else "probe" if user.startswith("TASK:\n") else
                "reflection" if task is not None else "team")
        assert kind != "judge" or system == MAPRO_JUDGE_SYSTEM  # the reference's own judge system text
        limit = request.body.get("max_completion_tokens", request.body.get("max_tokens"))
        if kind == "reflection":  # the rewriter and blame pass send the reference's own system texts
            assert system == {"pool": MAPRO_REWRITER_SYSTEM, "mutate": MAPRO_REWRITER_SYSTEM,
                              "blame": MAPRO_BLAME_SYSTEM}[task[1]]
        # The reference's token limits: an 8-token judge, a 768-token probe (config/default).
        assert kind != "judge" or limit == 8
        assert kind != "probe" or limit == 768
        if kind in surfaces:
            surfaces[kind].append((request.body.get("chat_template_kwargs"), request.body.get("top_p"),
                                   request.body.get("temperature")))
    assert surfaces["judge"] and {s[0]["enable_thinking"] for s in surfaces["judge"] + surfaces["probe"]} == {False}
    assert surfaces["team"] and all(s[0] is None for s in surfaces["team"])
    # The reference's decoding: judges at temperature 0.2, top-p 1; probes at 0.2, top-p 0.9.
    assert {s[1:] for s in surfaces["judge"]} == {(1.0, 0.2)} and {s[1:] for s in surfaces["probe"]} == {(0.9, 0.2)}


# ------------------------------------------------------------------------------------------------
# Probe contexts per topology, judge parsing, thinking off


def _context_messages(context: str) -> list[tuple[str, str]]:
    """(source, content) of the JSON a probe context lists."""
    head, listed = context.split("\n\nSOURCE-TAGGED CONTEXT:\n", 1)
    assert head.startswith("TASK:\n")
    return [(m["source"], m["content"]) for m in json.loads(listed)]


def test_probe_contexts_follow_the_topology() -> None:
    from optimizers.mapro.contexts import NO_DELEGATION, probe_context
    from optimizers.team_graph import TeamGraph

    program = "def solve():\n" + "".join(f"    x{i} = {i}  # step {i}\n" for i in range(200))  # ~5000 chars
    chain_trace = [_m("system", "system", "SYS"), _m("user", "user", "THE TASK"), _m("analyzer", "ai", "plan A"),
                   _m("coder", "ai", program), _m("tester", "ai", "test C")]
    chain = TeamGraph("chain", ("analyzer", "coder", "tester"), (("analyzer", "coder"), ("coder", "tester")))
    # As the reference: the task header, then every message before the role's first turn, whole,
    # as source-tagged JSON (the task message first; never the system prompts).
    assert probe_context(chain, chain_trace, "analyzer") == (
        'TASK:\nTHE TASK\n\nSOURCE-TAGGED CONTEXT:\n[{"source": "user", "kind": "user", "content": "THE TASK"}]')
    assert _context_messages(probe_context(chain, chain_trace, "coder")) == [("user", "THE TASK"),
                                                                          ("analyzer", "plan A")]
    # The tester (downstream) sees the whole program it is to test, not a 1200-character clip.
    assert len(program) > 4000
    assert _context_messages(probe_context(chain, chain_trace, "tester")) == [
        ("user", "THE TASK"), ("analyzer", "plan A"), ("coder", program)]
    peers_trace = [_m("user", "user", "THE TASK"), _m("debater", "ai", "round 0", "peer1"),
                   _m("debater", "ai", "round 1", "peer2")]
    peers = TeamGraph("shared", ("debater",), (), replicas=2, peers=True)
    alone = TeamGraph("shared", ("debater",), (), replicas=2, peers=False)
    shared = json.loads(probe_context(peers, peers_trace, "debater").split("CONTEXT:\n", 1)[1])
    assert shared[1:] == [{"source": "debater", "agent": "peer1", "kind": "ai", "content": "round 0"},
                          {"source": "debater", "agent": "peer2", "kind": "ai", "content": "round 1"}]
    assert probe_context(alone, peers_trace, "debater") == "TASK:\nTHE TASK\n\nSOURCE-TAGGED CONTEXT:\n[]"
    star_trace = [_m("user", "user", "THE TASK"),
                  {**_m("manager", "ai", "delegating"), "tool_calls": [
                      {"name": "delegate_to_coder_worker", "args": {"instructions": "write the DP"}},
                      {"name": "delegate_to_tester_worker", "args": {"instructions": "test n=0"}}]},
                  _m("coder_worker", "ai", "code"), _m("tester_worker", "ai", "ok")]
    star = TeamGraph("star", ("manager", "coder_worker", "tester_worker", "analyzer_worker"),
                     tuple(("manager", w) for w in ("coder_worker", "tester_worker", "analyzer_worker")))
    assert probe_context(star, star_trace, "manager") == "TASK:\nTHE TASK"
    assert probe_context(star, star_trace, "coder_worker").endswith("MANAGER INSTRUCTIONS TO coder_worker:\n"
                                                                    "write the DP")
    assert probe_context(star, star_trace, "analyzer_worker").endswith(NO_DELEGATION)


def test_judge_replies_are_read_wherever_the_score_stands() -> None:
    from optimizers.judge import parse_score, thinking_off_body, visible_text

    assert parse_score("0.85") == 0.85 and parse_score("Score: 7/10") == 0.7 and parse_score("85") == 0.85
    assert parse_score("0.9 because the reply sh") == 0.9  # a reply cut at its token limit
    assert parse_score("1000") == 1.0 and parse_score("-3") == 0.0 and parse_score("no idea") == 0.5
    assert parse_score("<think>maybe 0.1</think>\n0.8") == 0.8  # thinking is ignored
    assert parse_score("<think>hmm, 0.1 or") == 0.5  # cut while thinking: nothing visible
    assert parse_score("0.2 first</think>0.6") == 0.6  # the client kept only the tail of a think block
    assert visible_text("<think>a</think> b <think>c") == "b"
    assert thinking_off_body("Qwen/Qwen3.5-9B") == {"chat_template_kwargs": {"enable_thinking": False}}
    assert thinking_off_body("qwen2.5-coder-0.5b-instruct") == {} and thinking_off_body(None) == {}


def test_blame_runs_on_a_chain_with_the_reference_blame_system_text(tmp_path: Path) -> None:
    # A two-stage chain on the useless world: every run fails, so between rounds the debugger
    # blames the coder. The blame pass (and the rewriter) send their own system texts, which the
    # journal's prompt hash covers: recomputing it with the expected text must match.
    from optimizers.reflection import prompt_hash
    from optimizers.surfaces import MAPRO_BLAME_SYSTEM, MAPRO_REWRITER_SYSTEM

    server = start_world(world="useless")
    try:
        run_job(world_job_config(tmp_path / "job", server.base_url, method="mapro", topology="sequential",
                                 team_size=2, budget=12, method_params={"max_iterations": 2, "candidate_count": 2}),
                fast_runtime())
        requests = list(server.requests)
    finally:
        server.stop()
    reflection = list(read_jsonl(tmp_path / "job" / "optimization" / "native" / "reflection.jsonl"))
    blame = [r for r in reflection if r["purpose"] == "blame"]
    assert blame and all("Agent 'debugger'" in r["prompt"] and "--- upstream coder ---" in r["prompt"] for r in blame)
    systems = {"blame": MAPRO_BLAME_SYSTEM, "pool": MAPRO_REWRITER_SYSTEM, "mutate": MAPRO_REWRITER_SYSTEM}
    assert {r["purpose"] for r in reflection} == set(systems)
    assert all(r["prompt_sha256"] == prompt_hash(r["purpose"], systems[r["purpose"]], r["prompt"]) for r in reflection)
    sent = [r for r in requests if "BLAME <agent>" in str(r.body["messages"][-1]["content"])]
    assert len(sent) == len(blame) and all(r.body["messages"][0] == {"role": "system", "content": MAPRO_BLAME_SYSTEM}
                                           for r in sent)
