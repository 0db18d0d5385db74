"""Paired statistics with problems as clusters: pure functions, no I/O.

A contrast's rolls are grouped by problem: every seed's job and every sample of a problem is a roll
of that problem, and rolls of one problem are not independent (a problem a prompt solves is solved
again). So the unit of analysis is the problem: its per-arm pass rate over its rolls, and the
paired difference of the two rates.

- The point estimate is the mean over problems of the per-problem difference (pp).
- The CI is a paired cluster bootstrap: problems are drawn with replacement, each keeping all its
  rolls of both arms.
- The test is the exact McNemar test only where it is valid: one binary roll per problem and arm
  (one seed, one sample). Otherwise a paired t-test over the per-problem differences, whose power
  is what ``optimizers.protocol.aggregate.power`` computes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optimizers.protocol.aggregate import stats
from optimizers.protocol.aggregate.power import estimate_icc, two_sided_t_p

MCNEMAR = "exact_mcnemar"
PAIRED_T = "paired_t_over_problems"


@dataclass(frozen=True, slots=True)
class ClusterTest:
    problems: int
    rolls_per_problem: float  # mean rolls per problem and arm
    a_rate: float
    b_rate: float
    delta_pp: float
    ci95_pp: tuple[float, float]
    test: str  # exact_mcnemar | paired_t_over_problems
    p_value: float
    icc: float | None  # intra-problem correlation of paired roll differences (None: not estimable)

    def as_dict(self) -> dict[str, Any]:
        return {"problems": self.problems, "rolls_per_problem": self.rolls_per_problem,
                "a_rate": self.a_rate, "b_rate": self.b_rate, "delta_pp": self.delta_pp,
                "ci95_pp": list(self.ci95_pp), "test": self.test, "p_value": self.p_value, "icc": self.icc}


def _paired_rolls(a: Mapping[str, Sequence[float]], b: Mapping[str, Sequence[float]]) -> list[str]:
    if set(a) != set(b):
        raise ValueError("the two arms were rolled on different problems")
    ids = sorted(a)
    if not ids:
        raise ValueError("no paired problems")
    for pid in ids:
        if len(a[pid]) != len(b[pid]) or not a[pid]:
            raise ValueError(f"problem {pid}: the arms have {len(a[pid])} and {len(b[pid])} rolls")
    return ids


def mcnemar_valid(a: Mapping[str, Sequence[float]], b: Mapping[str, Sequence[float]]) -> bool:
    """One binary roll per problem and arm: the discordant pairs are independent."""
    return all(len(a[p]) == 1 and len(b[p]) == 1 and stats.is_binary([*a[p], *b[p]]) for p in a)


def paired_t(differences: Sequence[float]) -> tuple[float, float]:
    """(t, two-sided p) of mean(differences) = 0; p = 1 when every difference is equal to 0,
    and 0 when all are equal and nonzero."""
    n = len(differences)
    if n < 2:
        return 0.0, 1.0
    m = stats.mean(differences)
    sd = stats.sample_std(differences) or 0.0
    if sd == 0.0:
        return (0.0, 1.0) if m == 0.0 else (math.copysign(math.inf, m), 0.0)
    t = m / (sd / math.sqrt(n))
    return t, two_sided_t_p(t, n - 1)


def cluster_bootstrap_ci(a_rates: Sequence[float], b_rates: Sequence[float], *, replicates: int = 10000,
                         level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile CI (pp) of mean(b − a) over problems, resampling problems with their rolls.

    The per-problem rates already average each problem's rolls, so drawing a problem draws all of
    them: the rolls of one problem are never split across replicates."""
    import numpy as np

    differences = 100.0 * (np.asarray(b_rates, dtype=float) - np.asarray(a_rates, dtype=float))
    if differences.size == 0:
        raise ValueError("no problems")
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, differences.size, size=(replicates, differences.size))
    estimates = differences[draws].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(estimates, [alpha, 1.0 - alpha])
    return float(low), float(high)


def cluster_compare(a: Mapping[str, Sequence[float]], b: Mapping[str, Sequence[float]], *,
                    replicates: int = 10000, seed: int = 0) -> ClusterTest:
    """Arm b vs arm a: ``a[problem]`` and ``b[problem]`` are the paired rolls' scores (same order)."""
    ids = _paired_rolls(a, b)
    a_rates = [stats.mean(a[p]) for p in ids]
    b_rates = [stats.mean(b[p]) for p in ids]
    differences = [y - x for x, y in zip(a_rates, b_rates)]
    if mcnemar_valid(a, b):
        wins, losses = stats.discordant([a[p][0] for p in ids], [b[p][0] for p in ids])
        test, p_value = MCNEMAR, stats.exact_mcnemar(wins, losses)
    else:
        test, p_value = PAIRED_T, paired_t(differences)[1]
    icc = estimate_icc([[float(y) - float(x) for x, y in zip(a[p], b[p])] for p in ids])
    return ClusterTest(
        problems=len(ids), rolls_per_problem=sum(len(a[p]) for p in ids) / len(ids),
        a_rate=stats.mean(a_rates), b_rate=stats.mean(b_rates), delta_pp=100.0 * stats.mean(differences),
        ci95_pp=cluster_bootstrap_ci(a_rates, b_rates, replicates=replicates, seed=seed),
        test=test, p_value=p_value, icc=icc)


def split_by_date(ids: Sequence[str], dates: Mapping[str, str], cutoff: str) -> dict[str, list[str]]:
    """Problems released on or before ``cutoff`` (ISO date) and after it (a contamination check)."""
    before = [p for p in ids if (dates.get(p) or "")[:10] <= cutoff[:10]]
    after = [p for p in ids if (dates.get(p) or "")[:10] > cutoff[:10]]
    return {"before": before, "after": after}
