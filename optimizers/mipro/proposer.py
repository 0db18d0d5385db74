"""MIPRO's grounded instruction proposer (reflection model).

For each role it writes instruction candidates aware of: a summary of the training problems
(data-aware), the team and the role's current prompt (program-aware), the role's bootstrapped
demos (few-shot-aware) and a random style tip (tip-aware), and it sees earlier proposals for
the role so candidates differ.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass

from optimizers.mipro.demos import Demo
from optimizers.reflection import ReflectionModel, clip, extract_fenced

TIPS: dict[str, str] = {
    "none": "",
    "creative": "Don't be afraid to be creative when writing the new instruction.",
    "simple": "Keep the instruction clear and concise.",
    "description": "Make sure the instruction is very informative and descriptive.",
    "high_stakes": "The instruction should include a high-stakes scenario in which the role must solve the task.",
    "persona": "Include a persona that is relevant to the task in the instruction (e.g. 'You are a ...').",
    "verification": "Emphasise how the role should check its own work before answering.",
}


@dataclass(frozen=True, slots=True)
class ProposerSettings:
    data_aware: bool = True
    program_aware: bool = True
    fewshot_aware: bool = True
    tip_aware: bool = True
    temperature: float | None = None
    concurrency: int = 4


async def summarize_data(model: ReflectionModel, problems: Sequence[str]) -> str | None:
    """One reflection call: what the training problems have in common."""
    if not problems:
        return None
    listing = "\n\n".join(f"Problem {i}:\n{clip(text, 1200)}" for i, text in enumerate(problems, start=1))
    prompt = (
        "Below are problems from the training set of a prompt optimization run. Describe the data set "
        "in a few sentences: the kind of problems, their input/output conventions, typical algorithmic "
        "topics and difficulty, and pitfalls a solver should watch for.\n\n" + listing +
        "\n\nReply with the description only."
    )
    reply = await model.ask(prompt, purpose="summary")
    return reply.strip() if reply and reply.strip() else None


def proposal_prompt(
    *,
    role: str,
    current: str,
    team: str,
    data_summary: str | None,
    demos: Sequence[Demo],
    tip: str,
    earlier: Sequence[str],
    settings: ProposerSettings,
) -> str:
    sections = [
        f"Write a new system prompt (instruction) for the `{role}` role of an LLM agent team that solves "
        "competitive programming problems graded by hidden tests. The instruction should make the "
        "team solve more problems."
    ]
    if settings.program_aware:
        sections.append(f"The team: {team}.\nThe role's current instruction:\n```\n{current}\n```")
    if settings.data_aware and data_summary:
        sections.append(f"Summary of the problems:\n{data_summary}")
    if settings.fewshot_aware and demos:
        shown = "\n\n".join(f"Example {i}. Problem (excerpt):\n{clip(d.problem, 800)}\nReply of this role:\n"
                            f"{clip(d.reply, 1200)}" for i, d in enumerate(demos, start=1))
        sections.append(f"Replies of this role in runs that solved the problem:\n{shown}")
    if earlier:
        listed = "\n\n".join(f"Candidate {i}:\n```\n{clip(text, 2500)}\n```" for i, text in enumerate(earlier, 1))
        sections.append(f"Instructions already proposed for this role (write a different one):\n{listed}")
    if settings.tip_aware and tip:
        sections.append(f"Tip: {tip}")
    sections.append(
        "Keep the answer format the team is told to follow unchanged. Reply with the complete new "
        "instruction inside one ``` block."
    )
    return "\n\n".join(sections)


async def propose_instructions(
    model: ReflectionModel,
    *,
    roles: Sequence[str],
    seed_prompts: dict[str, str],
    team: str,
    data_summary: str | None,
    demos_for: dict[str, list[list[Demo]]],
    count: int,
    rng: random.Random,
    settings: ProposerSettings,
) -> dict[str, list[str]]:
    """Per role: [seed instruction, proposal 1, ...] (failed or duplicate proposals are dropped)."""
    tip_names = sorted(TIPS)
    # Draw every tip up front, in a fixed order, so concurrency cannot change which role gets which.
    tips = {role: [TIPS[rng.choice(tip_names)] for _ in range(count)] for role in roles}
    limit = asyncio.Semaphore(max(1, settings.concurrency))

    async def for_role(role: str) -> list[str]:
        candidates = [seed_prompts[role]]
        role_demo_sets = demos_for.get(role, [])
        for index in range(1, count):
            demos = role_demo_sets[index % len(role_demo_sets)] if role_demo_sets else []
            prompt = proposal_prompt(role=role, current=seed_prompts[role], team=team, data_summary=data_summary,
                                     demos=demos, tip=tips[role][index], earlier=candidates[1:],
                                     settings=settings)
            async with limit:
                reply = await model.ask(prompt, purpose="propose", temperature=settings.temperature)
            text = extract_fenced(reply) or (reply or "").strip()
            if text and text not in candidates:
                candidates.append(text)
        return candidates

    results = await asyncio.gather(*(for_role(role) for role in roles))
    return dict(zip(roles, results, strict=True))
