"""MIPRO demos: bootstrapped from successful training rollouts, rendered into role prompts.

A demo of a role is what that role wrote in a team run that solved a training problem (its last
turn), next to an excerpt of the problem. A *demo set* is a list of solved problems; for each
role it becomes that role's demos on those problems. Demo set 0 is always empty (zero-shot).
The rendered prompt and ``Candidate.demos`` always describe the same demos.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optimizers.evaluator import Rollout
from optimizers.reflection import clip, task_text

DEMO_HEADER = "### Worked examples (replies of this role in team runs that solved the problem)"


@dataclass(frozen=True, slots=True)
class Demo:
    role: str
    problem_id: str
    problem: str
    reply: str

    def as_dict(self) -> dict[str, Any]:
        return {"role": self.role, "problem_id": self.problem_id, "input": self.problem, "output": self.reply}


def role_reply(trace: Sequence[Mapping[str, Any]], role: str) -> str | None:
    """The role's last turn in a trace (for shared-prompt roles: the last peer's)."""
    turns = [m for m in trace if m.get("kind") == "ai" and m.get("source") == role and str(m.get("content", ""))]
    return str(turns[-1]["content"]) if turns else None


def demos_by_problem(
    successes: Sequence[Rollout], roles: Sequence[str], *, problem_chars: int, reply_chars: int
) -> dict[str, dict[str, Demo]]:
    """problem id -> role -> demo, for successful rollouts in which every role spoke."""
    table: dict[str, dict[str, Demo]] = {}
    for rollout in successes:
        problem = clip(task_text(rollout.trace, 100_000), problem_chars)
        per_role: dict[str, Demo] = {}
        for role in roles:
            reply = role_reply(rollout.trace, role)
            if reply is not None:
                per_role[role] = Demo(role, rollout.problem_id, problem, clip(reply, reply_chars))
        if per_role:
            table[rollout.problem_id] = per_role
    return table


def demo_sets(problem_ids: Sequence[str], *, count: int, size: int, rng: random.Random) -> list[tuple[str, ...]]:
    """``count`` demo sets: set 0 empty, the others seeded shuffles of the solved problems."""
    sets: list[tuple[str, ...]] = [()]
    pool = list(problem_ids)
    for _ in range(1, count):
        if not pool or size <= 0:
            break
        shuffled = pool[:]
        rng.shuffle(shuffled)
        chosen = tuple(sorted(shuffled[:size], key=pool.index))
        if chosen not in sets:
            sets.append(chosen)
    return sets


def render(instruction: str, demos: Sequence[Demo]) -> str:
    """The role prompt: the instruction, then its demos (if any)."""
    if not demos:
        return instruction
    parts = [instruction.rstrip(), "", DEMO_HEADER]
    for index, demo in enumerate(demos, start=1):
        parts += ["", f"Example {index}. Problem (excerpt):", demo.problem, "",
                  "Reply of this role:", demo.reply]
    return "\n".join(parts)
