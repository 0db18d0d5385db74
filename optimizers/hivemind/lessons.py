"""HiveMind's prompt "metamorphosis": lessons from the target role's winning and losing cases.

The reflection model reads cases of one role (the problem, that role's own turns in the full
team's run, the verdict) and writes a few generic lessons between ``<lessons>`` markers. A
candidate prompt is always the role's *seed* prompt plus a "Lessons learned" list of the most
recent lessons (append-only log, newest last), so prompts never drift by repeated rewriting.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from optimizers.reflection import clip, outcome_line, render_trace, task_text

LESSONS_HEADER = "Lessons learned:"
START, END = "<lessons>", "</lessons>"
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s*")


@dataclass(frozen=True, slots=True)
class Case:
    problem_id: str
    question: str
    output: str  # the role's own turns in the run
    outcome: str  # score and verdict feedback (never hidden-test content)
    score: float


def with_lessons(seed_prompt: str, lessons: Sequence[str]) -> str:
    """The seed prompt followed by the lessons (the seed prompt itself when there are none)."""
    if not lessons:
        return seed_prompt
    items = "\n".join(f"- {lesson}" for lesson in lessons)
    return f"{seed_prompt.rstrip()}\n\n{LESSONS_HEADER}\n{items}"


def parse_lessons(text: str | None, *, limit: int) -> list[str]:
    """The lessons between the markers (or, without markers, the bulleted lines), deduplicated."""
    if not text:
        return []
    start, end = text.rfind(START), text.rfind(END)
    body = text[start + len(START):end] if 0 <= start < end else text
    lines = body.splitlines()
    if not (0 <= start < end):
        lines = [line for line in lines if _BULLET.match(line)]  # no markers: only list items count
    lessons: list[str] = []
    for line in lines:
        lesson = " ".join(_BULLET.sub("", line).split())
        if lesson and lesson not in lessons:
            lessons.append(lesson[:600])
        if len(lessons) >= limit:
            break
    return lessons


def cases_of(rollouts: Sequence[Any], role: str, *, fail_below: float, max_cases: int) -> tuple[list[Case], list[Case]]:
    """(winning, losing) cases of ``role`` from full-team rollouts, split at ``fail_below``."""
    winning: list[Case] = []
    losing: list[Case] = []
    for rollout in rollouts:
        case = Case(rollout.problem_id, task_text(rollout.trace, 1500),
                    render_trace(rollout.trace, role=role, each=1200, total=3000) or "(this role did not act)",
                    outcome_line(rollout), rollout.score)
        (winning if rollout.score >= fail_below else losing).append(case)
    return winning[:max_cases], losing[:max_cases]


def _render(cases: Sequence[Case], title: str) -> str:
    if not cases:
        return f"## {title}\n(none)"
    blocks = [f"### Case {i + 1}: problem {c.problem_id}\nProblem:\n{c.question}\n\nThis role's turns:\n{c.output}"
              f"\n\nOutcome: {clip(c.outcome, 600)}" for i, c in enumerate(cases)]
    return f"## {title}\n" + "\n\n".join(blocks)


WEAKEST = ("Its weakest contributor in recent runs is the `{role}` role (measured by Shapley value: what the "
           "team gains when this role's agents take part).")
ROTATION = "This cycle refines the `{role}` role, which leads the team and is always part of it."


def lessons_prompt(*, role: str, team: str, prompt: str, winning: Sequence[Case], losing: Sequence[Case],
                   fewest: int, most: int, why: str = WEAKEST) -> str:
    """The request for lessons; ``why`` says why this role was chosen (``WEAKEST`` or ``ROTATION``)."""
    return "\n\n".join([
        f"The team is {team}. " + why.format(role=role),
        f"## The `{role}` role's current prompt\n{prompt}",
        _render(losing, "Losing cases (the team failed)"),
        _render(winning, "Winning cases (the team succeeded)"),
        f"Write {fewest} to {most} short, generic lessons for the `{role}` role: habits that would turn the "
        "losing cases into wins without breaking the winning ones. Lessons must hold for any problem "
        "(no problem-specific details, no code), and must not change the role's responsibilities in the "
        f"team or its output format. Put them one per line, each starting with '- ', between {START} and "
        f"{END}.",
    ])
