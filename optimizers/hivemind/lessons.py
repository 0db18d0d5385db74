"""HiveMind's prompt "metamorphosis": lesson blocks from the target role's winning and losing cases.

The reflection model reads this cycle's cases of one prompt (the problem, that prompt's own
output in the full team's run, grouped into losing and winning runs) and the prompt's Shapley
value, and writes one *block* of 3-5 generic lessons between ``<lessons>`` markers. A block is
the unit the method keeps: an accepted block is appended to the prompt's log, and a candidate
prompt is always the role's *seed* prompt plus a "Lessons learned" section holding the newest
``max_lessons`` blocks (the accepted ones, then this cycle's), so prompts never drift by
repeated rewriting (reference: ``extract_lessons``/``metamorphose``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

LESSONS_HEADER = "Lessons learned:"
START, END = "<lessons>", "</lessons>"
_BLOCK = re.compile(re.escape(START) + r"(.*?)" + re.escape(END), re.DOTALL)
_LIST_ITEM = re.compile(r"^(?:[-*]|\d+[.)])\s+")
_NUMBERED = re.compile(r"^\d+[.)]\s+")
_PLACEHOLDER = re.compile(r"<lesson\s*\d*>", re.IGNORECASE)
NOT_ACTIVE = "(this agent was never activated in this run)"


@dataclass(frozen=True, slots=True)
class Case:
    """One row of the full team's run, as the reflection model sees it."""

    problem_id: str
    question: str  # the problem, whitespace-collapsed and cut
    output: str  # the target prompt's own output, whitespace-collapsed and cut
    score: float


@dataclass(frozen=True, slots=True)
class CaseLimits:
    """How much the reflection model reads (reference: 6 cases a side, 300 and 400 characters)."""

    max_cases: int
    problem_chars: int
    output_chars: int


def parse_block(text: str | None) -> str:
    """The lesson block of a reply: the last non-empty marked block, one ``- `` bullet per line.

    Without markers only list items (``-``, ``*``, ``1.``) count. Template placeholders such as
    ``<lesson 1>`` are dropped. An empty string means the reply held no lesson.
    """
    if not text:
        return ""
    blocks = [block for block in _BLOCK.findall(text) if block.strip()]
    body = blocks[-1] if blocks else text
    lines = []
    for raw in body.splitlines():
        line = _PLACEHOLDER.sub("", raw).strip()
        if not line.lstrip("-* ").strip():
            continue
        if not blocks and not _LIST_ITEM.match(line):
            continue  # no markers: prose around a list is not a lesson
        line = _NUMBERED.sub("", line)
        line = re.sub(r"^([-*])\s+", r"\1 ", line)
        lines.append(line if line.startswith(("-", "*")) else f"- {line}")
    return "\n".join(lines).strip()


def with_lessons(seed_prompt: str, blocks: Sequence[str], *, keep: int) -> str:
    """The seed prompt followed by the newest ``keep`` lesson blocks (the seed prompt itself when
    there are none)."""
    kept = [block for block in blocks if block.strip()][-keep:]
    if not kept:
        return seed_prompt
    return f"{seed_prompt.rstrip()}\n\n{LESSONS_HEADER}\n" + "\n".join(kept)


def _collapse(text: str, limit: int) -> str:
    return " ".join(text.split())[:limit]


def own_output(trace: Sequence[Mapping[str, Any]], role: str, *, replicas: bool) -> str:
    """What the target prompt produced in one run.

    A prompt run by one agent: its last three turns, empty ones dropped. A prompt shared by replicas (independent,
    decentralized): every replica's turns, each labelled, so the reflection sees all players of
    the parameter rather than pretending it is one agent.
    """
    turns = [m for m in trace if m.get("source") == role and m.get("kind") not in ("system", "user")]
    if not replicas:
        # As the reference: the last three turns first, then the empty ones among them dropped
        # (a role whose last turn was empty shows two, not an older third).
        last = [str(m.get("content") or "") for m in turns[-3:]]
        return "\n---\n".join(text for text in last if text.strip()) or NOT_ACTIVE
    turns = [m for m in turns if str(m.get("content") or "").strip()]
    by_agent: dict[str, list[str]] = {}
    for message in turns:
        by_agent.setdefault(str(message.get("agent") or role), []).append(str(message.get("content")))
    return "\n---\n".join(f"{role} replica {agent}: " + "\n".join(texts)
                          for agent, texts in by_agent.items()) or NOT_ACTIVE


def cases_of(rollouts: Sequence[Any], role: str, question: Any, *, replicas: bool, fail_below: float,
             limits: CaseLimits) -> tuple[list[Case], list[Case]]:
    """(losing, winning) cases of ``role`` from full-team rollouts, split at ``fail_below``.

    ``question(rollout)`` gives the problem text of a rollout."""
    losing: list[Case] = []
    winning: list[Case] = []
    for rollout in rollouts:
        case = Case(rollout.problem_id, _collapse(question(rollout), limits.problem_chars),
                    _collapse(own_output(rollout.trace, role, replicas=replicas), limits.output_chars),
                    rollout.score)
        (losing if rollout.score < fail_below else winning).append(case)
    return losing[:limits.max_cases], winning[:limits.max_cases]


def _render(cases: Sequence[Case]) -> str:
    if not cases:
        return "(none)"
    return "\n".join(f"[case {i}] problem: {case.question}\n         agent output: {case.output}"
                     for i, case in enumerate(cases, 1))


def lessons_prompt(*, role: str, team: str, shapley: float | None, losing: Sequence[Case],
                   winning: Sequence[Case], fewest: int, most: int, revision: int) -> str:
    """The request for one lesson block. ``shapley`` None: the role is in every coalition (a
    centralized manager), so no contribution was measured for it."""
    if shapley is None:
        measured = ("It leads the team and takes part in every run, so no contribution was measured for it; "
                    "this cycle refines it in turn.")
    else:
        measured = (f"Its measured contribution this cycle (Shapley value over the team's score): {shapley:.4f}. "
                    "A low or negative value means it is holding the team back.")
    return "\n\n".join([
        f"You refine ONE role inside {team} that solves competitive programming problems (stdin/stdout "
        "programs or LeetCode-style class methods) graded by hidden tests.",
        f"Target role: `{role}`. {measured}",
        "Below are this cycle's runs of the whole team: the problem, the target role's own output, and "
        "whether the TEAM's final answer was right.",
        f"LOSING runs (the team's answer was wrong):\n{_render(losing)}",
        f"WINNING runs (the team's answer was right):\n{_render(winning)}",
        "Compare the role's behaviour in losing and winning runs: which habits, mistakes or omissions "
        "recur when the team loses, and which good habits show when it wins?",
        f"Write {fewest} to {most} short, general LESSONS the role should follow from now on. Each is a "
        "concrete instruction about HOW the role works (never about a particular problem or value); do "
        "not restate the role's job or change its output format, only add guidance on top of it.",
        f"Revision {revision}. Reply with the lessons only, one per line starting with '- ', between "
        f"{START} and {END}.",
    ])
