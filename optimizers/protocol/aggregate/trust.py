"""Cost, optimism, truncation and statistical power of grid cells: pure functions for the
aggregate and the report (no I/O).

- Cost per job (from ``result.json``): charged rollouts, task-model tokens spent searching,
  reflection tokens, uncharged calls (judges, probes: ``result["uncharged_calls"]``, absent =
  none), wall time of the search. Per cell: means over its seeds, and Δpp per million
  reflection tokens.
- Optimism per cell: mean over seeds of the optimism gap (``optimizers.protocol.job.optimism``).
- Truncation per cell: cut replies / replies, pooled over seeds, per phase and for reflection.
- Power: the minimum detectable effect (MDE) of the grid's design: n paired binary problems per
  seed, ``seeds`` seeds, an exact McNemar test per seed, Holm's correction over a family of
  ``tests`` p-values. A cell's effect is detected when its smallest Holm-adjusted p is below
  alpha, which needs some seed's raw p <= alpha / tests (Holm's first step). With a true effect
  of d (pp) and a discordance rate psi (share of problems where the arms differ), the wins among
  the D ~ Bin(n, psi) discordant problems are Bin(D, (psi + d) / (2 psi)); the per-seed power is
  exact, and the cell's is 1 - (1 - per-seed power)^seeds. The MDE is the smallest d (0.1 pp
  steps) with cell power >= the target (80 %).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from optimizers.protocol.aggregate import stats

PHASES = ("optimize", "validation", "test")
DEFAULT_DISCORDANCE = 0.2  # used when no comparison in the data has a discordant pair
MILLION = 1_000_000


# --------------------------------------------------------------------------- per job


def tokens(usage: Any) -> int:
    """Prompt + completion tokens of a usage record (0 when absent)."""
    if not isinstance(usage, Mapping):
        return 0
    return int(usage.get("prompt_tokens", 0) or 0) + int(usage.get("completion_tokens", 0) or 0)


def job_cost(result: Mapping[str, Any]) -> dict[str, Any]:
    """What one job spent searching (``result.json`` payload in, plain numbers out)."""
    optimization = result.get("optimization") or {}
    usage = optimization.get("usage") or {}
    uncharged = result.get("uncharged_calls") or {}
    elapsed = optimization.get("elapsed_seconds")
    return {
        "charged_rollouts": int((optimization.get("budget") or {}).get("charged", 0) or 0),
        "task_tokens": tokens(usage.get("task")),
        "reflection_tokens": tokens(usage.get("reflection")),
        "uncharged_calls": sum(int((row or {}).get("calls", 0) or 0) for row in uncharged.values()),
        "uncharged_tokens": sum(tokens(row) for row in uncharged.values()),
        "wall_s": None if elapsed is None else float(elapsed),
    }


def _mean(values: Iterable[float | None]) -> float | None:
    present = [float(v) for v in values if v is not None]
    return stats.mean(present) if present else None


def cell_cost(costs: Sequence[Mapping[str, Any]], mean_delta_pp: float | None) -> dict[str, Any]:
    """Means over a cell's jobs, and Δpp per million reflection tokens (None without tokens)."""
    keys = ("charged_rollouts", "task_tokens", "reflection_tokens", "uncharged_calls", "uncharged_tokens", "wall_s")
    out: dict[str, Any] = {f"mean_{k}": _mean(c.get(k) for c in costs) for k in keys}
    reflection = out["mean_reflection_tokens"]
    out["delta_pp_per_million_reflection_tokens"] = (
        None if mean_delta_pp is None or not reflection else mean_delta_pp / (reflection / MILLION))
    return out


def cell_optimism(optimisms: Sequence[Mapping[str, Any] | None]) -> dict[str, Any]:
    rows = [o for o in optimisms if o]
    return {"mean_optimism_gap_pp": _mean(o.get("optimism_gap_pp") for o in rows),
            "mean_excess_optimism_pp": _mean(o.get("excess_optimism_pp") for o in rows),
            "jobs_with_gap": sum(1 for o in rows if o.get("optimism_gap_pp") is not None)}


def cell_truncation(truncations: Sequence[Mapping[str, Any] | None]) -> dict[str, Any]:
    """Pooled over jobs: per phase (all roles) and for reflection: replies, cut, rate."""
    totals = {phase: [0, 0] for phase in (*PHASES, "reflection")}
    for truncation in truncations:
        if not truncation:
            continue
        for phase in PHASES:
            row = ((truncation.get("task") or {}).get(phase) or {}).get("all") or {}
            totals[phase][0] += int(row.get("replies", 0))
            totals[phase][1] += int(row.get("truncated", 0))
        row = (truncation.get("reflection") or {}).get("all") or {}
        totals["reflection"][0] += int(row.get("calls", 0))
        totals["reflection"][1] += int(row.get("truncated", 0))
    out = {name: {"replies": n, "truncated": cut, "rate": (cut / n if n else None)}
           for name, (n, cut) in totals.items()}
    task_n = sum(totals[p][0] for p in PHASES)
    task_cut = sum(totals[p][1] for p in PHASES)
    out["task"] = {"replies": task_n, "truncated": task_cut, "rate": task_cut / task_n if task_n else None}
    return out


# --------------------------------------------------------------------------- Pareto front


def pareto_front(points: Sequence[tuple[str, float, float]]) -> list[str]:
    """Labels of the points no other point beats: (label, cost, gain); lower cost and higher gain
    are better, a point is dominated when another is at least as good in both and better in one."""
    front = []
    for label, cost, gain in points:
        dominated = any((c <= cost and g >= gain) and (c < cost or g > gain) for _, c, g in points)
        if not dominated:
            front.append(label)
    return front


# --------------------------------------------------------------------------- power


@lru_cache(maxsize=None)
def _rejections(n: int, level: float) -> tuple[tuple[int, ...], ...]:
    """For each number of discordant pairs D (0..n), the win counts w whose exact McNemar p <= level."""
    return tuple(tuple(w for w in range(d + 1) if stats.exact_mcnemar(w, d - w) <= level + 1e-15)
                 for d in range(n + 1))


def _binom_pmf(k: int, n: int, p: float) -> float:
    if p <= 0.0:
        return 1.0 if k == 0 else 0.0
    if p >= 1.0:
        return 1.0 if k == n else 0.0
    return math.comb(n, k) * p**k * (1.0 - p) ** (n - k)


def seed_power(n: int, discordance: float, effect: float, level: float) -> float:
    """P(exact McNemar p <= level) for n paired binary items with P(arms differ) = discordance and
    true difference ``effect`` (fractions, not pp); needs 0 <= effect <= discordance."""
    if not 0.0 <= effect <= discordance <= 1.0:
        raise ValueError("need 0 <= effect <= discordance <= 1")
    win_share = 0.5 if discordance == 0 else (discordance + effect) / (2.0 * discordance)
    regions = _rejections(n, level)
    return math.fsum(_binom_pmf(d, n, discordance) * math.fsum(_binom_pmf(w, d, win_share) for w in regions[d])
                     for d in range(n + 1))


def cell_power(n: int, seeds: int, tests: int, discordance: float, effect: float, alpha: float = 0.05) -> float:
    """P(the cell's smallest Holm-adjusted p < alpha) lower bound: some seed's p <= alpha/tests."""
    per_seed = seed_power(n, discordance, effect, alpha / max(1, tests))
    return 1.0 - (1.0 - per_seed) ** seeds


def minimum_detectable_effect(
    n: int, seeds: int, tests: int, discordance: float, *, alpha: float = 0.05, power: float = 0.8,
    step_pp: float = 0.1,
) -> float | None:
    """Smallest effect in pp (``step_pp`` grid) detected with ``power``; None if even an effect as
    large as the discordance rate is not."""
    steps = int(round(100.0 * discordance / step_pp))
    for index in range(1, steps + 1):
        effect_pp = round(index * step_pp, 6)
        if cell_power(n, seeds, tests, discordance, min(effect_pp / 100.0, discordance), alpha) >= power:
            return effect_pp
    return None


def observed_discordance(comparisons: Iterable[Any]) -> float | None:
    """Pooled share of discordant problems over every seed of the given comparisons."""
    discordant = total = 0
    for comparison in comparisons:
        for seed in comparison.seeds:
            if seed.wins is not None and seed.losses is not None:
                discordant += seed.wins + seed.losses
                total += seed.n
    return discordant / total if total and discordant else None


@dataclass(frozen=True, slots=True)
class PowerDesign:
    family: str  # e.g. "lcb|qwen"
    cells: int  # grid cells in the family
    seeds: int
    problems: int
    alpha: float
    power: float
    discordance: float
    discordance_source: str  # observed | assumed

    @property
    def tests(self) -> int:
        return self.cells * self.seeds

    def as_dict(self) -> dict[str, Any]:
        return {"family": self.family, "cells": self.cells, "seeds": self.seeds, "tests": self.tests,
                "problems": self.problems, "alpha": self.alpha, "power": self.power,
                "discordance": round(self.discordance, 6), "discordance_source": self.discordance_source,
                "mde_pp": minimum_detectable_effect(self.problems, self.seeds, self.tests, self.discordance,
                                                    alpha=self.alpha, power=self.power),
                "mde_pp_one_cell": minimum_detectable_effect(self.problems, self.seeds, self.seeds,
                                                             self.discordance, alpha=self.alpha, power=self.power)}


def design_families(family: str, models: Iterable[str] | None = None) -> dict[str, int]:
    """Grid cells per Holm family of cell tests, as the grid is designed (``cells.grid()``)."""
    from optimizers.protocol.grid import cells

    wanted = None if models is None else set(models)
    counts: dict[str, int] = {}
    for cell in cells.grid():
        if wanted is not None and cell.model not in wanted:
            continue
        if family == "none":
            key = "all"
        elif family == "method":
            key = f"lcb|{cell.model}|{cell.method}"
        else:
            key = f"lcb|{cell.model}"
        counts[key] = counts.get(key, 0) + 1
    return counts


def power_table(family: str, *, problems: int, seeds: int, discordance: float | None, models: Iterable[str] | None,
                alpha: float = 0.05, power: float = 0.8) -> list[dict[str, Any]]:
    """The MDE of every Holm family of the grid's design (restricted to ``models`` when given)."""
    source = "observed" if discordance is not None else "assumed"
    psi = DEFAULT_DISCORDANCE if discordance is None else discordance
    # Results of models outside the grid (e.g. the embedded model) get the whole grid's design.
    families = design_families(family, models) or design_families(family)
    return [PowerDesign(name, count, seeds, problems, alpha, power, psi, source).as_dict()
            for name, count in sorted(families.items())]
