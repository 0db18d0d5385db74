"""TAVO's trajectory-aware credit: segments, step ratings, per-role credit, edit aggregation.

- ``segment``: a trajectory becomes sub-trajectories. Centralized teams (a lead role, e.g. the
  manager): each lead turn plus everything until its next turn. Other teams: each role turn
  plus the tool replies that follow it; hand-off messages open the next segment as context.
- ``rate_steps`` (sub-trajectory credit, the ``credit`` switch): the reflection model rates every
  segment's contribution (progress, coordination, stage fit; 1-10) given the task, the earlier
  segments and the final verdict.
- ``assign_credit``: per (trajectory, role that spoke), or per (role, segment it acted in) as in
  the paper, the reflection model judges how the role contributed and proposes concrete prompt
  modifications (add / remove / restructure).
- ``aggregate``: suggestions pooled across tasks are merged and ranked (top 5 additions, top 3
  removals, top 3 restructurings); frequency counting when the model's answer is unusable.

Every reflection failure degrades gracefully: neutral ratings, no credit from that pair, or
frequency-ranked edits.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from optimizers.evaluator import Rollout
from optimizers.reflection import (
    ReflectionModel,
    clip,
    extract_json,
    gather_limited,
    outcome_line,
    render_message,
    string_list,
    task_text,
)

EDIT_KINDS = ("add", "remove", "restructure")
TOP_EDITS = {"add": 5, "remove": 3, "restructure": 3}
NEUTRAL = 5.0


@dataclass(frozen=True, slots=True)
class Segment:
    index: int
    role: str
    agent: str
    messages: tuple[Mapping[str, Any], ...]

    def render(self, each: int = 800) -> str:
        body = "\n".join(render_message(m, each) for m in self.messages)
        who = f"{self.role} ({self.agent})" if self.agent and self.agent != self.role else self.role
        return f"### Step {self.index} - {who}\n{body}"


@dataclass(frozen=True, slots=True)
class Rating:
    index: int
    score: float
    analysis: str = ""
    suggestion: str = ""


@dataclass(frozen=True, slots=True)
class Credit:
    """One role's credit in one trajectory."""

    problem_id: str
    role: str
    overall: float
    analysis: str
    edits: Mapping[str, tuple[str, ...]]
    segment: int | None = None  # the step credited (paper mode); None: the role's whole trajectory


@dataclass
class Edits:
    """Ranked prompt edits (meta-knowledge) for one role or for the whole team."""

    add: list[str] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)
    restructure: list[str] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.add or self.remove or self.restructure)

    def as_dict(self) -> dict[str, list[str]]:
        return {"add": self.add, "remove": self.remove, "restructure": self.restructure}

    def render(self) -> str:
        lines = []
        for kind, title in (("add", "Add"), ("remove", "Remove"), ("restructure", "Restructure")):
            for item in getattr(self, kind):
                lines.append(f"- {title}: {item}")
        return "\n".join(lines) or "- (no edits)"


# ------------------------------------------------------------------------------------------------
# Segmentation


def segment(trace: Sequence[Mapping[str, Any]], *, lead: str | None = None, limit: int = 16) -> list[Segment]:
    """Sub-trajectories of a trace (the last ``limit`` ones; index counts from the first)."""
    task = next((m.get("content") for m in trace if m.get("kind") == "user"), None)
    # The task (given to every agent) is shown separately, so it is not part of any step.
    body = [m for m in trace
            if m.get("kind") != "system" and not (m.get("kind") == "user" and m.get("content") == task)]
    segments: list[list[Mapping[str, Any]]] = []
    owners: list[tuple[str, str]] = []
    pending: dict[str, list[Mapping[str, Any]]] = {}  # hand-offs waiting for their agent's next turn
    for message in body:
        kind = message.get("kind")
        source = str(message.get("source", ""))
        agent = str(message.get("agent", ""))
        opens = kind == "ai" and (lead is None or source == lead or not segments)
        if opens:
            segments.append([*pending.pop(agent, []), message])
            owners.append((source, agent))
        elif segments and (lead is not None or kind == "tool"):
            segments[-1].append(message)
        else:
            pending.setdefault(agent, []).append(message)
    if segments:
        for waiting in pending.values():
            segments[-1].extend(waiting)
    out = [Segment(i, owners[i][0], owners[i][1], tuple(msgs)) for i, msgs in enumerate(segments)]
    return out[-limit:] if limit > 0 else out


def lead_role(roles: Sequence[str]) -> str | None:
    """The role whose turns structure a centralized team's trajectory."""
    return "manager" if "manager" in roles else None


# ------------------------------------------------------------------------------------------------
# Step ratings (sub-trajectory credit)


def _context(rollout: Rollout, team: str) -> str:
    return (f"Task (excerpt):\n{task_text(rollout.trace, 800)}\n\nTeam: {team}\n\n"
            f"Final verdict: {outcome_line(rollout)}")


async def rate_steps(model: ReflectionModel, rollout: Rollout, segments: Sequence[Segment], *, team: str,
                     temperature: float) -> list[Rating]:
    """Ratings of every segment; neutral where the model gives none."""
    if not segments:
        return []
    steps = "\n\n".join(s.render() for s in segments)
    prompt = (
        f"{_context(rollout, team)}\n\nThe team's trajectory, cut into steps:\n\n{clip(steps, 14000)}\n\n"
        "Rate how much each step contributed to the final outcome: progress toward a correct program "
        "(1-10), coordination with the rest of the team (1-10), and whether the step fits its stage of "
        "the solution (1-10); give an overall score (1-10), a one-sentence analysis and a concrete "
        "suggestion for the role that took the step. Reply with JSON only: "
        '{"ratings": [{"index": <step>, "progress": n, "coordination": n, "stage": n, "score": n, '
        '"analysis": "...", "suggestion": "..."}]}'
    )
    reply = await model.ask(prompt, purpose="rate", temperature=temperature)
    data = extract_json(reply)
    rows = data.get("ratings") if isinstance(data, Mapping) else data
    found: dict[int, Rating] = {}
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, Mapping):
            continue
        try:
            index = int(row.get("index"))
            score = float(row.get("score", NEUTRAL))
        except (TypeError, ValueError):
            continue
        found[index] = Rating(index, min(10.0, max(1.0, score)), str(row.get("analysis", ""))[:500],
                              str(row.get("suggestion", ""))[:500])
    return [found.get(s.index, Rating(s.index, NEUTRAL)) for s in segments]


# ------------------------------------------------------------------------------------------------
# Credit assignment per (trajectory, role)


async def assign_credit(
    model: ReflectionModel,
    rollout: Rollout,
    role: str,
    *,
    prompt_text: str,
    segments: Sequence[Segment],
    ratings: Sequence[Rating] | None,
    team: str,
    temperature: float,
    focus: Segment | None = None,
) -> Credit | None:
    """Credit of ``role`` in one trajectory: for all its steps, or (``focus``) for one step."""
    own = [focus] if focus is not None else [s for s in segments if s.role == role]
    evaluation: dict[str, Any] = {}
    if ratings is not None:
        evaluation["step_ratings"] = [
            {"step": r.index, "role": s.role, "score": r.score, "analysis": r.analysis}
            for s, r in zip(segments, ratings, strict=True)
        ]
    tail = [m for m in rollout.trace if m.get("kind") != "system"][-24:]
    evaluation["last_messages"] = [f"{m.get('source')}: {clip(str(m.get('content', '')), 500)}" for m in tail]
    evaluation_text = clip(json.dumps(evaluation, ensure_ascii=False, indent=1), 12000)
    own_text = "\n\n".join(s.render(1200) for s in own[-5:]) or "(the role did not act in this run)"
    scope = (f"the `{role}` role's step {focus.index} (its contribution in that sub-trajectory)"
             if focus is not None else f"the `{role}` role")
    steps_title = f"The step being credited (step {focus.index})" if focus is not None else (
        f"The `{role}` role's steps (last 5)")
    prompt = (
        f"{_context(rollout, team)}\n\nResult evaluation:\n{evaluation_text}\n\n"
        f"The `{role}` role's system prompt:\n```\n{clip(prompt_text, 6000)}\n```\n\n"
        f"{steps_title}:\n{clip(own_text, 8000)}\n\n"
        f"Assign credit to {scope}: how did its behaviour cause the outcome, what helped, what "
        "hurt, and which concrete changes to its system prompt would make the team solve more problems "
        "like this one (general strategies, never this problem's solution). Reply with JSON only: "
        '{"overall_score": 1-10, "analysis": "...", "strengths": ["..."], "weaknesses": ["..."], '
        '"causal_analysis": "...", "prompt_suggestions": ["..."], '
        '"prompt_modifications": {"add": ["..."], "remove": ["..."], "restructure": ["..."]}}'
    )
    reply = await model.ask(prompt, purpose="credit", temperature=temperature)
    data = extract_json(reply)
    if not isinstance(data, Mapping):
        return None
    mods = data.get("prompt_modifications")
    mods = mods if isinstance(mods, Mapping) else {}
    edits = {kind: tuple(string_list(mods.get(kind), limit=8)) for kind in EDIT_KINDS}
    extra = [s for s in string_list(data.get("prompt_suggestions"), limit=8) if s not in edits["add"]]
    edits["add"] = edits["add"] + tuple(extra)
    try:
        overall = float(data.get("overall_score", NEUTRAL))
    except (TypeError, ValueError):
        overall = NEUTRAL
    return Credit(rollout.problem_id, role, overall, str(data.get("analysis", ""))[:1000], edits,
                  None if focus is None else focus.index)


# ------------------------------------------------------------------------------------------------
# Aggregation across tasks (meta-knowledge)


def by_frequency(credits: Sequence[Credit]) -> Edits:
    """Fallback ranking: the most frequent suggestions of each kind (first seen wins ties)."""
    ranked = Edits()
    for kind in EDIT_KINDS:
        counts = Counter(item for c in credits for item in c.edits.get(kind, ()))
        order = {item: i for i, item in enumerate(item for c in credits for item in c.edits.get(kind, ()))}
        best = sorted(counts, key=lambda item: (-counts[item], order[item]))
        setattr(ranked, kind, best[: TOP_EDITS[kind]])
    return ranked


async def aggregate(model: ReflectionModel, credits: Sequence[Credit], *, scope: str,
                    temperature: float) -> Edits:
    """Merge near-duplicate suggestions and rank them; frequency counting as the fallback."""
    pooled = {kind: [item for c in credits for item in c.edits.get(kind, ())] for kind in EDIT_KINDS}
    if not any(pooled.values()):
        return Edits()
    listing = "\n".join(f"{kind}: {json.dumps(items[:60], ensure_ascii=False)}" for kind, items in pooled.items())
    prompt = (
        f"Prompt-edit suggestions for {scope}, collected from credit assignment on several tasks "
        f"(one entry per suggestion, duplicates included):\n{clip(listing, 14000)}\n\n"
        "Merge suggestions that say the same thing, rank them by how often and how strongly they "
        f"recur, and keep the top {TOP_EDITS['add']} additions, top {TOP_EDITS['remove']} removals "
        f"and top {TOP_EDITS['restructure']} restructurings. Reply with JSON only: "
        '{"add": ["..."], "remove": ["..."], "restructure": ["..."]}'
    )
    reply = await model.ask(prompt, purpose="aggregate", temperature=temperature)
    data = extract_json(reply)
    if not isinstance(data, Mapping):
        return by_frequency(credits)
    ranked = Edits(*(string_list(data.get(kind), limit=TOP_EDITS[kind]) for kind in EDIT_KINDS))
    return ranked if not ranked.empty() else by_frequency(credits)
