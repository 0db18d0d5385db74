"""MAPRO's pool refinement with the reflection model, as the reference does it:

- initial pools: the seed plus ``K - 1`` short reworded variants asked for in one request
  (``VARIANT:`` lines), padded with the seed when the reply holds too few;
- blame: on each sampled run that failed, every role with upstream roles critiques them
  (``BLAME <role>: <one sentence>`` or ``OK``); in the star, each worker that acted critiques the
  manager's delegation and the manager critiques the workers' reports; a lone shared prompt has
  nobody upstream and gets no blame;
- mutation: the best prompt plus ``K - 1`` rewrites cycling the adding / replacement /
  reorganization operators, each given the global outcome and that role's blame.

Each purpose has the reference's system text (in our words, ``optimizers.surfaces``): the
rewriter answers with the prompt only, the blame pass with BLAME lines only.
Pool variants and rewrites become prompts, so a reply cut at its token limit is refused (the
slot keeps the seed or best prompt); a cut critique is still read.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from optimizers.evaluator import Rollout
from optimizers.mapro.contexts import delegations, head, outputs_of, task_of
from optimizers.reflection import ReflectionModel, gather_limited, outcome_line
from optimizers.surfaces import MAPRO_BLAME_SYSTEM, MAPRO_MUTATE_PHRASE, MAPRO_POOL_PHRASE, MAPRO_REWRITER_SYSTEM
from optimizers.team_graph import TeamGraph

OPERATORS: Mapping[str, str] = {
    "adding": "Operator ADDING: keep the prompt as it is and append exactly one concrete sentence, taken from "
              "the feedback, that would fix the problem seen.",
    "replacement": "Operator REPLACEMENT: rewrite the weak or error-prone parts of the prompt with clearer, more "
                   "specific instructions that answer the feedback.",
    "reorganization": "Operator REORGANIZATION: reorder and tidy the prompt so it is consistent and easy to follow, "
                      "without changing what it asks for.",
}
BLAME_TEMPERATURE = 0.2
BLAME_TASK_CHARS = 800
BLAME_OUTPUT_CHARS = 600
BLAME_KEEP_CHARS = 800  # per role, over all sampled runs

_MARK = re.compile(r"^\W*(?:\d{1,2}[.)]\s*)?\**\s*VARIANT\s*\d*\s*\**\s*[:.\-\u2013]\s*\**",
                   re.IGNORECASE | re.MULTILINE)
_LABEL = re.compile(r"^\W*(?:\d{1,2}[.)]\s*)?\**\s*(?:VARIANT|PROMPT|ROLE PROMPT)\s*\d*\s*\**\s*[:.\-\u2013]\s*\**\s*",
                    re.IGNORECASE)
_FENCED = re.compile(r"^```[^\n]*\n(.*)\n```$", re.DOTALL)
_BLAME = re.compile(r"BLAME\s+`?([^\s:`]+)`?\s*:\s*(.+)")


def clean(text: str) -> str:
    """A reply as a prompt: a leading ``VARIANT/PROMPT:`` label, quotes and (ours) one fence
    around the whole reply removed."""
    text = text.strip()
    fenced = _FENCED.match(text)
    if fenced:
        text = fenced.group(1).strip()
    return _LABEL.sub("", text, count=1).strip().strip('"').strip()


def parse_variants(reply: str | None, wanted: int) -> list[str]:
    """The reference's three readings, each tried when the one before found fewer than
    ``wanted``: the text after each ``VARIANT`` mark; lines naming ``VARIANT``; any line."""
    text = reply or ""
    marks = list(_MARK.finditer(text))
    variants = []
    for index, mark in enumerate(marks):
        end = marks[index + 1].start() if index + 1 < len(marks) else len(text)
        piece = text[mark.end():end].strip().strip('"').strip()
        if piece:
            variants.append(piece)
    if len(variants) < wanted:
        variants = [clean(line) for line in text.splitlines() if "VARIANT" in line.upper()]
    if len(variants) < wanted:
        variants = [clean(line) for line in text.splitlines() if clean(line)]
    return [v for v in variants if v][:wanted]


async def initial_pools(
    model: ReflectionModel, seed_prompts: Mapping[str, str], roles: Sequence[str], *, size: int, temperature: float,
) -> dict[str, list[str]]:
    """Seed prompt + ``size - 1`` reworded variants per role, padded with the seed if short."""
    async def one(role: str) -> list[str]:
        if size <= 1:
            return [seed_prompts[role]]
        prompt = (
            f"Agent role: {role}\n\nBase role prompt:\n\"\"\"{seed_prompts[role]}\"\"\"\n\n"
            f"Write {size - 1} {MAPRO_POOL_PHRASE}. Each keeps what the role is for but "
            "changes the wording, the emphasis or the structure. Keep each one short (one to four sentences). "
            "Put each version on its own line, starting with 'VARIANT:'."
        )
        reply = await model.ask(prompt, purpose="pool", temperature=temperature, system=MAPRO_REWRITER_SYSTEM)
        variants = parse_variants(reply, size - 1)
        return [seed_prompts[role], *variants, *[seed_prompts[role]] * (size - 1 - len(variants))]

    pools = await asyncio.gather(*(one(role) for role in roles))
    return dict(zip(roles, pools, strict=True))


@dataclass(frozen=True, slots=True)
class Feedback:
    summary: str  # global: "Over n sampled tasks, s succeeded and f failed." plus examples
    blame: Mapping[str, str]  # role -> critiques from its neighbours (capped)


@dataclass(frozen=True, slots=True)
class _Critique:
    critic: str
    targets: tuple[str, ...]
    prompt: str


def _blame_prompt(rollout: Rollout, role: str, upstream: Sequence[tuple[str, str]], output: str) -> str:
    parents = "\n".join(f"--- upstream {name} ---\n{head(text, BLAME_OUTPUT_CHARS)}" for name, text in upstream)
    return (
        f"The team's final result was INCORRECT.\n\nTask:\n{head(task_of(rollout.trace), BLAME_TASK_CHARS)}\n\n"
        f"Agent '{role}' received these inputs from upstream agents and then wrote the output below.\n\n"
        f"Upstream inputs:\n{parents}\n\nOutput of '{role}':\n{head(output, BLAME_OUTPUT_CHARS)}\n\n"
        f"For each upstream agent above, say in one short sentence whether and how its output got in the way of "
        f"'{role}'; write OK when it was fine. One line per upstream agent, exactly: BLAME <agent>: <sentence>"
    )


def _chain_critiques(graph: TeamGraph, rollout: Rollout) -> list[_Critique]:
    trace = rollout.trace
    jobs = []
    for role in reversed(graph.roles):
        parents = graph.parents(role)
        if parents:
            upstream = [(p, "\n".join(outputs_of(trace, p))) for p in parents]
            jobs.append(_Critique(role, tuple(parents),
                                  _blame_prompt(rollout, role, upstream, "\n".join(outputs_of(trace, role)))))
    return jobs


def _star_critiques(graph: TeamGraph, rollout: Rollout) -> list[_Critique]:
    trace = rollout.trace
    hub, workers = graph.roles[0], graph.children(graph.roles[0])
    jobs = []
    for worker in workers:
        said = outputs_of(trace, worker)
        if not said:
            continue  # never acted in this run
        given = delegations(trace, hub, worker)
        upstream = [(hub, given[-1] if given else "(no explicit delegation found)")]
        jobs.append(_Critique(worker, (hub,), _blame_prompt(rollout, worker, upstream, "\n".join(said))))
    reports = [(w, (outputs_of(trace, w) or ["(this worker never acted)"])[-1]) for w in workers]
    hub_said = outputs_of(trace, hub)
    jobs.append(_Critique(hub, tuple(workers), _blame_prompt(rollout, hub, reports, hub_said[-1] if hub_said else "")))
    return jobs


def parse_blame(reply: str | None, targets: Sequence[str]) -> dict[str, list[str]]:
    """``BLAME <agent>: <sentence>`` lines about ``targets``; ``OK`` verdicts dropped."""
    found: dict[str, list[str]] = {}
    for name, text in _BLAME.findall(reply or ""):
        text = text.strip()
        if name in targets and text.upper() != "OK":
            found.setdefault(name, []).append(text)
    return found


def solved(rollout: Rollout) -> bool:
    """The reference's blame and feedback count a run with any credit as correct."""
    return rollout.score > 0


async def blame_feedback(
    model: ReflectionModel, graph: TeamGraph, rollouts: Sequence[Rollout], *, count: int, limit: asyncio.Semaphore,
) -> tuple[Feedback, list[str]]:
    """Feedback from the ``count`` lowest-scoring runs (stable in row order) of the best team;
    returns it and the problem ids it sampled."""
    usable = [r for r in rollouts if r.usable]
    sampled = sorted(usable, key=lambda r: r.score)[:count]
    make = _star_critiques if graph.kind == "star" else _chain_critiques
    jobs = [(index, job) for index, rollout in enumerate(sampled) if not solved(rollout)
            for job in make(graph, rollout)]
    replies = await gather_limited(limit, [
        model.ask(job.prompt, purpose="blame", temperature=BLAME_TEMPERATURE, keep_cut=True, system=MAPRO_BLAME_SYSTEM)
        for _, job in jobs])
    per_run: list[dict[str, list[str]]] = [{} for _ in sampled]
    for (index, job), reply in zip(jobs, replies, strict=True):
        for target, lines in parse_blame(reply, job.targets).items():
            per_run[index].setdefault(target, []).extend(f"(from {job.critic}) {line}" for line in lines)
    blame = {}
    for role in graph.roles:
        joined = " ".join(" ".join(run[role]) for run in per_run if run.get(role)).strip()
        blame[role] = joined[:BLAME_KEEP_CHARS] + ("…" if len(joined) > BLAME_KEEP_CHARS else "")
    failed = [r for r in sampled if not solved(r)]
    summary = f"Over {len(sampled)} sampled tasks, {len(sampled) - len(failed)} succeeded and {len(failed)} failed."
    examples = [f"The team answered INCORRECTLY ({head(outcome_line(r), 300)})" for r in failed[:2]]
    if examples:
        summary += " Examples: " + " | ".join(examples)
    return Feedback(summary, blame), [r.problem_id for r in sampled]


async def mutate_pools(
    model: ReflectionModel, best_prompts: Mapping[str, str], roles: Sequence[str], feedback: Feedback, *,
    size: int, round_number: int, temperature: float, limit: asyncio.Semaphore,
) -> dict[str, list[str]]:
    """New pool per role: the best prompt + ``size - 1`` rewrites cycling the operators."""
    operators = list(OPERATORS)
    jobs = [(role, index, operators[index % len(operators)]) for role in roles for index in range(size - 1)]

    async def rewrite(role: str, index: int, operator: str) -> str | None:
        prompt = (
            f"Agent role: {role}\n\n{MAPRO_MUTATE_PHRASE}\n\"\"\"{best_prompts[role]}\"\"\"\n\n"
            f"Feedback from running the team:\n- Overall outcome: {feedback.summary or '(none)'}\n"
            f"- Critique aimed at this agent by the others: {feedback.blame.get(role) or '(none)'}\n\n"
            f"{OPERATORS[operator]}\n\n(Revision attempt {round_number}.{index}: make it a distinct improvement.)\n\n"
            "Reply with the new role prompt text only."
        )
        reply = await model.ask(prompt, purpose="mutate", temperature=temperature, system=MAPRO_REWRITER_SYSTEM)
        return clean(reply) if reply is not None else None

    rewrites = await gather_limited(limit, [rewrite(*job) for job in jobs])
    pools = {role: [best_prompts[role]] for role in roles}
    for (role, _, _), text in zip(jobs, rewrites, strict=True):
        pools[role].append(text or best_prompts[role])
    return pools
