"""TAVO's prompt updates: per-role rewrites and the shared behavioural-rule overlay.

- ``rewrite_role``: the reflection model rewrites one role prompt from ranked edits (paper mode:
  the role's previous prompt and its own aggregated edits; hybrid: its seed prompt, the team's
  meta-knowledge and its own edits). A failed or empty rewrite keeps the prompt.
- ``write_overlay``: 3-6 behavioural rules from the team's meta-knowledge, placed between markers
  and appended to a *seed* prompt; ``with_overlay`` replaces any overlay already there, so
  overlays never stack.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from optimizers.reflection import ReflectionModel, clip, extract_fenced, extract_json, string_list
from optimizers.tavo.credit import Edits

OVERLAY_OPEN = "<<< TAVO_POLICY id:{id} >>>"
OVERLAY_CLOSE = "<<< /TAVO_POLICY >>>"
_OVERLAY = re.compile(r"\n*<<< TAVO_POLICY id:[0-9a-f]+ >>>.*?<<< /TAVO_POLICY >>>\n*", re.DOTALL)
MIN_RULES, MAX_RULES = 3, 6


def strip_overlay(text: str) -> str:
    return _OVERLAY.sub("\n", text).rstrip()


def with_overlay(text: str, rules: Sequence[str]) -> str:
    """``text`` (without any earlier overlay) followed by an overlay of ``rules``."""
    base = strip_overlay(text)
    if not rules:
        return base
    body = "\n".join(f"- {rule}" for rule in rules)
    overlay_id = hashlib.md5(body.encode()).hexdigest()[:10]  # noqa: S324 - an id, not security
    opening = OVERLAY_OPEN.format(id=overlay_id)
    return f"{base}\n\n{opening}\nTeam policy learned from earlier runs:\n{body}\n{OVERLAY_CLOSE}"


async def rewrite_role(
    model: ReflectionModel,
    *,
    role: str,
    base_prompt: str,
    own: Edits,
    team_edits: Edits | None,
    team: str,
    temperature: float,
) -> str:
    """A rewritten role prompt, or ``base_prompt`` when there is nothing to apply or no answer."""
    if own.empty() and (team_edits is None or team_edits.empty()):
        return base_prompt
    sections = [
        f"Rewrite the system prompt of the `{role}` role in {team}, which solves competitive programming "
        "problems graded by hidden tests.",
        f"Current prompt:\n```\n{clip(base_prompt, 8000)}\n```",
        f"Edits derived from credit assignment on this role's behaviour across several tasks:\n{own.render()}",
    ]
    if team_edits is not None and not team_edits.empty():
        sections.append(f"Lessons for the whole team:\n{team_edits.render()}")
    sections.append(
        "Apply the edits that generalize; keep everything else that works, keep the role's purpose and "
        "the answer format the team must follow. Reply with the complete new prompt inside one ``` block."
    )
    reply = await model.ask("\n\n".join(sections), purpose="rewrite", temperature=temperature)
    text = extract_fenced(reply)
    return strip_overlay(text) if text else base_prompt


async def write_overlay(model: ReflectionModel, meta: Edits, *, team: str, temperature: float) -> list[str]:
    """3-6 short behavioural rules for every role; the top additions if the model fails."""
    if meta.empty():
        return []
    prompt = (
        f"Lessons learned about {team} (ranked prompt edits from credit assignment across tasks):\n"
        f"{meta.render()}\n\nTurn them into {MIN_RULES}-{MAX_RULES} short, general behavioural rules that "
        "every role of the team will see appended to its prompt. No problem-specific content. Reply with "
        'JSON only: {"rules": ["..."]}'
    )
    reply = await model.ask(prompt, purpose="overlay", temperature=temperature)
    data = extract_json(reply)
    rules = string_list(data.get("rules") if isinstance(data, dict) else data, limit=MAX_RULES, chars=400)
    return rules or meta.add[:MAX_RULES]
