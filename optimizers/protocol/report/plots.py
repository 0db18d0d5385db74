"""The report's panels: one matplotlib figure each, drawn from ``ReportData`` (Agg backend).

``PANELS`` maps a panel id to its title, a one-line caption and its drawing function; the HTML
page and the W&B report show the panels in this order. A panel without data draws a figure that
says so (a partial run still gets every panel).
"""

from __future__ import annotations

from collections import defaultdict
from statistics import fmean
from typing import Any

from optimizers.protocol.report.canvas import Panel, _empty, _method_colors, _pyplot
from optimizers.protocol.report.data import DIFFICULTIES, UNKNOWN_DIFFICULTY, ReportData
from optimizers.protocol.report.trust_panels import TRUST_PANELS

# --------------------------------------------------------------------------- Δpp heatmap


def delta_heatmap(data: ReportData) -> Any:
    cells = [c for c in data.cells if c.comparison is not None]
    if not cells:
        return _empty("no cell has a usable test result yet")
    plt = _pyplot()
    import numpy as np

    methods, runtimes, models = data.methods, data.runtimes, data.models
    width = max(5.0, 1.6 * len(runtimes) + 2.0)
    height = max(2.4, 0.75 * len(methods) + 1.4)
    figure, axes_list = plt.subplots(1, len(models), figsize=(width * len(models), height), squeeze=False)
    bound = max(1.0, max(abs(c.comparison.mean_delta_pp) for c in cells))  # type: ignore[union-attr]
    image = None
    for axes, model in zip(axes_list[0], models):
        values = np.full((len(methods), len(runtimes)), np.nan)
        for cell in cells:
            if cell.model != model:
                continue
            row, col = methods.index(cell.method), runtimes.index(cell.runtime)
            comparison = cell.comparison
            assert comparison is not None
            values[row, col] = comparison.mean_delta_pp
            low, high = comparison.ci95_pp
            seeds = f"{len(comparison.seeds)} seed{'s' if len(comparison.seeds) != 1 else ''}"
            text = f"{comparison.mean_delta_pp:+.1f}\n[{low:+.1f}, {high:+.1f}]\n{seeds}" + (
                "" if cell.complete else " (partial)")
            axes.text(col, row, text, ha="center", va="center", fontsize=8,
                      color="black" if abs(comparison.mean_delta_pp) < 0.6 * bound else "white")
        image = axes.imshow(np.ma.masked_invalid(values), cmap="RdBu", vmin=-bound, vmax=bound, aspect="auto")
        axes.set_xticks(range(len(runtimes)), runtimes, rotation=20, ha="right")
        axes.set_yticks(range(len(methods)), methods)
        axes.set_title(f"Δpp deployed − seed prompts ({model})", fontsize=10)
        axes.set_facecolor("#eeeeee")
    if image is not None:
        figure.colorbar(image, ax=list(axes_list[0]), label="Δ pass@1 (pp)", shrink=0.85)
    return figure


# --------------------------------------------------------------------------- learning curves


def learning_curves(data: ReportData) -> Any:
    keyed = [(c, [j for j in c.jobs if j.curve]) for c in data.cells]
    keyed = [(c, jobs) for c, jobs in keyed if jobs]
    if not keyed:
        return _empty("no learning curve yet (no charged rollouts in these jobs)")
    plt = _pyplot()
    panels = sorted({(c.runtime, c.model) for c, _ in keyed}, key=lambda k: (data.runtimes.index(k[0]), k[1]))
    columns = min(3, len(panels))
    rows = (len(panels) + columns - 1) // columns
    figure, axes_grid = plt.subplots(rows, columns, figsize=(4.6 * columns, 3.3 * rows), squeeze=False)
    colors = _method_colors(data.methods)
    for index, (runtime, model) in enumerate(panels):
        axes = axes_grid[index // columns][index % columns]
        for cell, jobs in keyed:
            if (cell.runtime, cell.model) != (runtime, model):
                continue
            for job_index, job in enumerate(jobs):
                xs, ys = zip(*job.curve)
                # A one-point curve is a dot (a step line through one point draws nothing).
                axes.step(xs, ys, where="post", color=colors[cell.method], alpha=0.85, linewidth=1.4,
                          marker="o" if len(xs) == 1 else None, markersize=6,
                          label=cell.method if job_index == 0 else None)
        axes.set_title(f"{runtime} / {model}", fontsize=10)
        axes.set_xlabel("charged rollouts")
        axes.set_ylabel("committed incumbent score")
        axes.set_ylim(-0.02, 1.02)
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8, loc="lower right")
    for index in range(len(panels), rows * columns):
        axes_grid[index // columns][index % columns].axis("off")
    figure.tight_layout()
    return figure


# --------------------------------------------------------------------------- cost vs gain


def cost_vs_gain(data: ReportData) -> Any:
    cells = [c for c in data.cells if c.comparison is not None]
    if not cells:
        return _empty("no cell has a usable test result yet")
    plt = _pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    colors = _method_colors(data.methods)
    seen: set[str] = set()
    for cell in cells:
        gain = cell.comparison.mean_delta_pp  # type: ignore[union-attr]
        tokens = fmean([j.optimize_tokens for j in cell.jobs])
        seconds = [j.optimize_seconds for j in cell.jobs if j.optimize_seconds is not None]
        label = None if cell.method in seen else cell.method
        seen.add(cell.method)
        left.scatter([tokens], [gain], color=colors[cell.method], label=label, s=40, edgecolor="black", linewidth=0.4)
        if seconds:
            right.scatter([fmean(seconds)], [gain], color=colors[cell.method], s=40, edgecolor="black", linewidth=0.4)
        for axes, x in ((left, tokens), (right, fmean(seconds) if seconds else None)):
            if x is not None:
                axes.annotate(cell.runtime, (x, gain), fontsize=7, xytext=(3, 3), textcoords="offset points")
    left.set_xlabel("optimization tokens per job (task + reflection + judge/probe)")
    right.set_xlabel("optimization wall time per job (s)")
    for axes in (left, right):
        axes.axhline(0, color="#888888", linewidth=0.8)
        axes.set_ylabel("Δ pass@1 (pp)")
        axes.grid(alpha=0.3)
    left.legend(fontsize=8)
    figure.tight_layout()
    return figure


# --------------------------------------------------------------------------- pass@1 by difficulty


def pass_by_difficulty(data: ReportData) -> Any:
    baseline: dict[str, list[float]] = defaultdict(list)
    deployed: dict[tuple[str, str], list[float]] = defaultdict(list)
    for job in data.jobs:
        if not job.result.usable:
            continue
        for problem_id, seed_score, score in zip(job.result.example_ids, job.result.baseline, job.result.deployed):
            difficulty = job.difficulty.get(problem_id, UNKNOWN_DIFFICULTY)
            baseline[difficulty].append(float(seed_score))  # type: ignore[arg-type]
            deployed[(job.method, difficulty)].append(float(score))  # type: ignore[arg-type]
    levels = [d for d in DIFFICULTIES if baseline.get(d)]
    if not levels:
        return _empty("no scored test problems yet")
    plt = _pyplot()
    arms = ["seed prompts", *data.methods]
    colors = {"seed prompts": "#9e9e9e", **_method_colors(data.methods)}
    figure, axes = plt.subplots(figsize=(max(6.0, 1.1 * len(levels) * len(arms) * 0.5 + 3), 3.8))
    width = 0.8 / len(arms)
    for arm_index, arm in enumerate(arms):
        heights, counts = [], []
        for level in levels:
            scores = baseline[level] if arm == "seed prompts" else deployed.get((arm, level), [])
            heights.append(fmean(scores) if scores else 0.0)
            counts.append(len(scores))
        xs = [i + (arm_index - (len(arms) - 1) / 2) * width for i in range(len(levels))]
        bars = axes.bar(xs, heights, width=width, color=colors[arm], label=arm, edgecolor="black", linewidth=0.3)
        for bar, count in zip(bars, counts):
            axes.annotate(f"n={count}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), fontsize=6,
                          ha="center", xytext=(0, 2), textcoords="offset points")
    axes.set_xticks(range(len(levels)), levels)
    axes.set_ylim(0, 1.08)
    axes.set_ylabel("pass@1 on test problems")
    axes.set_title("pass@1 by difficulty (seed prompts vs each method's deployed prompts)", fontsize=10)
    axes.legend(fontsize=8, ncol=min(5, len(arms)), loc="upper center", bbox_to_anchor=(0.5, -0.1))
    axes.grid(alpha=0.3, axis="y")
    figure.tight_layout()
    return figure


# --------------------------------------------------------------------------- fallback rate


def fallback_rate(data: ReportData) -> Any:
    if not data.jobs:
        return _empty("no jobs")
    plt = _pyplot()
    methods = data.methods
    reasons: dict[str, dict[str, int]] = {m: defaultdict(int) for m in methods}
    totals = {m: 0 for m in methods}
    for job in data.jobs:
        if job.method not in totals:
            continue
        totals[job.method] += 1
        if job.fell_back:
            reasons[job.method][job.result.fallback_reason or "seed kept"] += 1
    all_reasons = sorted({r for per in reasons.values() for r in per})
    figure, axes = plt.subplots(figsize=(max(5.0, 1.0 * len(methods) + 3), 3.6))
    bottoms = [0.0] * len(methods)
    palette = plt.get_cmap("Set2")
    for index, reason in enumerate(all_reasons):
        heights = [reasons[m].get(reason, 0) / totals[m] if totals[m] else 0.0 for m in methods]
        axes.bar(methods, heights, bottom=bottoms, label=reason, color=palette(index % 8), edgecolor="black",
                 linewidth=0.3)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    for index, method in enumerate(methods):
        axes.annotate(f"{sum(reasons[method].values())}/{totals[method]} jobs", (index, bottoms[index]),
                      ha="center", fontsize=8, xytext=(0, 3), textcoords="offset points")
    axes.set_ylim(0, 1.15)
    axes.set_ylabel("share of jobs that deployed the seed")
    axes.set_title("fallback rate (validation kept the seed prompts), by reason", fontsize=10)
    if all_reasons:
        axes.legend(fontsize=8)
    axes.grid(alpha=0.3, axis="y")
    figure.tight_layout()
    return figure


PANELS: dict[str, Panel] = {
    "delta_heatmap": Panel(
        "Δpp heatmap: method × topology",
        "Mean over seeds of deployed − seed pass@1 on the test problems (percentage points), with the "
        "seed-stratified paired bootstrap 95 % CI; 'partial' cells miss grid seeds.",
        delta_heatmap),
    "learning_curves": Panel(
        "Learning curves",
        "The committed incumbent's score (as its method judged it) against charged rollouts, one line per job.",
        learning_curves),
    "cost_vs_gain": Panel(
        "Cost vs gain",
        "Tokens (task, reflection and judge/probe models) and wall time spent optimizing, per job (mean over seeds), against Δpp.",
        cost_vs_gain),
    "pass_by_difficulty": Panel(
        "pass@1 by difficulty",
        "Mean test score by problem difficulty: the seed prompts (all jobs) and each method's deployed prompts.",
        pass_by_difficulty),
    "fallback_rate": Panel(
        "Fallback rate",
        "Share of jobs whose validation kept the seed prompts, split by the recorded reason.",
        fallback_rate),
}


PANELS.update(TRUST_PANELS)
