"""TAVO: Trajectory-Aware Verbalized Optimization for multi-agent systems.

Per attempt: run the current prompts on a fixed train batch; cut each trajectory into
sub-trajectories and let the reflection model rate every step (``credit: true``; off = the
ablation without sub-trajectory credit); assign credit per (trajectory, role) and turn it into
concrete prompt edits; aggregate edits across tasks; update the prompts; gate the candidate on a
fixed validation batch. Adopt iff it beats the seed by ``adoption_threshold`` and is not worse
than the best by more than ``validation_delta_tolerance``. The train chain always moves on to
the newest candidate, adopted or not. A round without adoption uses up patience.

Modes (``mode``):
- ``paper`` (default; the issue asks for the paper's algorithm, the reference defaults to the
  release overlay): credit per (role, step it acted in) as the paper assigns it (``credit_unit``;
  ``trajectory`` keeps one call per (trajectory, role)); per role, aggregate that role's edits
  and rewrite its *previous* prompt;
- ``overlay``: team-wide meta-knowledge -> one list of rules appended to every *seed* prompt
  between markers, replacing the previous overlay;
- ``hybrid``: every role rewritten from its seed with the team's meta-knowledge and its own
  edits, then the overlay appended.

Only role prompts change. Batches are drawn once with ``Random(rng_seed_base + seed)``. Stops:
``max_outer_rounds``, ``native_patience``, ``budget_before_outer_round`` /
``budget_before_retry`` (an attempt needs train batch + validation batch rollouts), or
``rollout_budget_spent`` when not even the seed's validation batch fits.
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
from optimizers.reflection import (
    ReflectionModel,
    RolloutGuard,
    agents_in_trace,
    mean_score,
    params_from,
    roles_in_trace,
    team_description,
)
from optimizers.registry import register_optimizer
from optimizers.tavo.credit import (
    Credit,
    Edits,
    aggregate,
    assign_credit,
    gather_limited,
    lead_role,
    rate_steps,
    segment,
)
from optimizers.tavo.proposals import rewrite_role, strip_overlay, with_overlay, write_overlay

MODES = ("paper", "overlay", "hybrid")
CREDIT_UNITS = ("auto", "segment", "trajectory")


@dataclass(frozen=True, slots=True)
class TAVOParams:
    """Knobs (conf/method/tavo.yaml). Defaults follow the reference's TAVO settings."""

    mode: str = "paper"  # paper | overlay | hybrid
    credit: bool = True  # sub-trajectory step ratings (false = ablation)
    # Credit assignment unit: segment = one call per (role, step it acted in), as the paper;
    # trajectory = one call per (trajectory, role) over all its steps (the release); auto =
    # segment in paper mode, trajectory otherwise.
    credit_unit: str = "auto"
    max_credit_segments: int = 5  # per (trajectory, role) in segment mode: its last N steps
    train_batch_size: int = 6
    max_outer_rounds: int = 5
    validation_batch: int | None = None  # null: min(|val|, max(min_validation_batch, (B - rounds*train)//(rounds+1)))
    min_validation_batch: int = 3
    adoption_threshold: float = 0.01  # vs the seed's validation score
    validation_delta_tolerance: float = 0.0  # vs the best validation score so far
    attempts_per_round: int = 2
    patience: int = 2  # rounds in a row without adoption
    rng_seed_base: int = 233
    reflection_concurrency: int = 4
    rating_temperature: float = 0.3
    credit_temperature: float = 0.5
    default_temperature: float = 0.5  # aggregation, rewrites, overlay
    max_segments: int = 16  # steps per trajectory shown to the rater (the last ones)
    max_unusable_rollouts: int = 0

    def check(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"tavo: mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if min(self.train_batch_size, self.max_outer_rounds, self.attempts_per_round, self.patience,
               self.min_validation_batch) < 1:
            raise ValueError("tavo: batch sizes, rounds, attempts and patience must be >= 1")
        if self.credit_unit not in CREDIT_UNITS:
            raise ValueError(f"tavo: credit_unit must be one of {', '.join(CREDIT_UNITS)}, not {self.credit_unit!r}")
        if self.max_credit_segments < 1:
            raise ValueError("tavo: max_credit_segments must be >= 1")
        if self.validation_batch is not None and self.validation_batch < 1:
            raise ValueError("tavo: validation_batch must be >= 1 (or null)")


def credit_by_segment(params: TAVOParams) -> bool:
    return params.credit_unit == "segment" or (params.credit_unit == "auto" and params.mode == "paper")


def validation_batch_size(params: TAVOParams, budget: int, val_size: int, train_size: int | None = None) -> int:
    """``train_size``: the train batch actually drawn (the split may hold fewer rows than
    ``train_batch_size``; the reference lays the budget out with the drawn size)."""
    if params.validation_batch is not None:
        return min(val_size, params.validation_batch)
    # The reference's layout: the seed's validation batch plus K rounds of (train + validation),
    # v + K (t + v) <= B, so v <= (B - K t) / (K + 1). (With the defaults K + 1 = t = 6; dividing
    # by t, as this did before issue 31, agreed only there.)
    train = params.train_batch_size if train_size is None else min(params.train_batch_size, train_size)
    room = (budget - params.max_outer_rounds * train) // (params.max_outer_rounds + 1)
    return min(val_size, max(params.min_validation_batch, room))


# The cheapest run that still tests a proposal: 1 seed validation + 1 train + 1 validation rollout.
SMALLEST_USEFUL_BUDGET = 3


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """How many train and validation problems one attempt uses, and whether the budget shrank them."""

    train: int
    validation: int
    shrunk: bool = False


def plan_batches(params: TAVOParams, budget: int, train_size: int, val_size: int) -> BatchPlan:
    """The configured batches when the budget pays the seed's validation batch plus one attempt
    (train + validation batch). A smaller budget shrinks both (validation to a third of it, train
    to what is left), so the run proposes and tests at least one candidate instead of spending the
    seed's validation and stopping before its first round."""
    validation = validation_batch_size(params, budget, val_size, train_size)
    train = min(params.train_batch_size, train_size)
    if 2 * validation + train <= budget or budget < SMALLEST_USEFUL_BUDGET:
        return BatchPlan(train, validation)
    validation = min(validation, max(1, budget // 3))
    return BatchPlan(min(train, budget - 2 * validation), validation, shrunk=True)


@register_optimizer("tavo")
class TAVOOptimizer(Optimizer):
    # 2: issue 31, the validation batch by the reference's layout (B - K t) // (K + 1) with the
    # drawn train batch t (identical for the grid's defaults; differs for other K, t or a train
    # split under t rows, so a job started before must not resume under this code).
    version = "2"

    @classmethod
    def check_params(cls, params: Mapping[str, Any]) -> None:
        """Refuse unknown or malformed knobs before a job starts (ValueError, one line)."""
        params_from(TAVOParams, params, "tavo")

    async def optimize(
        self, seed: Candidate, *, train: Sequence[str], val: Sequence[str], ctx: OptimizeContext
    ) -> OptimizationResult:
        params: TAVOParams = params_from(TAVOParams, ctx.method_params, "tavo")
        return await _Run(seed, list(train), list(val), ctx, params).go()


class _Run:
    def __init__(self, seed: Candidate, train: list[str], val: list[str], ctx: OptimizeContext,
                 params: TAVOParams) -> None:
        self.seed = seed
        self.ctx = ctx
        self.params = params
        rng = random.Random(params.rng_seed_base + ctx.seed)
        self.plan = plan_batches(params, ctx.budget.remaining, len(train), len(val))
        self.train_batch = rng.sample(train, self.plan.train)
        self.val_batch = rng.sample(val, self.plan.validation)
        self.roles = sorted(seed.roles())
        self.team = team_description(self.roles)
        self.lead = lead_role(self.roles)
        self.reflection = ReflectionModel.from_context(ctx, "tavo")
        self.guard = RolloutGuard("tavo", params.max_unusable_rollouts)
        self.limit = asyncio.Semaphore(max(1, params.reflection_concurrency))
        self.history: list[dict[str, Any]] = []
        self.rounds = 0
        self.attempts = 0

    @property
    def attempt_cost(self) -> int:
        return len(self.train_batch) + len(self.val_batch)

    async def _run(self, candidate: Candidate, ids: Sequence[str], phase: str) -> list[Rollout]:
        rollouts = await self.ctx.evaluator.evaluate(candidate, ids, phase=phase)
        self.guard.check(rollouts)
        return rollouts

    def _note(self, row: dict[str, Any]) -> None:
        row = {**row, "charged": self.ctx.budget.charged}
        self.history.append(row)
        self.ctx.tracker.log(row["charged"], {f"tavo/{k}": v for k, v in row.items()
                                              if isinstance(v, (int, float)) and not isinstance(v, bool)})
        self.ctx.save_state("tavo", {"history": self.history})

    # ---------------------------------------------------------------- lifecycle

    async def go(self) -> OptimizationResult:
        p = self.params
        if self.ctx.budget.remaining < len(self.val_batch):
            return self._result(self.seed, None, "rollout_budget_spent")
        base = mean_score(await self._run(self.seed, self.val_batch, "val"))
        if base is None:
            return self._result(self.seed, None, "rollout_budget_spent")
        best, best_score = self.seed, base
        self.ctx.commit_incumbent(best, best_score)
        self._note({"event": "seed_validation", "candidate_id": self.seed.id, "val_score": base})
        current = self.seed
        misses = 0
        stop = "max_outer_rounds"
        for round_number in range(1, p.max_outer_rounds + 1):
            if self.ctx.budget.remaining < self.attempt_cost:
                stop = "budget_before_outer_round"
                break
            self.rounds = round_number
            adopted = False
            for attempt in range(1, p.attempts_per_round + 1):
                if attempt > 1 and self.ctx.budget.remaining < self.attempt_cost:
                    stop = "budget_before_retry"
                    break
                self.attempts += 1
                candidate, train_score, details = await self.attempt(current)
                val_score = mean_score(await self._run(candidate, self.val_batch, "val"))
                accept = (val_score is not None and val_score - base >= p.adoption_threshold
                          and val_score - best_score >= -p.validation_delta_tolerance)
                current = candidate  # the train chain always advances
                if accept:
                    best, best_score = candidate, float(val_score)  # type: ignore[arg-type]
                self.ctx.commit_incumbent(best, best_score)
                self._note({"event": "attempt", "round": round_number, "attempt": attempt,
                            "candidate_id": candidate.id, "train_score": train_score, "val_score": val_score,
                            "adopted": accept, "best_id": best.id, "best_val_score": best_score, **details})
                if accept:
                    adopted = True
                    break
            if stop == "budget_before_retry":
                break
            misses = 0 if adopted else misses + 1
            if misses >= p.patience:
                stop = "native_patience"
                break
        return self._result(best, best_score, stop)

    async def attempt(self, current: Candidate) -> tuple[Candidate, float | None, dict[str, Any]]:
        """Train rollouts -> credit -> edits -> the next candidate."""
        p = self.params
        rollouts = [r for r in await self._run(current, self.train_batch, "train") if r.usable]
        if rollouts:
            self.team = team_description(self.roles, max(agents_in_trace(r.trace) for r in rollouts))
        train_score = sum(r.score for r in rollouts) / len(rollouts) if rollouts else None
        segments = {r.problem_id: segment(r.trace, lead=self.lead, limit=p.max_segments) for r in rollouts}
        ratings: dict[str, Any] = {}
        if p.credit:
            rated = await gather_limited(self.limit, [
                rate_steps(self.reflection, r, segments[r.problem_id], team=self.team,
                           temperature=p.rating_temperature) for r in rollouts])
            ratings = {r.problem_id: rating for r, rating in zip(rollouts, rated, strict=True)}
        prompts = current.roles()
        pairs = [(r, role) for r in rollouts for role in roles_in_trace(r.trace) if role in prompts]
        units = [(r, role, focus) for r, role in pairs for focus in self._credit_units(segments[r.problem_id], role)]
        credited = await gather_limited(self.limit, [
            assign_credit(self.reflection, r, role, prompt_text=prompts[role], segments=segments[r.problem_id],
                          ratings=ratings.get(r.problem_id) if p.credit else None, team=self.team,
                          temperature=p.credit_temperature, focus=focus) for r, role, focus in units])
        credits = [c for c in credited if c is not None]
        texts = await self.propose(current, credits)
        updates = {f"role/{role}": text for role, text in texts.items() if text != current.components[f"role/{role}"]}
        candidate = current.with_components(updates) if updates else current
        details = {"trajectories": len(rollouts), "credit_calls": len(units), "credits": len(credits),
                   "changed_roles": sorted(k[len("role/"):] for k in updates)}
        return candidate, train_score, details

    def _credit_units(self, segments: Sequence[Any], role: str) -> list[Any]:
        """What one credit call covers: each of the role's last steps (segment unit), or the
        role's whole trajectory (None)."""
        if not credit_by_segment(self.params):
            return [None]
        own = [s for s in segments if s.role == role]
        return own[-self.params.max_credit_segments:] or [None]

    async def propose(self, current: Candidate, credits: Sequence[Credit]) -> dict[str, str]:
        p = self.params
        by_role: dict[str, list[Credit]] = {role: [c for c in credits if c.role == role] for role in self.roles}
        seed_prompts = self.seed.roles()
        if p.mode == "paper":
            own = await gather_limited(self.limit, [
                aggregate(self.reflection, by_role[role], scope=f"the `{role}` role", temperature=p.default_temperature)
                for role in self.roles])
            rewritten = await gather_limited(self.limit, [
                rewrite_role(self.reflection, role=role, base_prompt=current.roles()[role], own=edits, team_edits=None,
                             team=self.team, temperature=p.default_temperature)
                for role, edits in zip(self.roles, own, strict=True)])
            return dict(zip(self.roles, rewritten, strict=True))
        meta = await aggregate(self.reflection, credits, scope="the whole team", temperature=p.default_temperature)
        rules = await write_overlay(self.reflection, meta, team=self.team, temperature=p.default_temperature)
        bases: Mapping[str, str] = seed_prompts
        if p.mode == "hybrid":
            own = [Edits(*(_top(c, kind) for kind in ("add", "remove", "restructure"))) for c in
                   (by_role[role] for role in self.roles)]
            rewritten = await gather_limited(self.limit, [
                rewrite_role(self.reflection, role=role, base_prompt=strip_overlay(seed_prompts[role]), own=edits,
                             team_edits=meta, team=self.team, temperature=p.default_temperature)
                for role, edits in zip(self.roles, own, strict=True)])
            bases = dict(zip(self.roles, rewritten, strict=True))
        if not rules:
            # Nothing learned this attempt: keep the current prompts (an empty overlay would
            # silently drop the previous one).
            return current.roles() if p.mode == "overlay" else dict(bases)
        return {role: with_overlay(bases[role], rules) for role in self.roles}

    def _result(self, best: Candidate, best_score: float | None, stop: str) -> OptimizationResult:
        metadata = {
            "mode": self.params.mode,
            "credit": self.params.credit,
            "credit_unit": "segment" if credit_by_segment(self.params) else "trajectory",
            "train_batch_ids": self.train_batch,
            "validation_batch_ids": self.val_batch,
            "batches_shrunk_for_budget": self.plan.shrunk,
            "rounds": self.rounds,
            "attempts": self.attempts,
            "incumbent_val_score": best_score,
            "charged_rollouts": self.ctx.budget.charged,
            "reflection": self.reflection.usage(),
            "params": {k: getattr(self.params, k) for k in self.params.__dataclass_fields__},
        }
        return OptimizationResult(best=best, stop_reason=stop, history=self.history, metadata=metadata)


def _top(credits: Sequence[Credit], kind: str, limit: int = 5) -> list[str]:
    seen: list[str] = []
    for credit in credits:
        for item in credit.edits.get(kind, ()):
            if item not in seen:
                seen.append(item)
    return seen[:limit]
