"""MIPROv2: instructions and demos per role, searched with Optuna TPE (Opsahl-Ong et al., 2024).

1. Bootstrap: run the seed on training problems (charged) until enough of them are solved; the
   roles' turns in the solving runs become demos, grouped into demo sets (set 0 = no demos).
2. Propose: a data summary, then per role ``num_candidates - 1`` grounded instructions from the
   reflection model (the seed instruction is candidate 0).
3. Search: the default configuration (seed instructions, no demos) on all of validation, then
   ``num_trials`` TPE trials (seeded sampler) over (instruction, demo set) per role, each scored
   on validation - all of it, or a minibatch with a full evaluation of the best configuration
   every ``minibatch_full_eval_steps`` trials (``minibatch: true``).

The incumbent is the configuration with the best *full* validation score (ties keep the earlier
one, so the seed wins ties). Its role prompts have the chosen demos rendered in and
``Candidate.demos`` lists them. Stops: ``num_trials_complete`` or ``rollout_budget_spent`` (a
trial the remaining budget cannot pay is not started).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optimizers.base import OptimizationResult, OptimizeContext, Optimizer
from optimizers.candidate import Candidate
from optimizers.evaluator import Rollout
from optimizers.mipro.demos import Demo, demo_sets, demos_by_problem, render
from optimizers.mipro.proposer import ProposerSettings, propose_instructions, summarize_data
from optimizers.reflection import (
    ReflectionModel,
    RolloutGuard,
    agents_in_trace,
    mean_score,
    params_from,
    task_text,
    team_description,
)
from optimizers.registry import register_optimizer

STOP_DONE = "num_trials_complete"
STOP_BUDGET = "rollout_budget_spent"


@dataclass(frozen=True, slots=True)
class MIPROParams:
    """Knobs (conf/method/mipro.yaml). Defaults follow the reference's MIPRO policy."""

    num_candidates: int = 3  # instructions per role, the seed's included
    num_demo_sets: int | None = None  # demo sets per role, the empty one included; null = num_candidates
    num_trials: int = 3  # TPE trials after the default configuration
    max_bootstrapped_demos: int = 4
    bootstrap_rows: int = 30  # most training problems the seed runs to find solved ones
    bootstrap_batch: int = 10  # rows run at once while bootstrapping
    minibatch: bool = False  # score trials on a validation minibatch instead of all of it
    minibatch_size: int = 35
    minibatch_full_eval_steps: int = 5
    seed: int = 9  # added to the job seed
    view_data_batch_size: int = 10  # problems shown to the data summarizer
    data_aware: bool = True
    program_aware: bool = True
    fewshot_aware: bool = True
    tip_aware: bool = True
    proposer_temperature: float | None = None  # null: the reflection decoding's temperature
    reflection_concurrency: int = 4
    demo_problem_chars: int = 600
    demo_reply_chars: int = 1500
    max_unusable_rollouts: int = 0

    def check(self) -> None:
        if self.num_candidates < 1 or self.num_trials < 0 or self.max_bootstrapped_demos < 0:
            raise ValueError("mipro: num_candidates >= 1, num_trials >= 0, max_bootstrapped_demos >= 0")
        if self.minibatch and self.minibatch_size < 1:
            raise ValueError("mipro: minibatch_size must be >= 1")
        if self.bootstrap_batch < 1 or self.minibatch_full_eval_steps < 1:
            raise ValueError("mipro: bootstrap_batch and minibatch_full_eval_steps must be >= 1")


@dataclass(frozen=True, slots=True)
class Choice:
    """One configuration: per role (instruction index, demo set index)."""

    picks: tuple[tuple[str, int, int], ...]

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {role: {"instruction": i, "demo_set": d} for role, i, d in self.picks}


class _Space:
    """Instructions and demo sets per role -> candidates."""

    def __init__(self, seed: Candidate, roles: Sequence[str], instructions: dict[str, list[str]],
                 sets: list[tuple[str, ...]], demos: dict[str, dict[str, Demo]]) -> None:
        self.seed = seed
        self.roles = list(roles)
        self.instructions = instructions
        self.sets = sets
        self.demos = demos

    def role_demos(self, role: str, set_index: int) -> list[Demo]:
        return [self.demos[p][role] for p in self.sets[set_index] if role in self.demos.get(p, {})]

    def candidate(self, choice: Choice) -> Candidate:
        texts: dict[str, str] = {}
        chosen: list[dict[str, Any]] = []
        for role, instruction, demo_set in choice.picks:
            demos = self.role_demos(role, demo_set)
            texts[f"role/{role}"] = render(self.instructions[role][instruction], demos)
            chosen += [d.as_dict() for d in demos]
        updates = {k: v for k, v in texts.items() if v != self.seed.components[k]}
        if not updates and not chosen:
            return self.seed
        child = self.seed.with_components(updates) if updates else self.seed
        return Candidate(child.components, child.settings, tuple(chosen), parent=self.seed.id)

    def default(self) -> Choice:
        return Choice(tuple((role, 0, 0) for role in self.roles))


@register_optimizer("mipro")
class MIPROOptimizer(Optimizer):
    @classmethod
    def check_params(cls, params: Mapping[str, Any]) -> None:
        """Refuse unknown or malformed knobs before a job starts (ValueError, one line)."""
        params_from(MIPROParams, params, "mipro")

    async def optimize(
        self, seed: Candidate, *, train: Sequence[str], val: Sequence[str], ctx: OptimizeContext
    ) -> OptimizationResult:
        params: MIPROParams = params_from(MIPROParams, ctx.method_params, "mipro")
        run = _Run(seed, list(train), list(val), ctx, params)
        return await run.go()


class _Run:
    def __init__(self, seed: Candidate, train: list[str], val: list[str], ctx: OptimizeContext,
                 params: MIPROParams) -> None:
        self.seed = seed
        self.train = train
        self.val = val
        self.ctx = ctx
        self.params = params
        self.rng = random.Random(ctx.seed + params.seed)
        self.roles = sorted(seed.roles())
        self.reflection = ReflectionModel.from_context(ctx, "mipro")
        self.guard = RolloutGuard("mipro", params.max_unusable_rollouts)
        self.history: list[dict[str, Any]] = []
        self.full_scores: dict[str, float] = {}  # candidate id -> full validation mean
        self.candidates: dict[str, Candidate] = {seed.id: seed}
        self.best_id = seed.id
        self.stop = STOP_DONE

    @property
    def trial_cost(self) -> int:
        return min(self.params.minibatch_size, len(self.val)) if self.params.minibatch else len(self.val)

    async def _evaluate(self, candidate: Candidate, ids: Sequence[str], phase: str) -> list[Rollout]:
        rollouts = await self.ctx.evaluator.evaluate(candidate, ids, phase=phase)
        self.guard.check(rollouts)
        return rollouts

    # ---------------------------------------------------------------- steps

    async def bootstrap(self) -> list[Rollout]:
        """Seed rollouts on training problems until enough are solved (leaving budget to search)."""
        p = self.params
        wanted = p.max_bootstrapped_demos * (max(p.num_demo_sets or p.num_candidates, 1) - 1)
        affordable = self.ctx.budget.remaining - len(self.val) - self.trial_cost
        rows = self.train[: max(0, min(p.bootstrap_rows, affordable))]
        ran: list[Rollout] = []
        for start in range(0, len(rows), p.bootstrap_batch):
            if wanted and sum(r.score > 0 for r in ran) >= wanted:
                break
            ran += await self._evaluate(self.seed, rows[start:start + p.bootstrap_batch], "train")
        return ran

    async def full_eval(self, candidate: Candidate) -> float | None:
        if candidate.id in self.full_scores:
            return self.full_scores[candidate.id]
        if self.ctx.budget.remaining < len(self.val):
            return None
        score = mean_score(await self._evaluate(candidate, self.val, "val"))
        if score is None:
            return None
        self.full_scores[candidate.id] = score
        self.candidates[candidate.id] = candidate
        if score > self.full_scores.get(self.best_id, float("-inf")):
            self.best_id = candidate.id
        self.ctx.commit_incumbent(self.candidates[self.best_id], self.full_scores[self.best_id])
        return score

    def _note(self, event: str, **row: Any) -> None:
        record = {"event": event, "charged": self.ctx.budget.charged, "incumbent_id": self.best_id,
                  "incumbent_val_score": self.full_scores.get(self.best_id), **row}
        self.history.append(record)
        self.ctx.tracker.log(record["charged"], {f"mipro/{k}": v for k, v in record.items()
                                                 if isinstance(v, (int, float)) and not isinstance(v, bool)})
        self.ctx.save_state("mipro", {"history": self.history, "full_scores": self.full_scores})

    # ---------------------------------------------------------------- the run

    async def go(self) -> OptimizationResult:
        p = self.params
        if self.ctx.budget.remaining < len(self.val):
            self.stop = STOP_BUDGET
            return self._result(space=None)
        boot = await self.bootstrap()
        solved = [r for r in boot if r.usable and r.score > 0]
        demos = demos_by_problem(solved, self.roles, problem_chars=p.demo_problem_chars,
                                 reply_chars=p.demo_reply_chars)
        sets = demo_sets(list(demos), count=p.num_demo_sets or p.num_candidates,
                         size=p.max_bootstrapped_demos, rng=self.rng)
        self._note("bootstrap", rows=len(boot), solved=len(solved), demo_sets=len(sets))

        settings = ProposerSettings(p.data_aware, p.program_aware, p.fewshot_aware, p.tip_aware,
                                    p.proposer_temperature, p.reflection_concurrency)
        problems = [task_text(r.trace, 1500) for r in boot if r.usable][: p.view_data_batch_size]
        summary = await summarize_data(self.reflection, problems) if p.data_aware else None
        space = _Space(self.seed, self.roles, {}, sets, demos)
        demos_for = {role: [space.role_demos(role, s) for s in range(len(sets))] for role in self.roles}
        space.instructions = await propose_instructions(
            self.reflection, roles=self.roles, seed_prompts=self.seed.roles(),
            team=team_description(self.roles, max((agents_in_trace(r.trace) for r in boot), default=None)),
            data_summary=summary, demos_for=demos_for,
            count=p.num_candidates, rng=self.rng, settings=settings)
        self._note("proposals", instructions={r: len(v) for r, v in space.instructions.items()})

        default_score = await self.full_eval(self.seed)
        self._note("default", candidate_id=self.seed.id, score=default_score, full=True)
        if default_score is None:
            self.stop = STOP_BUDGET
            return self._result(space)
        await self.search(space)
        return self._result(space)

    async def search(self, space: _Space) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        p = self.params
        sampler = optuna.samplers.TPESampler(seed=self.ctx.seed + p.seed, multivariate=True)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        distributions = {}
        for role in self.roles:
            distributions[f"{role}/instruction"] = optuna.distributions.CategoricalDistribution(
                list(range(len(space.instructions[role]))))
            distributions[f"{role}/demo_set"] = optuna.distributions.CategoricalDistribution(
                list(range(len(space.sets))))
        default = {k: 0 for k in distributions}
        study.add_trial(optuna.trial.create_trial(params=default, distributions=distributions,
                                                  value=self.full_scores[self.seed.id]))
        minibatch_means: dict[str, list[float]] = {}
        for number in range(1, p.num_trials + 1):
            if self.ctx.budget.remaining < self.trial_cost:
                self.stop = STOP_BUDGET
                return
            trial = study.ask(distributions)
            choice = Choice(tuple((role, int(trial.params[f"{role}/instruction"]),
                                   int(trial.params[f"{role}/demo_set"])) for role in self.roles))
            candidate = space.candidate(choice)
            self.candidates[candidate.id] = candidate
            if p.minibatch:
                ids = self.rng.sample(self.val, self.trial_cost)
                score = mean_score(await self._evaluate(candidate, ids, "val"))
            else:
                score = await self.full_eval(candidate)
            if score is None:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                self._note("trial", trial=number, choice=choice.as_dict(), candidate_id=candidate.id, score=None)
                self.stop = STOP_BUDGET
                return
            study.tell(trial, score)
            if p.minibatch:
                minibatch_means.setdefault(candidate.id, []).append(score)
            self._note("trial", trial=number, choice=choice.as_dict(), candidate_id=candidate.id, score=score,
                       full=not p.minibatch)
            if p.minibatch and (number % p.minibatch_full_eval_steps == 0 or number == p.num_trials):
                if not await self._full_eval_best_minibatch(minibatch_means):
                    self.stop = STOP_BUDGET
                    return

    async def _full_eval_best_minibatch(self, means: dict[str, list[float]]) -> bool:
        """Evaluate on all of validation the best-by-minibatch configuration not yet fully scored."""
        pending = [(sum(v) / len(v), -order, cid) for order, (cid, v) in enumerate(means.items())
                   if cid not in self.full_scores]
        if not pending:
            return True
        _, _, candidate_id = max(pending)
        score = await self.full_eval(self.candidates[candidate_id])
        self._note("full_eval", candidate_id=candidate_id, score=score, full=True)
        return score is not None

    def _result(self, space: _Space | None) -> OptimizationResult:
        best = self.candidates[self.best_id]
        metadata = {
            "incumbent_val_score": self.full_scores.get(self.best_id),
            "full_evaluations": len(self.full_scores),
            "selected_demos_by_role": {role: [d["problem_id"] for d in best.demos if d["role"] == role]
                                       for role in self.roles},
            "instruction_candidates": ({r: len(v) for r, v in space.instructions.items()} if space else {}),
            "demo_sets": [list(s) for s in space.sets] if space else [],
            "charged_rollouts": self.ctx.budget.charged,
            "reflection": self.reflection.usage(),
            "params": {k: getattr(self.params, k) for k in self.params.__dataclass_fields__},
        }
        return OptimizationResult(best=best, stop_reason=self.stop, history=self.history, metadata=metadata)
