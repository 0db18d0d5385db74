"""A gym world: hidden facts, a success model with a known optimum, and what failing agents say.

The model (everything a method can ever observe comes out of it, nothing else):

- **Language.** What matters is *concepts* of a lexicon (``optimizers.gym.lexicon``): a concept is
  present in a prompt when any of its instruction forms is (many surface forms share one key, so
  an edit can be right in other words). Everything else in a prompt is irrelevant.
- **Configuration.** A *fact* counts only when its concept is in its home component
  (``role/<name>`` or ``protocol/<part>``) and, in a masked run, when an agent of that role acts;
  a *distractor* counts wherever it appears.
- **Success model.** For problem ``p`` the team solves it with probability
  ``sigmoid(logit(S) - difficulty[p])`` where ``logit(S) = base + sum of the weights of the
  present facts + sum of the bonuses of the synergy edges whose two facts are both present - sum
  of the penalties of the present distractors``. Weights, bonuses and penalties may have any sign
  (a negative synergy is a clash; a negative penalty is a phrase that helps wherever it is).
- **Draws (common random numbers).** One rollout's outcome is ``u < P`` with ``u`` uniform from
  (world, request seed, problem, configuration). The job derives the request seed from (world,
  problem, sample) only, so every method and budget sees the same draw for the same configuration
  on the same (problem, sample); two configurations get independent draws (as two prompts of a
  real model would).
- **Exact value and optimum.** ``expected_success(S)`` is the mean solve probability over the
  problems; it increases with the logit, and the logit is a sum over independent groups (the
  connected components of the synergy graph, every other fact alone, each distractor alone), so
  the optimum maximises each group on its own (``optimum``). ``brute_force_optimum`` checks it by
  enumerating every configuration (tests, on small random instances of every kind).
- **What failing agents say.** In a failing rollout, each with probability ``symptom_rate`` (times
  ``min(1, |effect| / salience)`` when ``salience`` is set, so small effects rarely show): a role
  lacking a fact of the optimum says a *lack* symptom of it; a role holding a harmful fact (not in
  the optimum, negative weight) or a harmful distractor says an *excess* symptom of it; a missing helpful
  distractor shows as a lack symptom in the main component. Misleading lines: a role holding a
  fact of the optimum says an excess symptom of it with probability ``wrong_rate`` (pointing the
  wrong way), and each acting component says a *decoy* lack symptom with probability
  ``decoy_rate`` (half the time of a harmful concept of this world, else of a random concept of
  the lexicon). With ``paraphrase`` the sentence is one of the concept's symptom forms, else its
  first. Symptoms never contain an instruction form.
- **The first gym's corner** (``legacy_*`` worlds with the corner knobs; all off by default, and
  then left out of the world's digest, so default worlds and their results are unchanged):
  ``salt`` names the draws after the first gym's world (``credit-sequential``, not
  ``legacy_credit-sequential``: split, outcomes, symptoms, judge and reflector draws);
  ``legacy_draws`` keys them as the first gym did (the outcome from the request seed and the
  problem only, not the configuration; a symptom's draw with the seed before the fact; one draw
  per distractor for every component that carries it; the runner then derives the request seed
  from the job and the candidate, so there are no common random numbers); ``legacy_probe``
  answers MAPRO's probes noise-free from the optimum, as the first gym did, instead of by a
  stochastic rollout.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from optimizers.gym.draws import OMIT_DEFAULT, Channel, unit_draw
from optimizers.gym.lexicon import EXCESS, LACK, Lexicon, lexicon

CONFIGURATIONS_REMEMBERED = 4096  # per world: far more candidates than a budget-600 job makes

PROTOCOL_PREFIX = "protocol/"


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


@dataclass(frozen=True, slots=True)
class Fact:
    """A concept that changes the logit by ``weight`` when it is in its ``home`` component."""

    id: str
    home: str  # component key, e.g. "role/debugger"
    weight: float
    key: str = ""  # the lexicon concept; "" = the id

    @property
    def concept(self) -> str:
        return self.key or self.id


@dataclass(frozen=True, slots=True)
class Synergy:
    """A bonus (any sign) paid only when both facts are present (each in its own home)."""

    first: str
    second: str
    bonus: float


@dataclass(frozen=True, slots=True)
class Distractor:
    """A concept that lowers the logit by ``penalty`` (any sign) wherever it appears."""

    id: str
    penalty: float
    key: str = ""

    @property
    def concept(self) -> str:
        return self.key or self.id


@dataclass(frozen=True)
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
    seed_distractors: frozenset[str] = frozenset()  # distractors the seed's main component carries
    components: tuple[str, ...] = ()  # the components facts live in; the first is the main one
    lexicon: str = "generated"
    symptom_rate: float = 0.8
    decoy_rate: float = 0.0
    wrong_rate: float = 0.0
    paraphrase: bool = True
    salience: float = 0.0  # > 0: a symptom's chance scales with min(1, |effect| / salience); 0: off
    judge_noise: float = 0.1
    channel: Channel = Channel()
    description: str = ""
    # The first gym's corner (see the module docstring).
    salt: str = field(default="", metadata=OMIT_DEFAULT)  # the name draws are salted with; "" = name
    legacy_draws: bool = field(default=False, metadata=OMIT_DEFAULT)
    legacy_probe: bool = field(default=False, metadata=OMIT_DEFAULT)

    def __post_init__(self) -> None:
        ids = [f.id for f in self.facts] + [d.id for d in self.distractors]
        if len(set(ids)) != len(ids):
            raise ValueError(f"world {self.name}: fact and distractor ids must be unique")
        concepts = [f.concept for f in self.facts] + [d.concept for d in self.distractors]
        if len(set(concepts)) != len(concepts):
            raise ValueError(f"world {self.name}: two facts or distractors share a concept")
        unknown = set(concepts) - set(self.lex.keys)
        if unknown:
            raise ValueError(f"world {self.name}: concepts {sorted(unknown)[:3]} are not in lexicon {self.lexicon}")
        known = {f.id for f in self.facts}
        for synergy in self.synergies:
            if {synergy.first, synergy.second} - known or synergy.first == synergy.second:
                raise ValueError(f"world {self.name}: a synergy names an unknown fact or one fact twice")
        if self.seed_facts - known:
            raise ValueError(f"world {self.name}: seed facts {sorted(self.seed_facts - known)} are unknown")
        if self.seed_distractors - {d.id for d in self.distractors}:
            raise ValueError(f"world {self.name}: unknown seed distractors")
        if not self.difficulties:
            raise ValueError(f"world {self.name}: no problems")
        if not self.components or any(f.home not in self.components for f in self.facts):
            raise ValueError(f"world {self.name}: every fact's home must be one of its components")
        for rate in (self.symptom_rate, self.decoy_rate, self.wrong_rate, self.channel.fix_rate,
                     self.channel.garble_rate):
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"world {self.name}: rates must be in [0, 1]")

    # ---------------------------------------------------------------- lookups

    @property
    def draw_name(self) -> str:
        """What every draw of this world is salted with."""
        return self.salt or self.name

    @cached_property
    def lex(self) -> Lexicon:
        return lexicon(self.lexicon)

    def fact(self, fact_id: str) -> Fact:
        return next(f for f in self.facts if f.id == fact_id)

    def text(self, concept: str) -> str:
        """The canonical instruction form of a concept (how the seed carries it)."""
        return self.lex.concept(concept).forms[0]

    @property
    def main(self) -> str:
        return self.components[0]

    @property
    def problems(self) -> tuple[str, ...]:
        return tuple(sorted(self.difficulties))

    # ---------------------------------------------------------------- configuration of a candidate

    @staticmethod
    def _acts(key: str, active_roles: Collection[str] | None) -> bool:
        if active_roles is None or key.startswith(PROTOCOL_PREFIX):
            return True
        return key.partition("/")[2] in active_roles

    def configuration(
        self, components: Mapping[str, str], *, active_roles: Collection[str] | None = None
    ) -> Configuration:
        """The facts and distractors ``components`` carry; a role that does not act (masked out)
        contributes nothing. Protocol parts act whenever the team runs."""
        # A pure function of its arguments (the world is frozen), asked again for every rollout
        # of a candidate: remembered per world, with a bound for worlds that live long.
        key = (frozenset(components.items()), None if active_roles is None else frozenset(active_roles))
        known = self._configurations.get(key)
        if known is None:
            if len(self._configurations) >= CONFIGURATIONS_REMEMBERED:
                self._configurations.clear()
            known = self._configurations[key] = self._configuration(components, active_roles)
        return known

    @cached_property
    def _configurations(self) -> dict[tuple[frozenset[tuple[str, str]], frozenset[str] | None], Configuration]:
        return {}

    def _configuration(self, components: Mapping[str, str], active_roles: Collection[str] | None) -> Configuration:
        lex = self.lex
        facts = frozenset(f.id for f in self.facts if self._acts(f.home, active_roles)
                          and lex.present(f.concept, components.get(f.home, "")))
        distractors = frozenset(
            d.id for d in self.distractors
            if any(self._acts(key, active_roles) and lex.present(d.concept, text) for key, text in components.items())
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
        """One rollout's outcome: reproducible from the request seed, the problem and the
        configuration (two configurations draw independently)."""
        key = () if self.legacy_draws else (config.digest,)  # the first gym: the same draw for every configuration
        return unit_draw(self.draw_name, "solve", seed, problem_id, *key) < self.solve_probability(config, problem_id)

    # ---------------------------------------------------------------- the optimum, two ways

    def groups(self) -> list[tuple[str, ...]]:
        """Independent groups of facts: the connected components of the synergy graph (chains
        included), and every other fact alone."""
        parent = {f.id: f.id for f in self.facts}

        def root(x: str) -> str:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for s in self.synergies:
            parent[root(s.first)] = root(s.second)
        members: dict[str, list[str]] = {}
        for f in self.facts:
            members.setdefault(root(f.id), []).append(f.id)
        return sorted(tuple(sorted(group)) for group in members.values())

    @cached_property
    def _optimum(self) -> Configuration:
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
        helpful = frozenset(d.id for d in self.distractors if d.penalty < 0)
        return Configuration(frozenset(chosen), helpful)

    def optimum(self) -> Configuration:
        """The best configuration by formula: in each group the subset with the largest logit
        contribution (ties: the smaller subset), and exactly the distractors whose penalty is
        negative."""
        return self._optimum

    def optimal_success(self) -> float:
        return self.expected_success(self.optimum())

    def seed_configuration(self) -> Configuration:
        return Configuration(self.seed_facts, self.seed_distractors)

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

    # ---------------------------------------------------------------- what failing agents say

    def symptoms(self, components: Mapping[str, str], config: Configuration, seed: int, problem_id: str,
                 *, active_roles: Collection[str] | None = None) -> dict[str, list[str]]:
        """For a failing rollout of ``config`` (carried by ``components``): component key -> the
        symptom sentences its role says (see the module docstring)."""
        lex, optimum = self.lex, self.optimum()
        out: dict[str, list[str]] = {}

        def say(component: str, concept: str, direction: str) -> None:
            forms = lex.concept(concept).symptoms(direction)
            if forms:
                index = int(unit_draw(self.draw_name, "form", seed, problem_id, concept, direction) * len(forms)) \
                    if self.paraphrase else 0
                out.setdefault(component, []).append(forms[index])

        def shows(what: str, *ids: object, rate: float) -> bool:
            parts = (what, seed, problem_id, *ids) if self.legacy_draws else (what, *ids, seed, problem_id)
            return rate > 0 and unit_draw(self.draw_name, *parts) < rate

        def salient(effect: float) -> float:
            return self.symptom_rate * (min(1.0, abs(effect) / self.salience) if self.salience > 0 else 1.0)

        for fact in self.facts:
            if not self._acts(fact.home, active_roles):
                continue
            present, needed = fact.id in config.facts, fact.id in optimum.facts
            effect = self._effect[fact.id]
            if needed and not present and shows("symptom", fact.id, rate=salient(effect)):
                say(fact.home, fact.concept, LACK)
            elif present and not needed and fact.weight < 0 and shows("symptom", fact.id, rate=salient(effect)):
                say(fact.home, fact.concept, EXCESS)
            elif present and needed and shows("wrong", fact.id, rate=self.wrong_rate):
                say(fact.home, fact.concept, EXCESS)
        for d in self.distractors:
            present, needed = d.id in config.distractors, d.id in optimum.distractors
            if present and not needed and self.legacy_draws:
                # The first gym: one draw per distractor, said in every component carrying it.
                if shows("symptom", d.id, rate=salient(d.penalty)):
                    for key, text in components.items():
                        if lex.present(d.concept, text):
                            say(key, d.concept, EXCESS)
            elif present and not needed:
                for key, text in components.items():
                    if self._acts(key, active_roles) and lex.present(d.concept, text) \
                            and shows("symptom", d.id, key, rate=salient(d.penalty)):
                        say(key, d.concept, EXCESS)
            elif needed and not present and shows("symptom", d.id, rate=salient(d.penalty)):
                say(self.main, d.concept, LACK)
        if self.decoy_rate > 0:
            harmful = self.harmful_concepts()
            for key in self.components:
                if self._acts(key, active_roles) and shows("decoy", key, rate=self.decoy_rate):
                    pool = harmful if harmful and unit_draw(self.draw_name, "decoy-pool", seed, problem_id, key) < 0.5 \
                        else lex.keys
                    say(key, pool[int(unit_draw(self.draw_name, "decoy-pick", seed, problem_id, key) * len(pool))], LACK)
        return out

    def probe_from_optimum(self, role_prompt: str) -> tuple[list[str], bool]:
        """The first gym's probe (``legacy_probe``), noise-free: an agent under ``role_prompt``
        says the lack symptom of every fact of the optimum the prompt misses (among the facts
        whose role it names or that live in the protocol; all of them when it names none) and
        the excess symptom of every distractor it carries; it solves iff it says nothing."""
        lex, optimum = self.lex, self.optimum()
        needed = [f for f in self.facts if f.id in optimum.facts]
        named = [f for f in needed
                 if f.home.partition("/")[2] in role_prompt or f.home.startswith(PROTOCOL_PREFIX)]
        missing = [f for f in named or needed if not lex.present(f.concept, role_prompt)]
        carried = [d for d in self.distractors if lex.present(d.concept, role_prompt)]
        lines = [lex.concept(f.concept).symptoms(LACK)[0] for f in missing]
        lines += [lex.concept(d.concept).symptoms(EXCESS)[0] for d in carried]
        return lines, not missing and not carried

    @cached_property
    def _effect(self) -> dict[str, float]:
        """A fact's salience: |weight| plus |bonus| of its synergy edges."""
        effect = {f.id: abs(f.weight) for f in self.facts}
        for s in self.synergies:
            effect[s.first] += abs(s.bonus)
            effect[s.second] += abs(s.bonus)
        return effect

    @cached_property
    def _harmful(self) -> tuple[str, ...]:
        optimum = self.optimum()
        return tuple([f.concept for f in self.facts if f.id not in optimum.facts and f.weight < 0]
                     + [d.concept for d in self.distractors if d.penalty > 0])

    def harmful_concepts(self) -> tuple[str, ...]:
        """Concepts of this world the optimum does not carry (a decoy may point at them)."""
        return self._harmful


@dataclass(frozen=True, slots=True)
class Configuration:
    """What matters of a candidate: the present facts and distractors (ids)."""

    facts: frozenset[str] = frozenset()
    distractors: frozenset[str] = frozenset()

    @property
    def digest(self) -> str:
        return ",".join(sorted(self.facts)) + "|" + ",".join(sorted(self.distractors))


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
