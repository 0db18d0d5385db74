"""The gym's worlds: the optimum two ways, reproducible rollouts through the real teams, symptoms
in the right role's turn, and a reflector that only acts on what its request shows."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from optimizers.gym.models import FIX_RATE, GymModel, proposal
from optimizers.gym.system import GymSystem, seed_candidate
from optimizers.gym.world import Configuration, brute_force_optimum
from optimizers.gym.worlds import SLOTS, WORLD_KINDS, make_world

ALL_WORLDS = [f"{kind}-{topology}" for kind, topology in itertools.product(WORLD_KINDS, SLOTS)]


@pytest.mark.parametrize("name", ALL_WORLDS)
def test_the_optimum_by_formula_is_the_optimum_by_brute_force(name: str) -> None:
    world = make_world(name)
    best, best_value = brute_force_optimum(world)
    formula = world.optimum()
    assert world.optimal_success() == pytest.approx(best_value, abs=1e-12)
    assert formula == best
    assert not formula.distractors
    # Every configuration is at most the optimum, and the seed is one of them.
    assert all(world.expected_success(c) <= best_value + 1e-12 for c in world.all_configurations())


def test_a_synergy_pays_only_in_combination() -> None:
    world = make_world("joint")
    alone = [Configuration(frozenset({"ask_bound"})), Configuration(frozenset({"state_bound"}))]
    both = Configuration(frozenset({"ask_bound", "state_bound"}))
    empty = Configuration()
    assert all(world.expected_success(c) < world.expected_success(empty) for c in alone)
    assert world.expected_success(both) > world.expected_success(empty) + 0.2
    assert {"ask_bound", "state_bound"} <= world.optimum().facts


def test_the_seed_optimal_world_starts_at_the_optimum_and_the_others_below() -> None:
    for kind in WORLD_KINDS:
        world = make_world(kind)
        seed = world.expected_success(world.seed_configuration())
        if kind == "seed_optimal":
            assert seed == pytest.approx(world.optimal_success())
        else:
            assert world.optimal_success() - seed > 0.05


def _run(system: GymSystem, candidate, problem_id: str, seed: int, active=None):
    masked = {"active": active} if active is not None else {}
    return asyncio.run(system.run(candidate, problem_id, seed=seed, mode="optimize", **masked))


@pytest.mark.parametrize("topology", list(SLOTS))
def test_rollouts_go_through_the_real_team_and_follow_the_world(topology: str) -> None:
    world = make_world(f"credit-{topology}")
    seed, spec, roster = seed_candidate(world)
    system = GymSystem(world, spec, roster)
    assert system.configuration(seed) == world.seed_configuration()
    problem = world.problems[0]
    config = system.configuration(seed)
    outcomes = {s: world.solved(config, problem, s) for s in range(40)}
    failing = next(s for s, ok in outcomes.items() if not ok)
    passing = next(s for s, ok in outcomes.items() if ok)
    good, bad = _run(system, seed, problem, passing), _run(system, seed, problem, failing)
    assert (good.score, bad.score) == (1.0, 0.0)
    assert _run(system, seed, problem, failing).trace == bad.trace  # reproducible from the seed
    speakers = {m["source"] for m in bad.trace if m["kind"] == "ai"}
    assert speakers == set(seed.roles())  # every role acted (a manager delegates to its worker)
    # The missing facts' symptoms are in the main role's turns of the failing run (symptom rate
    # 0.8: look over several failing seeds), and nowhere in the passing one.
    main_role = SLOTS[topology][0].partition("/")[2]
    failing_seeds = [s for s, ok in outcomes.items() if not ok][:6]
    said = " ".join(m["content"] for s in failing_seeds for m in _run(system, seed, problem, s).trace
                    if m["kind"] == "ai" and m["source"] == main_role)
    assert all(f.symptom in said for f in world.facts)
    assert not any(s in m["content"] for m in good.trace for s in world.symptoms())


def test_success_rate_matches_the_model_and_facts_help() -> None:
    world = make_world("credit")
    seed, spec, roster = seed_candidate(world)
    system = GymSystem(world, spec, roster)
    main = SLOTS[world.topology][0]
    best = seed.with_component(main, seed.components[main] + "\n" + "\n".join(f.text for f in world.facts))
    assert system.configuration(best) == world.optimum()
    problem = world.problems[3]
    for candidate in (seed, best):
        p = world.solve_probability(system.configuration(candidate), problem)
        rate = sum(world.solved(system.configuration(candidate), problem, s) for s in range(2000)) / 2000
        assert rate == pytest.approx(p, abs=0.04)
    wins = sum(_run(system, best, problem, s).score for s in range(30))
    assert wins > sum(_run(system, seed, problem, s).score for s in range(30))


def test_a_masked_out_role_contributes_no_fact() -> None:
    world = make_world("joint")  # centralized: the worker holds the partner fact
    seed, spec, roster = seed_candidate(world)
    system = GymSystem(world, spec, roster)
    worker_facts = "\n".join(f.text for f in world.facts if f.home == "role/coder_worker")
    full = seed.with_component("role/coder_worker", seed.components["role/coder_worker"] + "\n" + worker_facts)
    manager_only = [a.name for a in roster.agents if a.role == "manager"]
    assert system.configuration(full).facts == {"state_bound", "exact_math"}
    assert system.configuration(full, manager_only).facts == frozenset()
    rollout = _run(system, full, world.problems[0], 5, active=manager_only)
    assert "coder_worker" not in {m["source"] for m in rollout.trace if m["kind"] == "ai"}


def test_the_reflector_fixes_what_it_sees_and_guesses_otherwise() -> None:
    world = make_world("credit")
    fact = world.facts[0]
    seen = f"the debugger said:\n{fact.symptom}\n"
    fixed = sum(fact.text in proposal(world, seen, "draw", i) for i in range(400)) / 400
    assert FIX_RATE <= fixed <= FIX_RATE + 0.2  # the fix, plus the odd random pick of the same fact
    blind = sum(fact.text in proposal(world, "no symptom here", "draw", i) for i in range(400)) / 400
    assert blind < 0.25  # only by chance (a random world phrase)
    kept = proposal(world, f"Current prompt: {world.distractors[0].text} {fact.text}", "x", 1)
    assert fact.text in kept  # a rewrite keeps what the shown prompt said (no symptom: nothing dropped)
    dropped = [proposal(world, f"{world.distractors[0].text}\n{world.distractors[0].symptom}", "d", i)
               for i in range(200)]
    assert sum(world.distractors[0].text not in p for p in dropped) / 200 >= FIX_RATE - 0.1


def test_the_judge_scores_shown_outputs_with_noise() -> None:
    from optimizers.gym.models import program
    from optimizers.judge import JUDGE_SYSTEM

    world = make_world("noisy")
    model = GymModel(world, model_id="gym")

    def score(text: str, seed: int) -> float:
        from topologies.types import Decoding

        messages = [{"role": "system", "content": JUDGE_SYSTEM},
                    {"role": "user", "content": f"Rate it.\n=== REPLY ===\n{text}"}]
        reply = asyncio.run(model.complete("judge", messages, decoding=Decoding(seed=seed)))
        return float(reply.content)

    pid = world.problems[0]
    right = [score(program(pid, True), s) for s in range(60)]
    wrong = [score(world.facts[0].symptom + "\n" + program(pid, False), s) for s in range(60)]
    assert sum(right) / 60 > sum(wrong) / 60 + 0.3
    assert len(set(right)) > 10  # noisy, yet reproducible:
    assert score(program(pid, True), 3) == score(program(pid, True), 3)
