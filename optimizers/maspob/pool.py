"""MASPOB's prompt pool: per role the seed prompt plus reflection-written variants in set styles.

Every variant must keep the seed's *interface* (``InterfaceManifest``): its placeholders,
``delegate_to_*`` names, XML-ish tags and code-fence languages exactly, and every role name,
tool or other snake_case identifier and backticked identifier the seed mentions; its length must
lie in ``[min_chars, max_length_ratio x seed]``, and it must not merely repeat the seed. A variant
that breaks this is regenerated (the model is told what it broke) up to ``max_retries`` times, then
dropped, as is a duplicate of an earlier variant; the pool over-generates
styles (``overgeneration``) so drops can be made up. A role still short of ``num_prompts`` is an
``IncompletePool`` error.

A finished pool is written to ``<workdir>/maspob_prompt_pool.json`` under an identity (reflection
model, seed prompts, meta-prompt template, knobs, job seed); a resumed job with the same identity
reuses it without asking the model again.
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
from optimizers.reflection import ReflectionModel

POOL_FILE = "maspob_prompt_pool.json"
POOL_SCHEMA = 1

# LiveCodeBench's preset styles come first (reference §2.8), then the rest in seeded random order.
PRESET_STYLES: tuple[str, ...] = ("code-rigorous", "systematic", "pattern-based")
STYLES: dict[str, str] = {
    "code-rigorous": "precise and exacting about program correctness: input parsing, edge cases, "
                     "complexity limits and a complete, runnable final program",
    "systematic": "an ordered procedure: numbered phases the agent works through every time",
    "pattern-based": "organized around recognizing the problem's algorithmic pattern (greedy, DP, "
                     "graphs, binary search, math) and applying the matching technique",
    "concise": "as short as possible while keeping every instruction that matters",
    "checklist": "a checklist of concrete checks the agent ticks off before answering",
    "test-first": "centred on deriving and running tests (samples, edge cases) before trusting a program",
    "example-driven": "explaining expectations through brief illustrative examples of good behaviour",
    "defensive": "anticipating failure modes (overflow, off-by-one, slow loops, wrong I/O format) and "
                 "guarding against each",
    "expert-persona": "written as the voice of a seasoned competitive programmer with strong habits",
    "socratic": "guiding the agent with questions it must answer for itself before acting",
    "principles-first": "a few firm principles, each followed by how it applies to this role",
    "structured-sections": "clearly headed sections: goal, inputs, procedure, output",
    "complexity-aware": "emphasizing estimating time and memory complexity against the constraints first",
    "collaborative": "emphasizing clear hand-offs and useful messages to the other agents",
    "minimal-risk": "preferring simple, well-known, provably correct approaches over clever ones",
    "debugging-focused": "emphasizing locating and fixing the root cause when something fails",
    "stepwise-reasoning": "asking for explicit step-by-step reasoning before any code is written",
    "verification-heavy": "requiring the agent to double-check every claim and result it passes on",
    "goal-oriented": "keeping the agent focused on the single outcome it is responsible for",
}

BEGIN, END = "BEGIN PROMPT", "END PROMPT"
TEMPLATE = """Rewrite the system prompt of the `{role}` role of {team}. The team solves competitive \
programming problems that are graded by hidden tests.

Style of the new prompt: {style} - {style_text}.

Keep the role's objective and its part in the team's protocol. Keep its interface exactly:
{interface}
Do not introduce placeholders, tools, delegate_to_* names, tags or code-fence languages that the \
original does not have. The new prompt must have between {min_chars} and {max_chars} characters.

Original prompt:
{begin}
{seed}
{end}

Reply with the new prompt only, between a line `{begin}` and a line `{end}`."""
RETRY_NOTE = """

Your previous answer was rejected: {problems}. Write the prompt again and fix this."""

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
    max_retries: int = 3  # regenerations of a variant that broke the interface
    concurrency: int = 4
    min_chars: int = 40
    max_length_ratio: float = 4.0


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


def style_order(rng: random.Random, count: int) -> list[str]:
    """Preset styles first, then the others shuffled; cycles when more are needed than exist."""
    others = [s for s in STYLES if s not in PRESET_STYLES]
    rng.shuffle(others)
    order = [*PRESET_STYLES, *others]
    return [order[i % len(order)] for i in range(count)]


def pool_identity(*, model: str | None, seeds: Mapping[str, str], settings: PoolSettings, job_seed: int,
                  team: str) -> dict[str, Any]:
    return {
        "schema": POOL_SCHEMA,
        "reflection_model": model,
        "seeds": {role: hashlib.sha256(text.encode()).hexdigest() for role, text in sorted(seeds.items())},
        "template": content_hash({"template": TEMPLATE, "retry": RETRY_NOTE, "styles": STYLES,
                                  "presets": PRESET_STYLES}),
        "settings": {k: getattr(settings, k) for k in settings.__dataclass_fields__ if k != "concurrency"},
        "job_seed": job_seed,
        "team": team,
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


class PoolBuilder:
    """Generates (or reloads) the pool of one job."""

    def __init__(self, model: ReflectionModel, *, settings: PoolSettings, team: str, rng: random.Random,
                 workdir: Path, identity: Mapping[str, Any]) -> None:
        self.model = model
        self.settings = settings
        self.team = team
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
        styles = style_order(self.rng, math.ceil(self.settings.overgeneration * (self.settings.num_prompts - 1)))
        results = await asyncio.gather(*(self._role(role, seeds, styles) for role in roles))
        usage = self.model.usage()
        pool = Pool(roles, {r: tuple(p) for r, (p, _) in zip(roles, results, strict=True)},
                    {r: tuple(s) for r, (_, s) in zip(roles, results, strict=True)},
                    {k: v for k, v in usage.items() if k != "journal"})
        write_json_atomic(self.path, {"identity": self.identity, "pool": pool.to_json()})
        return pool, False

    async def _role(self, role: str, seeds: Mapping[str, str], styles: Sequence[str]) -> tuple[list[str], list[str]]:
        """Variants in waves over the style list, so which styles are used does not depend on timing."""
        seed = seeds[role]
        manifest = InterfaceManifest.of(seed, tuple(seeds))
        prompts, used = [seed], ["seed"]
        next_style = 0
        rejected: list[str] = []
        while len(prompts) < self.settings.num_prompts and next_style < len(styles):
            wave = styles[next_style: next_style + self.settings.num_prompts - len(prompts)]
            next_style += len(wave)
            made = await asyncio.gather(*(self._variant(role, seed, manifest, style, index)
                                          for index, style in enumerate(wave, start=next_style - len(wave))))
            for style, (text, problems) in zip(wave, made, strict=True):
                if text is not None and normalized(text) not in {normalized(p) for p in prompts}:
                    prompts.append(text)
                    used.append(style)
                elif text is not None:
                    rejected.append(f"{style}: a duplicate")
                else:
                    rejected.append(f"{style}: {problems}")
        if len(prompts) < self.settings.num_prompts:
            reasons = "; ".join(rejected[-3:]) or "no styles left"
            raise IncompletePool(
                f"maspob: the prompt pool of role {role} has {len(prompts)} of {self.settings.num_prompts} prompts "
                f"after {next_style} styles (last rejections: {reasons})")
        return prompts, used

    async def _variant(self, role: str, seed: str, manifest: InterfaceManifest, style: str,
                       index: int) -> tuple[str | None, str]:
        s = self.settings
        max_chars = int(s.max_length_ratio * len(seed))
        base = TEMPLATE.format(role=role, team=self.team, style=style, style_text=STYLES[style],
                               interface=manifest.describe(), min_chars=s.min_chars, max_chars=max_chars,
                               begin=BEGIN, end=END, seed=seed)
        # The slot index keeps two slots that cycle back to the same style from sharing a reply.
        prompt = base if index < len(STYLES) else f"{base}\n\n(Variant {index + 1}.)"
        problems = ""
        for _attempt in range(1 + max(0, s.max_retries)):
            ask = prompt + (RETRY_NOTE.format(problems=problems) if problems else "")
            async with self.limit:
                reply = await self.model.ask(ask, purpose="variant", temperature=s.temperature)
            text = extract_variant(reply)
            if text is None:
                problems = f"the reply had no {BEGIN} ... {END} block"
                continue
            found = manifest.violations(InterfaceManifest.of(text, tuple(manifest.role_names)))
            if len(text) < s.min_chars or len(text) > max_chars:
                found.append(f"length {len(text)} outside {s.min_chars}..{max_chars}")
            if normalized(text) == normalized(seed):
                found.append("it repeats the original; rewrite it in the requested style")
            if not found:
                return text, ""
            problems = "; ".join(found)
        return None, problems
