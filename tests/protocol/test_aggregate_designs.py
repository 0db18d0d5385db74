"""The aggregate's test-design rows: clustered test, intent-to-treat vs per-protocol, cutoff split.

gepa on centralized, three seeds, six problems (test_aggregate's data). Seed 2's optimization failed
on infrastructure: it deployed the seed prompts (Δ = 0). Intent-to-treat keeps it:
(83.33 + 50 + 0) / 3 = 44.44 pp; per-protocol drops it: (83.33 + 50) / 2 = 66.67 pp.
"""

from __future__ import annotations

from pathlib import Path

from typing import Any

import pytest

from optimizers.journal import write_sealed
from optimizers.protocol.aggregate import summary as aggregate

IDS = ["p1", "p2", "p3", "p4", "p5", "p6"]
BASE = {0: "000001", 1: "000111", 2: "111111"}


def result_payload(method: str, seed: int, *, base: str, deployed: str) -> dict[str, Any]:
    b, d = [float(c) for c in base], [float(c) for c in deployed]
    return {
        "schema": aggregate.RESULT_SCHEMA, "status": "completed",
        "cell": {"method": method, "dataset": "lcb", "topology": "centralized", "team_size": 4,
                 "communication": "freeform", "rounds": 2, "model": "Qwen/Qwen3.5-9B", "registry_key": "centralized"},
        "cell_id": f"{method}-centralized", "seed": seed, "conformant": True, "in_grid": True,
        "optimization": {"status": "completed", "stop_reason": "budget", "budget": {"charged": 600}},
        "selection": {"selected_candidate": "incumbent" if base != deployed else "seed", "fallback_reason": None},
        "test": {"example_ids": IDS, "baseline_scores": b, "deployed_scores": d, "baseline_mean": sum(b) / 6,
                 "deployed_mean": sum(d) / 6, "delta_pp": 100 * (sum(d) - sum(b)) / 6, "valid_for_aggregation": True},
    }


def write(root: Path, seed: int, *, failed: bool = False, dates: list[str] | None = None,
          cutoff: str | None = None) -> None:
    payload = result_payload("gepa", seed, base=BASE[seed], deployed="111111" if not failed else BASE[seed])
    if failed:
        payload["optimization"].update({"status": "failed", "failure_kind": "infrastructure_invalid"})
    if dates is not None:
        payload["test"].update({"contest_dates": dates, "model_cutoff": cutoff})
    folder = root / "gepa" / "lcb" / "centralized" / "qwen" / str(seed)
    folder.mkdir(parents=True)
    write_sealed(folder / "result.json", payload)


def test_intent_to_treat_and_per_protocol(tmp_path: Path) -> None:
    for seed in range(3):
        write(tmp_path, seed, failed=seed == 2)
    rows = aggregate.aggregate([tmp_path], replicates=500).designs
    assert len(rows) == 1
    row = rows[0]
    assert row["itt_delta_pp"] == pytest.approx((500 / 6 + 50 + 0) / 3)
    assert row["pp_delta_pp"] == pytest.approx((500 / 6 + 50) / 2)
    assert row["infra_failed_seeds"] == [2]
    clustered = row["clustered"]
    # Three rolls per problem (one per seed): McNemar is not valid, the paired t over rates is.
    assert clustered["test"] == "paired_t_over_problems" and clustered["rolls_per_problem"] == 3
    assert clustered["problems"] == 6 and "p_holm" in clustered


def test_cutoff_split_when_the_test_set_spans_the_cutoff(tmp_path: Path) -> None:
    dates = ["2023-01-01", "2023-02-01", "2023-03-01", "2024-01-01", "2024-02-01", "2024-03-01"]
    for seed in range(3):
        write(tmp_path, seed, dates=dates, cutoff="2023-12-31")
    row = aggregate.aggregate([tmp_path], replicates=500).designs[0]
    cut = row["cutoff"]
    assert cut["before"]["problems"] == 3 and cut["after"]["problems"] == 3
    # Before: p1-p3 base rolls 0,0,1 each -> 1/3; after: p4,p5 base 0,1,1 -> 2/3, p6 1,1,1 -> 1.
    assert cut["before"]["base"] == pytest.approx(1 / 3)
    assert cut["after"]["base"] == pytest.approx((2 / 3 + 2 / 3 + 1) / 3)
    assert cut["before"]["deployed"] == cut["after"]["deployed"] == 1.0
    # Not spanning: no table.
    other = tmp_path / "other"
    for seed in range(3):
        write(other, seed, dates=dates, cutoff="2022-01-01")
    assert aggregate.aggregate([other], replicates=500).designs[0]["cutoff"] is None


def test_samples_are_rolls_of_one_problem(tmp_path: Path) -> None:
    """A job with samples stores them per problem; the clustered test counts problems."""
    for seed in range(3):
        payload = result_payload("gepa", seed, base=BASE[seed], deployed="111111")
        test = payload["test"]
        test["samples"] = 2
        test["baseline_samples"] = [[s, 0.0] for s in test["baseline_scores"]]
        test["deployed_samples"] = [[s, s] for s in test["deployed_scores"]]
        test["baseline_scores"] = [s / 2 for s in test["baseline_scores"]]
        folder = tmp_path / "gepa" / "lcb" / "centralized" / "qwen" / str(seed)
        folder.mkdir(parents=True)
        write_sealed(folder / "result.json", payload)
    row = aggregate.aggregate([tmp_path], replicates=500).designs[0]
    assert row["clustered"]["rolls_per_problem"] == 6 and row["clustered"]["problems"] == 6
