"""MAPRO: multi-agent prompt optimization as maximum a posteriori inference.

Each role keeps a pool of candidate prompts (index 0 is always the incumbent's). A round:

1. contexts: each role's input in the incumbent's first ``scoring_batch`` train transcripts;
2. probes: every distinct pool prompt answers every context of its role once on the task model;
3. rewards: the task model judges each output (node reward, with the role's preference demos)
   and each parent/child pair of outputs (edge reward), averaged over contexts;
4. exact MAP over the team's prompt graph (``map_inference``; ties keep the incumbent);
5. the MAP team is evaluated on the train rows (charged) unless it is the incumbent, and
   becomes the incumbent if its mean beats the best by more than ``epsilon``;
6. the rule-based critic updates the demos; blame on the best's worst runs and mutation of
   each role's best prompt give the next pools.

Stops: ``patience`` (the last ``patience`` score deltas all <= 0), ``max_iters`` or ``budget``
(the next full evaluation does not fit). Judge and probe calls are not rollouts: never charged,
counted in ``metadata["uncharged_calls"]``. Resume: rollouts, reflection and judge calls are all
journaled, so a restarted job replays the same rounds without paying again.
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
from optimizers.judge import judge_from_context
from optimizers.mapro.map_inference import map_assignment
from optimizers.mapro.refine import Feedback, blame_feedback, initial_pools, mutate_pools
from optimizers.mapro.rewards import Demos, critic_update, factor_graph, judge_rewards, probe_outputs
from optimizers.reflection import (
    ReflectionModel,
    RolloutGuard,
    mean_score,
    params_from,
    record_step,
    team_description,
)
from optimizers.registry import register_optimizer
from optimizers.team_graph import TeamGraph, infer_team_graph, role_context


@dataclass(frozen=True, slots=True)
class MAPROParams:
    """Knobs (conf/method/mapro.yaml). Defaults follow the reference's MAPRO settings."""

    candidate_count: int = 5  # pool size per role, the incumbent's prompt included
    max_iterations: int = 8
    patience: int = 3  # stop when the last `patience` train-score deltas are all <= 0
    epsilon: float = 0.0  # a new assignment must beat the best train mean by more than this
    scoring_batch: int = 3  # incumbent transcripts whose role inputs are probed and judged
    evaluation_batch: int = 0  # train rows per evaluation; 0 = all train rows
    feedback_count: int = 3  # lowest-scoring runs of the best that are blamed
    use_demos: bool = True  # condition the node judge on the critic's preference demos
    demos_shown: int = 3
    demos_kept: int = 6  # per polarity
    positive_demo_threshold: float = 0.75
    negative_demo_threshold: float = 0.4
    pool_temperature: float = 0.7
    mutate_temperature: float = 0.7
    judge_temperature: float = 0.2
    judge_max_tokens: int = 8
    probe_temperature: float = 0.2
    probe_top_p: float = 0.9
    probe_max_tokens: int = 768
    concurrency: int = 12  # judge, probe and reflection calls in flight
    rng_seed_base: int = 0  # evaluation rows (when evaluation_batch > 0) drawn with Random(base + seed)
    max_unusable_rollouts: int = 0

    def check(self) -> None:
        if self.candidate_count < 1 or self.max_iterations < 0 or self.patience < 1:
            raise ValueError("mapro: candidate_count and patience must be >= 1, max_iterations >= 0")
        if self.scoring_batch < 1 or self.feedback_count < 0 or self.evaluation_batch < 0:
            raise ValueError("mapro: scoring_batch must be >= 1, feedback_count and evaluation_batch >= 0")
        if self.concurrency < 1 or self.judge_max_tokens < 1 or self.probe_max_tokens < 1:
            raise ValueError("mapro: concurrency and token limits must be >= 1")


@register_optimizer("mapro")
class MAPROOptimizer(Optimizer):
    @classmethod
    def check_params(cls, params: Mapping[str, Any]) -> None:
        params_from(MAPROParams, params, "mapro")

    async def optimize(
        self, seed: Candidate, *, train: Sequence[str], val: Sequence[str], ctx: OptimizeContext
    ) -> OptimizationResult:
        params: MAPROParams = params_from(MAPROParams, ctx.method_params, "mapro")
        return await _Run(seed, list(train), ctx, params).go()


class _Run:
    def __init__(self, seed: Candidate, train: list[str], ctx: OptimizeContext, params: MAPROParams) -> None:
        self.seed = seed
        self.ctx = ctx
        self.params = params
        rows = train
        if params.evaluation_batch:
            rng = random.Random(params.rng_seed_base + ctx.seed)
            rows = rng.sample(train, min(len(train), params.evaluation_batch))
        self.rows = rows
        self.roles = sorted(seed.roles())
        self.reflection = ReflectionModel.from_context(ctx, "mapro")
        self.judge = judge_from_context(
            ctx, "mapro", model="task", temperature=params.judge_temperature, max_tokens=params.judge_max_tokens,
            probe={"temperature": params.probe_temperature, "top_p": params.probe_top_p,
                   "max_tokens": params.probe_max_tokens})
        self.guard = RolloutGuard("mapro", params.max_unusable_rollouts)
        self.limit = asyncio.Semaphore(params.concurrency)
        self.history: list[dict[str, Any]] = []
        self.demos: dict[str, Demos] = {role: Demos() for role in self.roles}
        self.graph: TeamGraph | None = None
        self.rounds = 0

    async def _evaluate(self, candidate: Candidate) -> tuple[list[Rollout], float | None]:
        rollouts = await self.ctx.evaluator.evaluate(candidate, self.rows, phase="train")
        self.guard.check(rollouts)
        return rollouts, mean_score(rollouts)

    def _note(self, row: dict[str, Any], state: Mapping[str, Any]) -> None:
        # Judge/probe calls so far ride along, so trackers chart them against charged rollouts.
        row = {**row, "uncharged_calls": sum(c["calls"] for c in self.judge.uncharged_calls().values())}
        record_step(self.ctx, "mapro", self.history, row, state)

    async def go(self) -> OptimizationResult:
        p = self.params
        if self.ctx.budget.remaining < len(self.rows):
            return self._result(self.seed, None, "budget")
        best_rollouts, best_score = await self._evaluate(self.seed)
        if best_score is None:
            return self._result(self.seed, None, "budget")
        best = self.seed
        usable = [r.trace for r in best_rollouts if r.usable][: p.scoring_batch]
        self.graph = graph = infer_team_graph(
            self.roles, usable, has_handoff=any(k.startswith("protocol/") for k in self.seed.components))
        team = team_description(list(graph.roles), graph.replicas)
        pools = await initial_pools(self.reflection, self.seed.roles(), graph.roles, size=p.candidate_count,
                                    team=team, temperature=p.pool_temperature)
        self._note({"event": "seed", "candidate_id": self.seed.id, "train_score": best_score},
                   self._state(pools, best))
        deltas: list[float] = []
        stop = "max_iters"
        for round_number in range(1, p.max_iterations + 1):
            if self.ctx.budget.remaining < len(self.rows):
                stop = "budget"
                break
            self.rounds = round_number
            traces = [r.trace for r in best_rollouts if r.usable][: p.scoring_batch]
            contexts = {role: [role_context(t, role) for t in traces] or [""] for role in graph.roles}
            outputs = await probe_outputs(self.judge, pools, contexts, self.limit)
            rewards = await judge_rewards(self.judge, graph, team, contexts, outputs,
                                          self.demos if p.use_demos else {}, demo_limit=p.demos_shown,
                                          limit=self.limit)
            assignment, log_quality = map_assignment(factor_graph(graph, rewards))
            chosen = best.with_components({f"role/{role}": pools[role][k] for role, k in assignment.items()})
            if chosen == best:
                chosen, rollouts, score = best, best_rollouts, best_score
            else:
                rollouts, score = await self._evaluate(chosen)
                if score is None:
                    stop = "budget"
                    break
            delta = score - best_score
            improved = chosen != best and delta > p.epsilon
            if improved:
                best, best_rollouts, best_score = chosen, rollouts, score
            deltas.append(delta)
            usable_scores = [r.score for r in rollouts if r.usable]
            solved = sum(1 for s in usable_scores if s >= 1.0) / len(usable_scores) if usable_scores else None
            critic = critic_update(self.demos, rewards, assignment, solved,
                                   positive_threshold=p.positive_demo_threshold,
                                   negative_threshold=p.negative_demo_threshold, keep=p.demos_kept)
            row = {"event": "round", "round": round_number, "assignment": dict(assignment),
                   "candidate_id": chosen.id, "train_score": score, "delta": delta, "improved": improved,
                   "best_id": best.id, "best_score": best_score, "log_quality": round(log_quality, 6),
                   "node_rewards": {r: [round(v, 4) for v in vs] for r, vs in rewards.node.items()},
                   "demos_added": critic}
            if len(deltas) >= p.patience and all(d <= 0 for d in deltas[-p.patience:]):
                self._note(row, self._state(pools, best))
                stop = "patience"
                break
            if round_number == p.max_iterations or self.ctx.budget.remaining < len(self.rows):
                self._note(row, self._state(pools, best))
                stop = "max_iters" if round_number == p.max_iterations else "budget"
                break
            feedback: Feedback = await blame_feedback(self.reflection, graph, best_rollouts, team=team,
                                                      count=p.feedback_count, limit=self.limit)
            pools = await mutate_pools(self.reflection, best.roles(), graph.roles, feedback, size=p.candidate_count,
                                       team=team, round_number=round_number, temperature=p.mutate_temperature,
                                       limit=self.limit)
            row["blamed_roles"] = sorted(feedback.blame)
            self._note(row, self._state(pools, best))
        return self._result(best, best_score, stop)

    def _state(self, pools: Mapping[str, list[str]], best: Candidate) -> dict[str, Any]:
        return {"best": best.to_dict(), "pools": {r: list(v) for r, v in pools.items()},
                "demos": {r: d.to_dict() for r, d in self.demos.items()}}

    def _result(self, best: Candidate, best_score: float | None, stop: str) -> OptimizationResult:
        graph = self.graph
        metadata = {
            "evaluation_ids": list(self.rows),
            "rounds": self.rounds,
            "incumbent_train_score": best_score,
            "charged_rollouts": self.ctx.budget.charged,
            "graph": None if graph is None else {"kind": graph.kind, "roles": list(graph.roles),
                                                 "edges": [list(e) for e in graph.edges],
                                                 "replicas": graph.replicas, "peers": graph.peers},
            "reflection": self.reflection.usage(),
            "uncharged_calls": self.judge.uncharged_calls(),
            "params": {k: getattr(self.params, k) for k in self.params.__dataclass_fields__},
        }
        return OptimizationResult(best=best, stop_reason=stop, history=self.history, metadata=metadata)
