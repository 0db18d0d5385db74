"""MASPO: joint prompt optimization by per-role coordinate ascent with an evolutionary beam
(reference: ``optimizers/maspo`` of MAS-PromptBench; fidelity sheet: ``docs/methods/maspo.md``).

The roles are swept producers first (``TeamGraph.sweep_order``). A visit of a role refreshes its
beam (when it was searched before), then runs up to ``rounds_per_turn`` depth steps. A depth
step, per beam node (at most ``beam_width``, each with its own minibatch):

1. a minibatch of train rows: the predecessors' misalignment cases (at most ``injection`` of
   them sampled), the rest drawn at random from the other rows;
2. the parent team (the global best prompts, this role := the node's prompt) runs on it
   (charged; a fresh run even when that team ran the row before);
3. the parent runs are split into ``offspring`` parts; the reflection model rewrites the role's
   prompt from each part's (problem, role context, role output) samples, between ``<prompt>``
   tags; a missing tag or a cut reply keeps the old prompt;
4. each distinct new prompt runs on the same rows with the parent's seeds (paired); it is
   scored by local validity (forced A/B judge on the role's own replies), lookahead (the same
   on the successor's replies) and the global outcome (paired win rate vs the parent);
5. a child with a positive joint score joins the beam with cumulative = parent's + joint, any
   other proposal carries the parent; the beam keeps the ``beam_width`` best; when the step's
   best cumulative beats the role's best, that prompt becomes the role's global best (the
   incumbent changes and is committed to the learning curve) and the role's misalignment
   buffer takes the cases mined for it.

Every rollout that fits is run: a minibatch is cut to what is left of the budget, so the budget
is used to the end. Stops: ``maximum_search_depth`` (every role searched that deep) or
``budget``. Judge calls are not rollouts: counted in ``metadata["uncharged_calls"]``.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optimizers.base import OptimizationResult, OptimizeContext, Optimizer
from optimizers.candidate import Candidate
from optimizers.evaluator import Rollout
from optimizers.judge import JUDGE_MODELS, judge_from_context
from optimizers.maspo.prompts import (
    compare_prompt,
    extract_prompt,
    proposal_prompt,
    proposer_sample,
    role_replies,
)
from optimizers.maspo.search import (
    UPDATE_MARGIN,
    BeamNode,
    Case,
    Weights,
    compose_minibatch,
    mine_misalignment,
    top_beam,
    win_rate,
)
from optimizers.reflection import ReflectionModel, RolloutGuard, gather_limited, params_from, record_step
from optimizers.registry import register_optimizer
from optimizers.surfaces import NO_SYSTEM
from optimizers.team_graph import TeamGraph, infer_team_graph


@dataclass(frozen=True, slots=True)
class MASPOParams:
    """Knobs (conf/method/maspo.yaml). Defaults follow the reference's MASPO settings."""

    beam_width: int = 2
    offspring: int = 2  # K_sub: proposals per beam node, one per half of the parent runs
    minibatch: int = 10
    maximum_search_depth: int = 9  # depth steps per role (the paper's table says 3)
    rounds_per_turn: int = 3  # depth steps per visit of a role
    misalignment_cap: int = 3  # cases kept per role
    injection: int = 5  # hard cases put into a successor's minibatch
    local_weight: float = 0.4
    lookahead_weight: float = 0.4
    global_weight: float = 0.2
    fallback_local_weight: float = 0.7
    fallback_global_weight: float = 0.3
    offset: float = 0.5
    proposal_temperature: float = 0.7
    judge_model: str = "reflection"  # reflection | task
    judge_temperature: float = 0.0
    judge_max_tokens: int | None = None  # None: the reflection decoding's limit
    concurrency: int = 4  # judge calls in flight (the reference's reflection_inflight)
    reflection_inflight: int = 4  # proposal calls in flight
    rng_seed_base: int = 0  # minibatches drawn with Random(base + seed)
    max_unusable_rollouts: int = 0

    def check(self) -> None:
        if min(self.beam_width, self.offspring, self.minibatch, self.rounds_per_turn, self.concurrency,
               self.reflection_inflight) < 1:
            raise ValueError("maspo: beam_width, offspring, minibatch, rounds_per_turn and concurrency must be >= 1")
        if self.maximum_search_depth < 0 or self.misalignment_cap < 0 or self.injection < 0:
            raise ValueError("maspo: maximum_search_depth, misalignment_cap and injection must be >= 0")
        if self.judge_model not in JUDGE_MODELS:
            raise ValueError(f"maspo: judge_model must be one of {', '.join(JUDGE_MODELS)}")

    @property
    def weights(self) -> Weights:
        return Weights(self.local_weight, self.lookahead_weight, self.global_weight, self.fallback_local_weight,
                       self.fallback_global_weight, self.offset)


@register_optimizer("maspo")
class MASPOOptimizer(Optimizer):
    # 2: issue 20 (forced A/B verdicts, reference proposer input, per-node minibatches, paired
    # seeds and fresh parent runs, duplicate beam nodes, budget used to the end, curve commits).
    # 3: issue 31 (no system message for proposer and judge; a role's last three replies taken
    # before empty ones are dropped; the seed's first runs committed).
    version = "3"

    @classmethod
    def check_params(cls, params: Mapping[str, Any]) -> None:
        params_from(MASPOParams, params, "maspo")

    async def optimize(
        self, seed: Candidate, *, train: Sequence[str], val: Sequence[str], ctx: OptimizeContext
    ) -> OptimizationResult:
        params: MASPOParams = params_from(MASPOParams, ctx.method_params, "maspo")
        return await _Run(seed, list(train), ctx, params).go()


@dataclass(frozen=True, slots=True)
class Scored:
    prompt: str
    local: float | None
    lookahead: float | None
    global_: float | None
    joint: float
    mean: float | None  # the candidate's mean score on its rows
    cases: tuple[Case, ...]
    rows: tuple[str, ...] = ()

    def row(self) -> dict[str, Any]:
        return {"local": self.local, "lookahead": self.lookahead, "global": self.global_,
                "joint": round(self.joint, 6), "rows": list(self.rows),
                "misaligned": [c.problem_id for c in self.cases]}


class _Run:
    def __init__(self, seed: Candidate, train: list[str], ctx: OptimizeContext, params: MASPOParams) -> None:
        self.seed = seed
        self.train = train
        self.ctx = ctx
        self.params = params
        self.rng = random.Random(params.rng_seed_base + ctx.seed)
        self.roles = sorted(seed.roles())
        self.reflection = ReflectionModel.from_context(ctx, "maspo")
        # As the reference, the proposer and the judge send no system message.
        self.judge = judge_from_context(ctx, "maspo", model=params.judge_model, temperature=params.judge_temperature,
                                        max_tokens=params.judge_max_tokens, judge_system=NO_SYSTEM)
        self.guard = RolloutGuard("maspo", params.max_unusable_rollouts)
        self.judge_limit = asyncio.Semaphore(params.concurrency)
        self.reflect_limit = asyncio.Semaphore(params.reflection_inflight)
        self.best: dict[str, str] = seed.roles()
        self.best_overall = {role: BeamNode(self.best[role]) for role in self.roles}
        self.beams = {role: [BeamNode(self.best[role])] for role in self.roles}
        self.depth = {role: 0 for role in self.roles}
        self.buffers: dict[str, list[Case]] = {role: [] for role in self.roles}
        self.history: list[dict[str, Any]] = []
        self.graph: TeamGraph | None = None
        self.step_number = 0  # steps and refreshes so far; keys each one's paired seeds
        self.turns: dict[tuple[str, str, str], int] = {}
        self.first_runs: tuple[list[str], list[Rollout]] | None = None

    # ---------------------------------------------------------------- plumbing

    def bundle(self, role: str, prompt: str) -> Candidate:
        """The global best team with ``role`` := ``prompt``."""
        prompts = {**self.best, role: prompt}
        changed = {f"role/{r}": text for r, text in prompts.items() if text != self.seed.components[f"role/{r}"]}
        return self.seed.with_components(changed) if changed else self.seed

    @property
    def pairing(self) -> str:
        return f"maspo/{self.step_number}"

    async def run(self, candidate: Candidate, rows: Sequence[str]) -> list[Rollout]:
        """Charged rollouts with this step's paired seeds. A team that runs a row again in the
        same step gets the next turn (a fresh seed), as the reference's session counts turns."""
        pairing = self.pairing
        by_turn: dict[int, list[str]] = {}
        for row in rows:
            key = (pairing, candidate.id, row)
            turn = self.turns.get(key, 0)
            self.turns[key] = turn + 1
            by_turn.setdefault(turn, []).append(row)
        runs: dict[str, Rollout] = {}
        for turn, batch in by_turn.items():
            done = await self.ctx.evaluator.evaluate(candidate, batch, phase="train", sample=turn, pairing=pairing)
            runs.update(zip(batch, done, strict=True))
        rollouts = [runs[row] for row in rows]
        self.guard.check(rollouts)
        return rollouts

    def left(self) -> int:
        return self.ctx.budget.remaining

    def _note(self, row: dict[str, Any]) -> None:
        row = {**row, "step": self.step_number,
               "uncharged_calls": sum(c["calls"] for c in self.judge.uncharged_calls().values())}
        record_step(self.ctx, "maspo", self.history, row, {
            "best": self.best, "best_overall": {r: n.to_dict() for r, n in self.best_overall.items()},
            "depth": self.depth, "beams": {r: [n.to_dict() for n in b] for r, b in self.beams.items()},
            "buffers": {r: [c.to_dict() for c in b] for r, b in self.buffers.items()}})

    def _commit(self, score: float | None) -> None:
        self.ctx.commit_incumbent(self.bundle(self.roles[0], self.best[self.roles[0]]), score)

    # ---------------------------------------------------------------- lifecycle

    async def go(self) -> OptimizationResult:
        p = self.params
        if p.maximum_search_depth == 0 or not self.train:
            return self._result("maximum_search_depth")
        while self.left() > 0 and any(self.depth[r] < p.maximum_search_depth for r in self.roles):
            for role in await self.order():
                if self.left() <= 0:
                    break
                if 0 < self.depth[role] < p.maximum_search_depth:
                    self.step_number += 1
                    await self.refresh(role)
                for _ in range(p.rounds_per_turn):
                    if self.left() <= 0 or self.depth[role] >= p.maximum_search_depth:
                        break
                    self.step_number += 1
                    await self.step(role)
        return self._result("budget" if self.left() <= 0 else "maximum_search_depth")

    async def order(self) -> list[str]:
        """The sweep order. The team's structure is read from the seed's first runs, which are the
        first step's first parent runs (its minibatch depends on no role: no buffer is filled yet)."""
        if self.graph is None:
            rows, _ = compose_minibatch(self.train, self.params.minibatch, {}, [], injection=self.params.injection,
                                        rng=self.rng)
            rows = rows[: self.left()]
            self.step_number += 1
            runs = await self.run(self.seed, rows)
            self.step_number -= 1  # the first step runs under this number again and reuses them
            self.first_runs = (rows, runs)
            self._commit(_mean(runs))  # the curve starts at the seed's measured score
            self.graph = infer_team_graph(self.roles, [r.trace for r in runs if r.usable],
                                          has_handoff=any(k.startswith("protocol/") for k in self.seed.components))
        return self.graph.sweep_order()

    def predecessors(self, role: str) -> list[str]:
        assert self.graph is not None
        if self.graph.kind == "star":  # the reference wires every worker after the manager, too
            return self.graph.predecessors(role) or [self.graph.roles[0]]
        return self.graph.predecessors(role)

    def minibatch(self, role: str) -> tuple[list[str], list[str], list[Rollout] | None]:
        """``(rows, injected, parent runs already made)`` for the next beam node."""
        if self.first_runs is not None:
            rows, runs = self.first_runs
            self.first_runs = None
            return rows, [], runs
        rows, injected = compose_minibatch(self.train, self.params.minibatch, self.buffers, self.predecessors(role),
                                           injection=self.params.injection, rng=self.rng)
        return rows[: self.left()], injected, None

    async def step(self, role: str) -> None:
        assert self.graph is not None
        p = self.params
        children: list[BeamNode] = []
        step_best = self.best_overall[role]
        step_cases: tuple[Case, ...] = ()
        step_mean: float | None = None
        nodes_log: list[dict[str, Any]] = []
        for node in list(self.beams[role]):
            if self.left() <= 0:
                break
            rows, injected, made = self.minibatch(role)
            parent = self.bundle(role, node.prompt)
            parent_runs = made if made is not None else await self.run(parent, rows)
            proposals = await self.propose(role, node.prompt, parent_runs)
            planned: list[tuple[str, list[str]]] = []
            left = self.left()
            for prompt in proposals:
                if prompt != node.prompt:
                    granted = min(len(rows), left)
                    left -= granted
                    planned.append((prompt, rows[:granted]))
            child_runs = await asyncio.gather(*(self.run(self.bundle(role, prompt), cut) for prompt, cut in planned))
            scored_by_prompt = {}
            for (prompt, cut), runs in zip(planned, child_runs, strict=True):
                scored_by_prompt[prompt] = await self.score(role, prompt, cut, parent_runs[: len(cut)], runs)
            node_best = (node.prompt, 0.0, (), None)
            log: list[dict[str, Any]] = []
            for prompt in proposals:
                scored = scored_by_prompt.get(prompt)
                if scored is None:  # identical to the parent: scores 0 without rollouts
                    children.append(node)
                    log.append({"identical_to_parent": True, "joint": 0.0})
                    continue
                log.append(scored.row())
                if scored.joint > 0:
                    children.append(BeamNode(prompt, node.cumulative + scored.joint))
                    if scored.joint > node_best[1]:
                        node_best = (prompt, scored.joint, scored.cases, scored.mean)
                else:
                    children.append(node)
            if not proposals:
                children.append(node)
            node_cumulative = node.cumulative + max(0.0, node_best[1])
            if node_cumulative > step_best.cumulative:
                step_best = BeamNode(node_best[0], node_cumulative)
                step_cases, step_mean = node_best[2], node_best[3]
            nodes_log.append({"parent_cumulative": node.cumulative, "rows": rows, "injected": injected,
                              "parent_score": _mean(parent_runs), "candidates": log})
        if children:
            self.beams[role] = top_beam(children, p.beam_width)
        updated = step_best.cumulative > self.best_overall[role].cumulative + UPDATE_MARGIN
        if updated:
            self.best_overall[role] = step_best
            self.best[role] = step_best.prompt
            if step_cases:
                self.buffers[role] = list(step_cases)
        self.depth[role] += 1
        self._note({"event": "step", "role": role, "depth": self.depth[role], "nodes": nodes_log,
                    "best_updated": updated, "best_cumulative": self.best_overall[role].cumulative,
                    "buffer": [c.problem_id for c in self.buffers[role]]})
        if updated:
            self._commit(step_mean)

    async def propose(self, role: str, prompt: str, runs: Sequence[Rollout]) -> list[str]:
        """One rewrite per half of the parent runs (halves reused when ``offspring`` > 2);
        distinct prompts, in half order."""
        assert self.graph is not None
        middle = len(runs) // 2
        halves = [list(runs[:middle]) or list(runs), list(runs[middle:]) or list(runs)]
        parts = (halves * self.params.offspring)[: self.params.offspring]
        terminal = self.graph.successor(role) is None
        kind = self.graph.kind

        async def rewrite(part: Sequence[Rollout]) -> str:
            samples = proposer_sample(part, role)
            ask = proposal_prompt(role, prompt, samples, kind=kind, terminal=terminal, shared=len(self.roles) == 1)
            reply = await self.reflection.ask(ask, purpose="propose", temperature=self.params.proposal_temperature,
                                              system=NO_SYSTEM)
            return extract_prompt(reply) or prompt

        rewritten = await gather_limited(self.reflect_limit, [rewrite(part) for part in parts])
        return list(dict.fromkeys(rewritten))

    async def _verdicts(self, role: str, pairs: Sequence[tuple[Rollout, Rollout]]) -> list[float]:
        """Forced A/B verdicts on ``role``'s replies, the candidate's (first of each pair) as A."""
        jobs = []
        for child, parent in pairs:
            question = next((str(m.get("content", "")) for m in parent.trace if m.get("kind") == "user"), "")

            def render(a: str, b: str, question: str = question) -> str:
                return compare_prompt(role, question, a, b)

            jobs.append(self.judge.prefer(role_replies(child.trace, role), role_replies(parent.trace, role), render))
        return await gather_limited(self.judge_limit, jobs)

    async def score(self, role: str, prompt: str, rows: Sequence[str], parent: Sequence[Rollout],
                    child: Sequence[Rollout]) -> Scored:
        assert self.graph is not None
        weights = self.params.weights
        successor = self.graph.successor(role)
        kept = [(row, c, p) for row, c, p in zip(rows, child, parent, strict=True) if c.usable and p.usable]
        mean = sum(c.score for _, c, _ in kept) / len(kept) if kept else None
        if not kept:
            return Scored(prompt, None, None, None, 0.0, mean, (), tuple(rows))
        child_scores = [c.score for _, c, _ in kept]
        parent_scores = [p.score for _, _, p in kept]
        global_ = win_rate(child_scores, parent_scores)
        if successor is None:
            return Scored(prompt, None, None, global_, weights.joint(local=None, lookahead=None, global_=global_,
                                                                     terminal=True), mean, (), tuple(rows))
        local_list = await self._verdicts(role, [(c, p) for _, c, p in kept])
        local = sum(local_list) / len(local_list)
        spoke = [i for i, (_, c, p) in enumerate(kept)
                 if role_replies(c.trace, successor) and role_replies(p.trace, successor)]
        judged = await self._verdicts(successor, [(kept[i][1], kept[i][2]) for i in spoke])
        lookahead_by_row = dict(zip(spoke, judged, strict=True))
        lookahead = sum(judged) / len(judged) if judged else None
        joint = weights.joint(local=local, lookahead=lookahead, global_=global_, terminal=False)
        cases = mine_misalignment([row for row, _, _ in kept], local_list, lookahead_by_row, child_scores,
                                  parent_scores, cap=self.params.misalignment_cap)
        return Scored(prompt, local, lookahead, global_, joint, mean, tuple(cases), tuple(rows))

    async def refresh(self, role: str) -> None:
        """Re-score the beam's non-anchor nodes against the anchor (the role's global best) on a
        fresh minibatch (no lookahead), restart the cumulative scores, re-rank, and shift the
        anchor when another node now leads with a positive score."""
        p = self.params
        anchor = self.best[role]
        others = [n for n in self.beams[role] if n.prompt.strip() != anchor.strip()]
        reset = [BeamNode(anchor), *(BeamNode(n.prompt) for n in others)][: p.beam_width]
        if not others:
            return self._skip_refresh(role, anchor, reset, "no-non-anchor-nodes")
        fresh = self.rng.sample(self.train, min(p.minibatch, len(self.train)))
        if self.left() < len(fresh) + 1:  # the anchor's runs alone would leave nothing to compare
            return self._skip_refresh(role, anchor, reset, "budget-tail")
        anchor_runs = await self.run(self.bundle(role, anchor), fresh)
        refreshed = [BeamNode(anchor)]
        means: dict[int, float | None] = {}
        log = []
        for node in others:
            cut = fresh[: min(len(fresh), self.left())]
            if not cut:
                refreshed.append(BeamNode(node.prompt))
                log.append({"rows": [], "score": 0.0})
                continue
            node_runs = await self.run(self.bundle(role, node.prompt), cut)
            scored = await self.rescore(role, node.prompt, cut, anchor_runs[: len(cut)], node_runs)
            means[len(refreshed)] = scored.mean
            refreshed.append(BeamNode(node.prompt, scored.joint))
            log.append({**scored.row(), "score": round(scored.joint, 6)})
        order = sorted(range(len(refreshed)), key=lambda i: -refreshed[i].cumulative)
        self.beams[role] = [refreshed[i] for i in order][: p.beam_width]
        leader = refreshed[order[0]]
        self.best_overall[role] = leader
        shifted = leader.cumulative > UPDATE_MARGIN and leader.prompt.strip() != anchor.strip()
        if shifted:
            self.best[role] = leader.prompt
        self._note({"event": "refresh", "role": role, "depth": self.depth[role], "rows": fresh, "nodes": log,
                    "anchor_shifted": shifted})
        if shifted:
            self._commit(means.get(order[0]))

    def _skip_refresh(self, role: str, anchor: str, reset: list[BeamNode], why: str) -> None:
        self.beams[role] = reset
        self.best_overall[role] = BeamNode(anchor)
        self._note({"event": "refresh", "role": role, "depth": self.depth[role], "rows": [], "nodes": [],
                    "anchor_shifted": False, "skipped": why})

    async def rescore(self, role: str, prompt: str, rows: Sequence[str], anchor: Sequence[Rollout],
                      node: Sequence[Rollout]) -> Scored:
        """A beam node against the anchor: local and global credit only (terminal: global)."""
        assert self.graph is not None
        kept = [(row, c, a) for row, c, a in zip(rows, node, anchor, strict=True) if c.usable and a.usable]
        mean = sum(c.score for _, c, _ in kept) / len(kept) if kept else None
        if not kept:
            return Scored(prompt, None, None, None, 0.0, mean, (), tuple(rows))
        global_ = win_rate([c.score for _, c, _ in kept], [a.score for _, _, a in kept])
        local = None
        if self.graph.successor(role) is not None:
            verdicts = await self._verdicts(role, [(c, a) for _, c, a in kept])
            local = sum(verdicts) / len(verdicts)
        joint = self.params.weights.joint(local=local, lookahead=None, global_=global_, terminal=local is None)
        return Scored(prompt, local, None, global_, joint, mean, (), tuple(rows))

    def _result(self, stop: str) -> OptimizationResult:
        best = self.bundle(self.roles[0], self.best[self.roles[0]])
        graph = self.graph
        metadata = {
            "depth": dict(self.depth),
            "best_cumulative": {r: n.cumulative for r, n in self.best_overall.items()},
            "misalignment_buffers": {r: [c.to_dict() for c in b] for r, b in self.buffers.items()},
            "charged_rollouts": self.ctx.budget.charged,
            "graph": None if graph is None else {"kind": graph.kind, "roles": list(graph.roles),
                                                 "sweep": graph.sweep_order(),
                                                 "edges": [list(e) for e in graph.edges]},
            "reflection": self.reflection.usage(),
            "uncharged_calls": self.judge.uncharged_calls(),
            "params": {k: getattr(self.params, k) for k in self.params.__dataclass_fields__},
        }
        return OptimizationResult(best=best, stop_reason=stop, history=self.history, metadata=metadata)


def _mean(rollouts: Sequence[Rollout]) -> float | None:
    usable = [r.score for r in rollouts if r.usable]
    return sum(usable) / len(usable) if usable else None
