"""Power of a paired test design with problems as clusters: the minimum detectable effect (MDE).

A contrast (deployed vs seed prompts of one cell, or method vs identity) is measured on ``problems``
test problems, each rolled ``seeds × samples`` times per arm with paired request seeds. The analysis
the aggregate runs (``optimizers.protocol.aggregate.clusters``) takes each problem's mean paired
difference ``d_i`` over its rolls and tests mean(d) = 0 with a paired t-test over problems, at
``alpha / tests`` (Holm's first step: the family's smallest p must clear it, so this is what the
family's power hinges on; ``tests = 1`` is one cell alone).

The model behind the formula. One paired roll gives x = deployed − seed ∈ {−1, 0, +1}; the arms
differ with probability ``discordance`` (psi) and the true effect is δ = E[x], so
Var(x) = psi − δ². Rolls of the same problem are correlated (a problem a prompt solves tends to be
solved again): ``icc`` (ρ) is the correlation of two paired rolls of one problem. Over m rolls,
Var(d_i) = (psi − δ²) · (ρ + (1 − ρ) / m). The t-test detects δ with the stated power when
δ = c · sqrt(Var(d_i) / n) with c = t(1 − α/2, n − 1) + t(power, n − 1), which solves to

    δ = sqrt(c² · psi · g / (n + c² · g)),   g = ρ + (1 − ρ) / m.

``tests/protocol/test_power.py`` simulates exactly this model (binary rolls with the stated pass
rate, discordance and intra-problem correlation) and checks the simulated power at the MDE is
within ±3 pp of the target where the normal approximation holds. Where the MDE nears the
discordance (few problems, a large Holm family: the reference grid) the differences are skewed and
the t-test is more powerful than the formula says (simulated 80-92 %): the printed MDE is then an
upper bound. An MDE above the discordance means no effect is detectable at all. More problems shrink the MDE without limit; more rolls per problem
(seeds, samples) only down to the floor sqrt(c² · psi · ρ / n): past it, only problems help.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Any

DEFAULT_PASS_RATE = 0.4  # seed prompts' pass@1 on LCB test problems (assumed when no data)
DEFAULT_DISCORDANCE = 0.2  # share of paired rolls where the arms differ (trust.DEFAULT_DISCORDANCE)
DEFAULT_ICC = 0.5  # correlation of two paired rolls of one problem (assumed when no data)
DEFAULT_ALPHA = 0.05
DEFAULT_POWER = 0.8


# --------------------------------------------------------------------------- Student's t


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    if df <= 0:
        raise ValueError("degrees of freedom must be > 0")
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p (bisection on ``t_cdf``; a normal start bracket)."""
    if not 0.0 < p < 1.0:
        raise ValueError("p must be in (0, 1)")
    z = NormalDist().inv_cdf(p)
    low, high = min(z, -abs(z)) - 1.0, max(z, abs(z)) + 1.0
    while t_cdf(low, df) > p:
        low *= 2.0
    while t_cdf(high, df) < p:
        high *= 2.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-12:
            break
    return 0.5 * (low + high)


def two_sided_t_p(t: float, df: float) -> float:
    return min(1.0, 2.0 * (1.0 - t_cdf(abs(t), df)))


# --------------------------------------------------------------------------- designs


@dataclass(frozen=True, slots=True)
class Assumptions:
    """What the MDE depends on besides the design: from finished jobs when there are some."""

    pass_rate: float = DEFAULT_PASS_RATE
    discordance: float = DEFAULT_DISCORDANCE
    icc: float = DEFAULT_ICC
    source: str = "assumed"  # assumed | observed (n jobs)

    def __post_init__(self) -> None:
        if not 0.0 < self.pass_rate < 1.0:
            raise ValueError(f"pass rate must be in (0, 1), not {self.pass_rate}")
        if not 0.0 < self.discordance <= 2.0 * min(self.pass_rate, 1.0 - self.pass_rate):
            raise ValueError(f"discordance {self.discordance} is impossible at pass rate {self.pass_rate} "
                             f"(needs 0 < discordance <= {2.0 * min(self.pass_rate, 1.0 - self.pass_rate):.3f})")
        if not 0.0 <= self.icc <= 1.0:
            raise ValueError(f"icc must be in [0, 1], not {self.icc}")

    def as_dict(self) -> dict[str, Any]:
        return {"pass_rate": round(self.pass_rate, 6), "discordance": round(self.discordance, 6),
                "icc": round(self.icc, 6), "source": self.source}


@dataclass(frozen=True, slots=True)
class Design:
    """One contrast's design: problems × seeds × samples paired rolls, tested within a family."""

    problems: int
    seeds: int = 1
    samples: int = 1
    tests: int = 1  # contrasts in the Holm family (1: one cell alone)
    alpha: float = DEFAULT_ALPHA
    power: float = DEFAULT_POWER

    def __post_init__(self) -> None:
        if self.problems < 2 or self.seeds < 1 or self.samples < 1 or self.tests < 1:
            raise ValueError("a design needs >= 2 problems and >= 1 seed, sample and test")
        if not 0.0 < self.alpha < 1.0 or not 0.0 < self.power < 1.0:
            raise ValueError("alpha and power must be in (0, 1)")

    @property
    def rolls_per_problem(self) -> int:
        return self.seeds * self.samples

    @property
    def level(self) -> float:
        return self.alpha / self.tests

    def label(self) -> str:
        return f"{self.problems}x{self.seeds}x{self.samples}"


def critical_sum(design: Design) -> float:
    """c = t(1 − level/2, n − 1) + t(power, n − 1)."""
    df = design.problems - 1
    return t_quantile(1.0 - design.level / 2.0, df) + t_quantile(design.power, df)


def variance_factor(design: Design, icc: float) -> float:
    """g = ρ + (1 − ρ)/m: Var(d_i) per unit of roll variance."""
    return icc + (1.0 - icc) / design.rolls_per_problem


def mde(design: Design, assumptions: Assumptions) -> float:
    """The minimum detectable effect as a fraction (0.05 = 5 pp)."""
    c2 = critical_sum(design) ** 2
    g = variance_factor(design, assumptions.icc)
    return math.sqrt(c2 * assumptions.discordance * g / (design.problems + c2 * g))


def mde_pp(design: Design, assumptions: Assumptions) -> float:
    return round(100.0 * mde(design, assumptions), 2)


def detectable(design: Design, assumptions: Assumptions) -> bool:
    """Whether any effect can be detected: the arms cannot differ by more than they disagree."""
    return mde(design, assumptions) <= assumptions.discordance


def power_at(design: Design, assumptions: Assumptions, effect: float) -> float:
    """Approximate power of the paired t-test over problems for a true effect (fraction)."""
    g = variance_factor(design, assumptions.icc)
    sd = math.sqrt(max(assumptions.discordance - effect * effect, 1e-12) * g)
    df = design.problems - 1
    shift = abs(effect) / sd * math.sqrt(design.problems)
    return 1.0 - t_cdf(t_quantile(1.0 - design.level / 2.0, df) - shift, df)


# --------------------------------------------------------------------------- the smallest design

PROBLEM_STEPS = (50, 75, 100, 150, 200, 250, 300, 350, 400, 500, 600, 800, 1000)
SEED_STEPS = (1, 2, 3, 5)
SAMPLE_STEPS = (1, 2, 5, 10, 20)


def smallest_design(
    target_pp: float,
    assumptions: Assumptions,
    *,
    tests: int,
    cost: Callable[[Design], float],
    problems: Iterable[int] = PROBLEM_STEPS,
    seeds: Iterable[int] = SEED_STEPS,
    samples: Iterable[int] = SAMPLE_STEPS,
    alpha: float = DEFAULT_ALPHA,
    power: float = DEFAULT_POWER,
    max_problems: int | None = None,
) -> Design | None:
    """The cheapest design (by ``cost``) whose MDE is at most ``target_pp``; None when none is.

    ``max_problems`` caps the problems (what a test window holds)."""
    best: tuple[float, Design] | None = None
    for n in problems:
        if max_problems is not None and n > max_problems:
            continue
        for s in seeds:
            for k in samples:
                design = Design(n, s, k, tests, alpha, power)
                if mde_pp(design, assumptions) > target_pp:
                    continue
                price = cost(design)
                if best is None or price < best[0]:
                    best = (price, design)
    return None if best is None else best[1]


def with_tests(design: Design, tests: int) -> Design:
    return replace(design, tests=max(1, tests))


# --------------------------------------------------------------------------- from finished jobs


def estimate_icc(per_problem: Sequence[Sequence[float]]) -> float | None:
    """One-way ANOVA intra-class correlation of paired differences (rolls grouped by problem);
    None without at least two problems with two rolls each, or without any variation."""
    groups = [list(g) for g in per_problem if len(g) >= 2]
    if len(groups) < 2:
        return None
    m = sum(len(g) for g in groups) / len(groups)  # mean group size (unbalanced: an approximation)
    grand = math.fsum(math.fsum(g) for g in groups) / sum(len(g) for g in groups)
    ssb = math.fsum(len(g) * (math.fsum(g) / len(g) - grand) ** 2 for g in groups)
    ssw = math.fsum(math.fsum((x - math.fsum(g) / len(g)) ** 2 for x in g) for g in groups)
    dfb, dfw = len(groups) - 1, sum(len(g) for g in groups) - len(groups)
    if dfw <= 0:
        return None
    msb, msw = ssb / dfb, ssw / dfw
    if msb + (m - 1) * msw <= 0:
        return None
    return min(1.0, max(0.0, (msb - msw) / (msb + (m - 1) * msw)))


def observed_assumptions(
    pairs: Iterable[tuple[Sequence[Sequence[float]], Sequence[Sequence[float]]]], jobs: int,
) -> Assumptions | None:
    """Assumptions measured on finished contrasts: ``pairs`` holds, per contrast, the seed arm's
    and the deployed arm's rolls per problem (aligned, binary). None when nothing is usable."""
    rolls = discordant = passes = 0
    differences: list[list[float]] = []
    for base, deployed in pairs:
        for a_rolls, b_rolls in zip(base, deployed):
            diffs = [float(b) - float(a) for a, b in zip(a_rolls, b_rolls)]
            differences.append(diffs)
            rolls += len(diffs)
            discordant += sum(1 for d in diffs if d != 0)
            passes += sum(1 for a in a_rolls if a)
    if not rolls or not discordant or passes in (0, rolls):
        return None
    pass_rate = passes / rolls
    psi = min(discordant / rolls, 2.0 * min(pass_rate, 1.0 - pass_rate))
    icc = estimate_icc(differences)
    return Assumptions(pass_rate, psi, DEFAULT_ICC if icc is None else icc,
                       f"observed ({jobs} jobs)" + ("" if icc is not None else ", icc assumed"))
