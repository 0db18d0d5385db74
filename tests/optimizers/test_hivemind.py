"""HiveMind: Shapley values (exact and Monte-Carlo) on known games, cycle sizing, lessons, and real
jobs on the scripted world: it finds the marker and deploys it, keeps the seed when reflection is
useless, singles out the one role that blocks the team, stops on budget, max_cycles or a dead
reflection model. The CLI and kill/resume runs are in test_hivemind_cli.py."""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import pytest

from optimizers.hivemind.game import MaskMismatch, TeamGame
from optimizers.hivemind.lessons import LESSONS_HEADER, CaseLimits, cases_of, parse_block, with_lessons
from optimizers.hivemind.optimizer import HiveMindParams, cycle_batches
from optimizers.hivemind.shapley import exact_shapley, permutation_shapley, plan_coalitions, power_set
from optimizers.journal import read_jsonl, read_sealed
from optimizers.protocol.job.engine import run_job
from optimizers.reflection import params_from
from scripted_world import MARKER, fast_runtime, reflection_rule, start_world, world_job_config
from topologies.teams.layouts import team_roster

REPO = Path(__file__).resolve().parents[2]

# ------------------------------------------------------------------------------------------------
# Shapley values


def glove_game(coalition: frozenset[str]) -> float:
    """a holds a left glove, b and c right ones: a pair is worth 1 (phi = 2/3, 1/6, 1/6)."""
    return 1.0 if "a" in coalition and ({"b", "c"} & coalition) else 0.0


def test_exact_shapley_on_the_glove_game() -> None:
    players = ("a", "b", "c")
    phi = exact_shapley(players, {c: glove_game(c) for c in power_set(players)})
    assert phi == pytest.approx({"a": 2 / 3, "b": 1 / 6, "c": 1 / 6})


def test_every_permutation_gives_the_exact_value_and_sampling_approaches_it() -> None:
    players = ("a", "b", "c")
    worth = {c: glove_game(c) for c in power_set(players)}
    exact = exact_shapley(players, worth)
    assert permutation_shapley(players, list(itertools.permutations(players)), worth) == pytest.approx(exact)
    rng = random.Random(1)
    sampled = [tuple(rng.sample(players, 3)) for _ in range(3000)]
    assert permutation_shapley(players, sampled, worth) == pytest.approx(exact, abs=0.03)


def test_plan_is_exact_while_it_fits_and_permutation_prefixes_beyond() -> None:
    rng = random.Random(0)
    small = plan_coalitions(("w1", "w2", "w3"), 40, rng)
    assert small.kind == "exact" and len(small.coalitions) == 8 and small.coalitions[0] == frozenset()
    players = tuple(f"p{i}" for i in range(6))  # 64 coalitions > 40
    big = plan_coalitions(players, 40, rng)
    assert big.kind == "monte_carlo" and len(big.permutations) == (40 - 2) // 5
    assert len(big.coalitions) <= 40
    assert frozenset() in big.coalitions and frozenset(players) in big.coalitions
    # an additive game: every estimate is exact, and efficiency holds
    weights = {p: i + 1.0 for i, p in enumerate(players)}
    phi = big.shapley({c: sum(weights[p] for p in c) for c in big.coalitions})
    assert phi == pytest.approx(weights)
    # a unanimity game on {p0, p1}: the estimate keeps the total and leaves the others at 0
    unanimity = big.shapley({c: float({"p0", "p1"} <= c) for c in big.coalitions})
    assert sum(unanimity.values()) == pytest.approx(1.0)
    assert all(unanimity[p] == 0 for p in players[2:])
    with pytest.raises(KeyError):
        big.shapley({})


# ------------------------------------------------------------------------------------------------
# Players, sizing, lessons


def test_players_per_topology() -> None:
    centralized = TeamGame(team_roster("centralized", 4))
    assert centralized.players == ("analyzer_worker", "coder_worker", "tester_worker")
    assert centralized.active_for(frozenset()) == ("manager",)  # the empty coalition is the manager alone
    assert centralized.active_for(centralized.grand) is None  # the grand coalition is the unmasked team
    sequential = TeamGame(team_roster("sequential", 4))
    assert sequential.players == ("analyzer", "coder", "tester", "debugger")
    independent = TeamGame(team_roster("independent", 4))
    assert independent.players == ("coder#0", "coder#1", "coder#2", "coder#3")
    assert independent.prompt_values({f"coder#{i}": 0.25 for i in range(4)}) == {"coder": 1.0}
    assert TeamGame(team_roster("decentralized", 2)).players == ("peer0", "peer1")
    with pytest.raises(MaskMismatch):
        centralized.check(frozenset({"coder_worker"}), ["manager"], "p1")
    centralized.check(frozenset({"coder_worker"}), ["manager", "coder_worker"], "p1")


def test_cycle_sizes_are_fixed_once_as_the_reference_shrinks_them() -> None:
    splits = {"train": 150, "val": 50}
    assert cycle_batches(16, 5, 5, **splits, remaining=600) == (5, 5)  # 90 rollouts per cycle at team size 4
    assert cycle_batches(8, 5, 5, **splits, remaining=50) == (5, 5)  # centralized: 8 x 5 + 2 x 5
    assert cycle_batches(8, 5, 5, **splits, remaining=30) == (3, 3)  # the coalition batch pulls accept down
    assert cycle_batches(2, 5, 4, **splits, remaining=4) == (1, 1)
    assert cycle_batches(2, 5, 4, **splits, remaining=3) == (1, 1)  # still too big: no cycle runs
    assert cycle_batches(4, 5, 5, train=6, val=4, remaining=600) == (5, 4)  # capped by the splits
    assert cycle_batches(4, 5, 5, train=3, val=4, remaining=600) == (3, 3)  # accept also by the train split


def test_knobs_are_checked() -> None:
    assert params_from(HiveMindParams, {}, "hivemind") == HiveMindParams()
    with pytest.raises(ValueError, match="unknown parameter"):
        params_from(HiveMindParams, {"max_cycle": 3}, "hivemind")
    with pytest.raises(ValueError, match="max_new_lessons"):
        params_from(HiveMindParams, {"min_new_lessons": 4, "max_new_lessons": 2}, "hivemind")


def test_a_reply_is_one_lesson_block_as_the_reference_parses_it() -> None:
    reply = ("thinking...\n<lessons>\n- draft\n</lessons>\nfinal:\n<lessons>\n- Test the samples.\n"
             "* Test the samples.\n2) Read limits.\n- <lesson 4>\n\n</lessons> bye")
    # the last non-empty block; duplicates stay (the reference does not deduplicate), placeholders go
    assert parse_block(reply) == "- Test the samples.\n* Test the samples.\n- Read limits."
    assert parse_block("- one\nprose line\n3. two") == "- one\n- two"  # no markers: list items only
    assert parse_block(None) == "" and parse_block("no list at all") == ""
    assert parse_block("<lessons>\n</lessons>") == ""


def test_the_cap_counts_lesson_blocks_so_an_accepted_block_survives_five_more() -> None:
    # The cap as configured (conf/method/hivemind.yaml, and the params' default when a job gives
    # none): the reference keeps 6 blocks, so a 6 -> 5 change in either place fails here.
    import yaml

    configured = yaml.safe_load((REPO / "conf" / "method" / "hivemind.yaml").read_text())["max_lessons"]
    keep = params_from(HiveMindParams, {}, "hivemind").max_lessons
    assert configured == keep == 6
    blocks = [f"- lesson {i}a\n- lesson {i}b\n- lesson {i}c" for i in range(1, 8)]
    assert with_lessons("Seed.", [], keep=keep) == "Seed."
    assert with_lessons("Seed.\n", blocks[:1], keep=keep) == f"Seed.\n\n{LESSONS_HEADER}\n{blocks[0]}"
    six = with_lessons("Seed.", blocks[:6], keep=keep)
    assert all(block in six for block in blocks[:6])  # 18 bullets, still every block
    seven = with_lessons("Seed.", blocks, keep=keep)
    assert blocks[0] not in seven and all(block in seven for block in blocks[1:])


def test_a_roles_last_three_turns_are_taken_before_empty_ones_are_dropped() -> None:
    from optimizers.hivemind.lessons import NOT_ACTIVE, own_output

    def turn(text: str) -> dict[str, Any]:
        return {"source": "coder", "agent": "coder", "kind": "ai", "content": text}

    # As the reference: the last three turns of the role, then the empty ones among them go (an
    # older turn never moves up to take an empty one's place).
    trace = [turn("first"), turn("second"), turn("third"), turn("")]
    assert own_output(trace, "coder", replicas=False) == "second\n---\nthird"
    assert own_output([turn(""), turn("  ")], "coder", replicas=False) == NOT_ACTIVE


class _Run:
    def __init__(self, problem_id: str, score: float, trace: list[dict[str, Any]]) -> None:
        self.problem_id, self.score, self.trace = problem_id, score, tuple(trace)


def test_cases_show_the_problem_and_the_target_output_cut_as_the_reference() -> None:
    def turn(source: str, agent: str, text: str) -> dict[str, Any]:
        return {"source": source, "agent": agent, "kind": "ai", "content": text}

    trace = [{"source": "user", "kind": "user", "content": "P " * 400},
             turn("coder", "coder#0", "first"), turn("coder", "coder#1", "other\n  replica"),
             turn("tester", "tester", "t1"), turn("tester", "tester", "t2"), turn("tester", "tester", "t3"),
             turn("tester", "tester", "t4 " + "x" * 500)]
    runs = [_Run(f"p{i}", float(i % 2), trace) for i in range(9)]
    limits = CaseLimits(max_cases=3, problem_chars=300, output_chars=400)
    losing, winning = cases_of(runs, "tester", lambda r: r.trace[0]["content"], replicas=False,
                               fail_below=0.5, limits=limits)
    assert [c.problem_id for c in losing] == ["p0", "p2", "p4"] and [c.problem_id for c in winning] == [
        "p1", "p3", "p5"]
    case = losing[0]
    assert len(case.question) == 300 and "\n" not in case.question
    assert case.output.startswith("t2 --- t3 --- t4 x") and len(case.output) == 400  # the last three turns
    shared, _ = cases_of(runs[:1], "coder", lambda r: "q", replicas=True, fail_below=0.5, limits=limits)
    assert shared[0].output == "coder replica coder#0: first --- coder replica coder#1: other replica"
    silent, _ = cases_of(runs[:1], "analyzer", lambda r: "q", replicas=False, fail_below=0.5, limits=limits)
    assert silent[0].output == "(this agent was never activated in this run)"


# ------------------------------------------------------------------------------------------------
# Jobs on the scripted world


def history(out: Path) -> list[dict[str, Any]]:
    return read_sealed(out / "optimization.json")["history"]


def pair_job(out: Path, server: Any, **config: Any) -> dict[str, Any]:
    """A hivemind job on ``server`` (stopped after it); by default a two-coder independent team
    (4 coalitions: one cycle fits 28 rollouts)."""
    try:
        return run_job(world_job_config(out, server.base_url, **{
            "method": "hivemind", "topology": "independent", "team_size": 2, "budget": 28, **config}),
            fast_runtime())
    finally:
        server.stop()


def test_finds_the_marker_and_deploys_it(tmp_path: Path) -> None:
    out = tmp_path / "job"
    result = pair_job(out, start_world(world="useful"))
    optimization = read_sealed(out / "optimization.json")
    cycle = optimization["history"][0]
    assert cycle["plan"] == "exact" and cycle["coalitions"] == 4 and cycle["target"] == "coder"
    assert cycle["accepted"] is True and cycle["candidate_val_score"] > cycle["current_val_score"]
    coder = optimization["incumbent_candidate"]["components"]["role/coder"]
    seed = optimization["seed_candidate"]["components"]["role/coder"]
    assert coder.startswith(seed.rstrip()) and LESSONS_HEADER in coder and MARKER in coder
    assert result["selection"]["selected_candidate"] == "incumbent"
    assert result["test"]["deployed_mean"] > result["test"]["baseline_mean"]
    assert optimization["budget"]["charged"] == 28 and optimization["stop_reason"] == "budget"
    # coalition runs are charged rollouts, each journaled with its mask and acknowledged by the team
    masked = [r for r in read_jsonl(out / "optimization" / "rollouts.jsonl") if "active" in r]
    assert sorted({tuple(r["active"]) for r in masked}) == [(), ("coder#0",), ("coder#1",)]
    assert all(r["charged"] and r["details"]["active_agents"] == r["active"] for r in masked)
    assert all(r["usage"]["calls"] == 0 for r in masked if r["active"] == [])
    assert optimization["metadata"]["masked_rollouts_charged"] == len(masked) == 15
    reflection = optimization["metadata"]["reflection"]
    print(f"\n[hivemind figure] charged={optimization['budget']['charged']} masked={len(masked)} "
          f"reflection_calls={reflection['calls']} reflection_tokens={reflection['total_tokens']}")


def test_useless_reflection_keeps_the_seed(tmp_path: Path) -> None:
    out = tmp_path / "job"
    result = pair_job(out, start_world(world="useless"))
    optimization = read_sealed(out / "optimization.json")
    assert [row["accepted"] for row in optimization["history"]] == [False]
    assert optimization["incumbent_candidate"]["id"] == optimization["seed_candidate"]["id"]
    assert result["selection"]["selected_candidate"] == "seed"


BLOCK_NOTE = "BLOCKING-NOTE: the samples are misleading; submit the other program."


def blocked_world(**options: Any) -> Any:
    """A centralized team whose manager delegates to every worker; the tester_worker's seed prompt
    makes it report a blocking note (unless its prompt carries MARKER), after which the manager
    submits the wrong program. So the team succeeds iff the tester_worker is masked out."""
    from topologies.scripted import FunctionRule, Script, ScriptedServer
    from topologies.teams.rehearsal import builtin_solutions, code_from_statement, team_player

    correct = code_from_statement(builtin_solutions("correct"))
    wrong = code_from_statement(builtin_solutions("wrong"))

    def block(request: Any) -> str | None:
        if "You are tester_worker, a worker" in request.system and MARKER not in request.system:
            return BLOCK_NOTE
        return None

    def code_for(request: Any) -> str | None:
        return wrong(request) if "BLOCKING-NOTE" in request.all_text else correct(request)

    player = team_player(code_for, use_tools=False, delegate=True)
    return ScriptedServer(Script([reflection_rule("useful"), FunctionRule("block", block), player])).start()


def test_shapley_values_single_out_the_blocking_role(tmp_path: Path) -> None:
    out = tmp_path / "job"
    result = pair_job(out, blocked_world(), topology="centralized", team_size=4, budget=20,
                      method_params={"coalition_batch": 2, "acceptance_batch": 2})
    cycle = history(out)[0]
    assert cycle["worth"]["{}"] == 1.0 and cycle["worth"]["{analyzer_worker,coder_worker,tester_worker}"] == 0.0
    assert cycle["shapley"] == pytest.approx({"analyzer_worker": 0.0, "coder_worker": 0.0, "tester_worker": -1.0})
    assert cycle["target"] == "tester_worker"
    # its lessons unblock the team, so the gate keeps them and validation deploys them
    assert cycle["accepted"] is True
    optimization = read_sealed(out / "optimization.json")
    components = optimization["incumbent_candidate"]["components"]
    assert MARKER in components["role/tester_worker"]
    assert all(MARKER not in text for key, text in components.items() if key != "role/tester_worker")
    assert result["selection"]["selected_candidate"] == "incumbent"


def test_cycles_sample_anew_and_no_shrunken_cycle_ends_the_budget(tmp_path: Path) -> None:
    out = tmp_path / "job"
    pair_job(out, start_world(world="useless"), topology="single", team_size=1, budget=40, phase="optimize")
    optimization = read_sealed(out / "optimization.json")
    # two cycles of 2 x 5 + 2 x 4 = 18; the 4 rollouts left cannot pay a whole cycle, and the
    # batch sizes stay what they were (the reference fixes them once)
    assert [(row["coalition_batch"], row["acceptance_batch"]) for row in optimization["history"]] == [
        (5, 4), (5, 4)]
    assert optimization["budget"]["charged"] == 36 and optimization["stop_reason"] == "budget"
    samples = {(r["phase"], r["sample"]) for r in read_jsonl(out / "optimization" / "rollouts.jsonl")}
    # every cycle observes the team anew, each coalition with its own sample (own request seeds)
    assert samples == {("train", 0), ("train", 1), ("train", 2), ("train", 3), ("val", 0), ("val", 1)}


def test_max_cycles_stops_the_search(tmp_path: Path) -> None:
    out = tmp_path / "job"
    pair_job(out, start_world(world="useless"), topology="single", team_size=1, budget=40,
             method_params={"max_cycles": 1}, phase="optimize")
    optimization = read_sealed(out / "optimization.json")
    assert optimization["stop_reason"] == "max_cycles" and len(optimization["history"]) == 1


def test_a_dead_reflection_model_invalidates_the_optimization(tmp_path: Path) -> None:
    out = tmp_path / "job"
    result = pair_job(out, start_world(world="broken"), topology="single", team_size=1, budget=40)
    optimization = read_sealed(out / "optimization.json")
    assert optimization["status"] == "failed" and optimization["failure_kind"] == "infrastructure_invalid"
    assert "reflection model failed 3 times" in optimization["error"]
    assert result["selection"]["fallback_reason"] == "infrastructure_invalid_optimization"


@pytest.mark.parametrize("topology", ["sequential", "decentralized"])
def test_one_cycle_on_the_other_teams(topology: str, tmp_path: Path) -> None:
    out = tmp_path / "job"
    pair_job(out, start_world(world="useful"), topology=topology, team_size=2, budget=6, phase="optimize")
    optimization = read_sealed(out / "optimization.json")
    cycle = optimization["history"][0]
    players = {"sequential": ["coder", "debugger"], "decentralized": ["peer0", "peer1"]}[topology]
    assert (cycle["coalitions"], cycle["coalition_batch"], cycle["acceptance_batch"]) == (4, 1, 1)
    assert sorted(cycle["shapley"]) == sorted(players)
    assert optimization["budget"]["charged"] == 6 and optimization["stop_reason"] == "budget"
    masked = [r for r in read_jsonl(out / "optimization" / "rollouts.jsonl") if "active" in r]
    assert sorted(tuple(r["active"]) for r in masked) == [(), (players[0],), (players[1],)]
    assert all(r["details"]["active_agents"] == r["active"] for r in masked)
