"""MASPO on the scripted world: it finds and deploys the marker prompt, keeps the seed when
nothing helps, counts its judge calls, and a misalignment case mined for one role is fed into
the next role's minibatch. Plus the model-free pieces (joint score, mining, minibatches, beam)."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import pytest

from optimizers.journal import read_json, read_jsonl, read_sealed
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


def _job(tmp_path: Path, world: str, **overrides: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    server = start_world(world=world)
    try:
        result = run_job(world_job_config(tmp_path / "job", server.base_url, method="maspo", **overrides),
                         fast_runtime())
    finally:
        server.stop()
    return result, read_sealed(tmp_path / "job" / "optimization.json")


def test_maspo_finds_the_marker_prompt_and_deploys_it(tmp_path: Path) -> None:
    result, optimization = _job(tmp_path, "useful", budget=20)
    assert MARKER in optimization["incumbent_candidate"]["components"]["role/solver"]
    (step,) = [row for row in optimization["history"] if row["event"] == "step"]
    candidates = step["nodes"][0]["candidates"]
    assert len(candidates) == 2  # one rewrite per half of the parent runs
    assert all(c["global"] == 1.0 and c["joint"] == 0.5 for c in candidates)  # a lone prompt: global credit only
    assert step["best_updated"] is True
    assert optimization["stop_reason"] == "budget"  # a second step (18 rollouts) does not fit in 20 - 12
    assert result["uncharged_calls"] == {}  # a lone prompt needs no judge: nothing uncharged to report
    assert result["selection"]["selected_candidate"] == "incumbent"
    assert result["test"]["deployed_mean"] > result["test"]["baseline_mean"]


def test_a_revisited_role_refreshes_its_beam_against_the_anchor(tmp_path: Path) -> None:
    _, optimization = _job(tmp_path, "useful", budget=60,
                           method_params={"maximum_search_depth": 2, "rounds_per_turn": 1})
    events = [(row["event"], row["depth"]) for row in optimization["history"]]
    assert events == [("step", 1), ("refresh", 1), ("step", 2)]
    refresh = optimization["history"][1]
    state = read_json(tmp_path / "job" / "optimization" / "native" / "maspo.json")
    # Both marker rewrites joined the beam; re-scored on a fresh minibatch they tie with the
    # anchor (global credit 0.5 -> 0), so the anchor stays and the cumulative scores restart.
    assert refresh["nodes"] == [{"local": None, "global": 0.5, "score": 0.0}]
    assert refresh["anchor_shifted"] is False
    assert len(state["beams"]["solver"]) == 2 and state["depth"] == {"solver": 2}
    assert optimization["stop_reason"] == "maximum_search_depth"
    assert MARKER in optimization["incumbent_candidate"]["components"]["role/solver"]


def test_maspo_keeps_the_seed_when_nothing_helps(tmp_path: Path) -> None:
    result, optimization = _job(tmp_path, "useless", topology="sequential", team_size=2, budget=40,
                                method_params={"maximum_search_depth": 1})
    steps = [row for row in optimization["history"] if row["event"] == "step"]
    assert [s["role"] for s in steps] == ["coder", "debugger"]
    assert not any(s["best_updated"] for s in steps)
    assert optimization["stop_reason"] == "maximum_search_depth"
    assert optimization["incumbent_candidate"]["id"] == optimization["seed_candidate"]["id"]
    assert result["selection"]["selected_candidate"] == "seed"
    # The coder is judged locally and one step ahead; a judge that prefers nothing says TIE.
    coder = steps[0]["nodes"][0]["candidates"][0]
    assert (coder["local"], coder["lookahead"], coder["global"]) == (0.5, 0.5, 0.5)


def test_judge_calls_are_counted_and_reach_result_json(tmp_path: Path) -> None:
    server = start_world(world="useful")
    try:
        result = run_job(world_job_config(tmp_path / "job", server.base_url, method="maspo", topology="sequential",
                                          team_size=2, budget=40, method_params={"maximum_search_depth": 1}),
                         fast_runtime())
    finally:
        server.stop()
    optimization = read_sealed(tmp_path / "job" / "optimization.json")
    # MASPO judges with the reflection model by default (judge_model: reflection), as the reference does.
    models = models_by_surface(server.requests)
    assert models["reflection"] == models["judge"] == {REFLECTION_ID} and models["team"] == {MODEL_ID}
    steps = [row for row in optimization["history"] if row["event"] == "step"]
    coder = steps[0]["nodes"][0]["candidates"][0]
    assert coder["local"] == 1.0 and coder["joint"] > 0  # the marker coder's program beats the seed's
    judged = [r for r in read_jsonl(tmp_path / "job" / "optimization" / "native" / "judge.jsonl")]
    calls = result["uncharged_calls"]
    assert set(calls) == {"judge"} and calls["judge"]["calls"] == len(judged) > 0
    assert calls["judge"]["prompt_tokens"] == sum(r["usage"]["prompt_tokens"] for r in judged) > 0
    assert optimization["metadata"]["uncharged_calls"] == calls
    assert MARKER in optimization["incumbent_candidate"]["components"]["role/coder"]


def _misaligned_world() -> Any:
    """The coder's rewrite always wins locally; the debugger's reply after it loses on exactly
    the first row the judge compares (a misalignment case), and wins on the others."""
    from optimizers.judge import JUDGE_SYSTEM
    from optimizers.reflection import REFLECTION_SYSTEM
    from topologies.scripted import FunctionRule, Script, ScriptedServer, builtin_answers

    program = builtin_answers(lambda request, problem_id: False)
    lock = threading.Lock()
    debugger_verdicts: list[str] = []

    def reflect(request: Any) -> str | None:
        if REFLECTION_SYSTEM not in request.system:
            return None
        return "<prompt>\nYou are a careful agent. IMPROVED\n</prompt>"

    def judge(request: Any) -> str | None:
        if JUDGE_SYSTEM not in request.system:
            return None
        sections = judge_sections(request.last_user)
        if "`coder`" in request.last_user:
            return "A" if "TAG improved" in sections["A"] and "TAG improved" not in sections["B"] else "TIE"
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
    assert debugger["injected"] == [case] and debugger["minibatch"][0] == case
    assert len(debugger["minibatch"]) == 3 and len(set(debugger["minibatch"])) == 3
    assert optimization["metadata"]["misalignment_buffers"]["coder"] == [{"problem_id": case, "priority": 1}]


# ------------------------------------------------------------------------------------------------
# Model-free pieces


def test_joint_score_weights_and_fallbacks() -> None:
    weights = Weights()
    assert weights.joint(local=1.0, lookahead=0.5, global_=0.5, terminal=False) == pytest.approx(0.4 + 0.2 + 0.1 - 0.5)
    assert weights.joint(local=1.0, lookahead=None, global_=0.5, terminal=False) == pytest.approx(0.7 + 0.15 - 0.5)
    assert weights.joint(local=1.0, lookahead=1.0, global_=0.25, terminal=True) == pytest.approx(-0.25)
    assert win_rate([1, 0, 1], [0, 0, 1]) == pytest.approx((1 + 0.5 + 0.5) / 3) and win_rate([], []) == 0.5


def test_misalignment_mining_orders_by_severity_and_caps() -> None:
    rows = ["a", "b", "c", "d", "e"]
    cases = mine_misalignment(rows, local=[1.0, 1.0, 0.5, 1.0, 1.0], lookahead=[0.0, 1.0, 0.0, 0.0, None],
                              candidate=[1, 0, 0, 0, 0], parent=[1, 1, 1, 1, 1], cap=2)
    # d: successor and team lost (2); a: successor lost (1); b: team lost (1); c: no local win; cap 2.
    assert cases == [Case("d", 2), Case("a", 1)]


def test_minibatch_puts_hard_cases_first_and_draws_the_rest_elsewhere() -> None:
    train = [f"p{i}" for i in range(10)]
    hard = [Case("p3", 1), Case("p7", 2), Case("nope", 2), Case("p3", 1)]
    batch, injected = compose_minibatch(train, 4, hard, injection=5, rng=random.Random(0))
    assert injected == ["p7", "p3"] and batch[:2] == ["p7", "p3"] and len(set(batch)) == 4
    batch, injected = compose_minibatch(train, 4, hard, injection=1, rng=random.Random(0))
    assert injected == ["p7"] and "p3" not in batch  # a hard case is never drawn at random
    assert compose_minibatch(train[:2], 10, [], injection=5, rng=random.Random(0))[0] == ["p1", "p0"]


def test_beam_keeps_the_best_distinct_prompts() -> None:
    nodes = [BeamNode("a", 0.2), BeamNode("b", 0.5), BeamNode("a", 0.9), BeamNode("c", 0.5)]
    assert top_beam(nodes, 2) == [BeamNode("a", 0.9), BeamNode("b", 0.5)]
