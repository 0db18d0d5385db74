"""MAPRO's pool refinement with the reflection model: initial reworded pools, topology-aware
blame on failed runs (children critique their parents), and mutation of each role's best
prompt by the adding / replacement / reorganization operators."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from optimizers.evaluator import Rollout
from optimizers.reflection import (
    ReflectionModel,
    clip,
    extract_fenced,
    gather_limited,
    outcome_line,
    render_trace,
    task_text,
)
from optimizers.team_graph import TeamGraph

OPERATORS: Mapping[str, str] = {
    "adding": "Keep every current instruction and add one or two concrete instructions that address the "
              "feedback.",
    "replacement": "Replace the instruction that most likely caused the failures with a better one; keep the "
                   "rest.",
    "reorganization": "Reorganize the prompt so the steps that matter most for these failures come first and "
                      "are explicit; keep every requirement.",
}
_VARIANT = re.compile(r"^\s*VARIANT\s*\d*\s*:\s*", re.IGNORECASE | re.MULTILINE)
_BLAME = re.compile(r"^\s*BLAME\s+`?([\w.-]+)`?\s*:\s*(.+)$", re.MULTILINE)


def parse_variants(reply: str | None) -> list[str]:
    """The texts after each ``VARIANT:`` marker (fences stripped); empty ones dropped."""
    if not reply:
        return []
    pieces = _VARIANT.split(reply)[1:]
    out = []
    for piece in pieces:
        text = extract_fenced(piece) or piece.strip().strip("`").strip()
        if text and text not in out:
            out.append(text)
    return out


def parse_blame(reply: str | None, targets: Sequence[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name, text in _BLAME.findall(reply or ""):
        if name in targets:
            found.setdefault(name, []).append(" ".join(text.split())[:600])
    return found


async def initial_pools(
    model: ReflectionModel, seed_prompts: Mapping[str, str], roles: Sequence[str], *, size: int, team: str,
    temperature: float,
) -> dict[str, list[str]]:
    """Seed prompt + ``size - 1`` reworded variants per role, padded with the seed if short."""
    async def one(role: str) -> list[str]:
        prompt = (
            f"Write {size - 1} reworded variants of the system prompt of the `{role}` agent in {team}. Keep its "
            "meaning and every requirement; vary the wording, the order and the emphasis. Start each variant "
            f"with a line `VARIANT:`.\n\nCurrent prompt:\n```\n{seed_prompts[role]}\n```"
        )
        variants = [v for v in parse_variants(await model.ask(prompt, purpose="pool", temperature=temperature))
                    if v != seed_prompts[role]][: size - 1]
        return [seed_prompts[role], *variants, *[seed_prompts[role]] * (size - 1 - len(variants))]

    pools = await asyncio.gather(*(one(role) for role in roles))
    return dict(zip(roles, pools, strict=True))


@dataclass(frozen=True, slots=True)
class Feedback:
    summary: str  # global: "n succeeded, m failed" plus verdict examples
    blame: Mapping[str, list[str]]  # role -> critiques from its neighbours


async def blame_feedback(
    model: ReflectionModel, graph: TeamGraph, rollouts: Sequence[Rollout], *, team: str, count: int,
    limit: asyncio.Semaphore,
) -> Feedback:
    """On the ``count`` lowest-scoring runs of the best assignment, every role critiques the
    roles it depends on (``TeamGraph.blame_targets``) on each failed run."""
    usable = [r for r in rollouts if r.usable]
    worst = sorted(usable, key=lambda r: (r.score, r.problem_id))[:count]
    solved = sum(1 for r in usable if r.score >= 1.0)
    examples = "\n".join(f"- {r.problem_id}: {clip(outcome_line(r), 300)}" for r in worst)
    summary = f"{solved} succeeded, {len(usable) - solved} failed.\n{examples}".strip()
    jobs = [(r, role) for r in worst if r.score < 1.0 for role in graph.roles if graph.blame_targets(role)]

    async def critique(rollout: Rollout, role: str) -> dict[str, list[str]]:
        targets = graph.blame_targets(role)
        names = ", ".join(f"`{t}`" for t in targets)
        prompt = (
            f"This run of {team} failed.\n\nTask:\n{task_text(rollout.trace, 1500)}\n\nVerdict: "
            f"{outcome_line(rollout)}\n\nTranscript:\n{render_trace(rollout.trace, total=5000)}\n\n"
            f"You are the `{role}` agent. Critique what {names} did that led to this failure and what their "
            "prompts should tell them instead. One line per agent: `BLAME <agent>: <critique>`."
        )
        return parse_blame(await model.ask(prompt, purpose="blame"), targets)

    results = await gather_limited(limit, [critique(r, role) for r, role in jobs])
    blame: dict[str, list[str]] = {}
    for found in results:
        for target, lines in found.items():
            for line in lines:
                if line not in blame.setdefault(target, []):
                    blame[target].append(line)
    return Feedback(summary, blame)


async def mutate_pools(
    model: ReflectionModel, best_prompts: Mapping[str, str], roles: Sequence[str], feedback: Feedback, *,
    size: int, team: str, round_number: int, temperature: float, limit: asyncio.Semaphore,
) -> dict[str, list[str]]:
    """New pool per role: the best prompt + ``size - 1`` rewrites cycling the operators."""
    operators = list(OPERATORS)
    jobs = [(role, index, operators[index % len(operators)]) for role in roles for index in range(size - 1)]

    async def rewrite(role: str, index: int, operator: str) -> str | None:
        blame = "\n".join(f"- {line}" for line in feedback.blame.get(role, [])[:6]) or "- none"
        prompt = (
            f"Improve the system prompt of the `{role}` agent in {team}.\nOperator: {operator}. "
            f"{OPERATORS[operator]}\n\nCurrent prompt:\n```\n{best_prompts[role]}\n```\n\nHow the team did:\n"
            f"{feedback.summary}\n\nWhat the other agents blame `{role}` for:\n{blame}\n\n"
            f"(round {round_number}, variant {index + 1})\nReturn the complete new prompt in one fenced block."
        )
        return extract_fenced(await model.ask(prompt, purpose="mutate", temperature=temperature))

    rewrites = await gather_limited(limit, [rewrite(*job) for job in jobs])
    pools = {role: [best_prompts[role]] for role in roles}
    for (role, _, _), text in zip(jobs, rewrites, strict=True):
        pools[role].append(text or best_prompts[role])
    return pools
