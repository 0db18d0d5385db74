"""The built-in worlds, from easy to hard, on any of the five topologies.

Each world kind places its facts in *slots*: ``main`` is the component that matters most (the
role that writes the final program), ``other`` a second editable component (another role, or the
hand-off protocol; the same role in one-role teams). So every kind runs on every topology.

- ``credit``: only one role matters (credit assignment). Two facts in the main role, none in the
  other; two distractors.
- ``joint``: interactions between roles (joint search). A fact in the other component and its
  partner in the main one cost a little alone and pay a lot together; one independent fact.
- ``noisy``: small effects near a 50 % solve rate, rare symptoms and noisy judges (acceptance
  under noise).
- ``seed_optimal``: the seed already carries the optimum; any edit can only keep it or hurt.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from optimizers.gym.world import Distractor, Fact, Synergy, World, spread_difficulties

# The default suite: each kind on a different topology, so all role structures are exercised.
DEFAULT_SUITE: tuple[tuple[str, str], ...] = (
    ("credit", "sequential"),
    ("joint", "centralized"),
    ("noisy", "decentralized"),
    ("seed_optimal", "independent"),
)
TEAM_SIZE = 2  # the smallest team of every topology: cheap rollouts, still two roles where roles exist

# (main, other) component of each topology at TEAM_SIZE.
SLOTS: Mapping[str, tuple[str, str]] = {
    "single": ("role/solver", "role/solver"),
    "independent": ("role/coder", "role/coder"),
    "sequential": ("role/debugger", "role/coder"),
    "centralized": ("role/coder_worker", "role/manager"),
    "decentralized": ("role/debater", "protocol/handoff"),
}

# Phrases contain no quotes or backslashes, so a scripted reply can put them in JSON strings.
READ_ALL = ("Read the whole input at once with sys.stdin.read and split it into tokens.",
            "I was unsure how the input is laid out, so I read it line by line and may have missed tokens.")
TRACE_SAMPLES = ("Trace every sample case by hand before giving the final program.",
                 "I did not trace the samples, so an off-by-one mistake may remain.")
EXACT_MATH = ("Use exact integer arithmetic and never floating point for counts or totals.",
              "The totals were computed with floats, so rounding may have changed the answer.")
EMPTY_CASES = ("Handle empty and single-element inputs explicitly.",
               "I did not consider what happens when the input is empty or has one element.")
ASK_BOUND = ("Ask for the time complexity of every program before accepting it.",
             "The plan never asked how fast the program must be.")
STATE_BOUND = ("State the time complexity of each program you return and keep it within the limits.",
               "I returned the program without checking whether it is fast enough.")
RECURSION = ("Prefer deep recursion over loops in every solution.",
             "As instructed I recursed deeply, which may exceed the recursion limit.")
DEBUG_PRINTS = ("Print your intermediate debugging values to standard output.",
                "My debugging prints went to standard output as the prompt asks.")
NO_LIBRARY = ("Never import any module, not even from the standard library.",
              "Without imports I had to hand-roll the data structures.")


def _fact(fact_id: str, home: str, phrase: tuple[str, str], weight: float) -> Fact:
    return Fact(fact_id, home, phrase[0], phrase[1], weight)


def _distractor(distractor_id: str, phrase: tuple[str, str], penalty: float) -> Distractor:
    return Distractor(distractor_id, phrase[0], phrase[1], penalty)


def _problems() -> tuple[str, ...]:
    from lcb.data import load_problems

    return tuple(p.id for p in load_problems("builtin").problems)


def credit(topology: str) -> World:
    main, _ = SLOTS[topology]
    return World(
        name=f"credit-{topology}", topology=topology, team_size=TEAM_SIZE,
        facts=(_fact("read_all", main, READ_ALL, 1.2), _fact("trace_samples", main, TRACE_SAMPLES, 0.8)),
        distractors=(_distractor("recursion", RECURSION, 1.0), _distractor("debug_prints", DEBUG_PRINTS, 0.8)),
        base=-0.8, difficulties=spread_difficulties(_problems(), 1.0, f"credit-{topology}"),
        description="one role matters: both facts belong in the main role",
    )


def joint(topology: str) -> World:
    main, other = SLOTS[topology]
    return World(
        name=f"joint-{topology}", topology=topology, team_size=TEAM_SIZE,
        facts=(_fact("ask_bound", other, ASK_BOUND, -0.4), _fact("state_bound", main, STATE_BOUND, -0.2),
               _fact("exact_math", main, EXACT_MATH, 0.6)),
        synergies=(Synergy("ask_bound", "state_bound", 2.0),),
        distractors=(_distractor("recursion", RECURSION, 1.0),),
        base=-0.6, difficulties=spread_difficulties(_problems(), 1.0, f"joint-{topology}"),
        description="interactions: a fact pays off only with its partner in another component",
    )


def noisy(topology: str) -> World:
    main, other = SLOTS[topology]
    return World(
        name=f"noisy-{topology}", topology=topology, team_size=TEAM_SIZE,
        facts=(_fact("read_all", main, READ_ALL, 0.35), _fact("empty_cases", other, EMPTY_CASES, 0.3)),
        distractors=(_distractor("no_library", NO_LIBRARY, 0.3),),
        base=0.0, difficulties=spread_difficulties(_problems(), 0.5, f"noisy-{topology}"),
        symptom_rate=0.4, judge_noise=0.3,
        description="noisy evaluations: small effects near 50 % success, rare symptoms, noisy judges",
    )


def seed_optimal(topology: str) -> World:
    main, other = SLOTS[topology]
    return World(
        name=f"seed_optimal-{topology}", topology=topology, team_size=TEAM_SIZE,
        facts=(_fact("trace_samples", main, TRACE_SAMPLES, 1.0), _fact("exact_math", other, EXACT_MATH, 0.6)),
        distractors=(_distractor("recursion", RECURSION, 1.0), _distractor("debug_prints", DEBUG_PRINTS, 0.8)),
        base=-0.5, difficulties=spread_difficulties(_problems(), 1.0, f"seed_optimal-{topology}"),
        seed_facts=frozenset({"trace_samples", "exact_math"}),
        description="the seed is already optimal: a method must not make it worse",
    )


WORLD_KINDS: Mapping[str, Callable[[str], World]] = {
    "credit": credit,
    "joint": joint,
    "noisy": noisy,
    "seed_optimal": seed_optimal,
}


class UnknownWorld(LookupError):
    """A world name that is neither a kind nor kind-topology."""


def make_world(name: str) -> World:
    """``credit`` (the kind on its default topology) or ``credit-single`` (on a chosen one)."""
    kind, _, topology = name.partition("-")
    if kind not in WORLD_KINDS:
        raise UnknownWorld(f"unknown world {name!r}; kinds: {', '.join(WORLD_KINDS)}")
    if not topology:
        topology = dict(DEFAULT_SUITE)[kind]
    if topology not in SLOTS:
        raise UnknownWorld(f"unknown topology {topology!r} in world {name!r}; topologies: {', '.join(SLOTS)}")
    return WORLD_KINDS[kind](topology)


def default_worlds() -> list[World]:
    return [WORLD_KINDS[kind](topology) for kind, topology in DEFAULT_SUITE]
