"""Model requests that do not carry the generic reflection or judge system prompt.

Most reflection and judge calls go out with ``REFLECTION_SYSTEM`` / ``JUDGE_SYSTEM`` and a
``Task: <method>/<purpose>.`` tag. Where the reference method sends a system text of its own,
or none at all, we do the same (it changes what the model answers), so those texts live here:

- MAPRO: its judge is a strict reward model that answers with one number; its rewriter (pool
  variants and mutations) answers with the prompt text only; its blame pass answers with BLAME
  lines only (texts in our words, same role as the reference's);
- MASPO: its proposer and its pairwise judge send no system message.

Stand-in models (the scripted test server, the gym) must still tell these requests apart, so
each one is listed with what identifies it: its system text and a phrase of its prompt.
``identify`` is the one reading of that table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from optimizers.judge import JUDGE_SYSTEM
from optimizers.reflection import REFLECTION_SYSTEM

NO_SYSTEM = ""  # ``ReflectionModel.ask(system=NO_SYSTEM)``: send the user message alone

MAPRO_JUDGE_SYSTEM = (
    "You are a strict reward model. You judge how competently and clearly an agent in a multi-agent "
    "system does its role. Answer with nothing but one number with two decimals between 0.00 and 1.00."
)
MAPRO_REWRITER_SYSTEM = (
    "You rewrite the role prompt of one agent in a multi-agent system. Answer with the rewritten role "
    "prompt text only: no introduction, no quotes, no labels."
)
MAPRO_BLAME_SYSTEM = (
    "You assign blame between the agents of a multi-agent system. Be terse: answer with the requested "
    "BLAME lines and nothing else."
)

# Phrases the methods' prompts contain (they build their prompts with them, so both stay in step).
MAPRO_POOL_PHRASE = "alternative versions of this role prompt"
MAPRO_MUTATE_PHRASE = "Current role prompt:"
MASPO_PROPOSE_PHRASE = "<reference_prompt>"
MASPO_COMPARE_PHRASE = "=== OUTPUT B ==="

_TASK_TAG = re.compile(r"Task: ([a-z_]+)/([a-z_-]+)\.")


@dataclass(frozen=True, slots=True)
class Surface:
    """One kind of request: the system text it is sent with ("" for none) and a phrase of its
    prompt (None: the system text alone identifies it)."""

    method: str
    purpose: str
    system: str
    phrase: str | None = None


SURFACES: tuple[Surface, ...] = (
    Surface("mapro", "judge", MAPRO_JUDGE_SYSTEM),
    Surface("mapro", "pool", MAPRO_REWRITER_SYSTEM, MAPRO_POOL_PHRASE),
    Surface("mapro", "mutate", MAPRO_REWRITER_SYSTEM, MAPRO_MUTATE_PHRASE),
    Surface("mapro", "blame", MAPRO_BLAME_SYSTEM),
    Surface("maspo", "propose", NO_SYSTEM, MASPO_PROPOSE_PHRASE),
    Surface("maspo", "judge", NO_SYSTEM, MASPO_COMPARE_PHRASE),
)


def identify(system: str, prompt: str) -> tuple[str, str] | None:
    """(method, purpose) of an optimizer request, from its system text and prompt; None for
    anything else (a team agent's turn, a probe that runs a candidate prompt)."""
    system = system.strip()
    tag = _TASK_TAG.search(system)
    if JUDGE_SYSTEM in system:  # the generic judge system prompt is only ever sent to judge
        return (tag.group(1), tag.group(2)) if tag else ("", "judge")
    if REFLECTION_SYSTEM in system:
        return (tag.group(1), tag.group(2)) if tag else None
    for surface in SURFACES:
        if surface.system == system and (surface.phrase is None or surface.phrase in prompt):
            return surface.method, surface.purpose
    return None

