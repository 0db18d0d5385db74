"""Test-only pieces for job tests (imported by conftest.py and by job_entry.py in a subprocess).

- ``team_script``: a scripted model that answers built-in problems with their reference
  solutions: correct when the system prompt carries ``SOLVE_ALL``, else correct only for the
  problems in ``SEED_SOLVES`` and wrong (a real, failing program) for the others.
- ``ScriptedSearch``: a tiny deterministic method that spends budget: it scores the seed and
  ``variants`` marked children on train and returns the best (ties keep the earlier one).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from optimizers.base import (
    OptimizationResult,
    OptimizeContext,
    Optimizer,
    OptimizerInfrastructureError,
)
from optimizers.candidate import Candidate
from optimizers.protocol.grid.config import JobConfig, ModelSpec
from optimizers.registry import _REGISTERED, register_optimizer

REPO = Path(__file__).resolve().parents[2]
SOLVE_ALL = "<<solve-all>>"
MODEL_ID = "scripted/team-model"
# Half of each built-in split: train 3/6, val 2/4, test 2/4 for the seed prompts.
SEED_SOLVES = frozenset({
    "builtin_temperature_swing", "builtin_count_prefixed", "builtin_travel_time",
    "builtin_kth_distinct", "builtin_binary_strings",
    "demo_stdin", "demo_functional",
})


def team_script(*, faults: Sequence[Any] = (), latency_s: float = 0.0) -> Any:
    from topologies.scripted import FunctionRule, Script, builtin_answers

    answer = builtin_answers(lambda request, problem_id: SOLVE_ALL in request.system or problem_id in SEED_SOLVES)
    return Script([FunctionRule("solve", answer, faults=tuple(faults), latency_s=latency_s)], default=None)


def job_config(out: Path, base_url: str, **overrides: Any) -> JobConfig:
    values: dict[str, Any] = {
        "method": "identity",
        "topology": "single",
        "model": ModelSpec("scripted", MODEL_ID, (base_url,)),
        "seed": 0,
        "out": out,
        "team_size": 1,
        "data": "builtin",
        "budget": 12,
        "concurrency": 4,
        "quiet": True,
    }
    values.update(overrides)
    return JobConfig(**values)


def fast_runtime(**overrides: Any) -> Any:
    from optimizers.protocol.job.engine import JobRuntime

    values = {"retry_delay_s": 0.0, "client_max_retries": 0, "client_backoff_s": 0.0}
    values.update(overrides)
    return JobRuntime(**values)


class ScriptedSearch(Optimizer):
    needs_reflection = False

    async def optimize(
        self, seed: Candidate, *, train: Sequence[str], val: Sequence[str], ctx: OptimizeContext
    ) -> OptimizationResult:
        params = ctx.method_params
        variants = int(params.get("variants", 1))
        role_key = sorted(k for k in seed.components if k.startswith("role/"))[0]
        candidates = [seed] + [
            seed.with_component(role_key, f"{seed.components[role_key]}\n{SOLVE_ALL} v{i}") for i in range(variants)
        ]
        best, best_score, history = seed, -1.0, []
        stop = "schedule_done"
        for candidate in candidates:
            rollouts = await ctx.evaluator.evaluate(candidate, train)
            if params.get("fail_on_unusable") and any(
                not r.usable and not r.budget_exhausted for r in rollouts
            ):
                raise OptimizerInfrastructureError("a train rollout failed after its retries")
            scored = [r for r in rollouts if r.usable]
            if not scored:
                stop = "budget"
                break
            score = sum(r.score for r in scored) / len(scored)
            history.append({"candidate_id": candidate.id, "score": score, "n": len(scored)})
            if score > best_score:
                best, best_score = candidate, score
        return OptimizationResult(best=best, stop_reason=stop, history=history)


def register_test_methods() -> None:
    if "scripted_search" not in _REGISTERED:
        register_optimizer("scripted_search")(ScriptedSearch)
