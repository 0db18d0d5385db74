"""Test-only pieces shared by the tracking, launcher and Optuna tests.

- ``team_script()``: the scripted model answers built-in problems with their reference solution
  when the system prompt carries ``SOLVE_ALL`` (or the problem is in ``SEED_SOLVES``), else with a
  real but wrong program.
- ``ProbeSearch``: a tiny method that spends budget (seed + one marked variant on the train ids),
  so a job has charged rollouts, a learning curve and two candidates.
- ``run_app(...)``: the Hydra app in a subprocess (the real command line), at the repo root.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from optimizers.base import OptimizationResult, OptimizeContext, Optimizer
from optimizers.candidate import Candidate
from optimizers.registry import _REGISTERED, register_optimizer

REPO = Path(__file__).resolve().parents[2]
SOLVE_ALL = "<<solve-all>>"
MODEL_ID = "scripted/team-model"
SEED_SOLVES = frozenset({"builtin_temperature_swing", "builtin_count_prefixed", "builtin_travel_time",
                         "builtin_kth_distinct", "demo_stdin", "demo_functional"})


def team_script() -> Any:
    from topologies.scripted import FunctionRule, Script, builtin_answers

    answer = builtin_answers(lambda request, problem_id: SOLVE_ALL in request.system or problem_id in SEED_SOLVES)
    return Script([FunctionRule("solve", answer)], default=None)


class ProbeSearch(Optimizer):
    needs_reflection = False

    async def optimize(
        self, seed: Candidate, *, train: Sequence[str], val: Sequence[str], ctx: OptimizeContext
    ) -> OptimizationResult:
        role = sorted(k for k in seed.components if k.startswith("role/"))[0]
        variant = seed.with_component(role, f"{seed.components[role]}\n{SOLVE_ALL}")
        best, best_score = seed, -1.0
        for candidate in (seed, variant):
            rollouts = [r for r in await ctx.evaluator.evaluate(candidate, list(train)) if r.usable]
            if not rollouts:
                break
            score = sum(r.score for r in rollouts) / len(rollouts)
            ctx.tracker.log_candidate(candidate, train_score=score)
            if score > best_score:
                best, best_score = candidate, score
            ctx.commit_incumbent(best, best_score)  # the learning curve plots these commits
        return OptimizationResult(best=best, stop_reason="schedule_done")


def register_probe() -> None:
    if "tracking_probe" not in _REGISTERED:
        register_optimizer("tracking_probe")(ProbeSearch)


def app_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                "WANDB_SILENT": "true", "PYTHONWARNINGS": "ignore"})
    env.pop("WANDB_API_KEY", None)
    env.update(extra)
    return env


def job_overrides(base_url: str, runs_root: Path) -> list[str]:
    return ["method=identity", "topology=single", "model=custom", f"model.id={MODEL_ID}",
            f"task_endpoints=[{base_url}]", "data=builtin", "budget=4", "allow_any_cell=true",
            f"runs_root={runs_root}", "quiet=true", "concurrency=4"]


def run_app(args: Sequence[str], *, timeout: float = 240, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "optimizers.protocol.run", *args], cwd=REPO,
                          env=env or app_env(), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)
