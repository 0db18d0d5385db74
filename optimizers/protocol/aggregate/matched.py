"""Team vs matched single agent, and what the optimization costs per deployment (pure functions).

For every runtime condition with a matched-compute baseline cell (``self_consistency``,
``best_of_n``: seed team vs the single agent sampled N times at the team's tokens), each cell of
that condition gets a row: the team it tests (seed prompts for the baseline's own row, the
deployed prompts for an optimizer's cell) against the matched single agent on the same problems
and seeds, Δpp = team − single, with tokens per problem for both arms, next to the cell's own
"optimized vs seed" Δpp.

A transfer cell (``--deploy-from``: prompts tuned on model X, deployed on this condition's model)
gets its row too, against this condition's baseline; its optimization cost is the search that
made its prompts, the source cell's on X (a transfer job itself spends nothing).

Cost of the optimization itself: C = its charged task tokens + reflection tokens + uncharged
tokens (judges, probes), mean over the cell's seeds. Amortised over D deployments (problems the
deployed team is run on) it adds C / D tokens per problem. The break-even count is the smallest
D at which the optimized team's tokens per *solved* problem, (t_deployed + C / D) / p_deployed,
are no more than the reference's t_ref / p_ref (the seed team's, or the matched single agent's);
``None`` when that never happens (the optimized team is not cheaper per solved problem even for
free).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

DEFAULT_DEPLOYMENTS = 1000
MATCHED_METHODS = ("self_consistency", "best_of_n")  # the test-only baselines (optimizers/matched.py)


def is_baseline(job: Any) -> bool:
    return bool(job.matched)


def optimization_tokens(cost: Mapping[str, Any]) -> float:
    """Charged and uncharged tokens a search spent (task + reflection + uncharged calls)."""
    return float(sum(float(cost.get(k) or 0) for k in ("task_tokens", "reflection_tokens", "uncharged_tokens")))


def break_even(optimization: float, tokens_deployed: float | None, solved_deployed: float | None,
               tokens_reference: float | None, solved_reference: float | None) -> int | None:
    """Smallest number of deployments D with (t_dep + C/D) / p_dep <= t_ref / p_ref; None: never."""
    if None in (tokens_deployed, solved_deployed, tokens_reference, solved_reference):
        return None
    if not solved_deployed or not solved_reference:
        return None
    saving = solved_deployed * tokens_reference / solved_reference - tokens_deployed  # tokens/problem to spare
    if saving <= 0:
        return None
    return max(1, math.ceil(optimization / saving)) if optimization > 0 else 0


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _arm_tokens(jobs: Sequence[Any], arm: str) -> float | None:
    return _mean([float(j.tokens_per_problem[arm]) for j in jobs if arm in j.tokens_per_problem])


def _paired(team_job: Any, team_arm: str, single_job: Any) -> tuple[list[float], list[float]] | None:
    team = dict(zip(team_job.example_ids, getattr(team_job, team_arm)))
    single = dict(zip(single_job.example_ids, single_job.deployed))
    if set(team) != set(single):
        return None
    ids = sorted(team)
    return [single[i] for i in ids], [team[i] for i in ids]


def matched_rows(groups: Sequence[Any], cell_stats: Mapping[tuple[Any, ...], Any], compare: Any, *,
                 replicates: int, deployments: int = DEFAULT_DEPLOYMENTS) -> list[dict[str, Any]]:
    """One row per (cell, matched baseline) on the same condition and seeds; see the module doc."""
    complete = [g for g in groups if g.key in cell_stats]
    baselines = [g for g in complete if is_baseline(g.first) and not g.first.transfer_from]
    sources = {_source_key(g.first): g for g in complete if not g.first.transfer_from and not is_baseline(g.first)}
    rows: list[dict[str, Any]] = []
    for baseline in baselines:
        condition = _condition(baseline.first)
        single_tokens = _arm_tokens(list(baseline.by_seed.values()), "deployed")
        single_stats = cell_stats[baseline.key]
        n_values = sorted({int(j.matched.get("n", 0)) for j in baseline.by_seed.values()})
        for group in complete:
            if _condition(group.first) != condition or (is_baseline(group.first) and group is not baseline):
                continue
            own = group is baseline
            arm = "baseline" if own else "deployed"  # the seed team, or the team the method deploys
            pairs = {}
            for seed in sorted(set(group.by_seed) & set(baseline.by_seed)):
                paired = _paired(group.by_seed[seed], arm, baseline.by_seed[seed])
                if paired is not None:
                    pairs[seed] = paired
            if not pairs:
                continue
            comparison = compare("matched", {}, pairs, replicates=replicates)
            jobs = list(group.by_seed.values())
            team_tokens = _arm_tokens(jobs, arm)
            seed_tokens = _arm_tokens(jobs, "baseline")
            stats = cell_stats[group.key]
            searched = jobs
            if group.first.transfer_from:  # the search that made the prompts ran on the source model
                source = sources.get(_tuned_key(group.first))
                searched = list(source.by_seed.values()) if source is not None else []
            cost = 0.0 if own else (_mean([optimization_tokens(j.cost) for j in searched]) or 0.0)
            label = group.label()
            rows.append({
                "method": "seed team" if own else label["method"], "baseline": baseline.first.method,
                "task": label["task"], "runtime": label["runtime"], "model": label["model"],
                "seeds": sorted(pairs), "n_samples": n_values,
                "team_mean": comparison.macro_b, "single_mean": comparison.macro_a,
                "team_vs_single_pp": comparison.mean_delta_pp, "ci95_pp": list(comparison.ci95_pp),
                "team_tokens_per_problem": team_tokens, "single_tokens_per_problem": single_tokens,
                "optimized_vs_seed_pp": None if own else stats.mean_delta_pp,
                "optimization_tokens": cost, "deployments": deployments,
                "amortised_tokens_per_problem": None if team_tokens is None else team_tokens + cost / deployments,
                "break_even_vs_seed": None if own else break_even(
                    cost, team_tokens, stats.macro_b, seed_tokens, stats.macro_a),
                "break_even_vs_single": None if own else break_even(
                    cost, team_tokens, stats.macro_b, single_tokens, single_stats.macro_b),
            })
    rows.sort(key=lambda r: (r["baseline"], r["task"], r["model"], r["runtime"], r["method"] != "seed team",
                             r["method"]))
    return rows


def _source_key(job: Any) -> tuple[Any, ...]:
    return (job.method, job.variant, job.registry_key, job.model_key, job.selection_mode)


def _tuned_key(job: Any) -> tuple[Any, ...]:
    """The source cell a transfer cell's prompts came from (same method, knobs and runtime)."""
    from optimizers.protocol.grid import cells

    tuned = job.transfer_from
    variant = ",".join(k for k in job.variant.split(",") if k and not k.startswith("from="))
    return (job.method, variant, str(tuned.get("registry_key") or job.registry_key),
            cells.model_key(str(tuned.get("model"))), job.selection_mode)


def _condition(job: Any) -> tuple[Any, ...]:
    return tuple(job.cell.get(k) for k in ("dataset", "topology", "team_size", "communication", "rounds", "model"))


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render_matched(rows: Sequence[Mapping[str, Any]]) -> str:
    lines = ["\t".join(("method", "vs", "runtime", "model", "seeds", "N", "team", "single", "team_vs_single_pp",
                        "ci95_pp", "team_tok/prob", "single_tok/prob", "optimized_vs_seed_pp", "opt_tokens",
                        "amortised_tok/prob@D", "break_even_vs_seed", "break_even_vs_single"))]
    for row in rows:
        lines.append("\t".join([
            row["method"], row["baseline"], row["runtime"], row["model"], ",".join(map(str, row["seeds"])),
            ",".join(map(str, row["n_samples"])), _fmt(row["team_mean"], ".3f"), _fmt(row["single_mean"], ".3f"),
            _fmt(row["team_vs_single_pp"], "+.2f"), f"[{row['ci95_pp'][0]:+.2f}, {row['ci95_pp'][1]:+.2f}]",
            _fmt(row["team_tokens_per_problem"], ".0f"), _fmt(row["single_tokens_per_problem"], ".0f"),
            _fmt(row["optimized_vs_seed_pp"], "+.2f"), _fmt(row["optimization_tokens"], ".0f"),
            f"{_fmt(row['amortised_tokens_per_problem'], '.0f')}@{row['deployments']}",
            _break(row, "break_even_vs_seed"), _break(row, "break_even_vs_single"),
        ]))
    return "\n".join(lines) + "\n"


def _break(row: Mapping[str, Any], key: str) -> str:
    if row["method"] == "seed team":
        return "-"
    return "never" if row[key] is None else str(row[key])
