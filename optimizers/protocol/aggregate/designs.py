"""What a cell's test design lets it conclude, beyond the per-seed table (pure, no I/O).

- ``clustered``: deployed vs seed with problems as clusters (every seed's and sample's roll of a
  problem is one cluster): paired cluster bootstrap CI, exact McNemar only where it is valid (one
  binary roll per problem), else a paired t-test over per-problem pass rates
  (``optimizers.protocol.aggregate.clusters``); Holm within the same families as the main table.
- Intent-to-treat and per-protocol: a job whose optimization failed on infrastructure deploys the
  seed prompts (Δ = 0 by construction) and stays in the intent-to-treat mean, the estimate of
  "what running this method gets you"; the per-protocol mean leaves those seeds out ("what the
  method does when it runs"). Both are stated, with the seeds that failed.
- Contamination: when a cell's test problems span the model's training cutoff, pass@1 of both
  arms before (on or before the cutoff) and after it, side by side.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from optimizers.protocol.aggregate import stats
from optimizers.protocol.aggregate.clusters import cluster_compare, split_by_date

INFRASTRUCTURE_FAILURE = "infrastructure_invalid"


def _label(group: Any) -> dict[str, Any]:
    label = group.label()
    return {"method": label["method"], "task": label["task"], "runtime": label["runtime"],
            "model": label["model"], "cell": label["cell"]}


def cell_rolls(group: Any) -> tuple[dict[str, list[float]], dict[str, list[float]]] | None:
    """Per problem, the seed arm's and the deployed arm's rolls over every seed (None when a roll
    is missing: such a cell is incomplete in the main table too)."""
    a: dict[str, list[float]] = defaultdict(list)
    b: dict[str, list[float]] = defaultdict(list)
    for _, job in sorted(group.by_seed.items()):
        if len(job.baseline_rolls) != len(job.example_ids) or len(job.deployed_rolls) != len(job.example_ids):
            return None
        for pid, base, deployed in zip(job.example_ids, job.baseline_rolls, job.deployed_rolls):
            if None in base or None in deployed or len(base) != len(deployed):
                return None
            a[pid].extend(float(x) for x in base)
            b[pid].extend(float(x) for x in deployed)
    return (dict(a), dict(b)) if a else None


def intent_to_treat(group: Any, comparison: Any) -> dict[str, Any]:
    """Both estimates of the cell's Δpp and the seeds whose optimization failed on infrastructure."""
    deltas = {s.seed: s.delta_pp for s in comparison.seeds}
    failed = sorted(seed for seed, job in group.by_seed.items()
                    if job.optimization_status != "completed" or job.failure_kind == INFRASTRUCTURE_FAILURE)
    kept = [deltas[seed] for seed in sorted(deltas) if seed not in failed]
    return {"itt_delta_pp": stats.mean(list(deltas.values())),
            "pp_delta_pp": stats.mean(kept) if kept else None,
            "infra_failed_seeds": failed}


def cutoff_table(group: Any) -> dict[str, Any] | None:
    """pass@1 of both arms before and after the model's cutoff; None unless the cell's test
    problems lie on both sides of it."""
    first = group.first
    cutoff = first.model_cutoff
    if not cutoff or not first.contest_dates or len(first.contest_dates) != len(first.example_ids):
        return None
    rolls = cell_rolls(group)
    if rolls is None:
        return None
    a, b = rolls
    sides = split_by_date(first.example_ids, dict(zip(first.example_ids, first.contest_dates)), cutoff)
    if not sides["before"] or not sides["after"]:
        return None
    out: dict[str, Any] = {"cutoff": cutoff}
    for side, ids in sides.items():
        base = stats.mean([stats.mean(a[p]) for p in ids])
        deployed = stats.mean([stats.mean(b[p]) for p in ids])
        out[side] = {"problems": len(ids), "base": base, "deployed": deployed,
                     "delta_pp": 100.0 * (deployed - base)}
    return out


def design_rows(groups: Sequence[Any], cell_stats: Mapping[Any, Any], family_of: Callable[[Mapping[str, Any]], Any],
                replicates: int) -> list[dict[str, Any]]:
    """One row per complete cell: the clustered test, both estimates, the cutoff split."""
    rows: list[dict[str, Any]] = []
    for group in groups:
        comparison = cell_stats.get(group.key)
        if comparison is None:
            continue
        row: dict[str, Any] = {**_label(group), "seeds": sorted(group.by_seed), "clustered": None}
        rolls = cell_rolls(group)
        if rolls is not None:
            row["clustered"] = cluster_compare(*rolls, replicates=replicates).as_dict()
        row.update(intent_to_treat(group, comparison))
        row["cutoff"] = cutoff_table(group)
        rows.append(row)
    families: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["clustered"] is not None:
            families[family_of(row)].append(row)
    for members in families.values():
        for row, adjusted in zip(members, stats.holm([r["clustered"]["p_value"] for r in members])):
            row["clustered"]["p_holm"] = adjusted
    return rows


# --------------------------------------------------------------------------- output


def _f(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render_designs(rows: Sequence[Mapping[str, Any]]) -> str:
    lines = ["\t".join(("clustered", "method", "runtime", "model", "problems", "rolls_per_problem", "base", "deployed",
                        "delta_pp", "ci95_pp", "test", "p", "p_holm", "icc", "itt_delta_pp", "pp_delta_pp",
                        "infra_failed_seeds"))]
    for row in rows:
        c = row["clustered"] or {}
        ci = c.get("ci95_pp")
        lines.append("\t".join([
            "", row["method"], row["runtime"], row["model"], str(c.get("problems", "-")),
            _f(c.get("rolls_per_problem"), ".1f"), _f(c.get("a_rate"), ".3f"), _f(c.get("b_rate"), ".3f"),
            _f(c.get("delta_pp"), "+.2f"), f"[{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else "-", c.get("test", "-"),
            _f(c.get("p_value"), ".4g"), _f(c.get("p_holm"), ".4g"), _f(c.get("icc"), ".2f"),
            _f(row["itt_delta_pp"], "+.2f"), _f(row["pp_delta_pp"], "+.2f"),
            ",".join(map(str, row["infra_failed_seeds"])) or "-",
        ]))
    cut = [row for row in rows if row.get("cutoff")]
    if cut:
        lines.append("")
        lines.append("\t".join(("cutoff", "method", "runtime", "model", "model_cutoff", "before_n", "before_base",
                                "before_deployed", "before_delta_pp", "after_n", "after_base", "after_deployed",
                                "after_delta_pp")))
        for row in cut:
            t = row["cutoff"]
            lines.append("\t".join([
                "", row["method"], row["runtime"], row["model"], t["cutoff"],
                *(part for side in ("before", "after") for part in (
                    str(t[side]["problems"]), f"{t[side]['base']:.3f}", f"{t[side]['deployed']:.3f}",
                    f"{t[side]['delta_pp']:+.2f}")),
            ]))
    return "\n".join(lines) + "\n"
