"""Random world instances, one generator per kind (COCO-style: a kind is a function class, an
instance seed draws one member of it).

Every instance draws from its seed (``gym/KIND/TOPOLOGY/INSTANCE``): 5-20 concepts per component
(``facts``), each fact's home among the topology's components (kind-specific, below), its weight,
a synergy graph, distractors at a random density (10-30 % of the facts) with penalties of either
sign (15 % help wherever they are), the seed's own facts, the base (so the seed starts where the
kind says), and its own 24-48 synthetic problems (cases of the built-in ones, ``slots``) with their
difficulties spread over the kind's range. Most facts are *minor* (|weight| 0.005-0.04, either
sign: they barely matter and, with ``salience``, rarely show a symptom); the kind decides the few
that matter:

- ``credit``: 2-4 important facts (+0.4..+0.9), all in the main component; 1-2 harmful facts
  (-0.3..-0.8) anywhere. Credit assignment: which role holds what matters.
- ``joint``: 1-2 pairs across components that cost a little alone (-0.1..-0.4) and pay together
  (+1.0..+1.6); a chain (a third fact that pays only with one member of a pair); a clash (two
  facts good alone, +0.3..+0.6, bad together, -0.7..-1.1: the optimum keeps one); one independent
  important fact. Joint search over an interaction graph.
- ``noisy``: 2-3 small important facts (+0.2..+0.4) across components, success near 50 %, a
  narrow difficulty spread, symptom rate 0.4, judge noise 0.3. Acceptance under noise.
- ``seed_optimal``: credit-like, but the seed carries exactly the optimum: any edit can only keep
  it or hurt (decoys and wrong-way symptoms tempt).

Model knobs of every generated kind unless said otherwise: symptom rate 0.8, decoy rate 0.2,
wrong-way rate 0.1, paraphrases on, salience 0.5, reflector fix rate 0.6, garble rate 0.1.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from optimizers.gym.draws import Channel
from optimizers.gym.lexicon import generated
from optimizers.gym.slots import CASE, TEAM_SIZE, builtin_problems, components_of
from optimizers.gym.world import Distractor, Fact, Synergy, World, spread_difficulties

FACTS_PER_COMPONENT = (5, 20)
PROBLEMS_PER_INSTANCE = (24, 48)  # synthetic cases of the built-in problems, each its own difficulty


@dataclass
class _Draft:
    """A world under construction (mutable while a generator fills it)."""

    rng: random.Random
    components: tuple[str, ...]
    facts: list[Fact]
    synergies: list[Synergy]
    shaped: set[str]  # facts the shape has already given a role

    def pick(self, component: str | None = None) -> int:
        """Index of a still-minor fact (in ``component`` when given)."""
        options = [i for i, f in enumerate(self.facts)
                   if f.id not in self.shaped and (component is None or f.home == component)]
        return self.rng.choice(options)

    def set(self, index: int, weight: float) -> str:
        fact = self.facts[index]
        self.facts[index] = Fact(fact.id, fact.home, round(weight, 4), fact.key)
        self.shaped.add(fact.id)
        return fact.id


def _credit(d: _Draft) -> None:
    for _ in range(d.rng.randint(2, 4)):
        d.set(d.pick(d.components[0]), d.rng.uniform(0.4, 0.9))
    for _ in range(d.rng.randint(1, 2)):
        d.set(d.pick(), -d.rng.uniform(0.3, 0.8))


def _joint(d: _Draft) -> None:
    main, other = d.components[0], d.components[-1]
    pairs = []
    for _ in range(d.rng.randint(1, 2)):
        a = d.set(d.pick(other), -d.rng.uniform(0.1, 0.4))
        b = d.set(d.pick(main), -d.rng.uniform(0.1, 0.4))
        d.synergies.append(Synergy(a, b, round(d.rng.uniform(1.0, 1.6), 4)))
        pairs.append((a, b))
    anchor = d.rng.choice(pairs[0])  # a chain: a third fact that pays only with one of the pair
    c = d.set(d.pick(d.rng.choice(d.components)), -d.rng.uniform(0.05, 0.2))
    d.synergies.append(Synergy(anchor, c, round(d.rng.uniform(0.4, 0.8), 4)))
    x = d.set(d.pick(main), d.rng.uniform(0.3, 0.6))  # a clash: each good alone, bad together
    y = d.set(d.pick(other), d.rng.uniform(0.3, 0.6))
    d.synergies.append(Synergy(x, y, -round(d.rng.uniform(0.7, 1.1), 4)))
    d.set(d.pick(main), d.rng.uniform(0.4, 0.8))


def _noisy(d: _Draft) -> None:
    for _ in range(d.rng.randint(2, 3)):
        d.set(d.pick(d.rng.choice(d.components)), d.rng.uniform(0.2, 0.4))
    d.set(d.pick(), -d.rng.uniform(0.15, 0.3))


@dataclass(frozen=True, slots=True)
class KindSpec:
    shape: Callable[[_Draft], None]
    seed_success: tuple[float, float]  # where the seed starts (optimum, for seed_optimal)
    spread: float = 1.0
    symptom_rate: float = 0.8
    judge_noise: float = 0.1
    seed_is_optimal: bool = False
    minimum: tuple[int, int] = (6, 1)  # facts the shape needs in (main, other): it draws them from minor ones
    description: str = ""


KIND_SPECS: Mapping[str, KindSpec] = {
    "credit": KindSpec(_credit, (0.2, 0.4), description="credit assignment: the important facts sit in one role"),
    "joint": KindSpec(_joint, (0.2, 0.4), minimum=(5, 4), description="joint search: pairs, a chain and a clash across components"),
    "noisy": KindSpec(_noisy, (0.4, 0.5), spread=0.5, symptom_rate=0.4, judge_noise=0.3, minimum=(3, 3),
                      description="small effects near 50 % success, rare symptoms, noisy judges"),
    "seed_optimal": KindSpec(_credit, (0.55, 0.8), seed_is_optimal=True,
                             description="the seed already carries the optimum"),
}


def generate(kind: str, topology: str, instance: int, *, facts: tuple[int, int] = FACTS_PER_COMPONENT,
             problems: tuple[str, ...] | None = None) -> World:
    """Instance ``instance`` of ``kind`` on ``topology`` (``facts``: the range of concepts per
    component; small ranges make instances a brute force can check)."""
    spec = KIND_SPECS[kind]
    name = f"{kind}-{topology}@{instance}"
    rng = random.Random(f"gym/{name}/{facts}")
    components = components_of(topology)
    lexicon = generated()
    # The shape needs a few facts per component whatever the range (one component holds both).
    need = (sum(spec.minimum),) if len(components) == 1 else spec.minimum
    counts = [max(rng.randint(*facts), n) for n in need]
    distractor_count = max(1, round(rng.uniform(0.1, 0.3) * sum(counts)))
    keys = rng.sample(lexicon.keys, sum(counts) + distractor_count)
    draft_facts = []
    for component, count in zip(components, counts, strict=True):
        for _ in range(count):
            weight = rng.choice((-1, 1)) * rng.uniform(0.005, 0.04)
            draft_facts.append(Fact(f"f{len(draft_facts)}", component, round(weight, 4), keys.pop()))
    draft = _Draft(rng, components, draft_facts, [], set())
    spec.shape(draft)
    distractors = tuple(
        Distractor(f"d{i}", round(-rng.uniform(0.2, 0.5) if rng.random() < 0.15 else rng.uniform(0.3, 1.2), 4),
                   keys.pop())
        for i in range(distractor_count))
    world = World(
        name=name, topology=topology, team_size=TEAM_SIZE, facts=tuple(draft.facts), distractors=distractors,
        synergies=tuple(draft.synergies), difficulties={"_": 0.0}, components=components,
        description=spec.description,
    )
    optimum = world.optimum()
    if spec.seed_is_optimal:
        seed_facts, seed_distractors = optimum.facts, optimum.distractors
    else:
        minor = [f.id for f in draft.facts if f.id not in draft.shaped]
        seed_facts = frozenset(rng.sample(minor, min(len(minor), rng.randint(0, 2))))
        harmful = [f.id for f in draft.facts if f.weight < 0 and f.id in draft.shaped
                   and f.id not in _synergy_members(draft)]
        if harmful and rng.random() < 0.3:
            seed_facts |= {rng.choice(harmful)}
        bad = [d.id for d in distractors if d.penalty > 0]
        seed_distractors = frozenset({rng.choice(bad)}) if bad and rng.random() < 0.25 else frozenset()
    seed_logit = world.logit(_config(seed_facts, seed_distractors)) if not spec.seed_is_optimal \
        else world.logit(optimum)
    target = rng.uniform(*spec.seed_success)
    base = round(math.log(target / (1 - target)) - seed_logit, 4)
    problem_ids = problems or synthetic_problems(rng)
    import dataclasses

    return dataclasses.replace(
        world, base=base, difficulties=spread_difficulties(problem_ids, spec.spread, name),
        seed_facts=frozenset(seed_facts), seed_distractors=frozenset(seed_distractors),
        symptom_rate=spec.symptom_rate, decoy_rate=0.2, wrong_rate=0.1, paraphrase=True, salience=0.5,
        judge_noise=spec.judge_noise, channel=Channel(fix_rate=0.6, garble_rate=0.1, paraphrase=True),
    )


def synthetic_problems(rng: random.Random) -> tuple[str, ...]:
    """An instance's own problems: 24-48 cases ``<builtin id>~<k>`` of random built-in problems
    (their difficulty is drawn per case)."""
    builtins = builtin_problems()
    count = rng.randint(*PROBLEMS_PER_INSTANCE)
    return tuple(f"{rng.choice(builtins)}{CASE}{k}" for k in range(count))


def _synergy_members(draft: _Draft) -> set[str]:
    return {x for s in draft.synergies for x in (s.first, s.second)}


def _config(facts: frozenset[str], distractors: frozenset[str]):  # noqa: ANN202 - a Configuration
    from optimizers.gym.world import Configuration

    return Configuration(frozenset(facts), frozenset(distractors))
