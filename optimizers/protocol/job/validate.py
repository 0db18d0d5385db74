"""The validate phase: seed vs incumbent on the selection rows, keep or reject; seals ``selection.json``.

Both candidates are scored by uncharged, content-addressed evaluations (so the seed's is shared
with every other job of the condition); the decision rule lives in ``selection``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from optimizers.candidate import Candidate
from optimizers.journal import read_jsonl, short_hash
from optimizers.protocol.job.console import log
from optimizers.protocol.job.evaluation import Evaluation, collapse_samples, problem_means
from optimizers.protocol.job.optimism import optimism
from optimizers.protocol.job.selection import decide
from optimizers.protocol.job.truncation import count_replies


async def validate_phase(job: Any, optimization: Mapping[str, Any]) -> dict[str, Any]:
    existing = job.store.read("selection")
    if existing is not None:
        return existing
    from optimizers.protocol.job.lcb_system import apply_candidate

    cfg = job.cfg
    job.data.search_problems()
    seed = job.seed_candidate
    incumbent = Candidate.from_dict(optimization["incumbent_candidate"])
    forced: str | None = None
    if optimization["status"] != "completed":
        forced = "infrastructure_invalid_optimization"
    elif incumbent == seed:
        forced = "identical_candidate"
    else:
        try:
            apply_candidate(job.base_spec, incumbent)
        except ValueError:
            forced = "invalid_incumbent_candidate"
    val_ids = list(job.rows.selection)
    log(cfg, f"validating seed vs incumbent on {len(val_ids)} problems ({job.rows.mode} selection)")
    samples = cfg.test.val_samples
    baseline = await job.evaluations.evaluate(seed, "val", val_ids, evaluation_seed=cfg.seed, samples=samples)
    candidate_eval: Evaluation | None = None
    if forced is None:
        candidate_eval = await job.evaluations.evaluate(incumbent, "val", val_ids, evaluation_seed=cfg.seed,
                                                        samples=samples)
    elif forced == "identical_candidate":
        candidate_eval = baseline
    # With samples, keep-or-reject compares per-problem pass rates (one record per problem).
    decision = decide(
        val_ids, collapse_samples(baseline.rollouts),
        collapse_samples(candidate_eval.rollouts) if candidate_eval else None, forced_reason=forced
    )
    deployed = incumbent if decision.deploy_incumbent else seed
    payload: dict[str, Any] = {
        "job_id": job.job_id,
        "cell_id": job.cell_id,
        "condition_id": job.condition_id,
        "optimization_id": optimization["optimization_id"],
        "seed_candidate": seed.to_dict(),
        "incumbent_candidate": incumbent.to_dict(),
        "deployed_candidate": deployed.to_dict(),
        "selected_candidate": decision.selected_candidate,
        "fallback_reason": decision.fallback_reason,
        "baseline_validation_score": decision.baseline_score,
        "incumbent_validation_score": decision.incumbent_score,
        "validation_delta": decision.validation_delta,
        "baseline_validation_id": baseline.evaluation_id,
        "incumbent_validation_id": candidate_eval.evaluation_id if candidate_eval else None,
        "validation_ids": val_ids,
        "baseline_validation_scores": problem_means(baseline.rollouts),
        "incumbent_validation_scores": problem_means(candidate_eval.rollouts) if candidate_eval else None,
        "evaluation_seed": cfg.seed,
        "test_exposed": False,
    }
    payload["selection_id"] = short_hash(payload, 24)
    payload["optimization_sha256"] = optimization["sha256"]  # verified before test, not hashed
    # Diagnostics (not part of the decision, so not hashed).
    payload["selection_mode"] = job.rows.mode
    payload["optimism"] = optimism(
        read_jsonl(job.store.optimization_dir / "rollouts.jsonl"),
        incumbent_id=incumbent.id, seed_id=seed.id,
        incumbent_selection_score=decision.incumbent_score if forced != "identical_candidate"
        else decision.baseline_score,
        seed_selection_score=decision.baseline_score,
    )
    payload["truncation"] = count_replies(
        list(baseline.rollouts) + (list(candidate_eval.rollouts) if candidate_eval is not baseline and
                                   candidate_eval is not None else []))
    record = job.store.write("selection", payload)
    log(cfg, f"selection sealed: {decision.selected_candidate} (fallback={decision.fallback_reason}, "
              f"seed={decision.baseline_score}, incumbent={decision.incumbent_score})")
    return record

