"""World kinds: random instances from per-kind generators, and the first gym's fixed worlds.

Each kind places its facts in *components*: ``main`` is the component that matters most (the
role that writes the final program), ``other`` a second editable component (another role, or the
hand-off protocol; the same role in one-role teams). So every kind runs on every topology.

A world name is ``KIND[-TOPOLOGY][@INSTANCE]``: ``credit@7`` is instance 7 of the ``credit``
generator on its default topology (``optimizers.gym.generators``, COCO-style: each instance
draws its own concepts, home roles, weights, synergy graph, distractors and difficulty from the
instance seed). ``legacy_credit`` (with a topology too, e.g. ``legacy_joint-single``) is the
first gym's fixed world of that kind: the corner of the design with no decoys, no wrong-way
symptoms, no paraphrases, no instance randomisation and the old rates (its ``@N`` is ignored: one
world, the instance only seeds the method). With the corner knobs (``CORNER``: ``legacy_salt``,
``legacy_draws``, ``legacy_probe``, ``legacy_reading``) it is the first gym draw for draw: same
split, same request seeds, outcomes, symptoms, judge and reflector draws, and MAPRO's noise-free
probe (``benchmarks.gym.corner`` checks it against the first gym's code run with today's
methods).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from optimizers.gym.draws import Channel
from optimizers.gym.slots import SLOTS, TEAM_SIZE, builtin_problems, components_of
from optimizers.gym.world import Distractor, Fact, Synergy, World, spread_difficulties

KINDS: tuple[str, ...] = ("credit", "joint", "noisy", "seed_optimal")
# Each kind on a different topology by default, so all role structures are exercised.
DEFAULT_TOPOLOGY: Mapping[str, str] = {
    "credit": "sequential", "joint": "centralized", "noisy": "decentralized", "seed_optimal": "independent",
}
DEFAULT_SUITE: tuple[tuple[str, str], ...] = tuple(DEFAULT_TOPOLOGY.items())
LEGACY = "legacy_"


# ------------------------------------------------------------------------------------------------
# The first gym's worlds (legacy lexicon, old rates)


def _legacy(kind: str, topology: str, facts: list[tuple[str, str, float]], distractors: list[tuple[str, float]],
            **options: object) -> World:
    name = f"{LEGACY}{kind}-{topology}"
    keys = tuple(f for f, _, _ in facts) + tuple(d for d, _ in distractors)
    return World(
        name=name, topology=topology, team_size=TEAM_SIZE,
        facts=tuple(Fact(fid, home, weight) for fid, home, weight in facts),
        distractors=tuple(Distractor(did, penalty) for did, penalty in distractors),
        components=components_of(topology), lexicon="legacy", paraphrase=False,
        # The old reflector: no misreading, one form, blind edits among the world's own phrases.
        channel=Channel(fix_rate=0.6, garble_rate=0.0, paraphrase=False, blind=keys),
        **options,  # type: ignore[arg-type]
    )


def legacy_credit(topology: str) -> World:
    main, _ = SLOTS[topology]
    return _legacy("credit", topology, [("read_all", main, 1.2), ("trace_samples", main, 0.8)],
                   [("recursion", 1.0), ("debug_prints", 0.8)], base=-0.8,
                   difficulties=spread_difficulties(builtin_problems(), 1.0, f"credit-{topology}"),
                   description="one role matters: both facts belong in the main role")


def legacy_joint(topology: str) -> World:
    main, other = SLOTS[topology]
    return _legacy("joint", topology,
                   [("ask_bound", other, -0.4), ("state_bound", main, -0.2), ("exact_math", main, 0.6)],
                   [("recursion", 1.0)], synergies=(Synergy("ask_bound", "state_bound", 2.0),), base=-0.6,
                   difficulties=spread_difficulties(builtin_problems(), 1.0, f"joint-{topology}"),
                   description="interactions: a fact pays off only with its partner in another component")


def legacy_noisy(topology: str) -> World:
    main, other = SLOTS[topology]
    return _legacy("noisy", topology, [("read_all", main, 0.35), ("empty_cases", other, 0.3)],
                   [("no_library", 0.3)], base=0.0,
                   difficulties=spread_difficulties(builtin_problems(), 0.5, f"noisy-{topology}"),
                   symptom_rate=0.4, judge_noise=0.3,
                   description="noisy evaluations: small effects near 50 % success, rare symptoms, noisy judges")


def legacy_seed_optimal(topology: str) -> World:
    main, other = SLOTS[topology]
    return _legacy("seed_optimal", topology, [("trace_samples", main, 1.0), ("exact_math", other, 0.6)],
                   [("recursion", 1.0), ("debug_prints", 0.8)], base=-0.5,
                   difficulties=spread_difficulties(builtin_problems(), 1.0, f"seed_optimal-{topology}"),
                   seed_facts=frozenset({"trace_samples", "exact_math"}),
                   description="the seed is already optimal: a method must not make it worse")


LEGACY_KINDS: Mapping[str, Callable[[str], World]] = {
    "credit": legacy_credit, "joint": legacy_joint, "noisy": legacy_noisy, "seed_optimal": legacy_seed_optimal,
}


# ------------------------------------------------------------------------------------------------
# Names


class UnknownWorld(LookupError):
    """A world name that is not KIND[-TOPOLOGY][@INSTANCE] for a known kind and topology."""


def parse_name(name: str) -> tuple[str, str, int | None, bool]:
    """(kind, topology, instance or None, legacy) of a world name."""
    base, at, instance_text = name.partition("@")
    instance: int | None = None
    if at:
        if not instance_text.isdigit():
            raise UnknownWorld(f"bad instance {instance_text!r} in world {name!r}: expected a non-negative integer")
        instance = int(instance_text)
    kind, _, topology = base.partition("-")
    legacy = kind.startswith(LEGACY)
    kind = kind.removeprefix(LEGACY)
    if kind not in KINDS:
        kinds = ", ".join([*KINDS, *(LEGACY + k for k in KINDS)])
        raise UnknownWorld(f"unknown world {name!r}; kinds: {kinds}")
    topology = topology or DEFAULT_TOPOLOGY[kind]
    if topology not in SLOTS:
        raise UnknownWorld(f"unknown topology {topology!r} in world {name!r}; topologies: {', '.join(SLOTS)}")
    return kind, topology, instance, legacy


def make_world(name: str, knobs: Mapping[str, object] | None = None) -> World:
    """The world ``name`` (see the module docstring), with model knobs overridden (``knobs``:
    symptom_rate, decoy_rate, wrong_rate, judge_noise, paraphrase, the channel's fix_rate,
    garble_rate, and the first gym's corner knobs ``CORNER``)."""
    kind, topology, instance, legacy = parse_name(name)
    if legacy:
        world = LEGACY_KINDS[kind](topology)
    else:
        from optimizers.gym.generators import generate

        world = generate(kind, topology, instance or 0)
    return with_knobs(world, knobs or {})


WORLD_KNOBS = ("symptom_rate", "decoy_rate", "wrong_rate", "judge_noise", "paraphrase", "legacy_draws",
               "legacy_probe", "legacy_salt")
CHANNEL_KNOBS = ("fix_rate", "garble_rate", "legacy_reading")
FLAGS = ("paraphrase", "legacy_draws", "legacy_probe", "legacy_salt", "legacy_reading")
# The knobs that make a legacy_ world the first gym draw for draw (all on).
CORNER: tuple[tuple[str, bool], ...] = (("legacy_draws", True), ("legacy_probe", True), ("legacy_reading", True),
                                        ("legacy_salt", True))


def with_knobs(world: World, knobs: Mapping[str, object]) -> World:
    import dataclasses

    unknown = sorted(set(knobs) - set(WORLD_KNOBS) - set(CHANNEL_KNOBS))
    if unknown:
        raise UnknownWorld(f"unknown knob(s) {', '.join(unknown)}; knobs: {', '.join(WORLD_KNOBS + CHANNEL_KNOBS)}")
    if not knobs:
        return world

    def value(name: str, raw: object) -> object:
        if name in FLAGS:
            if isinstance(raw, bool):
                return raw
            text = str(raw).lower()
            if text not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
                raise UnknownWorld(f"knob {name} must be on or off (1/0, true/false), not {raw!r}")
            return text in ("1", "true", "yes", "on")
        try:
            return float(raw)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise UnknownWorld(f"knob {name} must be a number, not {raw!r}") from None

    own = {k: value(k, v) for k, v in knobs.items() if k in WORLD_KNOBS}
    channel = {k: value(k, v) for k, v in knobs.items() if k in CHANNEL_KNOBS}
    if "legacy_salt" in own:  # draws named after the first gym's world (credit-sequential)
        if own.pop("legacy_salt"):
            if not world.name.startswith(LEGACY):
                raise UnknownWorld(f"knob legacy_salt: world {world.name} is not one of the first gym's (legacy_...)")
            own["salt"] = world.name.removeprefix(LEGACY)
        else:
            own["salt"] = ""
    try:
        return dataclasses.replace(world, **own, channel=dataclasses.replace(world.channel, **channel))
    except ValueError as exc:
        raise UnknownWorld(str(exc)) from None


def default_worlds() -> list[World]:
    return [make_world(f"{kind}@0") for kind in KINDS]
