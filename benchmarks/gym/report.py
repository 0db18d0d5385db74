"""Aggregate gym job results: bootstrap CIs, the table, the JSON summary and the PNG."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BOOTSTRAP_SEED = 0
FAILED = ("crashed",)  # statuses that are failures of the method (shown, excluded from means)


@dataclass(frozen=True, slots=True)
class Estimate:
    mean: float
    low: float
    high: float
    n: int

    def to_dict(self) -> dict[str, float | int]:
        return {"mean": self.mean, "low": self.low, "high": self.high, "n": self.n}


def bootstrap(values: Sequence[float], *, resamples: int = 2000, level: float = 0.95) -> Estimate | None:
    """The mean with a percentile-bootstrap CI (fixed RNG, so a report is reproducible)."""
    if not values:
        return None
    import numpy as np

    data = np.asarray(values, dtype=float)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    means = data[rng.integers(0, len(data), size=(resamples, len(data)))].mean(axis=1)
    tail = (1 - level) / 2
    return Estimate(float(data.mean()), float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail)),
                    len(data))


def summarize(results: Iterable[Mapping[str, Any]], *, resamples: int = 2000) -> list[dict[str, Any]]:
    """One row per (world, method, budget)."""
    groups: dict[tuple[str, str, int], list[Mapping[str, Any]]] = {}
    for result in results:
        label = result.get("label") or result["method"]  # the method, with its non-default params
        groups.setdefault((result["world"], label, int(result["budget"])), []).append(result)
    rows = []
    for (world, method, budget), items in sorted(groups.items()):
        ok = [r for r in items if r["status"] not in FAILED]
        shares = [r["gain_share"] for r in ok if r.get("gain_share") is not None]
        reached = [r["rollouts_to_90"] for r in ok if r.get("rollouts_to_90") is not None]
        regret = bootstrap([r["regret"] for r in ok], resamples=resamples)
        share = bootstrap(shares, resamples=resamples)
        rows.append({
            "world": world, "method": method, "budget": budget, "jobs": len(items),
            "failed": len(items) - len(ok),
            "statuses": {s: sum(r["status"] == s for r in items) for s in sorted({r["status"] for r in items})},
            "errors": sorted({r["error"] for r in items if r.get("error")})[:3],
            "seed_regret": items[0]["seed_regret"],
            "optimal_success": items[0]["optimal_success"],
            "regret": regret.to_dict() if regret else None,
            "gain_share": share.to_dict() if share else None,
            "rollouts_to_90_median": statistics.median(reached) if reached else None,
            "reached_90": len(reached),
            "mean_charged": statistics.fmean(r["charged"] for r in ok) if ok else None,
            "mean_wall_s": statistics.fmean(r.get("wall_s", 0.0) for r in items),
        })
    return rows


def _cell(row: Mapping[str, Any] | None) -> str:
    if row is None:
        return "-"
    if row["regret"] is None:
        return f"all {row['failed']} failed"
    r = row["regret"]
    text = f"{r['mean']:.3f} [{r['low']:.3f}, {r['high']:.3f}]"
    if row["gain_share"] is not None:
        text += f" {row['gain_share']['mean'] * 100:.0f}%"
    if row["failed"]:
        text += f" ({row['failed']} crashed)"
    return text


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: regret [95% CI] and share of the possible gain per budget; rollouts to 90 % at the
    largest budget (median over the seeds that got there, and how many did); mean charged
    rollouts and seconds per job at the largest budget; finished seeds per budget."""
    budgets = sorted({r["budget"] for r in rows})
    index = {(r["world"], r["method"], r["budget"]): r for r in rows}
    worlds = sorted({r["world"] for r in rows}, key=lambda w: [x["world"] for x in rows].index(w))
    header = ["world", "method", *[f"B={b}: regret [95% CI] gain" for b in budgets],
              f"rollouts to 90% (B={budgets[-1]})", "charged", "seeds", "s/job"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for world in worlds:
        methods = sorted({r["method"] for r in rows if r["world"] == world})
        methods.sort(key=lambda m: (m != "identity", m))
        for method in methods:
            last = index.get((world, method, budgets[-1]))
            r90 = "-"
            if last is not None and last["jobs"] - last["failed"]:
                median = last["rollouts_to_90_median"]
                r90 = f"{median:g} ({last['reached_90']}/{last['jobs'] - last['failed']})" if median is not None \
                    else f"never (0/{last['jobs'] - last['failed']})"
            charged = f"{last['mean_charged']:.0f}" if last and last["mean_charged"] is not None else "-"
            wall = f"{last['mean_wall_s']:.1f}" if last else "-"
            seeds = "/".join(str(index[(world, method, b)]["jobs"]) if (world, method, b) in index else "0"
                             for b in budgets)
            cells = [_cell(index.get((world, method, b))) for b in budgets]
            lines.append("| " + " | ".join([world, method, *cells, r90, charged, seeds, wall]) + " |")
    return "\n".join(lines)


def plot(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Regret vs budget per method, one panel per world (mean and 95% bootstrap CI)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    worlds = list(dict.fromkeys(r["world"] for r in rows))
    methods = sorted({r["method"] for r in rows})
    columns = min(2, len(worlds))
    lines = (len(worlds) + columns - 1) // columns
    figure, axes = plt.subplots(lines, columns, figsize=(6.5 * columns, 4.2 * lines), squeeze=False)
    colors = plt.get_cmap("tab10")
    for panel, world in enumerate(worlds):
        ax = axes[panel // columns][panel % columns]
        seed_regret = next(r["seed_regret"] for r in rows if r["world"] == world)
        ax.axhline(seed_regret, color="grey", linestyle="--", linewidth=1, label="seed")
        for index, method in enumerate(methods):
            points = sorted((r["budget"], r["regret"]) for r in rows
                            if r["world"] == world and r["method"] == method and r["regret"])
            if not points:
                continue
            xs = [b * (1 + 0.03 * (index - len(methods) / 2)) for b, _ in points]  # spread overlapping bars
            ys = [p["mean"] for _, p in points]
            errors = [[p["mean"] - p["low"] for _, p in points], [p["high"] - p["mean"] for _, p in points]]
            ax.errorbar(xs, ys, yerr=errors, marker="o", markersize=4, capsize=2, linewidth=1.2,
                        color=colors(index % 10), label=method)
        ax.set_xscale("log")
        budgets = sorted({r["budget"] for r in rows if r["world"] == world})
        ax.set_xticks(budgets, [str(b) for b in budgets])
        ax.minorticks_off()
        ax.set_title(world)
        ax.set_xlabel("rollout budget")
        ax.set_ylabel("regret (optimum - deployed success)")
        ax.set_ylim(bottom=-0.01)
    for panel in range(len(worlds), lines * columns):
        axes[panel // columns][panel % columns].axis("off")
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), frameon=False)
    figure.tight_layout(rect=(0, 0.07, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.png")
    figure.savefig(tmp, dpi=110)
    plt.close(figure)
    tmp.replace(path)
