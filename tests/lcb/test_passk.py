"""Unbiased pass@k against a brute-force count over every k-subset of the samples."""

from __future__ import annotations

import itertools

import pytest

from lcb import passk


def brute_force(samples: list[int], k: int) -> float:
    subsets = list(itertools.combinations(range(len(samples)), k))
    return sum(1 for s in subsets if any(samples[i] for i in s)) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7])
def test_unbiased_pass_at_k_equals_the_brute_force_count(n: int) -> None:
    for c in range(n + 1):
        samples = [1] * c + [0] * (n - c)
        for k in range(1, n + 1):
            assert passk.pass_at_k(n, c, k) == pytest.approx(brute_force(samples, k), abs=1e-12), (n, c, k)


def test_pass_at_1_is_the_mean_and_the_table_skips_k_beyond_the_samples() -> None:
    rows = [[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]]
    table = passk.pass_at_k_table(rows, ks=(1, 2, 5))
    assert table["1"] == pytest.approx((0.5 + 0.0 + 1.0) / 3)
    assert table["2"] == pytest.approx((brute_force([1, 0, 0, 1], 2) + 0 + 1) / 3)
    assert "5" not in table and table["4"] == pytest.approx(2 / 3)  # pass@n: solved by any sample
    # A partial score (some hidden tests passed) is not a pass.
    assert passk.pass_at_k_table([[0.5, 0.5]], ks=(1,)) == {"1": 0.0, "2": 0.0}


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError):
        passk.pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        passk.pass_at_k(3, 1, 4)
