"""HiveMind: contribution-guided online prompt optimization (CG-OPO) of a multi-agent team.

One cycle:
1. the next ``coalition_batch`` train problems (one fixed shuffled order, consumed round-robin);
   every coalition of the plan runs on them as a real, masked team run (charged rollouts) and
   its worth is the mean score. The plan is the exact power set of the players while
   2^players <= ``max_coalitions``, else Monte-Carlo permutation prefixes;
2. Shapley value per player, summed per role prompt (replicas share one prompt);
3. target = the prompt with the lowest Shapley value — on a centralized team the manager (not a
   player: it is always active) every ``manager_every_k``-th cycle instead;
4. the reflection model turns the target's winning and losing cases (its own turns in the full
   team's runs, split at ``fail_below``) into a few generic lessons;
5. candidate = the target's seed prompt + "Lessons learned" + the last ``max_lessons`` lessons
   (accepted ones, then the new ones);
6. gate on the next ``acceptance_batch`` validation problems: the current prompts and the
   candidate (both unmasked, charged); accepted iff the candidate's mean is strictly higher.

A cycle starts only if ``#coalitions * batch + 2 * acceptance`` rollouts fit the remaining budget;
the batch sizes shrink toward 1 until they do. Stop reasons: ``budget`` (not even a one-problem
cycle fits) or ``max_cycles``. The method is deterministic given the journals (rollouts and
reflection replies replay after a kill); its state after each cycle is saved as JSON.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from optimizers.base import OptimizationResult, OptimizeContext, Optimizer
from optimizers.candidate import Candidate
from optimizers.evaluator import Rollout
from optimizers.hivemind.game import TeamGame, coalition_label
from optimizers.hivemind.lessons import (
    ROTATION,
    WEAKEST,
    cases_of,
    lessons_prompt,
    parse_lessons,
    with_lessons,
)
from optimizers.hivemind.shapley import Coalition, CoalitionPlan, plan_coalitions
from optimizers.reflection import ReflectionModel, RolloutGuard, mean_score, params_from, team_description
from optimizers.registry import register_optimizer

METHOD = "hivemind"
ALGORITHM = "CG-OPO_coalition"
MANAGER = "manager"


@dataclass(frozen=True, slots=True)
class HiveMindParams:
    """Knobs (conf/method/hivemind.yaml). Defaults follow the reference's HiveMindSettings."""

    max_cycles: int = 0  # 0: cycle until the budget is spent
    coalition_batch: int = 5  # train problems per coalition per cycle
    acceptance_batch: int = 5  # validation problems per gate
    max_coalitions: int = 40  # exact power set while 2^players fits, else permutation prefixes
    manager_every_k: int = 3  # centralized: every k-th cycle targets the manager (0: never)
    max_lessons: int = 6  # lessons kept in a prompt (the newest)
    min_new_lessons: int = 3  # asked of the reflection model per cycle ...
    max_new_lessons: int = 5  # ... and the most taken from its reply
    fail_below: float = 0.5  # a case scoring below this is a losing case
    max_cases: int = 4  # winning and losing cases each shown to the reflection model
    hm_seed: int = 0  # plan RNG 90001*seed + hm_seed, row order RNG 100003*seed + hm_seed
    reflection_temperature: float = 0.7
    reflection_top_p: float = 1.0
    max_unusable_rollouts: int = 0  # infrastructure-failed rollouts tolerated before the run is invalid

    def check(self) -> None:
        if self.max_cycles < 0:
            raise ValueError("hivemind: max_cycles must be >= 0 (0: until the budget is spent)")
        if min(self.coalition_batch, self.acceptance_batch, self.max_lessons, self.min_new_lessons,
               self.max_cases) < 1:
            raise ValueError("hivemind: batch sizes, lesson counts and max_cases must be >= 1")
        if self.max_new_lessons < self.min_new_lessons:
            raise ValueError("hivemind: max_new_lessons must be >= min_new_lessons")
        if self.max_coalitions < 4:
            raise ValueError("hivemind: max_coalitions must be >= 4 (the empty, grand and one more coalition)")
        if self.manager_every_k < 0:
            raise ValueError("hivemind: manager_every_k must be >= 0")


def fit_batches(coalitions: int, batch: int, accept: int, remaining: int) -> tuple[int, int] | None:
    """The largest (coalition batch, acceptance batch), shrunk toward 1, whose cycle fits ``remaining``."""
    while coalitions * batch + 2 * accept > remaining:
        if batch >= accept and batch > 1:
            batch -= 1
        elif accept > 1:
            accept -= 1
        else:
            return None
    return batch, accept


@register_optimizer(METHOD)
class HiveMindOptimizer(Optimizer):
    @classmethod
    def check_params(cls, params: Mapping[str, Any]) -> None:
        """Refuse unknown or malformed knobs before a job starts (ValueError, one line)."""
        params_from(HiveMindParams, params, METHOD)

    async def optimize(
        self, seed: Candidate, *, train: Sequence[str], val: Sequence[str], ctx: OptimizeContext
    ) -> OptimizationResult:
        params: HiveMindParams = params_from(HiveMindParams, ctx.method_params, METHOD)
        if ctx.team is None:
            raise ValueError("hivemind needs the team roster (OptimizeContext.team) to run coalitions")
        return await _Run(seed, list(train), list(val), ctx, params).go()


class _Rows:
    """A fixed shuffled order of problem ids, handed out round-robin."""

    def __init__(self, ids: Sequence[str], rng: random.Random) -> None:
        self.order = list(ids)
        rng.shuffle(self.order)
        self.cursor = 0

    def take(self, count: int) -> list[str]:
        count = min(count, len(self.order))
        out = [self.order[(self.cursor + i) % len(self.order)] for i in range(count)]
        self.cursor = (self.cursor + count) % len(self.order)
        return out


class _Run:
    def __init__(self, seed: Candidate, train: list[str], val: list[str], ctx: OptimizeContext,
                 params: HiveMindParams) -> None:
        self.seed = seed
        self.ctx = ctx
        self.params = params
        self.game = TeamGame(ctx.team)
        missing = [role for role in self.game.prompts() if f"role/{role}" not in seed.components]
        if missing:
            raise ValueError(f"hivemind: the seed has no prompt for role(s) {', '.join(missing)}")
        self.plan_rng = random.Random(90001 * ctx.seed + params.hm_seed)
        row_rng = random.Random(100003 * ctx.seed + params.hm_seed)
        self.train_rows = _Rows(train, row_rng)
        self.val_rows = _Rows(val, row_rng)
        # A batch never repeats a problem, so no batch is larger than its split.
        self.batch = min(params.coalition_batch, len(train))
        self.accept = min(params.acceptance_batch, len(val))
        self.reflection = ReflectionModel.from_context(ctx, METHOD)
        self.guard = RolloutGuard(METHOD, params.max_unusable_rollouts)
        self.team = team_description(list(self.game.prompts()), len(ctx.team.agents))
        self.lessons: dict[str, list[str]] = {role: [] for role in self.game.prompts()}  # accepted, oldest first
        self.history: list[dict[str, Any]] = []
        self.cycles = 0
        self.coalition_rollouts = 0
        self.plan_kinds: set[str] = set()

    # ---------------------------------------------------------------- lifecycle

    async def go(self) -> OptimizationResult:
        p = self.params
        current = self.seed
        stop = "max_cycles"
        while p.max_cycles == 0 or self.cycles < p.max_cycles:
            plan = plan_coalitions(self.game.players, p.max_coalitions, self.plan_rng)
            sizes = fit_batches(len(plan.coalitions), self.batch, self.accept, self.ctx.budget.remaining)
            if sizes is None:
                stop = "budget"
                break
            self.cycles += 1
            current = await self.cycle(current, plan, *sizes)
        return self._result(current, stop)

    async def cycle(self, current: Candidate, plan: CoalitionPlan, batch: int, accept: int) -> Candidate:
        number = self.cycles
        self.plan_kinds.add(plan.kind)
        train_ids = self.train_rows.take(batch)
        worth, full_runs = await self.coalition_values(current, plan, train_ids)
        shapley = plan.shapley(worth)
        by_prompt = self.game.prompt_values(shapley)
        target = self.pick_target(number, by_prompt)
        row: dict[str, Any] = {
            "event": "cycle", "cycle": number, "plan": plan.kind, "coalitions": len(plan.coalitions),
            "coalition_batch": batch, "acceptance_batch": accept, "train_ids": train_ids,
            "worth": {coalition_label(c, plan.players): worth[c] for c in plan.coalitions},
            "shapley": shapley, "prompt_shapley": by_prompt, "target": target,
            "team_score": worth[self.game.grand],
        }
        new = await self.write_lessons(current, target, full_runs)
        row["new_lessons"] = new
        candidate = self.candidate(current, target, new)
        if candidate == current:
            row.update(accepted=False, reason="no_new_lessons" if not new else "unchanged_prompt")
            self._note(row, current)
            return current
        val_ids = self.val_rows.take(accept)
        current_runs, candidate_runs = await asyncio.gather(
            self._run(current, val_ids, "val", number), self._run(candidate, val_ids, "val", number))
        current_score, candidate_score = mean_score(current_runs), mean_score(candidate_runs)
        accepted = current_score is not None and candidate_score is not None and candidate_score > current_score
        row.update(val_ids=val_ids, current_val_score=current_score, candidate_val_score=candidate_score,
                   candidate_id=candidate.id, accepted=accepted)
        if accepted:
            self.lessons[target] = self.lessons[target] + new
            current = candidate
        self._note(row, current)
        return current

    # ---------------------------------------------------------------- steps

    async def coalition_values(
        self, current: Candidate, plan: CoalitionPlan, train_ids: list[str]
    ) -> tuple[dict[Coalition, float], list[Rollout]]:
        """Run every coalition of the plan on the batch (masked team runs); worth = mean score."""
        runs = await asyncio.gather(*(
            self._run(current, train_ids, "train", self.cycles, active=self.game.active_for(c))
            for c in plan.coalitions))
        worth: dict[Coalition, float] = {}
        full: list[Rollout] = []
        for coalition, rollouts in zip(plan.coalitions, runs, strict=True):
            for rollout in rollouts:
                self.game.check(coalition, rollout.details.get("active_agents"), rollout.problem_id)
            if coalition != self.game.grand:
                self.coalition_rollouts += sum(1 for r in rollouts if r.charged)
            score = mean_score(rollouts)
            if score is None:  # cannot happen when the cycle was sized to fit; keep the guard loud
                raise RuntimeError(f"hivemind: coalition {sorted(coalition)} was not fully run")
            worth[coalition] = score
            if coalition == self.game.grand:
                full = rollouts
        return worth, full

    def pick_target(self, number: int, by_prompt: Mapping[str, float]) -> str:
        k = self.params.manager_every_k
        if self.ctx.team.topology == "centralized" and k > 0 and number % k == 0:
            return MANAGER
        order = {role: i for i, role in enumerate(self.game.prompts())}
        return min(by_prompt, key=lambda role: (by_prompt[role], order[role]))

    async def write_lessons(self, current: Candidate, target: str, full_runs: Sequence[Rollout]) -> list[str]:
        p = self.params
        winning, losing = cases_of([r for r in full_runs if r.usable], target, fail_below=p.fail_below,
                                   max_cases=p.max_cases)
        why = WEAKEST if target in self.game.scored_prompts() else ROTATION
        prompt = lessons_prompt(role=target, team=self.team, prompt=current.components[f"role/{target}"],
                                winning=winning, losing=losing, fewest=p.min_new_lessons, most=p.max_new_lessons,
                                why=why)
        reply = await self.reflection.ask(prompt, purpose="lessons", temperature=p.reflection_temperature,
                                          top_p=p.reflection_top_p)
        known = set(self.lessons[target])
        return [lesson for lesson in parse_lessons(reply, limit=p.max_new_lessons) if lesson not in known]

    def candidate(self, current: Candidate, target: str, new: list[str]) -> Candidate:
        if not new:
            return current
        kept = (self.lessons[target] + new)[-self.params.max_lessons:]
        seed_prompt = self.seed.components[f"role/{target}"]
        return current.with_component(f"role/{target}", with_lessons(seed_prompt, kept))

    async def _run(self, candidate: Candidate, ids: Sequence[str], phase: str, cycle: int,
                   active: Sequence[str] | None = None) -> list[Rollout]:
        """Fresh samples every cycle (``sample`` = cycle - 1), as online optimization observes the
        team anew: nothing is served from an earlier cycle's cache, so every cycle spends what
        its size says and the loop always ends."""
        rollouts = await self.ctx.evaluator.evaluate(candidate, ids, phase=phase, sample=cycle - 1, active=active)
        self.guard.check(rollouts)
        return rollouts

    # ---------------------------------------------------------------- bookkeeping

    def _note(self, row: dict[str, Any], current: Candidate) -> None:
        row = {**row, "incumbent_id": current.id, "charged": self.ctx.budget.charged}
        self.history.append(row)
        metrics: dict[str, float] = {"hivemind/cycle": row["cycle"], "hivemind/accepted": float(row["accepted"]),
                                     "hivemind/team_score": row["team_score"],
                                     "hivemind/masked_rollouts": self.coalition_rollouts}
        metrics.update({f"hivemind/shapley/{role}": value for role, value in row["prompt_shapley"].items()})
        for key in ("current_val_score", "candidate_val_score"):
            if row.get(key) is not None:
                metrics[f"hivemind/{key}"] = row[key]
        self.ctx.tracker.log(row["charged"], metrics)
        self.ctx.save_state(METHOD, self._state(current))

    def _state(self, current: Candidate) -> dict[str, Any]:
        return {"cycles": self.cycles, "incumbent": current.to_dict(), "lessons": self.lessons,
                "train_cursor": self.train_rows.cursor, "val_cursor": self.val_rows.cursor,
                "charged": self.ctx.budget.charged, "history": self.history}

    def _result(self, best: Candidate, stop: str) -> OptimizationResult:
        metadata = {
            "algorithm": ALGORITHM,
            "players": list(self.game.players),
            "prompts": list(self.game.prompts()),
            "plans": sorted(self.plan_kinds),
            "cycles": self.cycles,
            "accepted_cycles": sum(1 for row in self.history if row.get("accepted")),
            "lessons": self.lessons,
            "train_order": self.train_rows.order,
            "validation_order": self.val_rows.order,
            "charged_rollouts": self.ctx.budget.charged,
            "masked_rollouts_charged": self.coalition_rollouts,
            "reflection": self.reflection.usage(),
            "params": {f.name: getattr(self.params, f.name) for f in fields(self.params)},
        }
        return OptimizationResult(best=best, stop_reason=stop, history=self.history, metadata=metadata)
