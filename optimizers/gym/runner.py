"""One gym job: a method from the registry optimizes a world's seed under a budget.

The method is used only through the common seam (registry, ``Optimizer.optimize``, the real
``BudgetedEvaluator`` and ``Budget``, ``OptimizeContext``). What it deploys (``result.best``) is
scored exactly by the world; its committed incumbents give the anytime curve of exact success over
charged rollouts. A job writes ``result.json`` atomically when it ends; a rerun skips jobs whose
result exists for the same method version and world table, and starts unfinished ones afresh.

Common random numbers: the request seed of a rollout is drawn from (world, phase, problem,
sample) only, never from the method, the budget or the candidate, so every method and budget
sees the same draws on an instance (the outcome still depends on the configuration, see
``world``). A world with ``legacy_draws`` (the first gym's corner) keys the request seed as the
first gym did instead: on the job (its world name without ``legacy_`` and instance, row, budget,
seed) and the candidate, so no two methods share draws.

Rows: a row is a registered method at its defaults, or a *budget-scaled variant* (``gepa_scaled``,
``mipro_scaled``, ``tavo_scaled``): the method with its schedule knobs scaled with the budget
(``SCALED``), so a schedule that ignores the budget is shown both ways. The reference defaults
are untouched.
"""

from __future__ import annotations

import asyncio

import shutil
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optimizers.base import OptimizeContext, OptimizerInfrastructureError
from optimizers.budget import Budget
from optimizers.evaluator import BudgetedEvaluator
from optimizers.gym.models import GymModel
from optimizers.gym.system import TASK_MODEL_ID, GymSystem, seed_candidate
from optimizers.gym.world import Configuration, World, unit_draw
from optimizers.gym.worlds import LEGACY, make_world
from optimizers.journal import read_json, short_hash, write_json_atomic
from optimizers.registry import get_optimizer_class

RESULT_NAME = "result.json"
GYM_SCHEMA = 2
TRAIN_SHARE = 0.6  # of a world's problems, rounded to a multiple of GEPA's minibatch of 3 (9 of 14)
TARGETS = (0.5, 0.9, 1.0)  # "rollouts to X %" for these shares of the possible gain


def _gepa(budget: int, train: int, val: int) -> dict[str, Any]:
    evals = max(5, budget // (train + val))  # GEPA's metric-call cap is max_full_evals x (train + val)
    return {"max_full_evals": evals, "early_stop_patience": max(3, evals // 3)}


def _mipro(budget: int, train: int, val: int) -> dict[str, Any]:
    # Bootstrapping runs the train set once; each trial scores a configuration on the validation
    # set; the instruction proposals grow with the trials.
    trials = max(3, (budget - train) // max(val, 1))
    return {"num_trials": trials, "num_candidates": max(3, min(12, trials // 4))}


def _tavo(budget: int, train: int, val: int) -> dict[str, Any]:
    rounds = max(5, budget // 30)  # a round: 6 train rollouts x 2 attempts + a validation batch
    return {"max_outer_rounds": rounds, "patience": max(2, rounds // 4)}


# Row -> (registered method, its params from the budget and the train / validation sizes).
SCALED: Mapping[str, tuple[str, Callable[[int, int, int], dict[str, Any]]]] = {
    "gepa_scaled": ("gepa", _gepa), "mipro_scaled": ("mipro", _mipro), "tavo_scaled": ("tavo", _tavo),
}


def row_method(row: str) -> str:
    return SCALED[row][0] if row in SCALED else row


@dataclass(frozen=True, slots=True)
class GymJob:
    world: str  # a world name (optimizers.gym.worlds): KIND[-TOPOLOGY][@INSTANCE]
    method: str  # a row: a registered method or a budget-scaled variant
    budget: int
    seed: int  # the method's seed (the instance number in a run)
    params: tuple[tuple[str, Any], ...] = ()  # extra method params (ctx.method_params)
    knobs: tuple[tuple[str, Any], ...] = ()  # world model knobs (sensitivity sweeps)

    @property
    def variant(self) -> str:
        """The row's folder name: its name, plus a hash of extra params."""
        return self.method if not self.params else f"{self.method}@{short_hash(dict(self.params), 8)}"

    @property
    def world_folder(self) -> str:
        return self.world if not self.knobs else f"{self.world}~{short_hash(dict(self.knobs), 8)}"

    @property
    def key(self) -> str:
        return f"{self.world_folder}/{self.variant}/b{self.budget}/s{self.seed}"

    def directory(self, out: Path) -> Path:
        return out / "jobs" / self.world_folder / self.variant / f"b{self.budget}" / f"s{self.seed}"

    def method_params(self, train: int = 9, val: int = 5) -> dict[str, Any]:
        scaled = SCALED[self.method][1](self.budget, train, val) if self.method in SCALED else {}
        return {**scaled, **dict(self.params)}

    def to_dict(self) -> dict[str, Any]:
        return {"world": self.world, "method": self.method, "budget": self.budget, "seed": self.seed,
                "params": dict(self.params), "knobs": dict(self.knobs)}


def canonical(value: Any) -> Any:
    """A process-independent form of a world (a frozenset's order follows the string hash seed,
    so its repr differs between processes)."""
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # Fields marked OMIT_DEFAULT count only when set, so adding one keeps old digests.
        return {f.name: canonical(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not (f.metadata.get("omit_default") and getattr(value, f.name) == f.default)}
    if isinstance(value, (frozenset, set)):
        return sorted(canonical(v) for v in value)
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return value


def world_digest(job: GymJob, world: World | None = None) -> str:
    """Changes whenever the world's table or knobs change, so stale results are not reused."""
    return short_hash(canonical(world or make_world(job.world, dict(job.knobs))))


def method_version(row: str) -> str:
    try:
        return str(get_optimizer_class(row_method(row)).version)
    except LookupError:
        return "unavailable"


def split(world: World) -> tuple[list[str], list[str]]:
    order = sorted(world.problems, key=lambda p: unit_draw(world.draw_name, "split", p))
    cut = max(3, 3 * round(TRAIN_SHARE * len(order) / 3))
    return order[:cut], order[cut:]


def seed_function(job: GymJob, world: World) -> Callable[[str, str, str, int], int]:
    """The evaluator's request seed: common random numbers (world, phase, problem, sample), or
    with ``world.legacy_draws`` the first gym's keying (see the module docstring)."""
    if world.legacy_draws:
        old_world = job.world.partition("@")[0].removeprefix(LEGACY)
        key = f"{old_world}/{job.variant}/b{job.budget}/s{job.seed}"
        return lambda phase, owner, pid, sample: int(unit_draw(key, phase, owner, pid, sample) * 2**31)
    salt = world.draw_name
    return lambda phase, owner, pid, sample: int(unit_draw(salt, phase, pid, sample) * 2**31)


def config_dict(config: Configuration) -> dict[str, list[str]]:
    return {"facts": sorted(config.facts), "distractors": sorted(config.distractors)}


def rollouts_to(curve: list[tuple[int, float]], seed_success: float, optimum: float, share: float) -> int | None:
    """The first charged count from which the incumbent reaches ``share`` of the possible gain
    and *stays* there to the end (the deployed value included). When there is no gain to make
    (the seed is optimal), the target is the optimum itself, so a method that makes the seed
    worse and deploys that never gets there. None: never."""
    target = seed_success + share * max(0.0, optimum - seed_success)
    reached: int | None = None
    for charged, value in curve:
        if value >= target - 1e-9:
            reached = charged if reached is None else reached
        else:
            reached = None
    return reached


def anytime(curve: list[tuple[int, float]], budget: int, points: int = 24) -> list[list[float]]:
    """The incumbent's exact success at log-spaced charged counts up to the budget (a step
    function of the committed incumbents), for anytime curves averaged over instances."""
    grid = sorted({0, *(int(round(budget ** (i / (points - 1)))) for i in range(points))})
    out, index, value = [], 0, curve[0][1]
    for x in grid:
        while index < len(curve) and curve[index][0] <= x:
            value = curve[index][1]
            index += 1
        out.append([x, round(value, 6)])
    return out


async def optimize(job: GymJob, workdir: Path, world: World | None = None) -> dict[str, Any]:
    """Run ``job`` (on ``world`` instead of the named one when given: a hand-built world)."""
    world = world or make_world(job.world, dict(job.knobs))
    seed, spec, roster = seed_candidate(world)
    system = GymSystem(world, spec, roster)
    if system.configuration(seed) != world.seed_configuration():
        raise AssertionError(f"world {world.name}: the seed prompts do not carry exactly the seed facts")
    train, val = split(world)
    budget = Budget(job.budget)
    evaluator = BudgetedEvaluator(
        system, budget,
        seed_for=seed_function(job, world),
        allowed_ids=world.problems, journal_dir=workdir / "optimization", concurrency=8,
        max_infrastructure_retries=0, retry_delay_s=0.0,
    )
    model = GymModel(lexicon=world.lex, channel=world.channel, judge_noise=world.judge_noise, salt=world.draw_name,
                     probe=lambda prompt, context, s: system.probe(seed.components, prompt, context, s),
                     model_id=TASK_MODEL_ID)
    seed_success, optimum = world.expected_success(world.seed_configuration()), world.optimal_success()
    curve: list[tuple[int, float]] = [(0, seed_success)]

    def on_incumbent(candidate: Any, score: float | None, charged: int) -> None:
        curve.append((charged, world.expected_success(system.configuration(candidate))))

    cls = get_optimizer_class(row_method(job.method))
    params = job.method_params(len(train), len(val))
    ctx = OptimizeContext(
        evaluator=evaluator, budget=budget, seed=job.seed, workdir=workdir / "native",
        reflection=model if getattr(cls, "needs_reflection", True) else None,
        on_incumbent=on_incumbent, team=roster, task_model=model, method_params=params,
    )
    ctx.workdir.mkdir(parents=True, exist_ok=True)
    status, error, stop_reason, deployed, traceback_tail = "completed", None, None, seed, None
    cpu_started = time.process_time()
    try:
        result = await cls().optimize(seed, train=train, val=val, ctx=ctx)
        deployed, stop_reason = result.best, result.stop_reason
    except OptimizerInfrastructureError as exc:  # the job would deploy the seed
        status, error = "infrastructure_invalid", f"{type(exc).__name__}: {exc}"[:1000]
    except Exception as exc:  # noqa: BLE001 - a crashing method is a result of the gym, not its failure
        status, error = "crashed", f"{type(exc).__name__}: {exc}"[:1000]
        traceback_tail = traceback.format_exc()[-3000:]
    await evaluator.drain()
    config = system.configuration(deployed)
    value = world.expected_success(config)
    curve.append((budget.charged, value))
    gain = optimum - seed_success
    uncharged = {s: u for s, u in model.usage.items() if s != "reflection"}
    return {
        "schema": GYM_SCHEMA,
        **job.to_dict(),
        "method_params": params,
        "method_version": method_version(job.method),
        "world_digest": world_digest(job, world),
        "world_topology": world.topology,
        "status": status,
        "error": error,
        **({"traceback": traceback_tail} if status == "crashed" else {}),
        "stop_reason": stop_reason,
        "charged": budget.charged,
        "budget_share": budget.charged / job.budget if job.budget else 0.0,
        "seed_success": seed_success,
        "optimal_success": optimum,
        "deployed_success": value,
        "regret": optimum - value,
        "seed_regret": optimum - seed_success,
        "gain_share": (value - seed_success) / gain if gain > 1e-12 else None,
        **{f"rollouts_to_{round(t * 100)}": rollouts_to(curve, seed_success, optimum, t) for t in TARGETS},
        "curve": [[c, round(v, 6)] for c, v in curve],
        "anytime": anytime(curve, job.budget),
        "deployed_configuration": config_dict(config),
        "deployed_candidate_id": deployed.id,
        "model_calls": model.calls,
        "uncharged_calls": sum(u["calls"] for u in uncharged.values()),
        "uncharged_tokens": sum(u["tokens"] for u in uncharged.values()),
        "reflection_calls": model.usage.get("reflection", {}).get("calls", 0),
        "reflection_tokens": model.usage.get("reflection", {}).get("tokens", 0),
        "usage": model.usage,
        "unknown_reply_shapes": dict(model.reflector.unknown),
        "cpu_s": round(time.process_time() - cpu_started, 3),
    }


def run_job(job: GymJob, out: Path, *, keep_journals: bool = False, world: World | None = None) -> dict[str, Any]:
    """Run ``job`` unless its result exists (same method version and world); returns the result."""
    directory = job.directory(out)
    result_path = directory / RESULT_NAME
    if result_path.exists():
        existing = read_json(result_path)
        current = (GYM_SCHEMA, method_version(job.method), world_digest(job, world))
        if (existing.get("schema"), existing.get("method_version"), existing.get("world_digest")) == current:
            return {**existing, "skipped": True}
    if directory.exists():  # an unfinished (killed) or outdated job: start it afresh
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    started = time.monotonic()
    result = asyncio.run(optimize(job, directory, world))
    result["wall_s"] = round(time.monotonic() - started, 3)
    if not keep_journals:
        for name in ("optimization", "native"):
            shutil.rmtree(directory / name, ignore_errors=True)
    write_json_atomic(result_path, result)
    return result



