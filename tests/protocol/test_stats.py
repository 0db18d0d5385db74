"""The aggregate's statistics against values worked out by hand."""

from __future__ import annotations

import math

import pytest

from optimizers.protocol.aggregate import stats


@pytest.mark.parametrize(
    ("wins", "losses", "expected"),
    [
        (3, 0, 0.25),  # 2 * C(3,0) / 2^3
        (5, 0, 0.0625),  # 2 / 32
        (2, 1, 1.0),  # 2 * (1 + 3) / 8 = 1
        (1, 4, 0.375),  # 2 * (1 + 5) / 32
        (0, 0, 1.0),  # no discordant pairs
        (10, 0, 2 / 1024),
    ],
)
def test_exact_mcnemar(wins: int, losses: int, expected: float) -> None:
    assert stats.exact_mcnemar(wins, losses) == pytest.approx(expected)
    assert stats.exact_mcnemar(losses, wins) == pytest.approx(expected)


def test_holm() -> None:
    # sorted 0.01, 0.03, 0.04 -> 3*0.01, 2*0.03, max(0.06, 1*0.04)
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert stats.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert stats.holm([0.0625, 0.25, 1.0]) == pytest.approx([0.1875, 0.5, 1.0])
    assert stats.holm([]) == []


def test_mean_and_sample_std_of_known_deltas() -> None:
    assert stats.mean([50.0, 50.0, 25.0]) == pytest.approx(125 / 3)
    # deviations 25/3, 25/3, -50/3 -> squares sum to 1250/3, / (n - 1) = 625/3
    assert stats.sample_std([50.0, 50.0, 25.0]) == pytest.approx(math.sqrt(625 / 3))
    assert stats.sample_std([4.0]) is None


def test_paired_helpers() -> None:
    base, deployed = [1, 0, 0, 0], [1, 1, 1, 0]
    assert stats.delta_pp(base, deployed) == pytest.approx(50.0)
    assert stats.discordant(base, deployed) == (2, 0)
    assert stats.discordant([1, 1, 0], [0, 1, 1]) == (1, 1)
    assert stats.paired_differences([0, 1], [1, 1]) == [100.0, 0.0]
    with pytest.raises(ValueError, match="differ in length"):
        stats.delta_pp([1], [1, 0])


def test_bootstrap_of_a_constant_delta_is_that_delta() -> None:
    low, high = stats.stratified_bootstrap_ci([[12.5] * 7, [12.5] * 3, [12.5] * 5], replicates=500)
    assert (low, high) == (pytest.approx(12.5), pytest.approx(12.5))


def test_bootstrap_is_deterministic_and_brackets_the_mean() -> None:
    strata = [[100.0, 0.0, 0.0, 100.0], [0.0, 0.0, 100.0, 0.0], [100.0, 100.0, 100.0, 0.0]]
    first = stats.stratified_bootstrap_ci(strata, replicates=2000)
    assert first == stats.stratified_bootstrap_ci(strata, replicates=2000)
    low, high = first
    grand = stats.mean([stats.mean(s) for s in strata])
    assert 0.0 <= low < grand < high <= 100.0
    narrower = stats.stratified_bootstrap_ci(strata, replicates=2000, level=0.5)
    assert low <= narrower[0] <= narrower[1] <= high


def test_bootstrap_seed_level_resampling() -> None:
    # Two strata with constant but different deltas: item resampling changes nothing, so every
    # replicate is the mean of 2 draws from {0, 100}: 0, 50 or 100 with probability 1/4, 1/2, 1/4.
    low, high = stats.stratified_bootstrap_ci([[0.0] * 4, [100.0] * 4], replicates=4000, level=0.9)
    assert (low, high) == (0.0, 100.0)
