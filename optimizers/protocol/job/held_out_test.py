"""The test phase: seed vs deployed candidate on the held-out test problems; seals ``test.json``.

Test problems are unlocked only here, after ``selection.json`` is sealed, so nothing the method or
the keep-or-reject decision saw can depend on them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from optimizers.candidate import Candidate
from optimizers.protocol.job.console import log
from lcb.passk import DEFAULT_KS, arms_pass_at_k
from optimizers.protocol.job.evaluation import Evaluation, problem_means, sample_scores
from optimizers.protocol.job.truncation import count_replies


async def run_held_out_test(job: Any, selection: Mapping[str, Any]) -> dict[str, Any]:
    cfg = job.cfg
    job.data.unlock_test(selection, job.rows.selection)
    job.data.test_problems()
    seed = job.seed_candidate
    deployed = Candidate.from_dict(selection["deployed_candidate"])
    ids = list(job.split_ids.test)
    samples = cfg.test.samples
    log(cfg, f"testing seed vs deployed ({selection['selected_candidate']}) on {len(ids)} problems"
             + (f" x {samples} samples" if samples > 1 else ""))
    baseline = await job.evaluations.evaluate(seed, "test", ids, evaluation_seed=cfg.seed, samples=samples)
    # The same candidate is the same content-addressed evaluation: a kept seed has delta 0.
    deployed_eval = await job.evaluations.evaluate(deployed, "test", ids, evaluation_seed=cfg.seed, samples=samples)
    valid = baseline.valid and deployed_eval.valid
    baseline_mean, deployed_mean = baseline.mean, deployed_eval.mean
    delta = round(100.0 * (deployed_mean - baseline_mean), 6) if valid else None  # type: ignore[operator]
    payload = {
        "job_id": job.job_id,
        "selection_id": selection["selection_id"],
        "condition_id": job.condition_id,
        "evaluation_seed": cfg.seed,
        "baseline_evaluation_id": baseline.evaluation_id,
        "deployed_evaluation_id": deployed_eval.evaluation_id,
        "example_ids": ids,
        # Aligned with example_ids, so reports can break pass@1 down without reloading data.
        "difficulties": [job.data.problem(pid).difficulty for pid in ids],
        "platforms": [job.data.problem(pid).platform for pid in ids],
        "contest_dates": [job.data.problem(pid).contest_date for pid in ids],
        "test_design": cfg.test.identity(),
        "model_cutoff": cfg.model.cutoff,  # splits pass@1 before / after it in the aggregate and report
        "samples": samples,
        # Per problem: pass@1 (the mean over its samples; the one score when samples == 1).
        "baseline_scores": problem_means(baseline.rollouts),
        "deployed_scores": problem_means(deployed_eval.rollouts),
        **({"baseline_samples": sample_scores(baseline.rollouts),
            "deployed_samples": sample_scores(deployed_eval.rollouts)} if samples > 1 else {}),
        "pass_at_k": _pass_at_k(baseline, deployed_eval) if valid else None,
        "baseline_status": [r.status.value for r in baseline.rollouts],
        "deployed_status": [r.status.value for r in deployed_eval.rollouts],
        "valid_for_aggregation": valid,
        "baseline_mean": baseline_mean,
        "deployed_mean": deployed_mean,
        "delta_pp": delta,
        "fallback_reason": selection["fallback_reason"],
        "selected_candidate": selection["selected_candidate"],
        "usage": {"baseline": baseline.usage(), "deployed": deployed_eval.usage()},
        "search_budget_charged": 0,
        "truncation": count_replies(list(baseline.rollouts) + (
            list(deployed_eval.rollouts) if deployed_eval.evaluation_id != baseline.evaluation_id else [])),
    }
    record = job.store.write("test", payload)
    log(cfg, f"test: seed={baseline_mean} deployed={deployed_mean} delta_pp={delta}")
    return record


def _pass_at_k(baseline: Evaluation, deployed: Evaluation) -> dict[str, dict[str, float]]:
    """Per arm, the unbiased pass@k (k = 1, 5, 10 up to the samples) over the test problems."""
    return arms_pass_at_k({"baseline": sample_scores(baseline.rollouts),  # type: ignore[dict-item]
                           "deployed": sample_scores(deployed.rollouts)}, DEFAULT_KS)
