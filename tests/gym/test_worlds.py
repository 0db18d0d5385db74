"""The gym's worlds: the optimum two ways on random instances of every kind, the generators'
ranges, reproducible rollouts through the real teams, what failing agents say (true, decoy and
wrong-way symptoms), and scripted models that read only their requests."""

from __future__ import annotations

import ast
import asyncio
import itertools
from pathlib import Path

import pytest

from optimizers.gym.draws import Channel
from optimizers.gym.generators import generate
from optimizers.gym.lexicon import EXCESS, LACK, generated, legacy
from optimizers.gym.models import GymModel, proposal
from optimizers.gym.system import GymSystem, seed_candidate
from optimizers.gym.world import Configuration, Distractor, Fact, Synergy, World, brute_force_optimum
from optimizers.gym.worlds import KINDS, SLOTS, UnknownWorld, make_world, with_knobs

REPO = Path(__file__).resolve().parents[2]
LEX = generated()
KEYS = LEX.keys


@pytest.mark.parametrize("kind", KINDS)
def test_the_optimum_by_formula_is_the_optimum_by_brute_force_on_random_instances(kind: str) -> None:
    helpful_distractors = negative_synergies = chains = 0
    for topology, instance in itertools.product(SLOTS, range(3)):
        world = generate(kind, topology, instance, facts=(1, 1))  # small enough to enumerate
        best, best_value = brute_force_optimum(world)
        assert world.optimum() == best, (world.name, best, world.optimum())
        assert world.optimal_success() == pytest.approx(best_value, abs=1e-12)
        helpful_distractors += bool(best.distractors)
        negative_synergies += any(s.bonus < 0 for s in world.synergies)
        chains += any(len(g) > 2 for g in world.groups())
    if kind == "joint":
        assert negative_synergies and chains  # the graph has clashes and chains, and they were checked


def test_hand_built_chains_clashes_and_negative_penalties() -> None:
    home = "role/solver"
    facts = tuple(Fact(f"f{i}", home, w, KEYS[i]) for i, w in enumerate((-0.3, -0.2, -0.1, 0.5, 0.4, 0.05)))
    world = World(
        name="hand", topology="single", team_size=2, facts=facts,
        distractors=(Distractor("good", -0.4, KEYS[10]), Distractor("bad", 0.7, KEYS[11]), Distractor("nil", 0.0, KEYS[12])),
        synergies=(Synergy("f0", "f1", 1.0), Synergy("f1", "f2", 0.6), Synergy("f3", "f4", -0.8)),
        difficulties={"a": -0.5, "b": 0.5}, components=(home,),
    )
    best, _ = brute_force_optimum(world)
    assert world.optimum() == best == Configuration(frozenset({"f0", "f1", "f2", "f3", "f5"}), frozenset({"good"}))
    assert ("f0", "f1", "f2") in world.groups()


@pytest.mark.parametrize("kind", KINDS)
def test_generated_instances_span_the_ranges_and_differ(kind: str) -> None:
    worlds = [make_world(f"{kind}@{i}") for i in range(12)]
    for world in worlds:
        counts = [sum(f.home == c for f in world.facts) for c in world.components]
        assert all(5 <= n <= 20 for n in counts), counts
        seed, optimum = world.expected_success(world.seed_configuration()), world.optimal_success()
        assert optimum - seed == pytest.approx(0.0, abs=1e-12) if kind == "seed_optimal" else optimum - seed > 0.1
        assert {f.home for f in world.facts if abs(f.weight) >= 0.2} <= set(world.components)
    assert len({w.optimal_success() for w in worlds}) == len(worlds)  # each instance its own difficulty
    assert all(24 <= len(w.problems) <= 48 and all("~" in p for p in w.problems) for w in worlds)
    assert len({p for w in worlds for p in w.problems}) > 300  # hundreds of synthetic problems
    assert len({frozenset(f.concept for f in w.facts) for w in worlds}) == len(worlds)
    assert make_world(f"{kind}@3") == make_world(f"{kind}@3")  # reproducible from the instance seed


def test_world_names_and_knobs_refuse_bad_input() -> None:
    assert make_world("credit-single@2").topology == "single"
    assert make_world("legacy_joint").name == "legacy_joint-centralized"
    for bad in ("nope", "credit-nowhere", "credit@x"):
        with pytest.raises(UnknownWorld):
            make_world(bad)
    world = with_knobs(make_world("credit@0"), {"decoy_rate": "0.5", "fix_rate": 0.9, "paraphrase": "false"})
    assert (world.decoy_rate, world.channel.fix_rate, world.paraphrase) == (0.5, 0.9, False)
    with pytest.raises(UnknownWorld, match="unknown knob"):
        with_knobs(world, {"weights": 1})
    with pytest.raises(UnknownWorld, match="rates must be in"):
        with_knobs(world, {"decoy_rate": 2})


def _run(system: GymSystem, candidate, problem_id: str, seed: int, active=None):
    masked = {"active": active} if active is not None else {}
    return asyncio.run(system.run(candidate, problem_id, seed=seed, mode="optimize", **masked))


@pytest.mark.parametrize("topology", list(SLOTS))
def test_rollouts_go_through_the_real_team_and_follow_the_world(topology: str) -> None:
    world = with_knobs(make_world(f"credit-{topology}@1"), {"decoy_rate": 0, "wrong_rate": 0})
    seed, spec, roster = seed_candidate(world)
    system = GymSystem(world, spec, roster)
    assert system.configuration(seed) == world.seed_configuration()
    problem = world.problems[0]
    config = system.configuration(seed)
    outcomes = {s: world.solved(config, problem, s) for s in range(40)}
    failing = [s for s, ok in outcomes.items() if not ok]
    passing = next(s for s, ok in outcomes.items() if ok)
    good, bad = _run(system, seed, problem, passing), _run(system, seed, problem, failing[0])
    assert (good.score, bad.score) == (1.0, 0.0)
    assert _run(system, seed, problem, failing[0]).trace == bad.trace  # reproducible from the seed
    assert {m["source"] for m in bad.trace if m["kind"] == "ai"} == set(seed.roles())
    # The important missing facts show lack symptoms in their home role's turns.
    important = [f for f in world.facts if f.id in world.optimum().facts and f.weight >= 0.35
                 and f.id not in config.facts]
    said = " ".join(m["content"] for s in failing[:8] for m in _run(system, seed, problem, s).trace
                    if m["kind"] == "ai" and m["source"] == world.main.partition("/")[2])
    assert important and all((f.concept, LACK) in LEX.symptoms_in(said) for f in important)
    assert not LEX.symptoms_in(" ".join(m["content"] for m in good.trace))


def test_true_decoy_and_wrong_way_symptoms_at_their_rates() -> None:
    world = with_knobs(make_world("credit-single@4"), {"decoy_rate": 0.3, "wrong_rate": 0.25, "symptom_rate": 1})
    optimum = world.optimum()
    full = {world.main: "\n".join(world.text(f.concept) for f in world.facts if f.id in optimum.facts)}
    config = world.configuration(full)
    assert config == optimum
    lines = [world.symptoms(full, config, s, "p")[world.main] if world.symptoms(full, config, s, "p") else []
             for s in range(400)]
    read = [LEX.symptoms_in(" ".join(x)) for x in lines]
    wrong = sum((f.concept, EXCESS) in r for r in read for f in world.facts if f.id in optimum.facts)
    per_fact = wrong / (400 * len(optimum.facts))
    assert 0.15 < per_fact < 0.35  # wrong-way: a fact of the optimum blamed (rate 0.25 times salience)
    decoys = sum(any(d == LACK for _, d in r) for r in read) / 400
    assert 0.2 < decoys < 0.4  # nothing is missing, so every lack line is a decoy (rate 0.3)
    quiet = with_knobs(world, {"decoy_rate": 0, "wrong_rate": 0})
    assert not any(quiet.symptoms(full, config, s, "p") for s in range(100))


def test_an_edit_in_other_words_counts_and_a_symptom_pasted_into_a_prompt_does_not() -> None:
    world = make_world("credit@0")
    fact = next(f for f in world.facts if f.id in world.optimum().facts)
    concept = LEX.concept(fact.concept)
    for form in concept.forms:
        assert fact.id in world.configuration({fact.home: f"Be good. {form}"}).facts
    pasted = " ".join(concept.lack + concept.excess)
    assert fact.id not in world.configuration({fact.home: pasted}).facts


def test_a_configuration_asked_again_is_the_same_and_a_mask_is_its_own_question() -> None:
    """The world remembers configurations (every rollout of a candidate asks again): the
    remembered answer depends on the whole text of every component and on the mask."""
    world = make_world("credit-sequential@2")
    seed, _, _ = seed_candidate(world)
    fact = next(f for f in world.facts if f.id in world.optimum().facts and f.id not in world.seed_facts)
    edited = {**seed.components, fact.home: seed.components[fact.home] + "\n" + world.text(fact.concept)}
    before = world.configuration(seed.components)
    assert fact.id in world.configuration(edited).facts and fact.id not in before.facts
    assert world.configuration(dict(seed.components)) == before
    home_role = fact.home.partition("/")[2]
    others = {c.partition("/")[2] for c in world.components} - {home_role}
    masked = world.configuration(edited, active_roles=others)
    assert fact.id not in masked.facts  # its home role does not act
    assert fact.id in world.configuration(edited).facts and fact.id not in world.configuration(edited, active_roles=others).facts
    fresh = make_world("credit-sequential@2")  # nothing remembered: the same answers
    assert fresh.configuration(edited, active_roles=others) == masked and fresh.configuration(seed.components) == before


def test_the_reflector_acts_on_what_it_reads_through_a_noisy_channel() -> None:
    channel = Channel(fix_rate=0.6, garble_rate=0.1, paraphrase=True)
    concept = LEX.concepts[7]
    seen = f"the debugger said:\n{concept.lack[2]}\n"
    fixed = [LEX.instructions_in(proposal(LEX, channel, seen, "s", i)) for i in range(600)]
    rate = sum(any(k == concept.key for k, _ in f) for f in fixed) / 600
    assert 0.6 * 0.9 - 0.08 <= rate <= 0.6 * 0.9 + 0.08  # fix rate x (1 - garble rate)
    assert len({s for f in fixed for k, s in f if k == concept.key}) == len(concept.forms)  # paraphrased
    blind = [LEX.instructions_in(proposal(LEX, channel, "no symptom here", "s", i)) for i in range(600)]
    assert sum(any(k == concept.key for k, _ in b) for b in blind) <= 3  # 1 of 400 concepts, half the time
    assert sum(bool(b) for b in blind) / 600 == pytest.approx(0.5, abs=0.08)
    kept = proposal(LEX, channel, f"Current prompt: {concept.forms[1]} {LEX.concepts[3].forms[0]}", "x", 1)
    assert concept.forms[1] in kept and LEX.concepts[3].forms[0] in kept  # a rewrite keeps what it read
    dropped = [proposal(LEX, channel, f"{concept.forms[0]}\n{concept.excess[0]}", "d", i) for i in range(300)]
    assert sum(concept.forms[0] not in p for p in dropped) / 300 >= 0.6 * 0.9 - 0.08


def test_the_legacy_corner_reflector_is_the_first_gyms() -> None:
    world = make_world("legacy_credit")
    lex = legacy()
    fact = world.facts[0]
    seen = f"the debugger said:\n{lex.concept(fact.concept).lack[0]}\n"
    fixed = sum(world.text(fact.concept) in proposal(lex, world.channel, seen, "d", i) for i in range(400)) / 400
    assert 0.6 <= fixed <= 0.8  # the fix rate, plus a blind pick of the same phrase among the world's four


def test_the_judge_scores_shown_outputs_with_noise() -> None:
    from optimizers.gym.models import program
    from optimizers.judge import JUDGE_SYSTEM
    from topologies.types import Decoding

    world = make_world("noisy@0")
    model = GymModel(lexicon=world.lex, channel=world.channel, judge_noise=world.judge_noise, salt=world.name,
                     probe=lambda *a: "", model_id="gym")

    def score(text: str, seed: int) -> float:
        messages = [{"role": "system", "content": JUDGE_SYSTEM},
                    {"role": "user", "content": f"Rate it.\n=== REPLY ===\n{text}"}]
        return float(asyncio.run(model.complete("judge", messages, decoding=Decoding(seed=seed))).content)

    pid = world.problems[0]
    right = [score(program(pid, True), s) for s in range(60)]
    wrong = [score(LEX.concepts[0].lack[0] + "\n" + program(pid, False), s) for s in range(60)]
    assert sum(right) / 60 > sum(wrong) / 60 + 0.3
    assert len(set(right)) > 10 and score(program(pid, True), 3) == score(program(pid, True), 3)
    assert model.usage["judge"]["calls"] == 122 and model.usage["judge"]["tokens"] > 0


def test_a_probe_is_a_stochastic_rollout_of_the_environment() -> None:
    from optimizers.gym.models import shows_correct_program

    world = make_world("credit-single@2")
    seed, spec, roster = seed_candidate(world)
    system = GymSystem(world, spec, roster)
    from optimizers.gym.slots import GymProblems

    statement = GymProblems()[world.problems[0]].statement  # a synthetic case of a built-in problem
    optimum_prompt = "\n".join(world.text(f.concept) for f in world.facts if f.id in world.optimum().facts)
    good = [shows_correct_program(system.probe(seed.components, optimum_prompt, statement, s)) for s in range(200)]
    bad = [shows_correct_program(system.probe(seed.components, "Be brief.", statement, s)) for s in range(200)]
    p_good = world.solve_probability(world.optimum(), world.problems[0])
    assert sum(good) / 200 == pytest.approx(p_good, abs=0.08)  # drawn, not read off the optimum
    assert sum(bad) / 200 < sum(good) / 200 - 0.1


HIDDEN = ("optimizers.gym.world", "optimizers.gym.worlds", "optimizers.gym.generators", "optimizers.gym.runner",
          "optimizers.gym.system")


def hidden_table_readers(source: str) -> list[str]:
    """Imports of the world's modules (where the table lives) in a module's source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        found += [n for n in names if any(n == h or n.startswith(h + ".") for h in HIDDEN)]
    return found


def test_no_scripted_model_reads_the_worlds_hidden_table() -> None:
    import inspect

    modules = [REPO / "optimizers/gym/models.py", REPO / "optimizers/gym/shapes.py",
               REPO / "optimizers/gym/lexicon.py", REPO / "optimizers/gym/draws.py",
               REPO / "topologies/scripted/reply_shapes.py", REPO / "optimizers/random_search/optimizer.py"]
    for path in modules:
        assert hidden_table_readers(path.read_text()) == [], path
    # Positive control: the checker sees a direct and a lazy import of the table.
    assert hidden_table_readers("def f():\n    from optimizers.gym.world import World\n") == ["optimizers.gym.world"]
    assert hidden_table_readers("import optimizers.gym.worlds as w\n") == ["optimizers.gym.worlds"]
    # What the models are built from: the language, their knobs, a salt and the environment's probe.
    assert list(inspect.signature(GymModel).parameters) == ["lexicon", "channel", "judge_noise", "salt", "probe",
                                                            "model_id"]
    # The reflector's channel says nothing about a world (the legacy corner's blind list aside;
    # legacy_reading is the order it lists what it reads in).
    assert {f for f in Channel.__dataclass_fields__} == {"fix_rate", "garble_rate", "paraphrase", "blind",
                                                         "legacy_reading"}
