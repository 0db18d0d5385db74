"""MAPRO's rewards: probe every pool candidate on the incumbent's role contexts, then let the
task-model judge rate each candidate's output (node reward) and each parent/child pair of
outputs (edge reward), conditioned on the role's preference demos. The rewards become the
log-space factors of the MAP problem (``map_inference.FactorGraph``).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from optimizers.judge import SCORE_FLOOR, Judge
from optimizers.mapro.map_inference import FactorGraph
from optimizers.reflection import clip, gather_limited
from optimizers.team_graph import TeamGraph

NEUTRAL = 0.5  # a judge call that failed or gave no number neither helps nor hurts


@dataclass(slots=True)
class Demos:
    """The rule-based critic's preference demos for one role (outputs judged good / bad)."""

    positive: list[str] = field(default_factory=list)
    negative: list[str] = field(default_factory=list)

    def add(self, polarity: str, text: str, keep: int) -> bool:
        """Keep ``text`` (the newest ``keep`` per polarity); False when it is already kept."""
        bucket = self.positive if polarity == "positive" else self.negative
        if not text or text in bucket:
            return False
        bucket.append(text)
        del bucket[:-keep]
        return True

    def shown(self, limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` demos, newest first, alternating good and bad."""
        good, bad = list(reversed(self.positive)), list(reversed(self.negative))
        out: list[tuple[str, str]] = []
        while (good or bad) and len(out) < limit:
            if good:
                out.append(("GOOD", good.pop(0)))
            if bad and len(out) < limit:
                out.append(("BAD", bad.pop(0)))
        return out

    def to_dict(self) -> dict[str, list[str]]:
        return {"positive": list(self.positive), "negative": list(self.negative)}


@dataclass(frozen=True, slots=True)
class Rewards:
    """Averaged judge rewards of one round, in [SCORE_FLOOR, 1]."""

    node: Mapping[str, list[float]]  # role -> per candidate
    edge: Mapping[tuple[str, str], list[list[float]]]  # (parent, child) -> [k][l]
    diagonal: Mapping[str, list[float]]  # shared peer prompt -> per candidate (same prompt both sides)
    outputs: Mapping[str, list[list[str]]]  # role -> [candidate][context] probe output


def _clamp(value: float) -> float:
    return min(1.0, max(SCORE_FLOOR, value))


def _mean(values: Sequence[float | None]) -> float:
    usable = [v for v in values if v is not None]
    return _clamp(sum(usable) / len(usable)) if usable else NEUTRAL


def _demo_block(demos: Demos | None, limit: int) -> str:
    shown = demos.shown(limit) if demos is not None else []
    if not shown:
        return ""
    rendered = "\n\n".join(f"=== {kind} EXAMPLE ===\n{clip(text, 800)}" for kind, text in shown)
    return f"Earlier replies of this agent, judged by whether the team then solved the problem:\n{rendered}\n\n"


def node_prompt(role: str, team: str, context: str, output: str, demos: Demos | None, demo_limit: int) -> str:
    return (
        f"Agent `{role}` in {team}.\n\n=== INPUT ===\n{clip(context, 3000)}\n\n"
        f"{_demo_block(demos, demo_limit)}=== REPLY ===\n{clip(output, 3000)}\n=== END REPLY ===\n\n"
        "How good is this reply for the team to solve the problem correctly (sound reasoning; a correct, "
        "complete program when one is due; useful to the agents that read it)? Answer with one number "
        "between 0 and 1."
    )


def edge_prompt(parent: str, child: str, team: str, context: str, parent_output: str, child_output: str) -> str:
    return (
        f"Agents `{parent}` and `{child}` in {team}; `{child}` works from what `{parent}` wrote.\n\n"
        f"=== TASK ===\n{clip(context, 2000)}\n\n=== {parent} REPLY ===\n{clip(parent_output, 2500)}\n\n"
        f"=== {child} REPLY ===\n{clip(child_output, 2500)}\n=== END REPLIES ===\n\n"
        f"How well do these two replies work together (does `{child}` use and correct what `{parent}` "
        "gave it, are they consistent)? Answer with one number between 0 and 1."
    )


async def probe_outputs(
    judge: Judge, pools: Mapping[str, Sequence[str]], contexts: Mapping[str, Sequence[str]], limit: asyncio.Semaphore
) -> dict[str, list[list[str]]]:
    """Each distinct (prompt, context) probed once on the task model; '' for a failed probe."""
    keys = sorted({(pools[role][k], context) for role in pools for k in range(len(pools[role]))
                   for context in contexts[role]})
    replies = await gather_limited(limit, [judge.probe(prompt, context) for prompt, context in keys])
    found = {key: reply or "" for key, reply in zip(keys, replies, strict=True)}
    return {role: [[found[(prompt, context)] for context in contexts[role]] for prompt in pools[role]]
            for role in pools}


async def judge_rewards(
    judge: Judge,
    graph: TeamGraph,
    team: str,
    contexts: Mapping[str, Sequence[str]],
    outputs: Mapping[str, list[list[str]]],
    demos: Mapping[str, Demos],
    *,
    demo_limit: int,
    limit: asyncio.Semaphore,
) -> Rewards:
    """Node, edge and diagonal rewards averaged over contexts."""
    node_jobs: list[tuple[str, int, int]] = [(role, k, c) for role in graph.roles
                                             for k in range(len(outputs[role])) for c in range(len(contexts[role]))]
    node_scores = await gather_limited(limit, [
        judge.score(node_prompt(role, team, contexts[role][c], outputs[role][k][c], demos.get(role), demo_limit))
        for role, k, c in node_jobs])
    node: dict[str, list[list[float | None]]] = {r: [[] for _ in outputs[r]] for r in graph.roles}
    for (role, k, _), score in zip(node_jobs, node_scores, strict=True):
        node[role][k].append(score)
    pairs: list[tuple[str, str]] = list(graph.edges)
    diagonal_roles = [graph.roles[0]] if graph.peers else []
    edge_jobs: list[tuple[tuple[str, str], int, int, int]] = []
    for parent, child in pairs:
        shared = min(len(contexts[parent]), len(contexts[child]))
        edge_jobs += [((parent, child), k, m, c) for k in range(len(outputs[parent]))
                      for m in range(len(outputs[child])) for c in range(shared)]
    for role in diagonal_roles:
        edge_jobs += [((role, role), k, k, c) for k in range(len(outputs[role])) for c in range(len(contexts[role]))]
    edge_scores = await gather_limited(limit, [
        judge.score(edge_prompt(parent, child, team, contexts[parent][c], outputs[parent][k][c],
                                outputs[child][m][c]))
        for (parent, child), k, m, c in edge_jobs])
    raw_edges: dict[tuple[str, str, int, int], list[float | None]] = {}
    for ((parent, child), k, m, _), score in zip(edge_jobs, edge_scores, strict=True):
        raw_edges.setdefault((parent, child, k, m), []).append(score)
    edge = {(p, c): [[_mean(raw_edges.get((p, c, k, m), [])) for m in range(len(outputs[c]))]
                     for k in range(len(outputs[p]))] for p, c in pairs}
    diagonal = {r: [_mean(raw_edges.get((r, r, k, k), [])) for k in range(len(outputs[r]))] for r in diagonal_roles}
    return Rewards({r: [_mean(v) for v in node[r]] for r in graph.roles}, edge, diagonal, outputs)


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
    assignment: Mapping[str, int],
    solved_fraction: float | None,
    *,
    positive_threshold: float,
    negative_threshold: float,
    keep: int,
) -> list[dict[str, Any]]:
    """The rule-based critic (no model call): the chosen candidate's output becomes a positive
    demo when the assignment solved at least half its rows and its node reward is high; the
    worst-rated candidate's output becomes a negative demo when its reward is low."""
    notes = []
    for role, chosen in assignment.items():
        node = rewards.node[role]
        demo = demos.setdefault(role, Demos())
        output = next((o for o in rewards.outputs[role][chosen] if o), "")
        good = solved_fraction is not None and solved_fraction >= 0.5 and node[chosen] >= positive_threshold
        if good and demo.add("positive", output, keep):
            notes.append({"role": role, "polarity": "positive", "candidate": chosen})
        worst = min(range(len(node)), key=lambda k: (node[k], k))
        worst_output = next((o for o in rewards.outputs[role][worst] if o), "")
        if node[worst] <= negative_threshold and demo.add("negative", worst_output, keep):
            notes.append({"role": role, "polarity": "negative", "candidate": worst})
    return notes
