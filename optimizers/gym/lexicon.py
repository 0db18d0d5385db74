"""The gym's language: concepts, the sentences that carry them, and the symptoms that point at them.

A *concept* is what matters to a world ("the boundary checks"). It has a key, several
*instruction forms* (sentences a prompt can carry it in; the world recognises the concept by any
of them, so an edit can be right in other words), and symptom forms in two directions: *lack*
("I may have overlooked the boundary checks": something is missing) and *excess* ("the prompt
made me dwell on the boundary checks": an instruction got in the way).

The lexicon is shared knowledge, like a language: the world uses it to recognise and to speak,
the scripted reflector and judge use it to read and to write. It says nothing about any world:
which concepts a world uses, where they belong, what they weigh, which combine, which form the
optimum. Those live only in the world (``optimizers.gym.world``).

Two lexicons exist: ``generated`` (400 concepts from a product of word lists, four instruction
forms, four lack and three excess forms each) and ``legacy`` (the nine fixed phrases of the first
gym, one form each: lack forms for its facts, excess forms for its distractors), so the old
worlds are a corner of the new design.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache, wraps
from typing import TypeVar

INSTRUCTION, LACK, EXCESS = "instruction", "lack", "excess"


@dataclass(frozen=True, slots=True)
class Concept:
    key: str
    forms: tuple[str, ...]  # instruction sentences (the first is the canonical one)
    lack: tuple[str, ...] = ()  # symptom sentences: it was missing
    excess: tuple[str, ...] = ()  # symptom sentences: it got in the way

    def symptoms(self, direction: str) -> tuple[str, ...]:
        return self.lack if direction == LACK else self.excess


@dataclass(frozen=True, slots=True)
class Lexicon:
    name: str
    concepts: tuple[Concept, ...]
    # (instruction, lack, excess) sentence templates with a ``{key}`` slot, when every concept is
    # written by them: reading then takes one regular-expression pass instead of a scan per form.
    templates: tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]] | None = None

    def __post_init__(self) -> None:
        keys = [c.key for c in self.concepts]
        if len(set(keys)) != len(keys):
            raise ValueError(f"lexicon {self.name}: duplicate concept keys")

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(c.key for c in self.concepts)

    def concept(self, key: str) -> Concept:
        return _index(self)[0][key]

    def instructions_in(self, text: str) -> list[tuple[str, str]]:
        """(key, sentence) of every instruction form found in ``text``, in order of appearance."""
        return [(key, sentence) for _, key, sentence, _ in self._read(text, (INSTRUCTION,))]

    def symptoms_in(self, text: str) -> list[tuple[str, str]]:
        """(key, direction) of every symptom form found in ``text``, in order of appearance."""
        return [(key, kind) for _, key, _, kind in self._read(text, (LACK, EXCESS))]

    def _read(self, text: str, kinds: tuple[str, ...]) -> list[tuple[int, str, str, str]]:
        found = []
        patterns = _patterns(self)
        if patterns is not None:
            known = _index(self)[0]
            for kind in kinds:
                for match in patterns[kind].finditer(text):
                    key = next(k for k in match.groups() if k is not None)
                    if key in known:
                        found.append((match.start(), key, match.group(0), kind))
        else:
            for sentence, (key, kind) in _index(self)[1].items():
                if kind in kinds:
                    at = text.find(sentence)
                    if at >= 0:
                        found.append((at, key, sentence, kind))
        return sorted(found)

    def present(self, key: str, text: str) -> bool:
        """Whether ``text`` carries the concept (any of its instruction forms)."""
        return any(form in text for form in self.concept(key).forms)


_T = TypeVar("_T")
_MEMO_SIZE = 8


def _per_lexicon(build: Callable[[Lexicon], _T]) -> Callable[[Lexicon], _T]:
    """Memoise ``build`` on the lexicon's identity. A lexicon is frozen, so what is built from it
    never changes; an ``lru_cache`` keyed on the lexicon itself would hash all its concepts and
    their sentence tuples on every call (tuples do not keep their hash), which was most of a gym
    job's CPU outside the method (millions of hash calls: ``concept`` is called per rollout).
    The memo holds the lexicon, so its id cannot be reused while the entry lives."""
    memo: dict[int, tuple[Lexicon, _T]] = {}

    @wraps(build)
    def cached(lexicon: Lexicon) -> _T:
        hit = memo.get(id(lexicon))
        if hit is not None and hit[0] is lexicon:
            return hit[1]
        value = build(lexicon)
        if len(memo) >= _MEMO_SIZE:  # a handful of lexicons live at once; clear() is atomic
            memo.clear()
        memo[id(lexicon)] = (lexicon, value)
        return value

    return cached


@_per_lexicon
def _index(lexicon: Lexicon) -> tuple[dict[str, Concept], dict[str, tuple[str, str]]]:
    by_key = {c.key: c for c in lexicon.concepts}
    sentences = {form: (c.key, INSTRUCTION) for c in lexicon.concepts for form in c.forms}
    sentences.update({s: (c.key, d) for c in lexicon.concepts for d in (LACK, EXCESS) for s in c.symptoms(d)})
    return by_key, sentences


@_per_lexicon
def _patterns(lexicon: Lexicon) -> dict[str, re.Pattern[str]] | None:
    if lexicon.templates is None:
        return None

    def pattern(templates: tuple[str, ...]) -> re.Pattern[str]:
        return re.compile("|".join(re.escape(t).replace(re.escape("{key}"), "([a-z][a-z\\-]* [a-z]+)")
                                   for t in templates))

    return dict(zip((INSTRUCTION, LACK, EXCESS), map(pattern, lexicon.templates), strict=True))


# ------------------------------------------------------------------------------------------------
# The generated lexicon

_ADJECTIVES = ("boundary", "overflow", "parsing", "ordering", "duplicate", "negative", "sample", "modular",
               "recursive", "greedy", "memoised", "sparse", "nested", "whitespace", "rounding", "streaming",
               "prefix", "sorted", "cyclic", "off-by-one")
_NOUNS = ("checks", "cases", "values", "loops", "inputs", "outputs", "counts", "indices", "ranges", "keys",
          "states", "limits", "tokens", "edges", "queries", "arrays", "strings", "totals", "paths", "windows")
# Instruction forms: what a prompt says. Symptom forms: what a failing agent says. No symptom
# form contains an instruction form, so pasting a symptom into a prompt carries no concept.
INSTRUCTION_TEMPLATES = (
    "Always pay attention to the {key}.",
    "Be explicit about the {key}.",
    "Double-check the {key} before answering.",
    "Think carefully about the {key}.",
)
LACK_TEMPLATES = (
    "I may have overlooked the {key}.",
    "Nobody asked me to watch the {key}, so they may be wrong.",
    "I am not sure the {key} were handled.",
    "Something about the {key} went wrong here.",
)
EXCESS_TEMPLATES = (
    "Dwelling on the {key} as instructed may have hurt.",
    "The prompt made me fuss over the {key} and that got in the way.",
    "Because I was told about the {key}, I lost track of the rest.",
)


def _templated(key: str) -> Concept:
    return Concept(key, tuple(t.format(key=key) for t in INSTRUCTION_TEMPLATES),
                   tuple(t.format(key=key) for t in LACK_TEMPLATES), tuple(t.format(key=key) for t in EXCESS_TEMPLATES))


@lru_cache(maxsize=1)
def generated() -> Lexicon:
    return Lexicon("generated", tuple(_templated(f"{a} {n}") for a, n in itertools.product(_ADJECTIVES, _NOUNS)),
                   templates=(INSTRUCTION_TEMPLATES, LACK_TEMPLATES, EXCESS_TEMPLATES))


# ------------------------------------------------------------------------------------------------
# The legacy lexicon: the first gym's phrases (instruction, symptom). Phrases contain no quotes or
# backslashes, so a scripted reply can put them in JSON strings.

LEGACY_FACTS: Mapping[str, tuple[str, str]] = {
    "read_all": ("Read the whole input at once with sys.stdin.read and split it into tokens.",
                 "I was unsure how the input is laid out, so I read it line by line and may have missed tokens."),
    "trace_samples": ("Trace every sample case by hand before giving the final program.",
                      "I did not trace the samples, so an off-by-one mistake may remain."),
    "exact_math": ("Use exact integer arithmetic and never floating point for counts or totals.",
                   "The totals were computed with floats, so rounding may have changed the answer."),
    "empty_cases": ("Handle empty and single-element inputs explicitly.",
                    "I did not consider what happens when the input is empty or has one element."),
    "ask_bound": ("Ask for the time complexity of every program before accepting it.",
                  "The plan never asked how fast the program must be."),
    "state_bound": ("State the time complexity of each program you return and keep it within the limits.",
                    "I returned the program without checking whether it is fast enough."),
}
LEGACY_DISTRACTORS: Mapping[str, tuple[str, str]] = {
    "recursion": ("Prefer deep recursion over loops in every solution.",
                  "As instructed I recursed deeply, which may exceed the recursion limit."),
    "debug_prints": ("Print your intermediate debugging values to standard output.",
                     "My debugging prints went to standard output as the prompt asks."),
    "no_library": ("Never import any module, not even from the standard library.",
                   "Without imports I had to hand-roll the data structures."),
}


@lru_cache(maxsize=1)
def legacy() -> Lexicon:
    facts = (Concept(key, (text,), lack=(symptom,)) for key, (text, symptom) in LEGACY_FACTS.items())
    distractors = (Concept(key, (text,), excess=(symptom,)) for key, (text, symptom) in LEGACY_DISTRACTORS.items())
    return Lexicon("legacy", (*facts, *distractors))


LEXICONS = {"generated": generated, "legacy": legacy}


def lexicon(name: str) -> Lexicon:
    if name not in LEXICONS:
        raise LookupError(f"unknown lexicon {name!r}; known: {', '.join(LEXICONS)}")
    return LEXICONS[name]()

