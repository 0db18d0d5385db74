"""A gym world: hidden facts, a success model with a known optimum, and symptoms.

The model (everything a method can ever observe comes out of it, nothing else):

- **Configuration.** A candidate's *configuration* is which world phrases its components carry:
  a *fact* counts only when its text is in its home component (``role/<name>`` or
  ``protocol/<part>``) and, in a masked run, when an agent of that role acts; a *distractor*
  counts wherever it appears. Everything else in a prompt (style, rewording) is irrelevant.
- **Success model.** For problem ``p`` the team solves it with probability
  ``sigmoid(logit(S) - difficulty[p])`` where ``logit(S) = base + sum of the weights of the
  present facts + sum of the bonuses of the synergy pairs whose two facts are both present - sum
  of the penalties of the present distractors``. A synergy pays only in combination (e.g. a
  manager fact whose partner fact sits in a worker prompt; alone each may even cost a little).
  The outcome of one rollout is ``u < P`` with ``u`` uniform, drawn from the request seed and the
  problem id, so every rollout is reproducible.
- **Exact value.** ``expected_success(S)`` is the mean of that probability over the world's
  problems; the optimum over all configurations has a closed form, because the logit is a sum of
  independent groups (a lone fact, or the two facts of a synergy), each maximised on its own, and
  the mean of sigmoids is increasing in the logit. ``brute_force_optimum`` checks it by
  enumerating every configuration.
- **Symptoms.** In a *failing* rollout each acting role whose component lacks a needed fact (one
  of the optimum) says that fact's symptom phrase in its turn, and a role whose component carries
  a distractor says that distractor's symptom, each with probability ``symptom_rate`` (drawn from
  the request seed). Symptoms are the only trace of the hidden table in anything a method sees;
  they never contain a fact's text.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

PROTOCOL_PREFIX = "protocol/"


def unit_draw(*parts: object) -> float:
    """A reproducible uniform number in [0, 1) from any parts (the request seed among them)."""
    digest = hashlib.sha256("\x00".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


@dataclass(frozen=True, slots=True)
class Fact:
    """A phrase that helps (``weight`` on the logit) when it is in its ``home`` component."""

    id: str
    home: str  # component key, e.g. "role/debugger"
    text: str
    symptom: str
    weight: float


@dataclass(frozen=True, slots=True)
class Synergy:
    """A bonus paid only when both facts are present (each in its own home)."""

    first: str
    second: str
    bonus: float


@dataclass(frozen=True, slots=True)
class Distractor:
    """A phrase that hurts wherever it appears (the logit drops by ``penalty``)."""

    id: str
    text: str
    symptom: str
    penalty: float


@dataclass(frozen=True, slots=True)
class Configuration:
    """What matters of a candidate: the present facts and distractors (ids)."""

    facts: frozenset[str] = frozenset()
    distractors: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class World:
    """One scripted world (see the module docstring for the model)."""

    name: str
    topology: str
    team_size: int
    facts: tuple[Fact, ...]
    distractors: tuple[Distractor, ...]
    synergies: tuple[Synergy, ...] = ()
    base: float = 0.0
    difficulties: Mapping[str, float] = field(default_factory=dict)  # problem id -> difficulty
    seed_facts: frozenset[str] = frozenset()  # facts the seed prompts already carry
    symptom_rate: float = 0.8
    judge_noise: float = 0.1
    description: str = ""

    def __post_init__(self) -> None:
        ids = [f.id for f in self.facts] + [d.id for d in self.distractors]
        if len(set(ids)) != len(ids):
            raise ValueError(f"world {self.name}: fact and distractor ids must be unique")
        known = {f.id for f in self.facts}
        for synergy in self.synergies:
            if {synergy.first, synergy.second} - known:
                raise ValueError(f"world {self.name}: synergy names an unknown fact")
        if self.seed_facts - known:
            raise ValueError(f"world {self.name}: seed facts {sorted(self.seed_facts - known)} are unknown")
        if not self.difficulties:
            raise ValueError(f"world {self.name}: no problems")
        texts = [f.text for f in self.facts] + [d.text for d in self.distractors]
        for text in texts:
            if any(s in text or text in s for s in self.symptoms()):
                raise ValueError(f"world {self.name}: a symptom overlaps the phrase {text!r}")

    # ---------------------------------------------------------------- lookups

    def fact(self, fact_id: str) -> Fact:
        return next(f for f in self.facts if f.id == fact_id)

    def symptoms(self) -> list[str]:
        return [f.symptom for f in self.facts] + [d.symptom for d in self.distractors]

    def phrases(self) -> list[str]:
        """Every phrase that matters (facts and distractors), the reflector's vocabulary."""
        return [f.text for f in self.facts] + [d.text for d in self.distractors]

    @property
    def problems(self) -> tuple[str, ...]:
        return tuple(sorted(self.difficulties))

    # ---------------------------------------------------------------- configuration of a candidate

    def configuration(
        self, components: Mapping[str, str], *, active_roles: Collection[str] | None = None
    ) -> Configuration:
        """The facts and distractors ``components`` carry; a role that does not act (masked out)
        contributes nothing. Protocol parts act whenever the team runs."""

        def acts(key: str) -> bool:
            if active_roles is None or key.startswith(PROTOCOL_PREFIX):
                return True
            return key.partition("/")[2] in active_roles

        facts = frozenset(f.id for f in self.facts if acts(f.home) and f.text in components.get(f.home, ""))
        distractors = frozenset(
            d.id for d in self.distractors
            if any(acts(key) and d.text in text for key, text in components.items())
        )
        return Configuration(facts, distractors)

    # ---------------------------------------------------------------- the success model

    def logit(self, config: Configuration) -> float:
        value = self.base
        value += sum(f.weight for f in self.facts if f.id in config.facts)
        value += sum(s.bonus for s in self.synergies if s.first in config.facts and s.second in config.facts)
        value -= sum(d.penalty for d in self.distractors if d.id in config.distractors)
        return value

    def solve_probability(self, config: Configuration, problem_id: str) -> float:
        return sigmoid(self.logit(config) - self.difficulties[problem_id])

    def expected_success(self, config: Configuration) -> float:
        """The exact mean solve probability over the world's problems."""
        logit = self.logit(config)
        return sum(sigmoid(logit - d) for d in self.difficulties.values()) / len(self.difficulties)

    def solved(self, config: Configuration, problem_id: str, seed: int) -> bool:
        """One rollout's outcome: reproducible from the request seed and the problem."""
        return unit_draw(self.name, "solve", seed, problem_id) < self.solve_probability(config, problem_id)

    # ---------------------------------------------------------------- the optimum, two ways

    def groups(self) -> list[tuple[str, ...]]:
        """Independent groups of facts: the two facts of each synergy, and every other fact alone."""
        paired: dict[str, tuple[str, ...]] = {}
        for s in self.synergies:
            group = tuple(sorted({*paired.get(s.first, (s.first,)), *paired.get(s.second, (s.second,))}))
            for member in group:
                paired[member] = group
        groups = sorted(set(paired.values()))
        return groups + [(f.id,) for f in self.facts if f.id not in paired]

    def optimum(self) -> Configuration:
        """The best configuration by formula: no distractor, and in each group the subset with the
        largest logit contribution (ties: the smaller subset)."""
        chosen: set[str] = set()
        for group in self.groups():
            best: tuple[float, int, tuple[str, ...]] | None = None
            for size in range(len(group) + 1):
                for subset in itertools.combinations(group, size):
                    gain = self.logit(Configuration(frozenset(subset))) - self.base
                    key = (round(gain, 12), -size, subset)
                    if best is None or key[:2] > best[:2]:
                        best = key
            assert best is not None
            chosen.update(best[2])
        return Configuration(frozenset(chosen))

    def optimal_success(self) -> float:
        return self.expected_success(self.optimum())

    def seed_configuration(self) -> Configuration:
        return Configuration(self.seed_facts)

    def needed_facts(self) -> frozenset[str]:
        """The facts of the optimum: a role lacking one shows its symptom when the team fails."""
        return self.optimum().facts

    def all_configurations(self) -> list[Configuration]:
        """Every configuration (2^(facts + distractors)); for the brute-force check."""
        fact_ids = [f.id for f in self.facts]
        distractor_ids = [d.id for d in self.distractors]
        out = []
        for fact_mask in itertools.product((False, True), repeat=len(fact_ids)):
            facts = frozenset(i for i, on in zip(fact_ids, fact_mask, strict=True) if on)
            for d_mask in itertools.product((False, True), repeat=len(distractor_ids)):
                present = frozenset(i for i, on in zip(distractor_ids, d_mask, strict=True) if on)
                out.append(Configuration(facts, present))
        return out

    # ---------------------------------------------------------------- symptoms

    def symptoms_by_component(self, config: Configuration, seed: int, problem_id: str) -> dict[str, list[str]]:
        """For a failing rollout: component key -> the symptom phrases its role says."""
        out: dict[str, list[str]] = {}
        needed = self.needed_facts()
        for fact in self.facts:
            if fact.id in needed and fact.id not in config.facts:
                if unit_draw(self.name, "symptom", seed, problem_id, fact.id) < self.symptom_rate:
                    out.setdefault(fact.home, []).append(fact.symptom)
        return out

    def distractor_symptoms(self, config: Configuration, seed: int, problem_id: str) -> list[tuple[str, str]]:
        """(distractor text, symptom) of the present distractors that show in this failing run."""
        return [
            (d.text, d.symptom) for d in self.distractors
            if d.id in config.distractors
            and unit_draw(self.name, "symptom", seed, problem_id, d.id) < self.symptom_rate
        ]


def brute_force_optimum(world: World) -> tuple[Configuration, float]:
    """The best configuration by enumerating all of them (exact expected success each)."""
    best = max(world.all_configurations(),
               key=lambda c: (round(world.expected_success(c), 12), -len(c.facts) - len(c.distractors)))
    return best, world.expected_success(best)


def spread_difficulties(problems: Sequence[str], spread: float, salt: str) -> dict[str, float]:
    """Per-problem difficulties evenly spread over [-spread, spread], assigned in a salted order."""
    order = sorted(problems, key=lambda p: unit_draw(salt, p))
    n = len(order)
    return {p: (spread * (2 * i / (n - 1) - 1) if n > 1 else 0.0) for i, p in enumerate(order)}
