"""MASPO: joint prompt optimization by per-role coordinate ascent with an evolutionary beam.

The roles are swept producers first (``TeamGraph.sweep_order``). A visit of a role refreshes its
beam (after the first visit), then runs up to ``rounds_per_turn`` depth steps. A depth step, per
beam node (at most ``beam_width``):

1. a minibatch of train rows: up to ``injection`` hard cases from the misalignment buffers of
   the role's predecessors, the rest drawn at random;
2. the parent team (the global best prompts, this role := the node's prompt) runs on it;
3. the parent runs are split into ``offspring`` parts; the reflection model rewrites the role's
   prompt from each part (text between ``<prompt>`` tags; no tags: the old prompt);
4. each distinct new prompt runs on the same rows; it is scored by local validity (pairwise
   judge on the role's own replies), lookahead (pairwise judge on the successor's replies) and
   the global outcome (paired win rate vs the parent), ``Weights``;
5. children with a positive joint score join the beam with cumulative = parent's + joint (a
   node without one is carried); the beam keeps the ``beam_width`` best; when the step's best
   cumulative beats the role's best, that prompt becomes the role's global best and the role's
   misalignment buffer is replaced by the cases mined for it.

Stops: ``maximum_search_depth`` (every role searched that deep) or ``budget`` (the next step
does not fit). Judge calls are not rollouts: counted in ``metadata["uncharged_calls"]``.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optimizers.base import OptimizationResult, OptimizeContext, Optimizer
from optimizers.candidate import Candidate
from optimizers.evaluator import Rollout
from optimizers.judge import JUDGE_MODELS, judge_from_context
from optimizers.maspo.search import (
    BeamNode,
    Case,
    Weights,
    compose_minibatch,
    mine_misalignment,
    top_beam,
    union_cases,
    win_rate,
)
from optimizers.reflection import (
    ReflectionModel,
    RolloutGuard,
    clip,
    gather_limited,
    outcome_line,
    params_from,
    record_step,
    task_text,
    team_description,
)
from optimizers.registry import register_optimizer
from optimizers.team_graph import TeamGraph, infer_team_graph, role_context, role_output

_PROMPT = re.compile(r"<prompt>\s*(.*?)\s*</prompt>", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class MASPOParams:
    """Knobs (conf/method/maspo.yaml). Defaults follow the reference's MASPO settings."""

    beam_width: int = 2
    offspring: int = 2  # K_sub: parts the parent runs are split into, one rewrite each
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
    concurrency: int = 12  # judge calls in flight
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
    global_: float
    joint: float
    cases: tuple[Case, ...]

    def row(self) -> dict[str, Any]:
        return {"local": self.local, "lookahead": self.lookahead, "global": self.global_,
                "joint": round(self.joint, 6), "misaligned": [c.problem_id for c in self.cases]}


class _BudgetSpent(Exception):
    """The next step does not fit in the rollout budget."""


class _Run:
    def __init__(self, seed: Candidate, train: list[str], ctx: OptimizeContext, params: MASPOParams) -> None:
        self.seed = seed
        self.train = train
        self.ctx = ctx
        self.params = params
        self.rng = random.Random(params.rng_seed_base + ctx.seed)
        self.roles = sorted(seed.roles())
        self.reflection = ReflectionModel.from_context(ctx, "maspo")
        self.judge = judge_from_context(ctx, "maspo", model=params.judge_model, temperature=params.judge_temperature,
                                        max_tokens=params.judge_max_tokens)
        self.guard = RolloutGuard("maspo", params.max_unusable_rollouts)
        self.judge_limit = asyncio.Semaphore(params.concurrency)
        self.reflect_limit = asyncio.Semaphore(params.reflection_inflight)
        self.best: dict[str, str] = seed.roles()
        self.best_cumulative = {role: 0.0 for role in self.roles}
        self.beams = {role: [BeamNode(self.best[role])] for role in self.roles}
        self.depth = {role: 0 for role in self.roles}
        self.buffers: dict[str, list[Case]] = {role: [] for role in self.roles}
        self.history: list[dict[str, Any]] = []
        self.graph: TeamGraph | None = None
        self.team = team_description(self.roles)
        self.first_batch: tuple[list[str], list[Rollout]] | None = None

    # ---------------------------------------------------------------- plumbing

    def bundle(self, role: str, prompt: str) -> Candidate:
        """The global best team with ``role`` := ``prompt``."""
        prompts = {**self.best, role: prompt}
        changed = {f"role/{r}": text for r, text in prompts.items() if text != self.seed.components[f"role/{r}"]}
        return self.seed.with_components(changed) if changed else self.seed

    async def run(self, candidate: Candidate, rows: Sequence[str]) -> list[Rollout]:
        """Charged rollouts (repeats are served free by the evaluator's cache)."""
        rollouts = await self.ctx.evaluator.evaluate(candidate, list(rows), phase="train")
        self.guard.check(rollouts)
        if any(r.budget_exhausted for r in rollouts):
            raise _BudgetSpent
        return rollouts

    def fits(self, rollouts: int) -> None:
        if self.ctx.budget.remaining < rollouts:
            raise _BudgetSpent

    def _note(self, row: dict[str, Any]) -> None:
        row = {**row, "uncharged_calls": sum(c["calls"] for c in self.judge.uncharged_calls().values())}
        record_step(self.ctx, "maspo", self.history, row, {
            "best": self.best, "best_cumulative": self.best_cumulative,
            "depth": self.depth, "beams": {r: [n.to_dict() for n in b] for r, b in self.beams.items()},
            "buffers": {r: [c.to_dict() for c in b] for r, b in self.buffers.items()}})

    # ---------------------------------------------------------------- lifecycle

    async def go(self) -> OptimizationResult:
        p = self.params
        stop = "maximum_search_depth"
        try:
            if p.maximum_search_depth == 0 or not self.train:
                return self._result(stop)
            size = min(p.minibatch, len(self.train))
            self.fits(size * (1 + p.offspring))  # the first step: the seed as parent plus its children
            # The first parent runs tell the team's structure (who speaks first, who follows).
            rows, _ = compose_minibatch(self.train, p.minibatch, [], injection=0, rng=self.rng)
            runs = await self.run(self.seed, rows)
            self.first_batch = (rows, runs)
            self.graph = infer_team_graph(self.roles, [r.trace for r in runs if r.usable],
                                          has_handoff=any(k.startswith("protocol/") for k in self.seed.components))
            self.team = team_description(list(self.graph.roles), self.graph.replicas)
            while any(self.depth[r] < p.maximum_search_depth for r in self.roles):
                for role in self.graph.sweep_order():
                    if self.depth[role] >= p.maximum_search_depth:
                        continue
                    if self.depth[role] > 0 and len(self.beams[role]) > 1:
                        self.fits(size * len(self.beams[role]))
                        await self.refresh(role)
                    for _ in range(p.rounds_per_turn):
                        if self.depth[role] >= p.maximum_search_depth:
                            break
                        if self.first_batch is None:
                            self.fits(size * (1 + p.offspring))
                        await self.step(role)
        except _BudgetSpent:
            stop = "budget"
        return self._result(stop)

    def minibatch(self, role: str) -> tuple[list[str], list[str]]:
        assert self.graph is not None
        if self.first_batch is not None:  # the seed's first runs are this step's parent runs
            return self.first_batch[0], []
        hard = union_cases(self.buffers, self.graph.predecessors(role))
        return compose_minibatch(self.train, self.params.minibatch, hard, injection=self.params.injection,
                                 rng=self.rng)

    async def step(self, role: str) -> None:
        assert self.graph is not None
        p = self.params
        rows, injected = self.minibatch(role)
        self.first_batch = None
        children: list[BeamNode] = []
        best_step: tuple[float, str, tuple[Case, ...]] | None = None
        rows_log: list[dict[str, Any]] = []
        for index, node in enumerate(self.beams[role]):
            if index > 0 and self.ctx.budget.remaining < len(rows) * (1 + p.offspring):
                break  # the anchor's step fits; the other beam nodes wait for budget
            parent = self.bundle(role, node.prompt)
            parent_runs = await self.run(parent, rows)
            proposals = await self.propose(role, node.prompt, parent_runs)
            scored: list[Scored] = []
            for prompt in proposals:
                if prompt == node.prompt:
                    scored.append(Scored(prompt, None, None, 0.5, 0.0, ()))  # no rollouts for a copy
                    continue
                child_runs = await self.run(self.bundle(role, prompt), rows)
                scored.append(await self.score(role, prompt, rows, parent_runs, child_runs))
            positive = [s for s in scored if s.joint > 0]
            children += [BeamNode(s.prompt, node.cumulative + s.joint) for s in positive] or [node]
            for s in positive:
                cumulative = node.cumulative + s.joint
                if best_step is None or cumulative > best_step[0]:
                    best_step = (cumulative, s.prompt, s.cases)
            rows_log.append({"node": index, "parent_cumulative": node.cumulative,
                             "parent_score": _mean(parent_runs), "candidates": [s.row() for s in scored]})
        self.beams[role] = top_beam(children, p.beam_width)
        updated = best_step is not None and best_step[0] > self.best_cumulative[role]
        if updated:
            assert best_step is not None
            self.best_cumulative[role], self.best[role] = best_step[0], best_step[1]
            self.buffers[role] = list(best_step[2])
        self.depth[role] += 1
        self._note({"event": "step", "role": role, "depth": self.depth[role], "minibatch": rows,
                    "injected": injected, "nodes": rows_log, "best_updated": updated,
                    "best_cumulative": self.best_cumulative[role],
                    "buffer": [c.problem_id for c in self.buffers[role]]})

    async def propose(self, role: str, prompt: str, runs: Sequence[Rollout]) -> list[str]:
        """One rewrite per part of the parent runs; distinct prompts, in part order."""
        usable = [r for r in runs if r.usable]
        parts = [usable[i:: self.params.offspring] for i in range(self.params.offspring)]
        parts = [part for part in parts if part]

        async def rewrite(part: Sequence[Rollout]) -> str:
            samples = "\n\n".join(
                f"### Problem {r.problem_id}\n{task_text(r.trace, 800)}\n\n#### Input of `{role}`\n"
                f"{clip(role_context(r.trace, role), 1200)}\n\n#### Reply of `{role}`\n"
                f"{role_output(r.trace, role, limit=1500)}\n\n#### Verdict\n{outcome_line(r)}" for r in part)
            ask = (f"Improve the system prompt of the `{role}` agent in {self.team}, so that its replies help the "
                   f"agents after it and the team's final program pass the hidden tests.\n\nCurrent prompt:\n"
                   f"<prompt>\n{prompt}\n</prompt>\n\nRuns with the current prompt:\n{samples}\n\n"
                   "Return the complete improved prompt between <prompt> and </prompt>.")
            reply = await self.reflection.ask(ask, purpose="propose", temperature=self.params.proposal_temperature)
            found = _PROMPT.findall(reply or "")
            return found[-1].strip() if found and found[-1].strip() else prompt

        rewritten = await gather_limited(self.reflect_limit, [rewrite(part) for part in parts])
        return list(dict.fromkeys(rewritten))

    async def score(self, role: str, prompt: str, rows: Sequence[str], parent: Sequence[Rollout],
                    child: Sequence[Rollout]) -> Scored:
        assert self.graph is not None
        weights = self.params.weights
        successor = self.graph.successor(role)
        terminal = successor is None
        pairs = [(row, c, p) for row, c, p in zip(rows, child, parent, strict=True) if c.usable and p.usable]
        child_scores = [c.score for _, c, _ in pairs]
        parent_scores = [p.score for _, _, p in pairs]
        global_ = win_rate(child_scores, parent_scores)
        if terminal or not pairs:
            return Scored(prompt, None, None, global_, weights.joint(local=None, lookahead=None, global_=global_,
                                                                     terminal=True), ())

        def verdicts(of: str) -> list[Any]:
            jobs = []
            for _, c, p in pairs:
                question = f"Problem:\n{task_text(c.trace, 1500)}"
                jobs.append(self.judge.prefer(question, role_output(c.trace, of), role_output(p.trace, of),
                                              what=f"the reply of the `{of}` agent"))
            return jobs

        local_list = await gather_limited(self.judge_limit, verdicts(role))
        spoke = [bool(role_output(c.trace, successor)) and bool(role_output(p.trace, successor)) for _, c, p in pairs]
        lookahead_list: list[float | None] = [None] * len(pairs)
        if any(spoke):
            judged = await gather_limited(self.judge_limit, verdicts(successor))
            lookahead_list = [v if s else None for v, s in zip(judged, spoke, strict=True)]
        local = sum(local_list) / len(local_list)
        seen = [v for v in lookahead_list if v is not None]
        lookahead = sum(seen) / len(seen) if seen else None
        joint = weights.joint(local=local, lookahead=lookahead, global_=global_, terminal=False)
        cases = mine_misalignment([row for row, _, _ in pairs], local_list, lookahead_list, child_scores,
                                  parent_scores, cap=self.params.misalignment_cap)
        return Scored(prompt, local, lookahead, global_, joint, tuple(cases))

    async def refresh(self, role: str) -> None:
        """Re-score the non-anchor beam nodes against the anchor on a fresh minibatch (no
        lookahead), reset cumulative scores and re-rank; the new anchor is the role's best."""
        p = self.params
        rows, _ = compose_minibatch(self.train, p.minibatch, [], injection=0, rng=self.rng)
        anchor, *others = self.beams[role]
        anchor_runs = await self.run(self.bundle(role, anchor.prompt), rows)
        rescored = [BeamNode(anchor.prompt, 0.0)]
        rows_log = []
        for node in others:
            node_runs = await self.run(self.bundle(role, node.prompt), rows)
            pairs = [(c, a) for c, a in zip(node_runs, anchor_runs, strict=True) if c.usable and a.usable]
            global_ = win_rate([c.score for c, _ in pairs], [a.score for _, a in pairs])
            local = None
            if pairs and self.graph is not None and self.graph.successor(role) is not None:
                judged = await gather_limited(self.judge_limit, [
                    self.judge.prefer(f"Problem:\n{task_text(c.trace, 1500)}", role_output(c.trace, role),
                                      role_output(a.trace, role), what=f"the reply of the `{role}` agent")
                    for c, a in pairs])
                local = sum(judged) / len(judged)
            score = (p.weights.joint(local=local, lookahead=None, global_=global_, terminal=local is None))
            rescored.append(BeamNode(node.prompt, score))
            rows_log.append({"local": local, "global": global_, "score": round(score, 6)})
        self.beams[role] = top_beam(rescored, p.beam_width)
        new_anchor = self.beams[role][0]
        shifted = new_anchor.prompt != anchor.prompt
        if shifted:
            self.best[role] = new_anchor.prompt
        self.best_cumulative[role] = new_anchor.cumulative
        self._note({"event": "refresh", "role": role, "depth": self.depth[role], "minibatch": rows,
                    "nodes": rows_log, "anchor_shifted": shifted})

    def _result(self, stop: str) -> OptimizationResult:
        best = self.bundle(self.roles[0], self.best[self.roles[0]])
        graph = self.graph
        metadata = {
            "depth": dict(self.depth),
            "best_cumulative": dict(self.best_cumulative),
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
