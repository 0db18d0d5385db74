"""HiveMind: contribution-guided online prompt optimization (CG-OPO) of a multi-agent team.

Before the first cycle the coalition plan (the exact power set of the players while
2^players <= ``max_coalitions``, else Monte-Carlo permutation prefixes) and the batch sizes are
fixed once: ``coalition_batch`` train and ``acceptance_batch`` validation problems, shrunk toward
1 only if one cycle of ``#coalitions * batch + 2 * acceptance`` rollouts would not fit the
budget. One cycle:

1. the next ``coalition_batch`` train problems (one fixed shuffled order, consumed round-robin);
   every coalition of the plan runs on them as a real, masked team run (charged rollouts, each
   coalition with its own request seeds unless ``shared_coalition_seeds``) and its worth is the
   mean score;
2. Shapley value per player, summed per role prompt (replicas share one prompt);
3. target = the prompt with the lowest Shapley value; on a centralized team the manager (not a
   player: it is always active) every ``manager_every_k``-th cycle instead;
4. the reflection model reads the target's cases from the full team's runs (problem and the
   target's own output, cut short; losing and winning runs split at ``fail_below``) and its
   Shapley value, and writes one block of lessons;
5. candidate = the target's seed prompt + "Lessons learned" + the newest ``max_lessons`` blocks
   (the accepted ones, then the new one);
6. gate on the next ``acceptance_batch`` validation problems: the current prompts and the
   candidate (both unmasked, charged); accepted iff the candidate's mean is higher (by more than
   1e-9); an accepted block joins the target's log and the new incumbent is committed to the
   learning curve. A cycle whose reply has no lesson (or changes nothing) skips the gate.

A cycle starts only if it fits whole; there is no shrunken last cycle. Stop reasons: ``budget``
(the next cycle does not fit) or ``max_cycles``. The method is deterministic given the journals
(rollouts and reflection replies replay after a kill); its state after each cycle is saved as JSON.
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
from optimizers.hivemind.lessons import CaseLimits, cases_of, lessons_prompt, parse_block, with_lessons
from optimizers.hivemind.shapley import Coalition, plan_coalitions
from optimizers.reflection import ReflectionModel, RolloutGuard, mean_score, params_from, task_text, team_description
from optimizers.registry import register_optimizer

METHOD = "hivemind"
ALGORITHM = "CG-OPO_coalition"
MANAGER = "manager"
GATE_MARGIN = 1e-9  # a candidate must beat the current mean by more than float noise


@dataclass(frozen=True, slots=True)
class HiveMindParams:
    """Knobs (conf/method/hivemind.yaml). Defaults follow the reference's HiveMindSettings."""

    max_cycles: int = 0  # 0: cycle until the budget is spent
    coalition_batch: int = 5  # train problems per coalition per cycle
    acceptance_batch: int = 5  # validation problems per gate
    max_coalitions: int = 40  # exact power set while 2^players fits, else permutation prefixes
    manager_every_k: int = 3  # centralized: every k-th cycle targets the manager (0: never)
    max_lessons: int = 6  # lesson blocks kept in a prompt (the newest)
    min_new_lessons: int = 3  # the request asks for min..max lessons in its one block
    max_new_lessons: int = 5
    fail_below: float = 0.5  # a case scoring below this is a losing case
    max_cases: int = 6  # losing and winning cases each shown to the reflection model
    case_problem_chars: int = 300  # characters of a case's problem (whitespace collapsed)
    case_output_chars: int = 400  # characters of the target's output in a case
    shared_coalition_seeds: bool = False  # True: all coalitions of a cycle share request seeds (CRN)
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
        if min(self.case_problem_chars, self.case_output_chars) < 50:
            raise ValueError("hivemind: case_problem_chars and case_output_chars must be >= 50")
        if self.max_coalitions < 4:
            raise ValueError("hivemind: max_coalitions must be >= 4 (the empty, grand and one more coalition)")
        if self.manager_every_k < 0:
            raise ValueError("hivemind: manager_every_k must be >= 0")


def cycle_batches(coalitions: int, batch: int, accept: int, *, train: int, val: int,
                  remaining: int) -> tuple[int, int]:
    """(coalition batch, acceptance batch) of every cycle, fixed once before the first.

    Capped by the split sizes (the acceptance batch also by the train split, as the reference
    does); then, while one cycle would not fit ``remaining``, the coalition batch shrinks first
    (pulling the acceptance batch down with it), then the acceptance batch. The result may still
    not fit: then no cycle runs.
    """
    batch = min(batch, train)
    accept = min(accept, val, train)
    while coalitions * batch + 2 * accept > remaining and batch > 1:
        batch -= 1
        accept = min(accept, batch)
    while coalitions * batch + 2 * accept > remaining and accept > 1:
        accept -= 1
    return batch, accept


@register_optimizer(METHOD)
class HiveMindOptimizer(Optimizer):
    # 2: lesson blocks, reference reflection input, plan and batch sizes fixed once, per-coalition
    # request seeds, incumbent commits (issue 21).
    # 3: a role's last three turns taken before empty ones are dropped; the seed committed at
    # its first measured score (issue 31).
    version = "3"

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
        if not train or not val:
            raise ValueError("hivemind needs non-empty train and validation splits")
        return await _Run(seed, list(train), list(val), ctx, params).go()


class _Rows:
    """A fixed shuffled order of problem ids, handed out round-robin."""

    def __init__(self, ids: Sequence[str], rng: random.Random) -> None:
        self.order = list(ids)
        rng.shuffle(self.order)
        self.cursor = 0

    def take(self, count: int) -> list[str]:
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
        # Both drawn once, as the reference does: one plan and one row order for the whole run.
        self.plan = plan_coalitions(self.game.players, params.max_coalitions,
                                    random.Random(90001 * ctx.seed + params.hm_seed))
        row_rng = random.Random(100003 * ctx.seed + params.hm_seed)
        self.train_rows = _Rows(train, row_rng)
        self.val_rows = _Rows(val, row_rng)
        self.batch, self.accept = cycle_batches(len(self.plan.coalitions), params.coalition_batch,
                                                params.acceptance_batch, train=len(train), val=len(val),
                                                remaining=ctx.budget.remaining)
        self.reflection = ReflectionModel.from_context(ctx, METHOD)
        self.guard = RolloutGuard(METHOD, params.max_unusable_rollouts)
        self.team = team_description(list(self.game.prompts()), len(ctx.team.agents))
        self.limits = CaseLimits(params.max_cases, params.case_problem_chars, params.case_output_chars)
        self.lessons: dict[str, list[str]] = {role: [] for role in self.game.prompts()}  # accepted blocks
        self.history: list[dict[str, Any]] = []
        self.cycles = 0
        self.coalition_rollouts = 0

    @property
    def cycle_cost(self) -> int:
        return len(self.plan.coalitions) * self.batch + 2 * self.accept

    # ---------------------------------------------------------------- lifecycle

    async def go(self) -> OptimizationResult:
        p = self.params
        current = self.seed
        stop = "budget"
        while self.cycle_cost <= self.ctx.budget.remaining:
            if p.max_cycles and self.cycles >= p.max_cycles:
                break
            self.cycles += 1
            current = await self.cycle(current)
        if p.max_cycles and self.cycles >= p.max_cycles:
            stop = "max_cycles"
        return self._result(current, stop)

    async def cycle(self, current: Candidate) -> Candidate:
        number = self.cycles
        train_ids = self.train_rows.take(self.batch)
        worth, full_runs = await self.coalition_values(current, train_ids)
        if number == 1:  # the curve starts at the seed's measured score (the whole team's)
            self.ctx.commit_incumbent(current, worth[self.game.grand])
        shapley = self.plan.shapley(worth)
        by_prompt = self.game.prompt_values(shapley)
        target = self.pick_target(number, by_prompt)
        row: dict[str, Any] = {
            "event": "cycle", "cycle": number, "plan": self.plan.kind, "coalitions": len(self.plan.coalitions),
            "coalition_batch": self.batch, "acceptance_batch": self.accept, "train_ids": train_ids,
            "worth": {coalition_label(c, self.plan.players): worth[c] for c in self.plan.coalitions},
            "shapley": shapley, "prompt_shapley": by_prompt, "target": target,
            "manager_cycle": target not in by_prompt, "team_score": worth[self.game.grand],
        }
        block = await self.write_lessons(target, by_prompt.get(target), full_runs, number)
        row["new_lessons"] = block
        candidate = self.candidate(current, target, block)
        if candidate.components[f"role/{target}"].strip() == current.components[f"role/{target}"].strip():
            row.update(accepted=False, reason="no_new_lessons" if not block else "unchanged_prompt")
            self._note(row, current)
            return current
        val_ids = self.val_rows.take(self.accept)
        current_runs, candidate_runs = await asyncio.gather(
            self._run(current, val_ids, "val", number - 1), self._run(candidate, val_ids, "val", number - 1))
        current_score, candidate_score = mean_score(current_runs), mean_score(candidate_runs)
        accepted = (current_score is not None and candidate_score is not None
                    and candidate_score > current_score + GATE_MARGIN)
        row.update(val_ids=val_ids, current_val_score=current_score, candidate_val_score=candidate_score,
                   candidate_id=candidate.id, accepted=accepted)
        if accepted:
            self.lessons[target] = self.lessons[target] + [block]
            current = candidate
            self.ctx.commit_incumbent(current, candidate_score)
        self._note(row, current)
        return current

    # ---------------------------------------------------------------- steps

    def coalition_sample(self, index: int) -> int:
        """The sample (and so the request seeds) of the ``index``-th coalition this cycle.

        The reference keys a rollout's seed by the coalition it runs, so coalitions do not share
        randomness; ``shared_coalition_seeds`` gives them one sample per cycle instead."""
        if self.params.shared_coalition_seeds:
            return self.cycles - 1
        return (self.cycles - 1) * len(self.plan.coalitions) + index

    async def coalition_values(self, current: Candidate, train_ids: list[str]
                               ) -> tuple[dict[Coalition, float], list[Rollout]]:
        """Run every coalition of the plan on the batch (masked team runs); worth = mean score."""
        coalitions = self.plan.coalitions
        runs = await asyncio.gather(*(
            self._run(current, train_ids, "train", self.coalition_sample(i), active=self.game.active_for(c))
            for i, c in enumerate(coalitions)))
        worth: dict[Coalition, float] = {}
        full: list[Rollout] = []
        for coalition, rollouts in zip(coalitions, runs, strict=True):
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
        # ties go to the first role name in alphabetical order, as in the reference
        return min(sorted(by_prompt), key=lambda role: by_prompt[role])

    async def write_lessons(self, target: str, shapley: float | None, full_runs: Sequence[Rollout],
                            number: int) -> str:
        p = self.params
        replicas = sum(1 for agent in self.ctx.team.agents if agent.role == target) > 1
        losing, winning = cases_of([r for r in full_runs if r.usable], target,
                                   lambda rollout: task_text(rollout.trace, 4000), replicas=replicas,
                                   fail_below=p.fail_below, limits=self.limits)
        prompt = lessons_prompt(role=target, team=self.team, shapley=shapley, losing=losing, winning=winning,
                                fewest=p.min_new_lessons, most=p.max_new_lessons, revision=number)
        reply = await self.reflection.ask(prompt, purpose="lessons", temperature=p.reflection_temperature,
                                          top_p=p.reflection_top_p)
        return parse_block(reply)

    def candidate(self, current: Candidate, target: str, block: str) -> Candidate:
        if not block:
            return current
        seed_prompt = self.seed.components[f"role/{target}"]
        text = with_lessons(seed_prompt, self.lessons[target] + [block], keep=self.params.max_lessons)
        return current.with_component(f"role/{target}", text)

    async def _run(self, candidate: Candidate, ids: Sequence[str], phase: str, sample: int,
                   active: Sequence[str] | None = None) -> list[Rollout]:
        """Fresh samples every cycle, as online optimization observes the team anew: nothing is
        served from an earlier cycle's cache, so every cycle spends what its size says."""
        rollouts = await self.ctx.evaluator.evaluate(candidate, ids, phase=phase, sample=sample, active=active)
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
            "plan": self.plan.kind,
            "coalition_plan": [coalition_label(c, self.plan.players) for c in self.plan.coalitions],
            "permutations": [list(order) for order in self.plan.permutations],
            "coalition_batch": self.batch,
            "acceptance_batch": self.accept,
            "cycle_cost": self.cycle_cost,
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
