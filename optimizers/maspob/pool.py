"""MASPOB's prompt pool: per role the seed prompt plus reflection-written variants in set styles.

The styles and the meta-prompt follow upstream MASPOB (``optimizers.maspob.styles``; our
wording). Every variant must keep the seed's *interface* (``InterfaceManifest``): its
placeholders, ``delegate_to_*`` names, XML-ish tags and code-fence languages exactly, and every
role name, tool or other snake_case identifier and backticked identifier the seed mentions; its
length must lie in ``[min_chars, max_length_ratio x max(max_length_floor, seed)]``, and it must not repeat the
seed. A style gets ``attempts`` tries (the same ask again, as the reference; ``retry_feedback``
adds what the last try broke), then it is dropped, as is a duplicate of an earlier variant; the
pool over-generates styles (``overgeneration``) so drops can be made up. A role still short of
``num_prompts`` is an ``IncompletePool`` error; a model that writes no usable variant in any
role's first ``probe_styles`` styles is a ``ReflectionCannotWrite`` error naming the cause
(refusal, echo of the original, broken interface), raised after a bounded number of calls.

A finished pool is written to ``<workdir>/maspob_prompt_pool.json`` under an identity (reflection
model, seed prompts, meta-prompt template and styles, knobs, job seed); a resumed job with the
same identity reuses it without asking the model again.
"""

from __future__ import annotations

import asyncio
import hashlib
import html
import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optimizers.base import OptimizerInfrastructureError
from optimizers.journal import content_hash, read_json, write_json_atomic
from optimizers.maspob.styles import DIMENSIONS, PRESETS, REFERENCE_PRIORITY, Style, style_sequence
from optimizers.reflection import ReflectionModel

POOL_FILE = "maspob_prompt_pool.json"
POOL_SCHEMA = 2

BEGIN, END = "BEGIN PROMPT", "END PROMPT"
# Upstream's generation meta-prompt (``ITERATIVE_GENERATE_PROMPT``) asks for an instruction of a
# given type and goal in a given style, keeping the placeholders, varying the structure and
# replying with the prompt only; the reference adaptation puts the role, the topology, the
# protocol to respect, the original prompt and the interface manifest into it. Ours says the
# same in our words, with the reply between two marker lines.
TEMPLATE = """Write a new system instruction for the `{role}` role of {team}. The team solves competitive \
programming (LiveCodeBench) problems that are graded by hidden tests.

Goal: reach the same objective as the original instruction below. {protocol} Demand exactly the \
same final output format as the original.

Original instruction:
{begin}
{seed}
{end}

Style to follow ({style}):
{style_text}

Rules:
1. Keep this executable interface exactly; remove nothing and invent nothing:
{interface}
2. Vary the structure: a different opening, a different form (bullets, numbered steps or \
paragraphs), a different length; stay between {min_chars} and {max_chars} characters.
3. Reply with the new instruction only, between a line `{begin}` and a line `{end}`."""
RETRY_NOTE = """

Your previous answer was rejected: {problems}. Write the prompt again and fix this."""
# What the variant must keep of the team's protocol, by team-graph shape (the reference
# adaptation's per-topology protocol sentences).
PROTOCOLS: dict[str, str] = {
    "star": "Keep the manager's delegation tools, the way workers report back, every placeholder and "
            "the final-answer contract exactly as they are.",
    "chain": "Keep the order of the stages, the hand-off format, every placeholder and the final-output "
             "contract exactly; do not invent a manager or delegation.",
    "single": "Keep how the agents that share this instruction work (alone or as peers), every placeholder "
              "and the final-output contract exactly; add no delegation and no central manager.",
    "isolated": "Keep the role's part in the team, every placeholder and the final-output contract exactly.",
}

# Why a try gave no variant (the cause a ReflectionCannotWrite error names).
NO_PROMPT, ECHO, INTERFACE = "refused", "echoed", "broke_interface"
CAUSES: dict[str, str] = {
    NO_PROMPT: "refused or ignored the reply format (no prompt block)",
    ECHO: "echoed the original prompt",
    INTERFACE: "broke the prompt's interface or length",
}

_PLACEHOLDER = re.compile(r"\{\{\s*[A-Za-z_][A-Za-z0-9_]*\s*\}\}|(?<!\{)\{[A-Za-z_][A-Za-z0-9_]*\}(?!\})")
_DELEGATE = re.compile(r"\bdelegate_to_[A-Za-z0-9_]+\b")
_IDENTIFIER = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")
_BACKTICKED = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9_\-]*(?:\s[^<>\n]*)?>")
_TAG_NAME = re.compile(r"</?([A-Za-z][A-Za-z0-9_\-]*)")
_FENCE_LANGUAGE = re.compile(r"^\s*```([A-Za-z0-9_+\-]+)", re.MULTILINE)
_REPLY_BLOCK = re.compile(rf"^\s*{BEGIN}\s*$\n(.*?)\n^\s*{END}\s*$", re.MULTILINE | re.DOTALL)


class IncompletePool(OptimizerInfrastructureError):
    """The reflection model did not produce enough interface-preserving variants for a role."""


class ReflectionCannotWrite(IncompletePool):
    """The reflection model wrote no usable variant in any role's first styles (the probe)."""


@dataclass(frozen=True, slots=True)
class InterfaceManifest:
    """What a variant of a prompt must keep. ``exact`` parts must match as sets; ``kept`` parts
    may gain members (a new backticked variable name harms nothing) but never lose one."""

    placeholders: frozenset[str] = frozenset()
    delegates: frozenset[str] = frozenset()
    tags: frozenset[str] = frozenset()
    fence_languages: frozenset[str] = frozenset()
    identifiers: frozenset[str] = frozenset()  # tool names and other snake_case names
    role_names: frozenset[str] = frozenset()
    backticked: frozenset[str] = frozenset()

    EXACT = ("placeholders", "delegates", "tags", "fence_languages")
    KEPT = ("identifiers", "role_names", "backticked")

    @classmethod
    def of(cls, text: str, roles: Sequence[str] = ()) -> InterfaceManifest:
        words = set(re.findall(r"[A-Za-z0-9_]+", text))
        return cls(
            placeholders=frozenset(_PLACEHOLDER.findall(text)),
            delegates=frozenset(_DELEGATE.findall(text)),
            tags=frozenset(_normal_tag(t) for t in _TAG.findall(text)),
            fence_languages=frozenset(lang.lower() for lang in _FENCE_LANGUAGE.findall(text)),
            identifiers=frozenset(_IDENTIFIER.findall(text)),
            role_names=frozenset(r for r in roles if r in words),
            backticked=frozenset(b.strip() for b in _BACKTICKED.findall(_without_fences(text)) if b.strip()),
        )

    def violations(self, variant: InterfaceManifest) -> list[str]:
        """What ``variant`` broke, in words (empty: the interface is kept)."""
        problems = []
        for name in self.EXACT:
            mine, theirs = getattr(self, name), getattr(variant, name)
            if lost := sorted(mine - theirs):
                problems.append(f"{name.replace('_', ' ')} missing: {', '.join(lost)}")
            if added := sorted(theirs - mine):
                problems.append(f"{name.replace('_', ' ')} not in the original: {', '.join(added)}")
        for name in self.KEPT:
            if lost := sorted(getattr(self, name) - getattr(variant, name)):
                problems.append(f"{name.replace('_', ' ')} missing: {', '.join(lost)}")
        return problems

    def describe(self) -> str:
        lines = []
        for name in (*self.EXACT, *self.KEPT):
            values = sorted(getattr(self, name))
            if values:
                lines.append(f"- {name.replace('_', ' ')}: {', '.join(values)}")
        return "\n".join(lines) if lines else "- (no placeholders, tool names or special identifiers)"


def _normal_tag(tag: str) -> str:
    match = _TAG_NAME.match(tag)
    assert match is not None
    return f"</{match.group(1)}>" if tag.startswith("</") else f"<{match.group(1)}>"


def _without_fences(text: str) -> str:
    return re.sub(r"```.*?```", " ", text, flags=re.DOTALL)


@dataclass(frozen=True, slots=True)
class PoolSettings:
    """The pool knobs (a slice of ``MASPOBParams``)."""

    num_prompts: int = 20  # per role, the seed included
    overgeneration: float = 1.5  # styles tried per needed variant, at most
    temperature: float = 0.5
    attempts: int = 3  # tries per style before it is given up (the reference's generate_one)
    retry_feedback: bool = False  # tell the model what the last try broke (the reference repeats the ask)
    probe_styles: int = 3  # give up when no role gets a variant from its first styles (0: never)
    concurrency: int = 4
    min_chars: int = 40
    max_length_ratio: float = 4.0
    max_length_floor: int = 2000  # the reference caps at ratio x max(floor, seed length)

    def max_chars(self, seed: str) -> int:
        return int(self.max_length_ratio * max(self.max_length_floor, len(seed)))


@dataclass(frozen=True, slots=True)
class Pool:
    """Per role: prompts[0] is the seed, then the variants; styles[i] names prompt i's style."""

    roles: tuple[str, ...]
    prompts: Mapping[str, tuple[str, ...]]
    styles: Mapping[str, tuple[str, ...]]
    usage: Mapping[str, Any] = field(default_factory=dict)  # reflection usage of the generation

    def size(self, role: str) -> int:
        return len(self.prompts[role])

    def to_json(self) -> dict[str, Any]:
        return {"roles": list(self.roles),
                "prompts": {r: list(self.prompts[r]) for r in self.roles},
                "styles": {r: list(self.styles[r]) for r in self.roles},
                "usage": dict(self.usage)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Pool:
        roles = tuple(data["roles"])
        return cls(roles, {r: tuple(data["prompts"][r]) for r in roles},
                   {r: tuple(data["styles"][r]) for r in roles}, dict(data.get("usage") or {}))


def slot_count(settings: PoolSettings) -> int:
    """Styles tried per role at most: the over-generated number of variants (upstream 1.5x)."""
    return math.ceil(settings.overgeneration * (settings.num_prompts - 1))


def pool_identity(*, model: str | None, seeds: Mapping[str, str], settings: PoolSettings, job_seed: int,
                  team: str, protocol: str = "") -> dict[str, Any]:
    return {
        "schema": POOL_SCHEMA,
        "reflection_model": model,
        "seeds": {role: hashlib.sha256(text.encode()).hexdigest() for role, text in sorted(seeds.items())},
        "template": content_hash({"template": TEMPLATE, "retry": RETRY_NOTE, "dimensions": DIMENSIONS,
                                  "presets": PRESETS, "priority": REFERENCE_PRIORITY}),
        "settings": {k: getattr(settings, k) for k in settings.__dataclass_fields__ if k != "concurrency"},
        "job_seed": job_seed,
        "team": team,
        "protocol": protocol,
    }


def normalized(text: str) -> str:
    """What two prompts are compared by: HTML entities decoded, white space and case folded
    (a small model echoing the original with ``&#39;`` for ``'`` has not written a variant)."""
    return " ".join(html.unescape(text).split()).casefold()


def extract_variant(reply: str | None) -> str | None:
    if not reply:
        return None
    match = _REPLY_BLOCK.search(reply)
    return match.group(1).strip() if match else None


@dataclass(frozen=True, slots=True)
class SlotOutcome:
    """One style slot: the variant (None: given up), what the last try broke, why each try failed."""

    style: Style
    text: str | None
    problems: str
    failures: tuple[str, ...]  # one cause (NO_PROMPT | ECHO | INTERFACE) per failed try


@dataclass
class _RoleFill:
    role: str
    seed: str
    manifest: InterfaceManifest
    styles: list[Style]
    prompts: list[str]
    used: list[str]
    next_style: int = 0
    rejected: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def take(self, outcome: SlotOutcome) -> None:
        self.failures.extend(outcome.failures)
        name = outcome.style.name
        if outcome.text is not None and normalized(outcome.text) not in {normalized(p) for p in self.prompts}:
            self.prompts.append(outcome.text)
            self.used.append(name)
        elif outcome.text is not None:
            self.rejected.append(f"{name}: a duplicate")
        else:
            self.rejected.append(f"{name}: {outcome.problems}")


class PoolBuilder:
    """Generates (or reloads) the pool of one job.

    Per role the styles come from ``style_sequence`` (the presets in the order the reference runs,
    then random styles; one seeded stream over the roles in order). First every role tries its
    first ``probe_styles`` styles; if some role got no variant from them, the model cannot write
    variants here (it refuses, echoes the original or breaks the interface) and the build stops
    with ``ReflectionCannotWrite`` naming the cause, after at most roles x probe x attempts calls.
    Otherwise each role fills up in waves over its remaining styles (a wave asks for as many
    variants as are still missing, so which styles are used does not depend on timing).
    """

    def __init__(self, model: ReflectionModel, *, settings: PoolSettings, team: str, rng: random.Random,
                 workdir: Path, identity: Mapping[str, Any], protocol: str = PROTOCOLS["isolated"]) -> None:
        self.model = model
        self.settings = settings
        self.team = team
        self.protocol = protocol
        self.rng = rng
        self.path = Path(workdir) / POOL_FILE
        self.identity = dict(identity)
        self.limit = asyncio.Semaphore(max(1, settings.concurrency))

    def cached(self) -> Pool | None:
        if not self.path.exists():
            return None
        try:
            data = read_json(self.path)
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("identity") != self.identity:
            return None
        return Pool.from_json(data["pool"])

    async def build(self, seeds: Mapping[str, str]) -> tuple[Pool, bool]:
        """(pool, reused): the cached pool when its identity matches, else a new one (saved)."""
        cached = self.cached()
        if cached is not None:
            return cached, True
        roles = tuple(seeds)
        count = slot_count(self.settings)
        fills = [_RoleFill(role, seeds[role], InterfaceManifest.of(seeds[role], roles),
                           style_sequence(count, self.rng), [seeds[role]], ["seed"]) for role in roles]
        probe = min(self.settings.probe_styles, self.settings.num_prompts - 1)
        if probe > 0:
            await asyncio.gather(*(self._wave(fill, probe) for fill in fills))
            self._check_probe(fills, probe)
        await asyncio.gather(*(self._fill(fill) for fill in fills))
        usage = self.model.usage()
        pool = Pool(roles, {f.role: tuple(f.prompts) for f in fills}, {f.role: tuple(f.used) for f in fills},
                    {k: v for k, v in usage.items() if k != "journal"})
        write_json_atomic(self.path, {"identity": self.identity, "pool": pool.to_json()})
        return pool, False

    def _check_probe(self, fills: Sequence[_RoleFill], probe: int) -> None:
        barren = [fill for fill in fills if len(fill.prompts) == 1]
        if not barren:
            return
        failures = [cause for fill in barren for cause in fill.failures]
        counts = {cause: failures.count(cause) for cause in CAUSES if cause in failures}
        main = max(counts, key=lambda cause: counts[cause]) if counts else NO_PROMPT
        others = "".join(f", {CAUSES[c]} {n}x" for c, n in counts.items() if c != main)
        calls = self.model.usage().get("calls", 0)
        raise ReflectionCannotWrite(
            f"maspob: the reflection model cannot write prompt variants (cause: {main}): it {CAUSES[main]} "
            f"in {counts.get(main, 0)} of {len(failures)} tries{others}; no usable variant for role(s) "
            f"{', '.join(fill.role for fill in barren)} from their first {probe} styles; "
            f"stopped after {calls} reflection calls")

    async def _fill(self, fill: _RoleFill) -> None:
        s = self.settings
        while len(fill.prompts) < s.num_prompts and fill.next_style < len(fill.styles):
            await self._wave(fill, s.num_prompts - len(fill.prompts))
        if len(fill.prompts) < s.num_prompts:
            reasons = "; ".join(fill.rejected[-3:]) or "no styles left"
            raise IncompletePool(
                f"maspob: the prompt pool of role {fill.role} has {len(fill.prompts)} of {s.num_prompts} prompts "
                f"after {fill.next_style} styles (last rejections: {reasons})")

    async def _wave(self, fill: _RoleFill, size: int) -> None:
        wave = fill.styles[fill.next_style: fill.next_style + size]
        fill.next_style += len(wave)
        for outcome in await asyncio.gather(*(self._variant(fill, style) for style in wave)):
            fill.take(outcome)

    async def _variant(self, fill: _RoleFill, style: Style) -> SlotOutcome:
        s = self.settings
        max_chars = s.max_chars(fill.seed)
        prompt = TEMPLATE.format(role=fill.role, team=self.team, protocol=self.protocol, style=style.name,
                                 style_text=style.text, interface=fill.manifest.describe(), min_chars=s.min_chars,
                                 max_chars=max_chars, begin=BEGIN, end=END, seed=fill.seed)
        problems = ""
        failures: list[str] = []
        for _attempt in range(max(1, s.attempts)):
            ask = prompt + (RETRY_NOTE.format(problems=problems) if problems and s.retry_feedback else "")
            async with self.limit:
                reply = await self.model.ask(ask, purpose="variant", temperature=s.temperature)
            text = extract_variant(reply)
            if text is None:
                problems = f"the reply had no {BEGIN} ... {END} block"
                failures.append(NO_PROMPT)
                continue
            if normalized(text) == normalized(fill.seed):
                problems = "it repeats the original; rewrite it in the requested style"
                failures.append(ECHO)
                continue
            found = fill.manifest.violations(InterfaceManifest.of(text, tuple(fill.manifest.role_names)))
            if len(text) < s.min_chars or len(text) > max_chars:
                found.append(f"length {len(text)} outside {s.min_chars}..{max_chars}")
            if not found:
                return SlotOutcome(style, text, "", tuple(failures))
            problems = "; ".join(found)
            failures.append(INTERFACE)
        return SlotOutcome(style, None, problems, tuple(failures))
