"""Random search: blind proposals, greedy acceptance on paired minibatches.

Each step picks one editable component (role prompt or protocol part) at random and asks the
reflection model for a new version of it, showing only that component's current text: no
rollout, no failure, no score (``Task: random/propose.``), so a proposal is a draw from what the
model writes unprompted (its vocabulary). The child and the incumbent then run on the same
minibatch of training problems with the same sample index (so with seeds keyed on (problem,
sample) the comparison is paired); the child replaces the incumbent only when it solves strictly
more. Each step uses a fresh sample index, so the incumbent's score is re-drawn rather than fixed
by one lucky batch. It stops when the budget cannot pay another step.

It is the floor of the comparison: a method that reads failing turns, judges or credit should
beat it at the same budget; one that does not is not using what it reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from optimizers.base import OptimizationResult, OptimizeContext, Optimizer
from optimizers.candidate import Candidate
from optimizers.reflection import ReflectionModel, RolloutGuard, extract_fenced, params_from, record_step
from optimizers.registry import register_optimizer

PROMPT = """Here is the current instruction of the `{name}` component of a team of LLM agents that
solve competitive programming problems.

```
{text}
```

Write a new version of this instruction. Reply with the new instruction in one fenced block."""


@dataclass(frozen=True, slots=True)
class RandomParams:
    minibatch: int = 3  # training problems per paired comparison
    max_idle_steps: int = 20  # steps in a row whose proposal failed or changed nothing
    max_unusable_rollouts: int = 0

    def check(self) -> None:
        if self.minibatch < 1 or self.max_idle_steps < 1:
            raise ValueError("random: minibatch and max_idle_steps must be >= 1")


@register_optimizer("random")
class RandomSearchOptimizer(Optimizer):
    version = "1"

    async def optimize(
        self, seed: Candidate, *, train: Sequence[str], val: Sequence[str], ctx: OptimizeContext
    ) -> OptimizationResult:
        params: RandomParams = params_from(RandomParams, ctx.method_params, "random")
        model = ReflectionModel.from_context(ctx, "random")
        guard = RolloutGuard("random", params.max_unusable_rollouts)
        problems = list(train) or list(val)
        keys = sorted(k for k in seed.components if k.startswith(("role/", "protocol/")))
        incumbent, history, idle, step, committed = seed, [], 0, 0, False
        batch_size = min(params.minibatch, len(problems))
        while keys and problems and ctx.budget.remaining >= 2 * batch_size and idle < params.max_idle_steps:
            step += 1
            key = ctx.rng.choice(keys)
            reply = await model.ask(PROMPT.format(name=key, text=incumbent.components[key]), purpose="propose")
            text = extract_fenced(reply)
            if not text or text == incumbent.components[key]:
                idle += 1
                continue
            idle = 0
            child = incumbent.with_component(key, text)
            batch = ctx.rng.sample(problems, batch_size)
            ours = await ctx.evaluator.evaluate(incumbent, batch, sample=step)
            theirs = await ctx.evaluator.evaluate(child, batch, sample=step)
            guard.check([*ours, *theirs])
            if any(r.budget_exhausted for r in (*ours, *theirs)):
                break
            if not committed:  # the curve starts at the seed, with the score measured for it
                ctx.commit_incumbent(incumbent, _solved(ours) / batch_size)
                committed = True
            accepted = _solved(theirs) > _solved(ours)
            if accepted:
                incumbent = child
                ctx.commit_incumbent(incumbent, _solved(theirs) / batch_size)
            record_step(ctx, "random", history, {"step": step, "component": key, "accepted": accepted,
                                                 "incumbent": _solved(ours), "child": _solved(theirs)}, {})
        stop = "budget" if ctx.budget.remaining < 2 * batch_size else "idle" if idle else "done"
        return OptimizationResult(best=incumbent, stop_reason=stop, history=history,
                                  metadata={"steps": step, "reflection": model.usage()})


def _solved(rollouts: Sequence[Any]) -> float:
    return sum(r.score for r in rollouts if r.usable)
