"""Test-only: scripted jobs for the job-page tests (the real engine, teams and grader; the scripted
model server stands in for the model).

``OneRoleEdit`` (registered as ``one_role_edit``) scores the seed and one child that appends the
``SOLVE_ALL`` marker to a single role's prompt (``method_params.role``) on the training problems,
and returns the better one; with ``method_params.always`` it returns the child whatever it scored
(so validation can reject it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tracking_support import MODEL_ID, SOLVE_ALL

from optimizers.base import OptimizationResult, OptimizeContext, Optimizer
from optimizers.candidate import Candidate
from optimizers.registry import _REGISTERED, register_optimizer

METHOD = "one_role_edit"


class OneRoleEdit(Optimizer):
    needs_reflection = False

    async def optimize(
        self, seed: Candidate, *, train: Sequence[str], val: Sequence[str], ctx: OptimizeContext
    ) -> OptimizationResult:
        key = f"role/{ctx.method_params['role']}"
        child = seed.with_component(key, f"{seed.components[key]}\n{SOLVE_ALL}")
        best, best_score = seed, -1.0
        for candidate in (seed, child):
            scored = [r for r in await ctx.evaluator.evaluate(candidate, list(train)) if r.usable]
            if not scored:
                break
            score = sum(r.score for r in scored) / len(scored)
            if score > best_score or (candidate is child and ctx.method_params.get("always")):
                best, best_score = candidate, score
                ctx.commit_incumbent(best, best_score)
        return OptimizationResult(best=best, stop_reason="schedule_done")


def register_one_role_edit() -> None:
    if METHOD not in _REGISTERED:
        register_optimizer(METHOD)(OneRoleEdit)


def run_edit_job(out: Path, base_url: str, *, topology: str, team_size: int, role: str, always: bool = False,
                 tracker: Any = None) -> dict[str, Any]:
    from optimizers.protocol.grid.config import JobConfig, ModelSpec
    from optimizers.protocol.job.engine import JobRuntime, run_job

    register_one_role_edit()
    config = JobConfig(method=METHOD, method_params={"role": role, "always": always}, topology=topology,
                       model=ModelSpec("scripted", MODEL_ID, (base_url,)), seed=0, out=out, team_size=team_size,
                       data="builtin", budget=12, concurrency=4, quiet=True, allow_any_cell=True)
    runtime = JobRuntime(tracker=tracker, retry_delay_s=0.0, client_max_retries=0, client_backoff_s=0.0)
    return run_job(config, runtime)
