"""MAPRO's rewards: probe every pool candidate on the incumbent's role contexts, then let the
task-model judge rate each candidate's output (node reward) and each hand-off (edge reward),
conditioned on the role's preference demos. The rewards become the log-space factors of the
MAP problem (``map_inference.FactorGraph``).

As in the reference: every (role, candidate, context) is probed and judged once, duplicates
included; a node is judged on (role, input, output, demos); an edge (parent, child) on the
parent candidate's output against the child's *candidate prompt* and the child's demos, for
every (parent candidate, child candidate) pair; a shared peer prompt adds the diagonal edge
(the same candidate on both sides). Scores are averaged over contexts (a reply without a
number counts 0.5) and clipped to [1e-6, 1].
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from optimizers.judge import SCORE_FLOOR, Judge
from optimizers.mapro.contexts import head
from optimizers.mapro.map_inference import FactorGraph
from optimizers.reflection import gather_limited
from optimizers.team_graph import TeamGraph

JUDGE_CHARS = 2000  # agent input and output in a judge prompt
PROMPT_CHARS = 3000  # a candidate role prompt in an edge judge prompt
DEMO_CHARS = 400
NO_DEMOS = "(no demonstrations yet)"


@dataclass(frozen=True, slots=True)
class Demo:
    """One output the critic labelled good (``+``) or bad (``-``), with the prompt behind it."""

    prompt: str
    output: str
    label: str
    note: str = ""

    def render(self) -> str:
        text = " ".join(self.output.split())
        if len(text) > DEMO_CHARS:
            text = text[:DEMO_CHARS] + "…"
        line = f"[{'GOOD' if self.label == '+' else 'BAD'}] output: {text}"
        return f"{line}  (why: {self.note})" if self.note else line

    def to_dict(self) -> dict[str, str]:
        return {"label": self.label, "note": self.note, "output": self.output}


@dataclass(slots=True)
class Demos:
    """The rule-based critic's preference demos for one role."""

    positive: list[Demo] = field(default_factory=list)
    negative: list[Demo] = field(default_factory=list)

    def add(self, demo: Demo, keep: int) -> None:
        """File ``demo`` under its polarity, keeping the newest ``keep`` of each (repeats allowed)."""
        bucket = self.positive if demo.label == "+" else self.negative
        bucket.append(demo)
        del bucket[:-keep]

    def shown(self, limit: int) -> list[Demo]:
        """Up to ``limit`` demos, newest first: good on even slots, bad on odd ones, either one
        filling in when the other runs out."""
        good, bad = list(reversed(self.positive)), list(reversed(self.negative))
        out: list[Demo] = []
        while len(out) < limit and (good or bad):
            if good and (len(out) % 2 == 0 or not bad):
                out.append(good.pop(0))
            else:
                out.append(bad.pop(0))
        return out

    def render(self, limit: int) -> str:
        return "\n".join(d.render() for d in self.shown(limit)) or NO_DEMOS

    def to_dict(self) -> dict[str, list[dict[str, str]]]:
        return {"positive": [d.to_dict() for d in self.positive], "negative": [d.to_dict() for d in self.negative]}


@dataclass(frozen=True, slots=True)
class Rewards:
    """Averaged judge rewards of one round, in [SCORE_FLOOR, 1]."""

    node: Mapping[str, list[float]]  # role -> per candidate
    edge: Mapping[tuple[str, str], list[list[float]]]  # (parent, child) -> [k][l]
    diagonal: Mapping[str, list[float]]  # shared peer prompt -> per candidate (same prompt both sides)
    outputs: Mapping[str, list[list[str]]]  # role -> [candidate][context] probe output


def _clamp(value: float) -> float:
    return min(1.0, max(SCORE_FLOOR, value))


def _mean(values: Sequence[float]) -> float:
    return _clamp(sum(values) / len(values)) if values else _clamp(0.5)


def node_prompt(role: str, context: str, output: str, demos: str) -> str:
    return (
        f"Agent role: {role}\n\n=== AGENT INPUT ===\n{head(context, JUDGE_CHARS)}\n\n"
        f"=== AGENT RESPONSE ===\n{head(output, JUDGE_CHARS)}\n\n"
        f"=== DEMONSTRATIONS (good and bad behaviour of this role) ===\n{demos}\n\n"
        "=== QUESTION ===\nOn a scale from 0.00 to 1.00, how well does the response do this agent's job: is it "
        "correct, complete and clear, and useful to the agents that read it? Reply with the number only."
    )


def edge_prompt(child: str, parent_output: str, child_prompt: str, demos: str) -> str:
    return (
        f"An upstream agent hands its output to the downstream agent '{child}'.\n\n"
        f"=== UPSTREAM OUTPUT ===\n{head(parent_output, JUDGE_CHARS)}\n\n"
        f"=== DOWNSTREAM ROLE PROMPT ===\n{head(child_prompt, PROMPT_CHARS)}\n\n"
        f"=== DOWNSTREAM DEMONSTRATIONS ===\n{demos}\n\n"
        "=== QUESTION ===\nOn a scale from 0.00 to 1.00, how well does the upstream output let the downstream "
        "agent, working under that role prompt, do its next step (complete information, usable format, "
        "clarity, fit with the downstream role)? Reply with the number only."
    )


async def probe_outputs(
    judge: Judge, pools: Mapping[str, Sequence[str]], contexts: Mapping[str, Sequence[str]], limit: asyncio.Semaphore
) -> dict[str, list[list[str]]]:
    """``Y[role][k][c]``: candidate ``k``'s reply to context ``c`` (one probe each, duplicates too)."""
    jobs = [(role, k, c) for role in pools for k in range(len(pools[role])) for c in range(len(contexts[role]))]
    replies = await gather_limited(limit, [judge.probe(pools[role][k], contexts[role][c]) for role, k, c in jobs])
    out: dict[str, list[list[str]]] = {role: [["" for _ in contexts[role]] for _ in pools[role]] for role in pools}
    for (role, k, c), reply in zip(jobs, replies, strict=True):
        out[role][k][c] = reply
    return out


async def judge_rewards(
    judge: Judge,
    graph: TeamGraph,
    pools: Mapping[str, Sequence[str]],
    contexts: Mapping[str, Sequence[str]],
    outputs: Mapping[str, list[list[str]]],
    demos: Mapping[str, Demos],
    *,
    demo_limit: int,
    limit: asyncio.Semaphore,
) -> Rewards:
    """Node, edge and diagonal rewards averaged over contexts (node jobs first, then edges)."""
    shown = {role: (demos[role].render(demo_limit) if role in demos else NO_DEMOS) for role in graph.roles}
    node_jobs = [(role, k, c) for role in graph.roles for k in range(len(pools[role]))
                 for c in range(len(contexts[role]))]
    edge_jobs: list[tuple[str, str, int, int, int]] = []
    for parent, child in graph.edges:
        shared = min(len(contexts[parent]), len(contexts[child]))
        edge_jobs += [(parent, child, k, m, c) for k in range(len(pools[parent]))
                      for m in range(len(pools[child])) for c in range(shared)]
    diagonal_roles = [graph.roles[0]] if graph.kind == "shared" and graph.peers else []
    for role in diagonal_roles:
        edge_jobs += [(role, role, k, k, c) for k in range(len(pools[role])) for c in range(len(contexts[role]))]
    scores = await gather_limited(limit, [
        *(judge.score(node_prompt(role, contexts[role][c], outputs[role][k][c], shown[role]))
          for role, k, c in node_jobs),
        *(judge.score(edge_prompt(child, outputs[parent][k][c], pools[child][m], shown[child]))
          for parent, child, k, m, c in edge_jobs),
    ])
    node_raw: dict[tuple[str, int], list[float]] = {}
    for (role, k, _), score in zip(node_jobs, scores[: len(node_jobs)], strict=True):
        node_raw.setdefault((role, k), []).append(score)
    edge_raw: dict[tuple[str, str, int, int], list[float]] = {}
    for (parent, child, k, m, _), score in zip(edge_jobs, scores[len(node_jobs):], strict=True):
        edge_raw.setdefault((parent, child, k, m), []).append(score)
    node = {role: [_mean(node_raw.get((role, k), [])) for k in range(len(pools[role]))] for role in graph.roles}
    edge = {(p, c): [[_mean(edge_raw.get((p, c, k, m), [])) for m in range(len(pools[c]))]
                     for k in range(len(pools[p]))] for p, c in graph.edges}
    diagonal = {r: [_mean(edge_raw.get((r, r, k, k), [])) for k in range(len(pools[r]))] for r in diagonal_roles}
    return Rewards(node, edge, diagonal, outputs)


def factor_graph(graph: TeamGraph, rewards: Rewards) -> FactorGraph:
    """log T(P) = sum log node + sum log edge; a shared prompt counts once per replica, and
    peers add n(n-1) diagonal edge factors (every replica uses the same candidate)."""
    weight = graph.replicas if graph.kind == "shared" else 1
    unary = {role: [weight * math.log(v) for v in rewards.node[role]] for role in graph.roles}
    for role, values in rewards.diagonal.items():
        pairs = graph.replicas * (graph.replicas - 1)
        unary[role] = [u + pairs * math.log(v) for u, v in zip(unary[role], values, strict=True)]
    pairwise = {key: [[math.log(v) for v in row] for row in table] for key, table in rewards.edge.items()}
    return FactorGraph({role: len(rewards.node[role]) for role in graph.roles}, unary, pairwise)


def critic_update(
    demos: dict[str, Demos],
    rewards: Rewards,
    pools: Mapping[str, Sequence[str]],
    assignment: Mapping[str, int],
    success: bool,
    *,
    positive_threshold: float,
    negative_threshold: float,
    keep: int,
) -> list[dict[str, Any]]:
    """The rule-based critic (no model call), on each candidate's first-context output:

    - the chosen candidate's output becomes a positive demo when the round's assignment solved at
      least half its rows (``success``) and the chosen prompt's node reward (its first copy in
      the pool) is at least ``positive_threshold``;
    - the lowest-rated candidate (first of equals) becomes a negative demo when its reward is at
      most ``negative_threshold`` and it is not the chosen one.
    """
    notes = []
    for role, chosen in assignment.items():
        scores = rewards.node[role]
        pool = list(pools[role])
        first_outputs = [outputs[0] if outputs else "" for outputs in rewards.outputs[role]]
        demo = demos.setdefault(role, Demos())
        rated = pool.index(pool[chosen])
        if success and scores[rated] >= positive_threshold:
            demo.add(Demo(pool[chosen], first_outputs[chosen], "+", "selected prompt on a solved task"), keep)
            notes.append({"role": role, "polarity": "positive", "candidate": chosen})
        worst = min(range(len(scores)), key=lambda k: (scores[k], k))
        if scores[worst] <= negative_threshold and worst != rated:
            demo.add(Demo(pool[worst], first_outputs[worst], "-", f"low reward score {scores[worst]:.2f}"), keep)
            notes.append({"role": role, "polarity": "negative", "candidate": worst})
    return notes
