"""Cluster-aware paired statistics: problems, not rolls, are the units."""

from __future__ import annotations

import pytest

from optimizers.protocol.aggregate import clusters


def test_one_binary_roll_per_problem_uses_exact_mcnemar() -> None:
    a = {f"p{i}": [0.0] for i in range(10)}
    b = {f"p{i}": [1.0 if i < 8 else 0.0] for i in range(10)}
    result = clusters.cluster_compare(a, b, replicates=500)
    assert result.test == clusters.MCNEMAR
    assert result.p_value == pytest.approx(2 / 2**8)  # 8 wins, 0 losses
    assert result.delta_pp == pytest.approx(80.0)


def test_samples_are_clustered_not_counted_as_independent_problems() -> None:
    """Ten identical samples of three problems are three problems of evidence, not thirty."""
    a = {"p0": [0.0] * 10, "p1": [0.0] * 10, "p2": [1.0] * 10}
    b = {"p0": [1.0] * 10, "p1": [1.0] * 10, "p2": [0.0] * 10}
    result = clusters.cluster_compare(a, b, replicates=500)
    assert result.test == clusters.PAIRED_T
    assert result.problems == 3 and result.rolls_per_problem == 10
    assert result.p_value > 0.3  # two problems up, one down: nothing significant
    assert result.icc == pytest.approx(1.0)
    # Positive control: the same rolls read as thirty independent problems look significant.
    flat_a = {f"{p}/{i}": [v] for p, rolls in a.items() for i, v in enumerate(rolls)}
    flat_b = {f"{p}/{i}": [v] for p, rolls in b.items() for i, v in enumerate(rolls)}
    assert clusters.cluster_compare(flat_a, flat_b, replicates=500).p_value < 0.1


def test_paired_t_and_bootstrap_on_rates() -> None:
    a = {f"p{i}": [0.0, 0.0, 1.0, 0.0] for i in range(30)}
    b = {f"p{i}": [1.0, 0.0, 1.0, 1.0] if i % 3 else [0.0, 0.0, 1.0, 0.0] for i in range(30)}
    result = clusters.cluster_compare(a, b, replicates=2000)
    assert result.delta_pp == pytest.approx(100 * (20 * 0.5) / 30)
    low, high = result.ci95_pp
    assert low < result.delta_pp < high and low > 0
    assert result.p_value < 1e-4


def test_unpaired_rolls_are_refused() -> None:
    with pytest.raises(ValueError, match="different problems"):
        clusters.cluster_compare({"p0": [1.0]}, {"p1": [1.0]})
    with pytest.raises(ValueError, match="rolls"):
        clusters.cluster_compare({"p0": [1.0, 0.0]}, {"p0": [1.0]})


def test_split_by_date() -> None:
    dates = {"a": "2023-05-01T00:00:00", "b": "2024-01-02T00:00:00", "c": "2023-12-31"}
    assert clusters.split_by_date(["a", "b", "c"], dates, "2023-12-31") == {"before": ["a", "c"], "after": ["b"]}
