"""Paired statistics for the aggregate: pure functions, no I/O.

Inputs are per-seed lists of paired per-problem scores (the same problem ids, in the same order,
for the two arms being compared). Differences are reported in percentage points (pp).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("mean of no values")
    return math.fsum(values) / len(values)


def sample_std(values: Sequence[float]) -> float | None:
    """Sample standard deviation (n - 1); None for fewer than two values."""
    if len(values) < 2:
        return None
    m = mean(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / (len(values) - 1))


def delta_pp(a: Sequence[float], b: Sequence[float]) -> float:
    """100 × (mean(b) − mean(a)) over paired items."""
    _check_paired(a, b)
    return 100.0 * (mean(b) - mean(a))


def _check_paired(a: Sequence[float], b: Sequence[float]) -> None:
    if len(a) != len(b):
        raise ValueError(f"paired lists differ in length ({len(a)} vs {len(b)})")
    if not a:
        raise ValueError("no paired items")


def is_binary(values: Sequence[float]) -> bool:
    return all(v in (0, 1) for v in values)


def discordant(a: Sequence[float], b: Sequence[float]) -> tuple[int, int]:
    """(wins, losses) of arm b over arm a: items where only b passes, items where only a passes."""
    _check_paired(a, b)
    wins = sum(1 for x, y in zip(a, b) if y > x)
    losses = sum(1 for x, y in zip(a, b) if x > y)
    return wins, losses


def exact_mcnemar(wins: int, losses: int) -> float:
    """Two-sided exact McNemar test: a binomial(n, 1/2) test on the discordant pairs.

    p = min(1, 2 · P[X ≤ min(wins, losses)]) with X ~ Bin(wins + losses, 1/2); 1.0 without
    discordant pairs.
    """
    if wins < 0 or losses < 0:
        raise ValueError("counts must be >= 0")
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1))
    return min(1.0, 2.0 * tail / 2**n)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order.

    Sorted ascending, the i-th (0-based) of m p-values is multiplied by (m − i); adjusted values
    are made monotone (running maximum) and capped at 1.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def stratified_bootstrap_ci(
    strata: Sequence[Sequence[float]],
    *,
    replicates: int = 10000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile CI of the mean over strata of per-item paired differences.

    Each replicate draws as many strata as there are, with replacement (seed-level variation), then
    resamples each drawn stratum's items with replacement (problem-level variation), takes each
    drawn stratum's mean and averages them. The bounds are the empirical (1 − level)/2 and
    (1 + level)/2 quantiles (numpy's "linear" rule). Deterministic for a given ``seed``.
    """
    if not strata or any(len(s) == 0 for s in strata):
        raise ValueError("every stratum needs at least one item")
    if replicates < 1:
        raise ValueError("replicates must be >= 1")
    if not 0 < level < 1:
        raise ValueError("level must be in (0, 1)")
    import numpy as np  # optuna's dependency; imported here so the CLIs' --help stays fast

    rng = np.random.default_rng(seed)
    arrays = [np.asarray(s, dtype=float) for s in strata]
    k = len(arrays)
    picks = rng.integers(0, k, size=(replicates, k))
    totals = np.zeros(replicates)
    for slot in range(k):
        # Each stratum's resampled means for every replicate, then pick the drawn stratum's.
        for index, values in enumerate(arrays):
            chosen = picks[:, slot] == index
            count = int(chosen.sum())
            if count == 0:
                continue
            draws = rng.integers(0, len(values), size=(count, len(values)))
            totals[chosen] += values[draws].mean(axis=1)
    estimates = totals / k
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(estimates, [alpha, 1.0 - alpha])
    return float(low), float(high)


def paired_differences(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """Per-item b − a, in pp."""
    _check_paired(a, b)
    return [100.0 * (y - x) for x, y in zip(a, b)]
