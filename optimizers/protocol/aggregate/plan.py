"""What a sweep will cost and what it can detect, before any model call (``grid --plan``).

Counting. A job with an optimizing method spends its budget (charged rollouts), then validation
rolls the incumbent on the validation problems, then test rolls the deployed prompts on the test
problems; the seed prompts' validation and test evaluations are content-addressed per runtime
condition and seed, so every method of a condition shares one (identity jobs are exactly that).
Rollouts × the topology's token profile (``optimizers.protocol.grid.profiles``) give calls and
tokens per phase; completion tokens at ``tokens_per_second`` (what one endpoint generates across
its concurrent requests) give endpoint-hours. Charged rollouts assume the whole budget is spent
and every incumbent differs from the seed: an upper bound.

Detecting. Each cell's deployed-vs-seed contrast is a paired design of test problems × seeds ×
samples; ``optimizers.protocol.aggregate.power`` gives its MDE alone (one cell) and within its Holm
family (the cells of the same model in the planned sweeps, the aggregate's default family). The
reference's own analysis (an exact McNemar test per seed, ``trust``) is shown next to it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from optimizers.protocol.aggregate import power, trust
from optimizers.protocol.grid.cells import Condition
from optimizers.protocol.grid.config import TestDesign
from optimizers.protocol.grid.profiles import DEFAULT_REFLECTION, TokenProfile

TEST_ONLY_METHODS = frozenset({"identity", "self_consistency", "best_of_n"})
PHASE_NAMES = ("optimize", "validate", "test")
DEFAULT_TOKENS_PER_SECOND = 2000.0
DEFAULT_MDE_THRESHOLD_PP = 5.0
# LiveCodeBench release_v6 holds 1055 problems; the protocol's train and validation take 200 of them.
MAX_TEST_PROBLEMS = 855
MCNEMAR_MAX_PROBLEMS = 200


@dataclass(frozen=True, slots=True)
class PlannedJob:
    method: str
    condition: Condition
    seed: int


@dataclass(frozen=True, slots=True)
class Sweep:
    """One experiment's jobs and the design they share."""

    name: str
    jobs: tuple[PlannedJob, ...]
    budget: int
    test: TestDesign
    test_problems: int
    val_problems: int
    reflecting: frozenset[str] = frozenset()  # methods that call the reflection model

    @property
    def cells(self) -> list[tuple[str, Condition]]:
        return sorted({(j.method, j.condition) for j in self.jobs}, key=lambda c: (c[0], c[1]))

    @property
    def seeds(self) -> int:
        per_cell = Counter((j.method, j.condition) for j in self.jobs)
        return min(per_cell.values()) if per_cell else 0


@dataclass(slots=True)
class Usage:
    rollouts: float = 0.0
    calls: float = 0.0
    prompt_tokens: float = 0.0
    completion_tokens: float = 0.0

    def add(self, rollouts: float, profile: TokenProfile, *, count_rollouts: bool = True) -> None:
        calls = rollouts * profile.calls_per_rollout
        self.rollouts += rollouts if count_rollouts else 0.0
        self.calls += calls
        self.prompt_tokens += calls * profile.prompt_tokens_per_call
        self.completion_tokens += calls * profile.completion_tokens_per_call

    @property
    def tokens(self) -> float:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict[str, int]:
        return {"rollouts": round(self.rollouts), "calls": round(self.calls),
                "prompt_tokens": round(self.prompt_tokens), "completion_tokens": round(self.completion_tokens),
                "tokens": round(self.tokens)}


def sweep_usage(sweep: Sweep, profiles: Mapping[str, TokenProfile],
                reflection: TokenProfile = DEFAULT_REFLECTION) -> dict[str, Usage]:
    """Rollouts, calls and tokens per phase (and the reflection model's) of a sweep."""
    phases = {name: Usage() for name in (*PHASE_NAMES, "reflection")}
    design = sweep.test
    shared: set[tuple[Condition, int]] = set()
    for job in sweep.jobs:
        profile = profiles[job.condition.topology].at_size(job.condition.team_size)
        if (job.condition, job.seed) not in shared:  # the seed prompts' evaluations, shared by methods
            shared.add((job.condition, job.seed))
            phases["validate"].add(sweep.val_problems * design.val_samples, profile)
            phases["test"].add(sweep.test_problems * design.samples, profile)
        if job.method in TEST_ONLY_METHODS:
            continue
        phases["optimize"].add(sweep.budget, profile)
        phases["validate"].add(sweep.val_problems * design.val_samples, profile)
        phases["test"].add(sweep.test_problems * design.samples, profile)
        if job.method in sweep.reflecting:
            phases["reflection"].add(sweep.budget, reflection, count_rollouts=False)  # calls, not rollouts
    return phases


def endpoint_hours(usage: Usage, tokens_per_second: float) -> float:
    return usage.completion_tokens / tokens_per_second / 3600.0


def family_sizes(sweeps: Iterable[Sweep]) -> Counter[str]:
    """Cells per Holm family (task family: one per model) over all planned sweeps."""
    return Counter(condition.model for sweep in sweeps for method, condition in sweep.cells
                   if method not in TEST_ONLY_METHODS)


def contrast_design(sweep: Sweep, tests: int) -> power.Design:
    return power.Design(sweep.test_problems, max(1, sweep.seeds), sweep.test.samples, max(1, tests))


def _hours(sweep: Sweep, profiles: Mapping[str, TokenProfile], tokens_per_second: float) -> float:
    usage = sweep_usage(sweep, profiles)
    return sum(endpoint_hours(u, tokens_per_second) for u in usage.values())


def resized(sweep: Sweep, design: power.Design) -> Sweep:
    """The sweep under another problems × seeds × samples design (seeds renumbered from 0)."""
    cells = sweep.cells
    jobs = tuple(PlannedJob(method, condition, seed) for method, condition in cells for seed in range(design.seeds))
    test = replace(sweep.test, samples=design.samples)
    return replace(sweep, jobs=jobs, test=test, test_problems=design.problems)


def plan_sweep(sweep: Sweep, *, profiles: Mapping[str, TokenProfile], families: Mapping[str, int],
               assumptions: power.Assumptions, tokens_per_second: float = DEFAULT_TOKENS_PER_SECOND,
               threshold_pp: float = DEFAULT_MDE_THRESHOLD_PP, max_problems: int | None = MAX_TEST_PROBLEMS,
               ) -> dict[str, Any]:
    """The plan of one sweep: counts, cost, MDE, and a warning with the smallest design when the
    MDE is above ``threshold_pp``."""
    usage = sweep_usage(sweep, profiles)
    hours = {name: endpoint_hours(u, tokens_per_second) for name, u in usage.items()}
    models = sorted({c.model for _, c in sweep.cells})
    tests = max([families.get(m, 1) for m in models] or [1])
    cell = contrast_design(sweep, 1)
    family = contrast_design(sweep, tests)
    out: dict[str, Any] = {
        "experiment": sweep.name,
        "jobs": len(sweep.jobs),
        "cells": len(sweep.cells),
        "seeds": sweep.seeds,
        "budget": sweep.budget,
        "design": {"test": sweep.test.design, "problems": sweep.test_problems, "seeds": sweep.seeds,
                   "samples": sweep.test.samples, "val_problems": sweep.val_problems,
                   "val_samples": sweep.test.val_samples, "temperature": sweep.test.temperature,
                   "label": cell.label()},
        "charged_rollouts": round(usage["optimize"].rollouts),
        "phases": {name: u.as_dict() for name, u in usage.items()},
        "calls": round(sum(u.calls for u in usage.values())),
        "tokens": round(sum(u.tokens for u in usage.values())),
        "tokens_per_second": tokens_per_second,
        "endpoint_hours_by_phase": {k: round(v, 1) for k, v in hours.items()},
        "endpoint_hours": round(sum(hours.values()), 1),
        "assumptions": assumptions.as_dict(),
        "holm_family_size": tests,
        "mde_pp_cell": power.mde_pp(cell, assumptions),
        "mde_pp": power.mde_pp(family, assumptions),
        "detectable": power.detectable(family, assumptions),
        "threshold_pp": threshold_pp,
    }
    if sweep.test.samples == 1 and sweep.test_problems <= MCNEMAR_MAX_PROBLEMS:
        # The reference's analysis: exact McNemar per seed, Holm over cells x seeds (exact binomial
        # sums: priced for reference-sized test sets only).
        out["mde_pp_mcnemar_per_seed"] = trust.minimum_detectable_effect(
            sweep.test_problems, max(1, sweep.seeds), tests * max(1, sweep.seeds), assumptions.discordance)
    if out["mde_pp"] > threshold_pp:
        def cost(design: power.Design) -> float:
            return _hours(resized(sweep, design), profiles, tokens_per_second)

        # Seeds stay as the sweep has them: they replicate the optimization itself, a variance the
        # problem-clustered model does not price, so the search trades problems and samples only.
        best = power.smallest_design(threshold_pp, assumptions, tests=tests, cost=cost, max_problems=max_problems,
                                     seeds=(max(1, sweep.seeds),))
        out["warning"] = (f"MDE {out['mde_pp']:.1f} pp is above {threshold_pp:g} pp: this design cannot detect "
                          f"the effects it looks for")
        out["smallest_design"] = None if best is None else {
            "problems": best.problems, "seeds": best.seeds, "samples": best.samples, "label": best.label(),
            "mde_pp": power.mde_pp(best, assumptions), "endpoint_hours": round(cost(best), 1)}
    return out


def plan_lines(plan: Mapping[str, Any]) -> list[str]:
    """The human-readable form of one sweep's plan."""
    d = plan["design"]
    a = plan["assumptions"]
    lines = [f"experiment {plan['experiment']}: {plan['jobs']} jobs ({plan['cells']} cells x {plan['seeds']} seeds), "
             f"budget {plan['budget']}, test={d['test']} {d['problems']} problems x {d['samples']} sample(s), "
             f"validation {d['val_problems']} x {d['val_samples']}"]
    lines.append("  phase\trollouts\tcalls\tprompt_tokens\tcompletion_tokens\tendpoint_hours")
    for name, usage in plan["phases"].items():
        lines.append(f"  {name}\t{usage['rollouts']}\t{usage['calls']}\t{usage['prompt_tokens']}\t"
                     f"{usage['completion_tokens']}\t{plan['endpoint_hours_by_phase'][name]}")
    lines.append(f"  total: {plan['charged_rollouts']} charged rollouts, {plan['calls']} calls, {plan['tokens']} tokens, "
                 f"{plan['endpoint_hours']} endpoint-hours at {plan['tokens_per_second']:g} generated tokens/s")
    lines.append(f"  MDE at 80% power ({d['label']}, pass rate {a['pass_rate']}, discordance {a['discordance']}, "
                 f"icc {a['icc']}, {a['source']}): {plan['mde_pp_cell']:.1f} pp per cell, {plan['mde_pp']:.1f} pp "
                 f"in its Holm family of {plan['holm_family_size']}"
                 + ("" if plan["detectable"] else " (above the discordance: nothing is detectable)"))
    if "mde_pp_mcnemar_per_seed" in plan:
        shown = plan["mde_pp_mcnemar_per_seed"]
        lines.append("  the reference's analysis (exact McNemar per seed, Holm over cells x seeds): MDE "
                     + (f"{shown:.1f} pp" if shown is not None else "none (no effect up to the discordance)"))
    if "warning" in plan:
        lines.append(f"  warning: {plan['warning']}")
        best = plan.get("smallest_design")
        lines.append("  smallest design reaching it: " + (
            f"{best['problems']} problems x {best['seeds']} seeds x {best['samples']} samples "
            f"(MDE {best['mde_pp']:.1f} pp, {best['endpoint_hours']} endpoint-hours)" if best
            else f"none within {MAX_TEST_PROBLEMS} problems (what LCB holds outside train/val) x 5 seeds x 20 samples"))
    return lines


def design_table(designs: Sequence[tuple[int, int, int]], *, tests: int, assumptions: power.Assumptions,
                 hours: Callable[[power.Design], float]) -> list[dict[str, Any]]:
    """Rows of the README's table: problems x seeds x samples -> MDE (cell, family) and hours."""
    rows = []
    for problems, seeds, samples in designs:
        cell = power.Design(problems, seeds, samples, 1)
        family = power.Design(problems, seeds, samples, tests)
        rows.append({"problems": problems, "seeds": seeds, "samples": samples,
                     "mde_pp_cell": power.mde_pp(cell, assumptions), "mde_pp": power.mde_pp(family, assumptions),
                     "endpoint_hours": round(hours(family), 1)})
    return rows
