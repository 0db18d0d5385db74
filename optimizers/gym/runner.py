"""One gym job: a method from the registry optimizes a world's seed under a budget.

The method is used only through the common seam (registry, ``Optimizer.optimize``, the real
``BudgetedEvaluator`` and ``Budget``, ``OptimizeContext``). What it deploys (``result.best``) is
scored exactly by the world; its committed incumbents give the curve of exact success over
charged rollouts. A job writes ``result.json`` atomically when it ends; a rerun skips jobs whose
result exists for the same method version and world table, and starts unfinished ones afresh.
"""

from __future__ import annotations

import asyncio
import shutil
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optimizers.base import OptimizeContext, OptimizerInfrastructureError
from optimizers.budget import Budget
from optimizers.evaluator import BudgetedEvaluator
from optimizers.gym.models import GymModel
from optimizers.gym.system import TASK_MODEL_ID, GymSystem, seed_candidate
from optimizers.gym.world import Configuration, World, unit_draw
from optimizers.gym.worlds import make_world
from optimizers.journal import read_json, short_hash, write_json_atomic
from optimizers.registry import get_optimizer_class

RESULT_NAME = "result.json"
GYM_SCHEMA = 1
TRAIN_SHARE = 9  # of the 14 built-in problems (a multiple of GEPA's minibatch of 3); the rest: validation
GAIN_TARGET = 0.9  # "rollouts until 90 %": the first charged count reaching 90 % of the possible gain


@dataclass(frozen=True, slots=True)
class GymJob:
    world: str
    method: str
    budget: int
    seed: int
    params: tuple[tuple[str, Any], ...] = ()  # method params (ctx.method_params); () = the defaults

    @property
    def variant(self) -> str:
        """The method's folder name: its name, plus a hash of non-default params."""
        return self.method if not self.params else f"{self.method}@{short_hash(dict(self.params), 8)}"

    @property
    def key(self) -> str:
        return f"{self.world}/{self.variant}/b{self.budget}/s{self.seed}"

    def directory(self, out: Path) -> Path:
        return out / "jobs" / self.world / self.variant / f"b{self.budget}" / f"s{self.seed}"

    def to_dict(self) -> dict[str, Any]:
        return {"world": self.world, "method": self.method, "budget": self.budget, "seed": self.seed,
                "params": dict(self.params)}


def world_digest(name: str) -> str:
    """Changes whenever the world's table changes, so stale results are not reused."""
    return short_hash(repr(make_world(name)))


def method_version(method: str) -> str:
    try:
        return str(get_optimizer_class(method).version)
    except LookupError:
        return "unavailable"


def split(world: World) -> tuple[list[str], list[str]]:
    order = sorted(world.problems, key=lambda p: unit_draw(world.name, "split", p))
    return order[:TRAIN_SHARE], order[TRAIN_SHARE:]


def config_dict(config: Configuration) -> dict[str, list[str]]:
    return {"facts": sorted(config.facts), "distractors": sorted(config.distractors)}


def rollouts_to_target(curve: list[tuple[int, float]], seed_success: float, optimum: float) -> int | None:
    """The first charged count at which the incumbent reaches 90 % of the possible gain (0 when
    there is no gain to make); None when it never does."""
    if optimum - seed_success <= 1e-12:
        return 0
    target = seed_success + GAIN_TARGET * (optimum - seed_success)
    return next((charged for charged, value in curve if value >= target - 1e-12), None)


async def optimize(job: GymJob, workdir: Path) -> dict[str, Any]:
    world = make_world(job.world)
    seed, spec, roster = seed_candidate(world)
    system = GymSystem(world, spec, roster)
    if system.configuration(seed) != world.seed_configuration():
        raise AssertionError(f"world {world.name}: the seed prompts do not carry exactly the seed facts")
    train, val = split(world)
    budget = Budget(job.budget)
    evaluator = BudgetedEvaluator(
        system, budget,
        seed_for=lambda phase, cid, pid, sample: int(unit_draw(job.key, phase, cid, pid, sample) * 2**31),
        allowed_ids=world.problems, journal_dir=workdir / "optimization", concurrency=8,
        max_infrastructure_retries=0, retry_delay_s=0.0,
    )
    model = GymModel(world, model_id=TASK_MODEL_ID)
    seed_success, optimum = world.expected_success(world.seed_configuration()), world.optimal_success()
    curve: list[tuple[int, float]] = [(0, seed_success)]

    def on_incumbent(candidate: Any, score: float | None, charged: int) -> None:
        curve.append((charged, world.expected_success(system.configuration(candidate))))

    cls = get_optimizer_class(job.method)
    ctx = OptimizeContext(
        evaluator=evaluator, budget=budget, seed=job.seed, workdir=workdir / "native",
        reflection=model if getattr(cls, "needs_reflection", True) else None,
        on_incumbent=on_incumbent, team=roster, task_model=model, method_params=dict(job.params),
    )
    ctx.workdir.mkdir(parents=True, exist_ok=True)
    status, error, stop_reason, deployed = "completed", None, None, seed
    try:
        result = await cls().optimize(seed, train=train, val=val, ctx=ctx)
        deployed, stop_reason = result.best, result.stop_reason
    except OptimizerInfrastructureError as exc:  # the job would deploy the seed
        status, error = "infrastructure_invalid", f"{type(exc).__name__}: {exc}"[:1000]
    except Exception as exc:  # noqa: BLE001 - a crashing method is a result of the gym, not its failure
        status, error = "crashed", f"{type(exc).__name__}: {exc}"[:1000]
        traceback_tail = traceback.format_exc()[-3000:]
    else:
        traceback_tail = None
    await evaluator.drain()
    config = system.configuration(deployed)
    value = world.expected_success(config)
    curve.append((budget.charged, value))
    gain = optimum - seed_success
    return {
        "schema": GYM_SCHEMA,
        **job.to_dict(),
        "label": job.method + ("[" + ",".join(f"{k}={v}" for k, v in job.params) + "]" if job.params else ""),
        "method_version": method_version(job.method),
        "world_digest": world_digest(job.world),
        "world_topology": world.topology,
        "status": status,
        "error": error,
        **({"traceback": traceback_tail} if status == "crashed" else {}),
        "stop_reason": stop_reason,
        "charged": budget.charged,
        "seed_success": seed_success,
        "optimal_success": optimum,
        "deployed_success": value,
        "regret": optimum - value,
        "seed_regret": optimum - seed_success,
        "gain_share": (value - seed_success) / gain if gain > 1e-12 else None,
        "rollouts_to_90": rollouts_to_target(curve, seed_success, optimum),
        "curve": [[c, round(v, 6)] for c, v in curve],
        "deployed_configuration": config_dict(config),
        "deployed_candidate_id": deployed.id,
        "model_calls": model.calls,
        "unknown_reply_shapes": dict(model.reflector.unknown),
    }


def run_job(job: GymJob, out: Path, *, keep_journals: bool = False) -> dict[str, Any]:
    """Run ``job`` unless its result exists (same method version and world); returns the result."""
    directory = job.directory(out)
    result_path = directory / RESULT_NAME
    if result_path.exists():
        existing = read_json(result_path)
        current = (GYM_SCHEMA, method_version(job.method), world_digest(job.world))
        if (existing.get("schema"), existing.get("method_version"), existing.get("world_digest")) == current:
            return {**existing, "skipped": True}
    if directory.exists():  # an unfinished (killed) or outdated job: start it afresh
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    started = time.monotonic()
    result = asyncio.run(optimize(job, directory))
    result["wall_s"] = round(time.monotonic() - started, 3)
    if not keep_journals:
        for name in ("optimization", "native"):
            shutil.rmtree(directory / name, ignore_errors=True)
    write_json_atomic(result_path, result)
    return result
