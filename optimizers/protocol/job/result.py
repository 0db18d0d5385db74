"""``result.json``, the job's one summary record, and the one JSON line the run command prints."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from optimizers.protocol.job.jobspec import PROTOCOL_ID
from optimizers.protocol.job.truncation import job_truncation, summary_metrics


def write_result(
    job: Any, optimization: Mapping[str, Any], selection: Mapping[str, Any], test: Mapping[str, Any]
) -> dict[str, Any]:
    budget = optimization["budget"]
    truncation = job_truncation(
        optimize=(optimization.get("truncation") or {}).get("task") or {},
        validation=selection.get("truncation") or {},
        test=test.get("truncation") or {},
        reflection=(optimization.get("truncation") or {}).get("reflection") or {},
    )
    payload = {
        "protocol": PROTOCOL_ID,
        "status": "completed",
        "job_id": job.job_id,
        "cell": job.cell,
        "cell_id": job.cell_id,
        "seed": job.cfg.seed,
        "condition_id": job.condition_id,
        "conformant": job.conformant,
        "in_grid": job.in_grid,
        "optimization": {
            "status": optimization["status"],
            "failure_kind": optimization["failure_kind"],
            "error": optimization.get("error"),  # the cause when the optimization failed
            "stop_reason": optimization["stop_reason"],
            "budget": {
                "maximum": budget["maximum"],
                "charged": budget["charged"],
                "infrastructure_failures": budget["infrastructure_failures"],
                "retries": budget["retries"],
                "unusable_rollouts": budget["unusable_rollouts"],
            },
            "usage": optimization["usage"],
            "proposals": optimization.get("proposals"),  # absent in jobs optimized before it existed
            "elapsed_seconds": optimization["elapsed_seconds"],
            "incumbent_candidate_id": optimization["incumbent_candidate"]["id"],
            "optimization_id": optimization["optimization_id"],
        },
        "selection": {
            "selection_id": selection["selection_id"],
            "selected_candidate": selection["selected_candidate"],
            "deployed_candidate_id": selection["deployed_candidate"]["id"],
            "fallback_reason": selection["fallback_reason"],
            "baseline_validation_score": selection["baseline_validation_score"],
            "incumbent_validation_score": selection["incumbent_validation_score"],
            "validation_delta": selection["validation_delta"],
            "mode": selection.get("selection_mode", "val"),
            "validation_ids": selection["validation_ids"],
            "optimism": selection.get("optimism"),
        },
        # Judge/probe model calls that are not charged rollouts (COST_SCHEMA); {} when none.
        "uncharged_calls": optimization.get("uncharged_calls") or {},
        "test": {
            **{key: test[key]
               for key in ("example_ids", "baseline_scores", "deployed_scores", "baseline_mean",
                           "deployed_mean", "delta_pp", "valid_for_aggregation")},
            # Tests sealed before these existed lack them; pass@k of one greedy sample is pass@1.
            **{key: test[key] for key in ("samples", "pass_at_k", "contest_dates", "model_cutoff", "test_design",
                                          "baseline_samples", "deployed_samples") if key in test},
        },
        "truncation": truncation,
        "code_versions": job.identity.spec.get("code_versions"),
        **({"forced_resume": dict(job.forced_resume)} if job.forced_resume else {}),
    }
    record = job.store.write("result", payload)
    job.tracker().summary({"test/baseline_mean": test["baseline_mean"],
                             "test/deployed_mean": test["deployed_mean"], "test/delta_pp": test["delta_pp"],
                             "selection/fallback_reason": selection["fallback_reason"],
                             "selection/optimism_gap_pp": (selection.get("optimism") or {}).get("optimism_gap_pp"),
                             **summary_metrics(truncation)})
    return record


def summary_line(result: Mapping[str, Any]) -> dict[str, Any]:
    """The one JSON line the app prints on stdout."""
    if "phase" in result:
        return {k: result.get(k) for k in ("phase", "status", "cell_id", "out", "stop_reason",
                                          "selected_candidate", "fallback_reason") if k in result}
    test = result.get("test", {})
    return {
        "status": result.get("status"),
        "cell_id": result.get("cell_id"),
        "baseline_mean": test.get("baseline_mean"),
        "deployed_mean": test.get("deployed_mean"),
        "delta_pp": test.get("delta_pp"),
        "valid_for_aggregation": test.get("valid_for_aggregation"),
        "fallback_reason": result.get("selection", {}).get("fallback_reason"),
    }

