"""Statistics of a gym run: paired over instances (every method ran on the same instances with
the same draws), so comparisons are blocked designs.

- ``blocks``: the instances x methods matrix of a value (regret) over the instances every method
  finished (complete blocks; an unfinished instance is left out of every method's rank).
- ``average_ranks`` (1 = lowest regret, ties share their mean rank) and ``friedman`` (the
  Friedman chi-square test that all methods rank alike).
- ``nemenyi_cd``: the critical difference of average ranks (Demsar 2006): two methods whose
  average ranks differ by more than it differ at level alpha. It uses the studentized range
  quantile q(alpha, k, inf) / sqrt(2).
- ``wilcoxon_holm``: paired Wilcoxon signed-rank tests of every pair, Holm-corrected; what the
  README calls "significantly better".
- ``paired_ci``: a bootstrap CI of the mean paired difference between two methods.
- ``ecdf``: the empirical distribution of normalised regret over instances (COCO-style).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

BOOTSTRAP_SEED = 0


@dataclass(frozen=True, slots=True)
class Blocks:
    methods: tuple[str, ...]
    instances: tuple[int, ...]
    values: np.ndarray  # instances x methods


def blocks(values: Mapping[str, Mapping[int, float]]) -> Blocks:
    """``values[method][instance]`` -> the complete blocks (instances every method has)."""
    methods = tuple(sorted(values))
    common = sorted(set.intersection(*(set(v) for v in values.values()))) if values else []
    matrix = np.array([[values[m][i] for m in methods] for i in common], dtype=float).reshape(len(common),
                                                                                                len(methods))
    return Blocks(methods, tuple(common), matrix)


def average_ranks(b: Blocks, *, decimals: int = 9) -> dict[str, float]:
    """Mean rank per method (1 = lowest value); values equal to ``decimals`` tie."""
    from scipy.stats import rankdata

    if not len(b.instances):
        return {}
    ranks = rankdata(np.round(b.values, decimals), axis=1)
    return dict(zip(b.methods, (float(x) for x in ranks.mean(axis=0)), strict=True))


def friedman(b: Blocks) -> tuple[float, float] | None:
    """(chi-square, p) of the Friedman test; None when it is undefined (< 3 methods or < 2
    blocks, or every block tied)."""
    from scipy.stats import friedmanchisquare

    if len(b.methods) < 3 or len(b.instances) < 2:
        return None
    values = np.round(b.values, 9)
    if np.all(values == values[:, :1]):
        return None
    stat, p = friedmanchisquare(*values.T)
    return float(stat), float(p)


def nemenyi_cd(k: int, n: int, alpha: float = 0.05) -> float:
    """The Nemenyi critical difference of average ranks for k methods over n blocks."""
    from scipy.stats import studentized_range

    if k < 2 or n < 1:
        return math.inf
    q = float(studentized_range.ppf(1 - alpha, k, np.inf)) / math.sqrt(2)
    return q * math.sqrt(k * (k + 1) / (6.0 * n))


def holm(pvalues: Mapping[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    """Holm step-down adjusted p-values (monotone, capped at 1)."""
    order = sorted(pvalues, key=lambda key: pvalues[key])
    adjusted, running = {}, 0.0
    for index, key in enumerate(order):
        running = max(running, min(1.0, (len(order) - index) * pvalues[key]))
        adjusted[key] = running
    return adjusted


def wilcoxon_holm(b: Blocks) -> dict[tuple[str, str], float]:
    """Holm-adjusted two-sided p of the paired Wilcoxon signed-rank test for every pair (a, b)
    with a < b by name; a pair with no non-zero difference gets p = 1."""
    from scipy.stats import wilcoxon

    raw: dict[tuple[str, str], float] = {}
    for i, a in enumerate(b.methods):
        for j in range(i + 1, len(b.methods)):
            diff = np.round(b.values[:, i] - b.values[:, j], 9)
            if len(diff) < 2 or not np.any(diff):
                raw[(a, b.methods[j])] = 1.0
                continue
            raw[(a, b.methods[j])] = float(wilcoxon(diff, zero_method="zsplit").pvalue)
    return holm(raw)


def significantly_better(b: Blocks, alpha: float = 0.05) -> set[tuple[str, str]]:
    """(better, worse) pairs: Holm-adjusted Wilcoxon p < alpha and a lower mean value."""
    p = wilcoxon_holm(b)
    means = dict(zip(b.methods, b.values.mean(axis=0), strict=True)) if len(b.instances) else {}
    out = set()
    for (x, y), value in p.items():
        if value < alpha and means[x] != means[y]:
            out.add((x, y) if means[x] < means[y] else (y, x))
    return out


def bootstrap_mean(values: Sequence[float], *, resamples: int = 2000, level: float = 0.95
                   ) -> tuple[float, float, float] | None:
    """(mean, low, high): the mean with a percentile-bootstrap CI (fixed RNG: reproducible)."""
    if not len(values):
        return None
    data = np.asarray(values, dtype=float)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    means = data[rng.integers(0, len(data), size=(resamples, len(data)))].mean(axis=1)
    tail = (1 - level) / 2
    return float(data.mean()), float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


def paired_ci(b: Blocks, first: str, second: str, *, resamples: int = 2000) -> tuple[float, float, float] | None:
    """Mean of (first - second) over the complete blocks, with a bootstrap CI over instances."""
    if first not in b.methods or second not in b.methods:
        return None
    i, j = b.methods.index(first), b.methods.index(second)
    return bootstrap_mean(list(b.values[:, i] - b.values[:, j]), resamples=resamples)


def ecdf(values: Sequence[float]) -> tuple[list[float], list[float]]:
    """Sorted values and the share of instances at or below each."""
    xs = sorted(values)
    return xs, [(i + 1) / len(xs) for i in range(len(xs))]
