"""Aggregate gym job results: the summary (per kind x method x budget), the table and the figures.

Rows are paired over instances: ranks, Friedman/Nemenyi and Wilcoxon-Holm use only the complete
blocks (instances every method of the cell finished); means and CIs use every finished instance
of a row (``n``), so a partial run is labelled by its counts.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.gym import stats

FAILED = ("crashed", "infrastructure_invalid")  # a method's own failure: shown, excluded from means
BASELINE = "random"  # every row's paired difference is against blind search


def kind_of(world: str) -> str:
    """A result's world kind as the table groups it: the world name without its instance."""
    return world.partition("@")[0]


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _estimate(values: Sequence[float], resamples: int) -> dict[str, float] | None:
    e = stats.bootstrap_mean(values, resamples=resamples)
    return None if e is None else {"mean": e[0], "low": e[1], "high": e[2], "n": len(values)}


def summarize(results: Iterable[Mapping[str, Any]], *, resamples: int = 2000) -> dict[str, Any]:
    """``rows`` (one per kind x method x budget) and ``cells`` (one per kind x budget: ranks,
    Friedman, critical difference, significant pairs)."""
    groups: dict[tuple[str, str, int], list[Mapping[str, Any]]] = {}
    for result in results:
        key = (kind_of(result["world"]) + _knob_tag(result), result["method"], int(result["budget"]))
        groups.setdefault(key, []).append(result)
    cells: dict[tuple[str, int], dict[str, Any]] = {}
    for kind, budget in sorted({(k, b) for k, _, b in groups}):
        values = {m: {int(r["seed"]): float(r["regret"]) for r in items if r["status"] not in FAILED}
                  for (k, m, b), items in groups.items() if (k, b) == (kind, budget)}
        values = {m: v for m, v in values.items() if v}
        b = stats.blocks(values)
        test = stats.friedman(b)
        cells[(kind, budget)] = {
            "kind": kind, "budget": budget, "blocks": len(b.instances), "methods": list(b.methods),
            "average_ranks": stats.average_ranks(b),
            "friedman": {"chi2": test[0], "p": test[1]} if test else None,
            "nemenyi_cd": stats.nemenyi_cd(len(b.methods), len(b.instances)) if len(b.instances) else None,
            "significantly_better": sorted([list(p) for p in stats.significantly_better(b)]) if len(b.instances) > 1
            else [],
            "_blocks": b,
        }
    rows = []
    for (kind, method, budget), items in sorted(groups.items()):
        ok = [r for r in items if r["status"] not in FAILED]
        cell = cells[(kind, budget)]
        versus = stats.paired_ci(cell["_blocks"], method, BASELINE, resamples=resamples) \
            if method != BASELINE else None
        first = items[0]
        rows.append({
            "kind": kind, "method": method, "budget": budget, "instances": len(items),
            "failed": len(items) - len(ok),
            "statuses": {s: sum(r["status"] == s for r in items) for s in sorted({r["status"] for r in items})},
            "errors": sorted({r["error"] for r in items if r.get("error")})[:3],
            "topology": first.get("world_topology"),
            "regret": _estimate([r["regret"] for r in ok], resamples),
            "normalised_regret": _estimate([r["regret"] / r["optimal_success"] for r in ok], resamples),
            "seed_regret": statistics.fmean(r["seed_regret"] for r in items),
            "gain_share": _estimate([r["gain_share"] for r in ok if r.get("gain_share") is not None], resamples),
            "versus_random": None if versus is None else {"mean": versus[0], "low": versus[1], "high": versus[2],
                                                          "n": cell["blocks"]},
            "average_rank": cell["average_ranks"].get(method),
            "budget_share": statistics.fmean(r["budget_share"] for r in items),
            "mean_charged": statistics.fmean(r["charged"] for r in items),
            **{f"rollouts_to_{t}_median": _median([r[f"rollouts_to_{t}"] for r in ok
                                                   if r.get(f"rollouts_to_{t}") is not None]) for t in (50, 90, 100)},
            **{f"reached_{t}": sum(r.get(f"rollouts_to_{t}") is not None for r in ok) for t in (50, 90, 100)},
            "uncharged_calls": statistics.fmean(r.get("uncharged_calls", 0) for r in items),
            "uncharged_tokens": statistics.fmean(r.get("uncharged_tokens", 0) for r in items),
            "reflection_calls": statistics.fmean(r.get("reflection_calls", 0) for r in items),
            "reflection_tokens": statistics.fmean(r.get("reflection_tokens", 0) for r in items),
            "mean_cpu_s": statistics.fmean(r.get("cpu_s", 0.0) for r in items),
            "mean_wall_s": statistics.fmean(r.get("wall_s", 0.0) for r in items),
        })
    return {"rows": rows, "cells": [{k: v for k, v in c.items() if k != "_blocks"} for c in cells.values()],
            "_cells": cells}


def _knob_tag(result: Mapping[str, Any]) -> str:
    knobs = result.get("knobs") or {}
    return "" if not knobs else "~" + ",".join(f"{k}={v}" for k, v in sorted(knobs.items()))


def _cell(row: Mapping[str, Any] | None) -> str:
    if row is None:
        return "-"
    if row["regret"] is None:
        return f"all {row['failed']} failed"
    r = row["regret"]
    text = f"{r['mean']:.3f} [{r['low']:.3f}, {r['high']:.3f}]"
    if row["average_rank"] is not None:
        text += f" r{row['average_rank']:.1f}"
    v = row["versus_random"]
    if v is not None:
        text += f" Δ{v['mean']:+.3f} [{v['low']:+.3f}, {v['high']:+.3f}]"
    if row["failed"]:
        text += f" ({row['failed']} failed)"
    return text


def table(summary: Mapping[str, Any]) -> str:
    """Markdown: per kind and method, per budget: mean regret [95 % CI] over instances, average
    rank among the cell's methods (complete blocks), and the paired difference to ``random``
    [95 % CI] (negative: better than blind search); at the largest budget: share of the budget
    spent, rollouts to 90 % of the gain (median, and how many instances got there and stayed),
    uncharged judge/probe calls per job, CPU seconds per job; instances per budget."""
    rows = summary["rows"]
    budgets = sorted({r["budget"] for r in rows})
    index = {(r["kind"], r["method"], r["budget"]): r for r in rows}
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    header = ["kind", "method", *[f"B={b}: regret [CI] rank Δrandom [CI]" for b in budgets],
              f"budget spent (B={budgets[-1]})", "rollouts to 90%", "uncharged calls", "CPU s/job", "instances"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for kind in kinds:
        methods = sorted({r["method"] for r in rows if r["kind"] == kind},
                         key=lambda m: (m not in ("identity", BASELINE), m != "identity", m))
        for method in methods:
            last = index.get((kind, method, budgets[-1]))
            r90 = "-"
            if last is not None and last["instances"] - last["failed"]:
                done = last["instances"] - last["failed"]
                median = last["rollouts_to_90_median"]
                r90 = f"{median:g} ({last['reached_90']}/{done})" if median is not None else f"never (0/{done})"
            spent = f"{last['budget_share'] * 100:.0f}%" if last else "-"
            calls = f"{last['uncharged_calls']:.0f}" if last else "-"
            cpu = f"{last['mean_cpu_s']:.1f}" if last else "-"
            counts = "/".join(str(index[(kind, method, b)]["instances"]) if (kind, method, b) in index else "0"
                              for b in budgets)
            cells = [_cell(index.get((kind, method, b))) for b in budgets]
            lines.append("| " + " | ".join([kind, method, *cells, spent, r90, calls, cpu, counts]) + " |")
    return "\n".join(lines)


def costs(results: Sequence[Mapping[str, Any]], requested: Sequence[Any], cores: int = 2) -> dict[str, Any]:
    """CPU seconds per job (method x budget, mean over finished jobs) and what the whole
    requested run costs at those rates: CPU seconds, and wall seconds on ``cores`` cores that
    nothing else uses (jobs spread evenly; process start-up not counted)."""
    per: dict[tuple[str, int], list[float]] = {}
    for r in results:
        per.setdefault((r["method"], int(r["budget"])), []).append(float(r.get("cpu_s", 0.0)))
    means = {key: statistics.fmean(v) for key, v in per.items()}
    known = [means[(j.method, j.budget)] for j in requested if (j.method, j.budget) in means]
    missing = sum((j.method, j.budget) not in means for j in requested)
    total = sum(known)
    return {"cpu_s_per_job": {f"{m}/b{b}": round(v, 3) for (m, b), v in sorted(means.items())},
            "jobs_priced": len(known), "jobs_unpriced": missing, "run_cpu_s": round(total, 1),
            "run_wall_s_quiet": round(total / cores, 1), "cores": cores}


def cost_table(price: Mapping[str, Any]) -> str:
    """Markdown: CPU seconds per job, method x budget."""
    cells: dict[str, dict[int, float]] = {}
    for key, value in price["cpu_s_per_job"].items():
        method, _, budget = key.rpartition("/b")
        cells.setdefault(method, {})[int(budget)] = value
    budgets = sorted({b for v in cells.values() for b in v})
    lines = ["| method | " + " | ".join(f"CPU s/job B={b}" for b in budgets) + " |", "|---|" + "---|" * len(budgets)]
    for method in sorted(cells):
        lines.append(f"| {method} | " + " | ".join(f"{cells[method][b]:.2f}" if b in cells[method] else "-"
                                                   for b in budgets) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# Figures


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(figure: Any, path: Path) -> None:
    plt = _pyplot()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.png")
    figure.savefig(tmp, dpi=100)
    plt.close(figure)
    tmp.replace(path)


def _save_with_legend(figure: Any, axes: Sequence[Any], path: Path) -> None:
    """One legend under the panels (the first panel's methods) for a figure of per-kind panels."""
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=min(len(labels), 7), frameon=False, fontsize=8)
    figure.tight_layout(rect=(0, 0.08, 1, 1))
    _save(figure, path)


def _colors(methods: Sequence[str]) -> dict[str, Any]:
    cmap = _pyplot().get_cmap("tab20")
    return {m: cmap(i % 20) for i, m in enumerate(sorted(methods))}


def _grid(n: int, columns: int = 2, size: tuple[float, float] = (6.5, 4.0)) -> tuple[Any, list[Any]]:
    plt = _pyplot()
    lines = max(1, (n + columns - 1) // columns)
    columns = min(columns, max(n, 1))
    figure, axes = plt.subplots(lines, columns, figsize=(size[0] * columns, size[1] * lines), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.axis("off")
    return figure, flat


def plot_regret(summary: Mapping[str, Any], path: Path) -> None:
    """Mean regret vs budget per method, one panel per kind (95 % bootstrap CI)."""
    rows = summary["rows"]
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    colors = _colors({r["method"] for r in rows})
    figure, axes = _grid(len(kinds))
    for ax, kind in zip(axes, kinds, strict=False):
        mine = [r for r in rows if r["kind"] == kind]
        ax.axhline(statistics.fmean(r["seed_regret"] for r in mine), color="grey", linestyle="--", linewidth=1,
                   label="seed")
        methods = sorted({r["method"] for r in mine})
        for i, method in enumerate(methods):
            points = sorted((r["budget"], r["regret"]) for r in mine if r["method"] == method and r["regret"])
            if not points:
                continue
            xs = [b * (1 + 0.025 * (i - len(methods) / 2)) for b, _ in points]
            ys = [p["mean"] for _, p in points]
            err = [[p["mean"] - p["low"] for _, p in points], [p["high"] - p["mean"] for _, p in points]]
            ax.errorbar(xs, ys, yerr=err, marker="o", markersize=3, capsize=2, linewidth=1, color=colors[method],
                        label=method)
        budgets = sorted({r["budget"] for r in mine})
        ax.set_xscale("log")
        ax.set_xticks(budgets, [str(b) for b in budgets])
        ax.minorticks_off()
        ax.set_title(kind)
        ax.set_xlabel("rollout budget")
        ax.set_ylabel("mean regret over instances")
    _save_with_legend(figure, axes, path)


def plot_cd(summary: Mapping[str, Any], path: Path) -> None:
    """Critical-difference diagrams: per kind (rows) and budget (columns), the methods on an axis
    of average rank; a bar joins methods within one Nemenyi critical difference (alpha 0.05)."""
    cells = [c for c in summary["cells"] if c["average_ranks"]]
    kinds = list(dict.fromkeys(c["kind"] for c in cells))
    budgets = sorted({c["budget"] for c in cells})
    plt = _pyplot()
    figure, axes = plt.subplots(len(kinds), len(budgets), figsize=(5.2 * len(budgets), 3.0 * len(kinds)),
                                squeeze=False)
    for r, kind in enumerate(kinds):
        for c, budget in enumerate(budgets):
            ax = axes[r][c]
            cell = next((x for x in cells if x["kind"] == kind and x["budget"] == budget), None)
            ax.set_yticks([])
            for side in ("left", "right", "top"):
                ax.spines[side].set_visible(False)
            if cell is None:
                ax.axis("off")
                continue
            ranks = sorted(cell["average_ranks"].items(), key=lambda kv: kv[1])
            k = len(ranks)
            ax.set_xlim(0.5, k + 0.5)
            ax.set_ylim(0, k + 2)
            for i, (method, rank) in enumerate(ranks):
                y = k - i
                ax.plot([rank, rank], [0, y], color="grey", linewidth=0.6)
                ax.text(rank + 0.08, y, f"{method} {rank:.2f}", fontsize=7, va="center")
            cd = cell["nemenyi_cd"]
            ax.plot([1, 1 + cd], [k + 1.5, k + 1.5], color="black", linewidth=2)
            ax.text(1 + cd / 2, k + 1.7, f"CD {cd:.2f}", fontsize=7, ha="center")
            values = [v for _, v in ranks]
            reach, drawn = -1, 0
            for i in range(k):  # maximal groups of methods within one CD of each other
                j = max(x for x in range(i, k) if values[x] - values[i] <= cd)
                if j > i and j > reach:
                    y = 0.3 + 0.3 * (drawn % 4)
                    ax.plot([values[i], values[j]], [y, y], color="red", linewidth=2.5, alpha=0.6)
                    drawn += 1
                reach = max(reach, j)
            f = cell["friedman"]
            ftext = f"Friedman p={f['p']:.1g}" if f else "Friedman n/a"
            ax.set_title(f"{kind}, B={budget}: {cell['blocks']} instances, {ftext}", fontsize=8)
            ax.set_xlabel("average rank (1 = lowest regret)", fontsize=7)
    figure.tight_layout()
    _save(figure, path)


def plot_ecdf(results: Sequence[Mapping[str, Any]], budget: int, path: Path) -> None:
    """ECDF over instances of normalised regret (regret / optimal success) at ``budget``, one
    panel per kind (COCO-style: higher and further left is better)."""
    chosen = [r for r in results if int(r["budget"]) == budget and r["status"] not in FAILED]
    kinds = list(dict.fromkeys(kind_of(r["world"]) for r in chosen))
    colors = _colors({r["method"] for r in chosen})
    figure, axes = _grid(len(kinds))
    for ax, kind in zip(axes, kinds, strict=False):
        mine = [r for r in chosen if kind_of(r["world"]) == kind]
        for method in sorted({r["method"] for r in mine}):
            xs, ys = stats.ecdf([r["regret"] / r["optimal_success"] for r in mine if r["method"] == method])
            ax.step([0.0, *xs], [0.0, *ys], where="post", color=colors[method], linewidth=1.2, label=method)
        ax.set_title(f"{kind}, B={budget}")
        ax.set_xlabel("normalised regret (share of the optimum lost)")
        ax.set_ylabel("share of instances at or below")
        ax.set_xlim(left=-0.01)
    _save_with_legend(figure, axes, path)


def plot_anytime(results: Sequence[Mapping[str, Any]], budget: int, path: Path) -> None:
    """Mean normalised regret of the committed incumbent against rollouts actually charged, at
    ``budget``, one panel per kind (a method that does not commit incumbents jumps at its end)."""
    chosen = [r for r in results if int(r["budget"]) == budget and r["status"] not in FAILED and r.get("anytime")]
    kinds = list(dict.fromkeys(kind_of(r["world"]) for r in chosen))
    colors = _colors({r["method"] for r in chosen})
    figure, axes = _grid(len(kinds))
    for ax, kind in zip(axes, kinds, strict=False):
        mine = [r for r in chosen if kind_of(r["world"]) == kind]
        for method in sorted({r["method"] for r in mine}):
            runs = [r for r in mine if r["method"] == method]
            xs = [x for x, _ in runs[0]["anytime"]]
            ys = [statistics.fmean((r["optimal_success"] - r["anytime"][i][1]) / r["optimal_success"] for r in runs)
                  for i in range(len(xs))]
            ax.step([max(x, 1) for x in xs], ys, where="post", color=colors[method], linewidth=1.2, label=method)
        ax.set_xscale("log")
        ax.set_title(f"{kind}, B={budget}")
        ax.set_xlabel("charged rollouts")
        ax.set_ylabel("mean normalised regret of the incumbent")
    _save_with_legend(figure, axes, path)
