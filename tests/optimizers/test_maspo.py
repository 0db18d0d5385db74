"""MASPO on the scripted world, step by step against traces worked out by hand from the
reference (docs/methods/maspo.md): per-node minibatches, paired and fresh parent runs, forced
A/B judging with its exact (uncharged) call count, duplicate beam nodes, the budget used to the
end, misalignment cases fed to the next role. Plus the model-free pieces."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import pytest

from optimizers.journal import read_jsonl, read_sealed
from optimizers.maspo.search import (
    BeamNode,
    Case,
    Weights,
    compose_minibatch,
    mine_misalignment,
    top_beam,
    win_rate,
)
from optimizers.protocol.job.engine import run_job
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

MERGE, JOB, TEMP, COUNT = "builtin_merge_intervals", "builtin_job_scheduling", "builtin_temperature_swing", \
    "builtin_count_prefixed"
CLIMB, TRAVEL = "builtin_longest_climb", "builtin_travel_time"


def _job(tmp_path: Path, world: str, **overrides: Any) -> tuple[dict[str, Any], dict[str, Any], Any]:
    server = start_world(world=world)
    try:
        result = run_job(world_job_config(tmp_path / "job", server.base_url, method="maspo", **overrides),
                         fast_runtime())
    finally:
        server.stop()
    return result, read_sealed(tmp_path / "job" / "optimization.json"), server


def _charged_runs(tmp_path: Path) -> list[tuple[str, str, int, str]]:
    """(candidate, problem, sample, pairing) of every charged rollout (journal: completion order)."""
    return [(r["candidate_id"], r["problem_id"], r["sample"], r["pairing"])
            for r in read_jsonl(tmp_path / "job" / "optimization" / "rollouts.jsonl") if r["charged"]]


def test_maspo_trace_single_agent(tmp_path: Path) -> None:
    """One shared prompt (terminal: global credit only), minibatch 4, depth 2, one step per visit,
    budget 40. Minibatches are Random(0) draws from the 6 train rows, in draw order.

    step 1 (depth 0): rows [merge, job, temp, count]; the seed runs them (4). The halves
      (merge, job) and (temp, count) give two marker rewrites c1, c2 (8): both solve every row,
      global 1.0, joint 0.5 > 0; beam [c1 0.5, c2 0.5]; c1 becomes the best (charged 12).
    refresh (depth 1): fresh rows [climb, merge, job, count]; the anchor c1 and c2 run them (8):
      all solve, global 0.5, score 0; the anchor stays, cumulative scores restart (charged 20).
    step 2 (depth 1): node c1 on [merge, travel, count, climb] (4, a fresh run of c1: new seeds);
      its first half rewrites to c1 itself (identical: 0, no rollouts), the second to c3 (4), a
      tie (global 0.5, joint 0): both carry c1. Node c2 on [count, travel, job, temp] (4); its
      rewrites c3 (again on count and travel in this step: the next turn, 4) and c4 (4) tie:
      both carry c2. Beam [c1, c1] (a duplicate node, as the reference keeps it); no update.
      Charged 40 = the budget: stop "budget".
    """
    result, optimization, _ = _job(tmp_path, "useful", budget=40,
                                   method_params={"minibatch": 4, "maximum_search_depth": 2, "rounds_per_turn": 1})
    history = optimization["history"]
    trace = [(row["event"], row["depth"], row["charged"], row.get("best_updated", row.get("anchor_shifted")))
             for row in history]
    assert trace == [("step", 1, 12, True), ("refresh", 1, 20, False), ("step", 2, 40, False)]
    step1, refresh, step2 = history
    assert [n["rows"] for n in step1["nodes"]] == [[MERGE, JOB, TEMP, COUNT]]
    assert [(c["global"], c["joint"]) for c in step1["nodes"][0]["candidates"]] == [(1.0, 0.5), (1.0, 0.5)]
    assert refresh["rows"] == [CLIMB, MERGE, JOB, COUNT] and refresh["nodes"][0]["score"] == 0.0
    assert [n["rows"] for n in step2["nodes"]] == [[MERGE, TRAVEL, COUNT, CLIMB], [COUNT, TRAVEL, JOB, TEMP]]
    assert [[c.get("identical_to_parent", False) for c in n["candidates"]] for n in step2["nodes"]] == [
        [True, False], [False, False]]
    assert all(c["joint"] == 0.0 for n in step2["nodes"] for c in n["candidates"])
    assert optimization["stop_reason"] == "budget" and optimization["budget"]["charged"] == 40
    runs = _charged_runs(tmp_path)
    assert len(runs) == len(set(runs)) == 40  # every charged rollout is a distinct request
    seed_id, best_id = optimization["seed_candidate"]["id"], optimization["incumbent_candidate"]["id"]
    assert sorted(r for r in runs if r[0] == seed_id) == sorted((seed_id, p, 0, "maspo/1")
                                                                for p in (MERGE, JOB, TEMP, COUNT))
    # c1 ran merge, job and count in all three steps: a fresh, charged run each time (new seeds).
    assert sorted((p, pairing) for c, p, _, pairing in runs if c == best_id) == sorted([
        *((p, "maspo/1") for p in (MERGE, JOB, TEMP, COUNT)), *((p, "maspo/2") for p in (CLIMB, MERGE, JOB, COUNT)),
        *((p, "maspo/3") for p in (MERGE, TRAVEL, COUNT, CLIMB))])
    repeats = [(p, pairing) for _, p, sample, pairing in runs if sample == 1]
    assert sorted(repeats) == [(COUNT, "maspo/3"), (TRAVEL, "maspo/3")]  # c3 again on rows it had in this step
    assert result["uncharged_calls"] == {}  # a lone prompt needs no judge
    assert MARKER in optimization["incumbent_candidate"]["components"]["role/solver"]


def test_maspo_trace_two_stage_team_with_exact_judge_count(tmp_path: Path) -> None:
    """Sequential coder -> debugger, minibatch 3, depth 1, budget 40.

    coder step: rows [merge, job, temp]; seed (3) + two marker-coder rewrites (3 each): the team
      still fails (the seed debugger answers), global 0.5; the coder's own replies now hold the
      correct program: 3 forced A/B calls per rewrite, all A (local 1.0); the debugger's replies
      are the same on both sides: neutral, 0.5 without a call. Joint 0.4 + 0.2 + 0.1 - 0.5 = 0.2.
      Charged 9, judge calls 6.
    debugger step (terminal): rows [travel, climb, merge]; seed-debugger parent (3) + two marker
      rewrites (3 each) solve: global 1.0, joint 0.5, no judge. Charged 18; every role at depth 1.
    """
    result, optimization, server = _job(tmp_path, "useful", topology="sequential", team_size=2, budget=40,
                                        method_params={"minibatch": 3, "maximum_search_depth": 1,
                                                       "rounds_per_turn": 1})
    steps = optimization["history"]
    assert [(s["role"], s["charged"], s["best_updated"], s["uncharged_calls"]) for s in steps] == [
        ("coder", 9, True, 6), ("debugger", 18, True, 6)]
    assert [n["rows"] for n in steps[0]["nodes"]] == [[MERGE, JOB, TEMP]]
    assert [n["rows"] for n in steps[1]["nodes"]] == [[TRAVEL, CLIMB, MERGE]]
    coder = steps[0]["nodes"][0]["candidates"]
    assert [(c["local"], c["lookahead"], c["global"], c["joint"]) for c in coder] == [(1.0, 0.5, 0.5, 0.2)] * 2
    assert [(c["global"], c["joint"]) for c in steps[1]["nodes"][0]["candidates"]] == [(1.0, 0.5)] * 2
    assert optimization["stop_reason"] == "maximum_search_depth" and optimization["budget"]["charged"] == 18
    # Judge calls: exactly 6, none charged, reported from their journal; MASPO judges with the
    # reflection model by default, as the reference does.
    calls = result["uncharged_calls"]
    judged = list(read_jsonl(tmp_path / "job" / "optimization" / "native" / "judge.jsonl"))
    assert calls == {"judge": {"calls": 6, "failed": 0, "truncated": 0,
                               "prompt_tokens": sum(r["usage"]["prompt_tokens"] for r in judged),
                               "completion_tokens": 6}}
    assert all(r["reply"] == "A" for r in judged)
    models = models_by_surface(server.requests)
    assert models["reflection"] == models["judge"] == {REFLECTION_ID} and models["team"] == {MODEL_ID}
    # As the reference, the proposer and the judge send no system message at all.
    maspo_requests = [r for r in server.requests if r.rule == "reflect"]
    assert len(maspo_requests) == 6 + 4  # the 6 judge calls and 4 proposals (2 per step)
    assert all([m["role"] for m in r.body["messages"]] == ["user"] for r in maspo_requests)
    # Paired seeds: a candidate and its parent ran each row with the same seed.
    seeds: dict[str, set[int]] = {}
    for r in read_jsonl(tmp_path / "job" / "optimization" / "rollouts.jsonl"):
        seeds.setdefault(r["problem_id"] + "@" + r["pairing"], set()).add(r["seed"])
    assert all(len(s) == 1 for s in seeds.values())
    assert MARKER in optimization["incumbent_candidate"]["components"]["role/coder"]
    assert MARKER in optimization["incumbent_candidate"]["components"]["role/debugger"]
    # Both incumbent changes reach the learning curve: the new coder at 9 rollouts (its team still
    # fails: 0.0), the new debugger at 18 (1.0).
    curve = list(read_jsonl(tmp_path / "job" / "optimization" / "learning_curve.jsonl"))
    commits = {(r["committed_at"], r["incumbent_score"]) for r in curve if r["commits"] > 0}
    assert commits == {(9, 0.0), (18, 1.0)}
    assert curve[-1]["incumbent_candidate_id"] == optimization["incumbent_candidate"]["id"]


def test_maspo_keeps_the_seed_when_nothing_helps(tmp_path: Path) -> None:
    result, optimization, _ = _job(tmp_path, "useless", topology="sequential", team_size=2, budget=40,
                                   method_params={"maximum_search_depth": 1})
    steps = [row for row in optimization["history"] if row["event"] == "step"]
    assert [s["role"] for s in steps] == ["coder", "debugger"]
    assert not any(s["best_updated"] for s in steps)
    assert optimization["stop_reason"] == "maximum_search_depth"
    assert optimization["incumbent_candidate"]["id"] == optimization["seed_candidate"]["id"]
    assert result["selection"]["selected_candidate"] == "seed"
    # The rewrites change nothing the team says: every pair is the same text, so local and
    # lookahead are 0.5 without a single judge call.
    coder = steps[0]["nodes"][0]["candidates"][0]
    assert (coder["local"], coder["lookahead"], coder["global"]) == (0.5, 0.5, 0.5)
    assert result["uncharged_calls"] == {}


def _misaligned_world() -> Any:
    """The coder's rewrite always wins locally; the debugger's reply after it loses on exactly
    the first row the judge compares (a misalignment case), and wins on the others."""
    from optimizers.surfaces import identify
    from topologies.scripted import FunctionRule, Script, ScriptedServer, builtin_answers

    program = builtin_answers(lambda request, problem_id: False)
    lock = threading.Lock()
    debugger_verdicts: list[str] = []

    def reflect(request: Any) -> str | None:
        if identify(request.system, request.last_user) != ("maspo", "propose"):
            return None
        return "<prompt>\nYou are a careful agent. IMPROVED\n</prompt>"

    def judge(request: Any) -> str | None:
        if identify(request.system, request.last_user) != ("maspo", "judge"):
            return None
        sections = judge_sections(request.last_user)
        if "Agent role: coder" in request.last_user:
            return "A" if "TAG improved" in sections["OUTPUT A"] and "TAG improved" not in sections["OUTPUT B"] else "B"
        with lock:
            debugger_verdicts.append("B" if not debugger_verdicts else "A")
            return debugger_verdicts[-1]

    def team(request: Any) -> str | None:
        answer = program(request)
        if answer is None:
            return None
        if "IMPROVED" in request.system:
            return f"{answer}\nTAG improved"
        conversation = request.all_text.replace(request.system, "")
        return f"{answer}\nsaw-improved" if "TAG improved" in conversation else answer

    rules = [FunctionRule("reflect", reflect), FunctionRule("judge", judge), FunctionRule("team", team)]
    return ScriptedServer(Script(rules, default=None)).start()


def test_a_misalignment_case_is_fed_into_the_next_roles_minibatch(tmp_path: Path) -> None:
    server = _misaligned_world()
    try:
        run_job(world_job_config(tmp_path / "job", server.base_url, method="maspo", topology="sequential",
                                 team_size=2, budget=40,
                                 method_params={"minibatch": 3, "offspring": 1, "rounds_per_turn": 1,
                                                "maximum_search_depth": 1}), fast_runtime())
    finally:
        server.stop()
    optimization = read_sealed(tmp_path / "job" / "optimization.json")
    coder, debugger = [row for row in optimization["history"] if row["event"] == "step"]
    assert (coder["role"], debugger["role"]) == ("coder", "debugger")
    (candidate,) = coder["nodes"][0]["candidates"]
    (case,) = candidate["misaligned"]  # local win, lost one step ahead
    assert candidate["local"] == 1.0 and candidate["lookahead"] == pytest.approx(2 / 3)
    assert coder["best_updated"] is True and coder["buffer"] == [case]
    (node,) = debugger["nodes"]
    assert node["injected"] == [case] and node["rows"][0] == case
    assert len(node["rows"]) == 3 and len(set(node["rows"])) == 3
    assert optimization["metadata"]["misalignment_buffers"]["coder"] == [{"problem_id": case, "priority": 1}]


# ------------------------------------------------------------------------------------------------
# Model-free pieces


def test_joint_score_weights_and_fallbacks() -> None:
    weights = Weights()
    assert weights.joint(local=1.0, lookahead=0.5, global_=0.5, terminal=False) == pytest.approx(0.4 + 0.2 + 0.1 - 0.5)
    assert weights.joint(local=1.0, lookahead=None, global_=0.5, terminal=False) == pytest.approx(0.7 + 0.15 - 0.5)
    assert weights.joint(local=1.0, lookahead=1.0, global_=0.25, terminal=True) == pytest.approx(-0.25)
    assert win_rate([1, 0, 1], [0, 0, 1]) == pytest.approx((1 + 0.5 + 0.5) / 3) and win_rate([], []) == 0.5
    assert win_rate([0.5 + 1e-12], [0.5]) == 0.5  # within the tie tolerance


def test_misalignment_mining_orders_by_the_reference_priorities_and_caps() -> None:
    rows = ["a", "b", "c", "d", "e"]
    cases = mine_misalignment(rows, local=[1.0, 1.0, 0.5, 1.0, 1.0], lookahead={0: 0.0, 1: 1.0, 2: 0.0, 3: 0.0},
                              candidate=[1, 0, 0, 0, 0], parent=[1, 1, 1, 1, 1], cap=3)
    # d: successor and team lost (0); a: successor lost (1); b, e: team lost (2); c: no clear local win.
    assert cases == [Case("d", 0), Case("a", 1), Case("b", 2)]
    assert mine_misalignment(["a"], local=[1.0], lookahead={0: 0.5}, candidate=[0], parent=[0], cap=3) == []


def test_minibatch_injects_predecessor_cases_and_draws_the_rest_elsewhere() -> None:
    train = [f"p{i}" for i in range(10)]
    buffers = {"coder": [Case("p3", 1), Case("p7", 0)], "planner": [Case("p3", 2)], "other": [Case("p9", 0)]}
    batch, injected = compose_minibatch(train, 4, buffers, ["coder", "planner"], injection=5, rng=random.Random(0))
    assert injected == ["p3", "p7"] and batch[:2] == ["p3", "p7"] and len(set(batch)) == 4
    # More cases than the injection: a random sample of them; the whole union stays out of the fill.
    batch, injected = compose_minibatch(train, 4, buffers, ["coder", "planner"], injection=1, rng=random.Random(0))
    assert len(injected) == 1 and injected[0] in ("p3", "p7") and not {"p3", "p7"} & set(batch[1:])
    rng = random.Random(0)
    assert compose_minibatch(train[:2], 10, {}, [], injection=5, rng=rng)[0] == random.Random(0).sample(train[:2], 2)


def test_beam_keeps_the_best_nodes_duplicates_included() -> None:
    nodes = [BeamNode("a", 0.2), BeamNode("b", 0.5), BeamNode("a", 0.9), BeamNode("b", 0.5)]
    assert top_beam(nodes, 3) == [BeamNode("a", 0.9), BeamNode("b", 0.5), BeamNode("b", 0.5)]


def test_forced_verdicts_and_proposal_extraction() -> None:
    from optimizers.judge import neutral_pair, parse_verdict
    from optimizers.maspo.prompts import extract_prompt, proposer_sample

    assert parse_verdict("A") == "A" and parse_verdict(" <choose>b</choose> ") == "B"
    assert parse_verdict("<think>B is longer</think>\nA") == "A"  # thinking is not the verdict
    for reply in ("TIE", "A or B", "Output A", "", None, "<think>A"):
        assert parse_verdict(reply) is None  # a loss for the candidate
    assert neutral_pair("x", " x ") and neutral_pair("", "y") and not neutral_pair("x", "y")
    assert extract_prompt("<analyse>..</analyse><prompt>\n new \n</prompt>") == "new"
    assert extract_prompt("no tags") is None and extract_prompt("<prompt>  </prompt>") is None
    from optimizers.evaluator import Rollout
    from optimizers.budget import Outcome

    trace = ({"source": "user", "kind": "user", "content": "THE PROBLEM"},
             {"source": "coder", "kind": "ai", "content": "my code"},
             {"source": "debugger", "kind": "ai", "content": "fixed"})
    shown = proposer_sample([Rollout("c", "p", "train", 0, 1, Outcome.SEMANTIC_FAILURE, 0.0, "wrong answer",
                                     trace=trace)], "coder")
    # Problem, role context and role output; never the score or the verdict.
    assert "THE PROBLEM" in shown and "[debugger] fixed" in shown and "my code" in shown
    assert "wrong answer" not in shown and "score" not in shown.lower()


def _run(trace: list[dict[str, Any]]) -> Any:
    from optimizers.budget import Outcome
    from optimizers.evaluator import Rollout

    return Rollout("c", "p", "train", 0, 1, Outcome.SEMANTIC_FAILURE, 0.0, "wrong answer", trace=tuple(trace))


def test_a_roles_last_three_replies_are_taken_before_empty_ones_are_dropped() -> None:
    from optimizers.maspo.prompts import role_replies

    def said(text: str) -> dict[str, Any]:
        return {"source": "coder", "kind": "ai", "content": text}

    # As the reference: the last three messages of the role, then the empty ones among them go;
    # an older reply never moves up to fill the place of an empty one.
    trace = [said("first"), said("second"), said("third"), said(""), {"source": "tester", "kind": "ai",
                                                                           "content": "t"}]
    assert role_replies(trace, "coder") == "second\n---\nthird"
    assert role_replies([said("only"), said("")], "coder") == "only"
    assert role_replies([said(""), said("")], "coder") == ""


def test_the_proposer_sees_the_reference_sizes() -> None:
    # The reference's limits, written out (a change of any constant fails): the problem's first
    # 2000 characters; the context is the task (first 2000) plus the last 8 messages of the other
    # roles, 400 characters each, all cut at 5000; the role's output is cut at 4500.
    from optimizers.maspo.prompts import proposer_sample

    task = "".join(f"{i % 10}" for i in range(3000))
    others = [{"source": "tester", "kind": "ai", "content": f"m{i:02d}" + "o" * 997} for i in range(10)]
    own = [{"source": "coder", "kind": "ai", "content": f"c{i}" + "x" * 2998} for i in range(3)]
    shown = proposer_sample([_run([{"source": "user", "kind": "user", "content": task}, *others, *own])], "coder")
    problem = shown.split("Problem 1:\n", 1)[1].split("\n\nContext:\n", 1)[0]
    assert problem == task[:2000]
    context = shown.split("\n\nContext:\n", 1)[1].split("\n\nAgent Output:\n", 1)[0]
    assert len(context) == 5000 and context.startswith("Task: " + task[:2000] + "\n[tester] m02" + "o" * 397)
    output = shown.split("\n\nAgent Output:\n", 1)[1]
    assert len(output) == 4500 and output.startswith("c0x")  # the last three replies, joined, then cut
    # With a short task nothing is cut at 5000: exactly the last 8 other messages, 400 characters each.
    shown = proposer_sample([_run([{"source": "user", "kind": "user", "content": "short"}, *others, *own])], "coder")
    lines = shown.split("\n\nContext:\n", 1)[1].split("\n\nAgent Output:\n", 1)[0].split("\n")
    assert lines[0] == "Task: short" and [line[:12] for line in lines[1:]] == [f"[tester] m{i:02d}" for i in range(2, 10)]
    assert all(len(line) == len("[tester] ") + 400 for line in lines[1:])
