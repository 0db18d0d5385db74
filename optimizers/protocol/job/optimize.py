"""The optimize phase: the method searches under its budget; seals ``optimization.json``.

Every rollout goes through the budgeted evaluator, which journals it, so a killed search resumes
without charging anything twice. An infrastructure failure of the method ends the phase with the
seed as incumbent and says why; any other error stops the job with its journals kept.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from optimizers.base import OptimizationResult, OptimizeContext, OptimizerInfrastructureError, Tracker
from optimizers.budget import Budget
from optimizers.candidate import Candidate
from optimizers.evaluator import MODE_OPTIMIZE, BudgetedEvaluator, Rollout
from optimizers.journal import canonical_json, read_jsonl, short_hash, without_keys
from optimizers.protocol.job.console import log, progress
from optimizers.protocol.job.errors import JobError
from optimizers.protocol.job.jobspec import json_safe, registry_key
from optimizers.protocol.job.learning_curve import LearningCurve
from optimizers.protocol.job.seeds import request_seed
from optimizers.protocol.job.selection import find_forbidden_keys
from optimizers.protocol.job.truncation import count_replies, reflection_truncation
from optimizers.registry import get_optimizer_class

LEARNING_CURVE_EVERY = 10


async def optimize_phase(job: Any) -> dict[str, Any]:
    existing = job.store.read("optimization")
    if existing is not None:
        return existing
    cfg = job.cfg
    search = job.data.search_problems()  # fail early on data problems
    del search
    budget = Budget(cfg.budget)
    evaluator = BudgetedEvaluator(
        job.system,
        budget,
        seed_for=lambda phase, cid, pid, sample: request_seed(job.job_id, phase, cid, pid, sample),
        allowed_ids=job.split_ids.train + job.rows.search,  # never the held-out selection rows
        journal_dir=job.store.optimization_dir,
        concurrency=cfg.concurrency,
        max_infrastructure_retries=cfg.max_infrastructure_retries,
        retry_delay_s=job.runtime.retry_delay_s,
        mode=MODE_OPTIMIZE,
    )
    resumed = evaluator.resumed_rollouts
    curve = LearningCurve(
        job.store.learning_curve_path,
        maximum=cfg.budget,
        seed_candidate_id=job.seed_candidate.id,
        every=LEARNING_CURVE_EVERY,
    )
    curve.start()
    evaluator.add_observer(curve)
    tracker = job.tracker()

    def on_incumbent(candidate: Candidate, score: float | None, charged: int) -> None:
        curve.commit(candidate.id, score, charged)
        tracker.log(charged, {"incumbent/score": score, "incumbent/candidate_id": candidate.id})

    evaluator.add_observer(_tracking_observer(tracker))
    optimizer_cls = get_optimizer_class(cfg.method)
    needs_reflection = getattr(optimizer_cls, "needs_reflection", True)
    ctx = OptimizeContext(
        evaluator=evaluator,
        budget=budget,
        seed=cfg.seed,
        workdir=job.store.native_dir,
        reflection=job.reflection if needs_reflection else None,
        tracker=tracker,
        method_params=dict(cfg.method_params),
        reflection_decoding=cfg.reflection_decoding,
        on_incumbent=on_incumbent,
        team=_team_roster(job.base_spec),
        task_model=job.client,
    )
    log(cfg, f"optimizing {cfg.method} on {registry_key(cfg)} model={cfg.model.id} seed={cfg.seed} "
              f"B={cfg.budget}" + (f" (resuming: {resumed} finished rollouts in the journal)" if resumed else ""))
    job.store.native_dir.mkdir(parents=True, exist_ok=True)
    bar = None if cfg.quiet else progress(f"optimize {cfg.method}", cfg.budget)
    if bar is not None:
        evaluator.add_observer(lambda rollout, b: bar.update(1) if rollout.charged else None)
    started = time.monotonic()
    status, failure_kind, error = "completed", None, None
    try:
        result = await optimizer_cls().optimize(
            job.seed_candidate, train=list(job.split_ids.train), val=list(job.rows.search), ctx=ctx
        )
        await evaluator.drain()
    except OptimizerInfrastructureError as exc:
        await evaluator.drain()
        status, failure_kind, error = "failed", "infrastructure_invalid", str(exc)[:2000]
        result = OptimizationResult(best=job.seed_candidate, stop_reason="infrastructure_failure")
    except JobError:
        raise
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        raise JobError(
            f"optimization failed ({type(exc).__name__}: {exc}); its journals are kept, "
            "rerun the same command to resume"
        ) from None
    finally:
        if bar is not None:
            bar.close()
    if error is not None:
        # One line, also in quiet runs (after the bar): the job goes on with the seed, and says why.
        print(f"warning: optimization failed: {' '.join(error.split())}", file=sys.stderr, flush=True)
    check_result(job, result, budget)
    snapshot = budget.snapshot()
    evaluator.note_candidate(result.best)
    final_score = (result.metadata or {}).get("incumbent_val_score")
    curve.finish(charged=snapshot["charged"], final_candidate_id=result.best.id,
                 final_score=final_score if isinstance(final_score, int | float) else None,
                 stop_reason=result.stop_reason)
    reflection_usage = _reflection_usage(result, ctx.reflection)
    payload = {
        "job_id": job.job_id,
        "cell_id": job.cell_id,
        "method": cfg.method,
        "status": status,
        "failure_kind": failure_kind,
        "error": error,
        "stop_reason": result.stop_reason,
        "seed_candidate": job.seed_candidate.to_dict(),
        "incumbent_candidate": result.best.to_dict(),
        "budget": snapshot,
        "usage": {"task": attempts_usage(job.store.optimization_dir / "attempts.jsonl"),
                  "reflection": reflection_usage},
        "uncharged_calls": uncharged_calls(result),
        "proposals": proposals_evaluated(job.store.optimization_dir / "rollouts.jsonl", job.seed_candidate.id),
        "elapsed_seconds": round(time.monotonic() - started, 3),
        "history": json_safe(list(result.history)),
        "metadata": json_safe(dict(result.metadata)),
        "training_ids": list(job.split_ids.train),
        "validation_ids": list(job.rows.search),  # what the method was given
        "selection_mode": job.rows.mode,
    }
    payload["optimization_id"] = outcome_id(payload)
    payload["truncation"] = {
        "task": count_replies(read_jsonl(job.store.optimization_dir / "rollouts.jsonl")),
        "reflection": reflection_truncation(reflection_usage),
    }
    record = job.store.write("optimization", payload)
    tracker.summary({"optimization/charged": snapshot["charged"], "optimization/status": status,
                     "optimization/stop_reason": result.stop_reason,
                     **uncharged_summary(payload["uncharged_calls"])})
    log(cfg, f"optimization {status}: stop={result.stop_reason} charged={snapshot['charged']}/{cfg.budget} "
              f"infra={snapshot['infrastructure_failures']}")
    return record


def check_result(job: Any, result: Any, budget: Budget) -> None:
    from optimizers.protocol.job.lcb_system import apply_candidate

    if not isinstance(result, OptimizationResult) or not isinstance(result.best, Candidate):
        raise JobError(f"method {job.cfg.method} returned {type(result).__name__}, not an OptimizationResult")
    if budget.reserved:
        raise JobError(f"method {job.cfg.method} left {budget.reserved} rollout(s) running")
    if budget.charged > budget.maximum:  # the budget makes this impossible; keep the guard
        raise JobError("budget overspent")
    leaks = list(find_forbidden_keys({"history": list(result.history), "metadata": dict(result.metadata)}))
    if leaks:
        raise JobError(f"method {job.cfg.method} output has test-only keys: {', '.join(leaks[:5])}")
    try:
        canonical_json({"history": list(result.history), "metadata": dict(result.metadata)})
    except (TypeError, ValueError) as exc:
        raise JobError(f"method {job.cfg.method} returned history/metadata that is not JSON: {exc}") from None
    try:
        apply_candidate(job.base_spec, result.best)
    except ValueError as exc:
        raise JobError(f"method {job.cfg.method} returned an unusable candidate: {exc}") from None


def attempts_usage(path: Path) -> dict[str, int]:
    """Token/call totals over every journaled attempt (also those of earlier, killed processes)."""
    total: dict[str, int] = {"attempts": 0}
    for record in read_jsonl(path):
        total["attempts"] += 1
        for key, value in (record.get("usage") or {}).items():
            total[key] = total.get(key, 0) + int(value)
    return total


def proposals_evaluated(path: Path, seed_id: str) -> dict[str, int]:
    """How many candidates other than the seed got charged rollouts, and how many rollouts they
    got: the first thing to check in a small run is that the method proposed something and tested it."""
    per_candidate: dict[str, int] = {}
    for record in read_jsonl(path):
        if record.get("charged") and record.get("candidate_id") != seed_id:
            per_candidate[record["candidate_id"]] = per_candidate.get(record["candidate_id"], 0) + 1
    return {"candidates_evaluated": len(per_candidate), "rollouts": sum(per_candidate.values())}


def _reflection_usage(result: Any, client: Any) -> dict[str, Any] | None:
    """The method's own reflection totals when it reports them (they include calls replayed from
    its journal after a resume); else what the client counted in this process."""
    reported = (result.metadata or {}).get("reflection") if result is not None else None
    if isinstance(reported, Mapping) and "calls" in reported:
        return json_safe(dict(reported))
    return _client_usage(client)


UNCHARGED_KEYS = ("calls", "failed", "truncated", "prompt_tokens", "completion_tokens")  # truncated: cut, still used


OUTCOME_KEYS = ("job_id", "status", "failure_kind", "stop_reason", "incumbent_candidate", "budget", "history",
                "metadata")
# Counts of what this process did rather than of what the search found: a job resumed after a
# kill replays from its journals the model calls the killed process made live (``live_calls`` /
# ``replayed_calls`` split differently, every call, reply and token the same), and MASPOB refits
# its surrogate once for the replayed pulls (``surrogate_fits``).
PROCESS_HISTORY = frozenset({"live_calls", "replayed_calls", "surrogate_fits"})


def without_process_history(value: Any) -> Any:
    """``value`` with every ``PROCESS_HISTORY`` count left out, at any depth."""
    return without_keys(value, PROCESS_HISTORY)


def outcome_id(payload: Mapping[str, Any]) -> str:
    """What an optimization came to, without timings or what one process did: equal for a run
    that was killed and resumed and for one that ran straight through."""
    return short_hash(without_process_history({k: payload[k] for k in OUTCOME_KEYS}), 24)


def uncharged_calls(result: Any) -> dict[str, dict[str, int]]:
    """``metadata["uncharged_calls"]`` of a method, checked and normalised (COST_SCHEMA):
    ``{purpose: {calls, failed, truncated, prompt_tokens, completion_tokens}}``; {} when it reports none."""
    reported = (result.metadata or {}).get("uncharged_calls") if result is not None else None
    if not isinstance(reported, Mapping):
        return {}
    out: dict[str, dict[str, int]] = {}
    for purpose, counts in sorted(reported.items()):
        if not isinstance(counts, Mapping):
            raise JobError(f"metadata.uncharged_calls.{purpose} is not an object")
        out[str(purpose)] = {key: int(counts.get(key, 0) or 0) for key in UNCHARGED_KEYS}
    return out


def uncharged_summary(calls: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    """W&B summary keys ``uncharged/<purpose>/<calls|prompt_tokens|completion_tokens>``."""
    return {f"uncharged/{purpose}/{key}": int(counts.get(key, 0))
            for purpose, counts in calls.items() for key in ("calls", "prompt_tokens", "completion_tokens")}


def _client_usage(client: Any) -> dict[str, int] | None:
    usage_by_role = getattr(client, "usage_by_role", None)
    if usage_by_role is None:
        return None
    total: dict[str, int] = {}
    for usage in usage_by_role().values():
        for key in ("calls", "prompt_tokens", "completion_tokens", "tool_calls"):
            total[key] = total.get(key, 0) + int(getattr(usage, key, 0))
    return total


def _team_roster(spec: Any) -> Any:
    from topologies.teams.layouts import team_roster

    return team_roster(spec.topology, spec.team_size)


def _tracking_observer(tracker: Tracker) -> Callable[[Rollout, Budget], None]:
    def observe(rollout: Rollout, budget: Budget) -> None:
        if rollout.charged:
            tracker.log(budget.charged, {"rollout/score": rollout.score, "budget/charged": budget.charged,
                                         "rollout/problem_id": rollout.problem_id,
                                         "rollout/candidate_id": rollout.candidate_id})
        else:
            tracker.log(budget.charged, {"rollout/unusable": 1, "rollout/status": rollout.status.value})

    return observe

