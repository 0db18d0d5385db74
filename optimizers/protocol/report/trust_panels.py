"""The report's trust panels: what each cell's search cost, how optimistic its incumbent looked,
how often replies were cut, the cost-vs-gain Pareto front and the grid's minimum detectable
effect. Numbers come from ``optimizers.protocol.aggregate.trust`` (the same functions the aggregate uses).
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from optimizers.protocol.aggregate import trust
from optimizers.protocol.report.data import CellView, ReportData
from optimizers.protocol.report.canvas import Panel, _empty, _method_colors, _pyplot

POWER_FAMILY = "task"  # the aggregate's default Holm family


def _name(cell: CellView) -> str:
    variant = cell.jobs[0].result.variant if cell.jobs else ""
    return f"{cell.method}[{variant}]" if variant and "[" not in cell.method else cell.method


def cell_rows(data: ReportData) -> list[dict[str, Any]]:
    """Per cell: cost means, Δpp per million reflection tokens, optimism gap, truncation rates."""
    rows = []
    for cell in data.cells:
        results = [j.result for j in cell.jobs]
        delta = cell.comparison.mean_delta_pp if cell.comparison is not None else None
        rows.append({
            "method": _name(cell), "runtime": cell.runtime, "model": cell.model,
            "selection": results[0].selection_mode if results else "val", "delta_pp": delta,
            "cost": trust.cell_cost([r.cost for r in results], delta),
            "optimism": trust.cell_optimism([r.optimism for r in results]),
            "truncation": trust.cell_truncation([r.truncation for r in results]),
        })
    return rows


def method_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per method (and selection rule): means over its cells."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        grouped[(row["method"], row["selection"])].append(row)
    out = []
    for (method, selection), members in grouped.items():
        def mean(values: Any) -> float | None:
            present = [float(v) for v in values if v is not None]
            return sum(present) / len(present) if present else None

        out.append({
            "method": method, "selection": selection, "cells": len(members),
            "optimism_gap_pp": mean(m["optimism"]["mean_optimism_gap_pp"] for m in members),
            "excess_optimism_pp": mean(m["optimism"]["mean_excess_optimism_pp"] for m in members),
            "truncated_task": mean(m["truncation"]["task"]["rate"] for m in members),
            "truncated_reflection": mean(m["truncation"]["reflection"]["rate"] for m in members),
            "delta_pp_per_million_reflection_tokens": mean(
                m["cost"]["delta_pp_per_million_reflection_tokens"] for m in members),
        })
    return out


def power_rows(data: ReportData, family: str = POWER_FAMILY) -> list[dict[str, Any]]:
    comparisons = [c.comparison for c in data.cells if c.comparison is not None]
    sizes = [s.n for c in comparisons for s in c.seeds] or [len(j.result.example_ids) for j in data.jobs]
    if not sizes:
        return []
    from optimizers.protocol.grid import cells

    return trust.power_table(family, problems=max(set(sizes), key=sizes.count), seeds=len(cells.GRID_SEEDS),
                             discordance=trust.observed_discordance(comparisons), models=set(data.models))


def payload(data: ReportData) -> dict[str, Any]:
    rows = cell_rows(data)
    return {"cells": rows, "methods": method_rows(rows), "power": power_rows(data)}


# --------------------------------------------------------------------------- HTML


def _pp(value: float | None) -> str:
    return "–" if value is None else f"{value:+.2f}"


def _rate(value: float | None) -> str:
    return "–" if value is None else f"{100.0 * value:.1f} %"


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


def _seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def html_sections(data: ReportData, mark: str = "", *, power_note: str | None = None) -> list[str]:
    """The trust table (per cell) and the power statement, as HTML sections; ``mark`` (HTML, or
    empty) heads each of them; ``power_note`` replaces the power statement with one line saying why
    it has nothing to say (``report.idle``)."""
    escape = html.escape
    info = payload(data)
    parts = [
        "<section id=\"panel-trust\"><h2>Cost, optimism and truncation</h2>" + mark +
        "<p class=\"caption\">Means over each cell's seeds. Optimism gap: the incumbent's score on the rows "
        "its method searched on minus its score on the selection rows (pp); excess: the same minus the "
        "seed's gap. Truncated: replies cut at the token limit (task: all phases; reflection calls).</p>"
        "<table><thead><tr><th class=\"l\">method</th><th class=\"l\">runtime</th><th class=\"l\">model</th>"
        "<th class=\"l\">selection</th><th>charged</th><th>task tokens</th><th>reflection tokens</th>"
        "<th>uncharged calls</th><th>wall s</th><th>Δpp / M reflection tokens</th><th>optimism gap (pp)</th>"
        "<th>excess (pp)</th><th>truncated task</th><th>truncated reflection</th></tr></thead><tbody>",
    ]
    for row in info["cells"]:
        cost, optimism, cut = row["cost"], row["optimism"], row["truncation"]
        parts.append(
            f"<tr><td class=\"l\">{escape(row['method'])}</td><td class=\"l\">{escape(row['runtime'])}</td>"
            f"<td class=\"l\">{escape(row['model'])}</td><td class=\"l\">{escape(row['selection'])}</td>"
            f"<td>{_num(cost['mean_charged_rollouts'])}</td><td>{_num(cost['mean_task_tokens'])}</td>"
            f"<td>{_num(cost['mean_reflection_tokens'])}</td><td>{_num(cost['mean_uncharged_calls'])}</td>"
            f"<td>{_seconds(cost['mean_wall_s'])}</td>"
            f"<td>{_pp(cost['delta_pp_per_million_reflection_tokens'])}</td>"
            f"<td>{_pp(optimism['mean_optimism_gap_pp'])}</td><td>{_pp(optimism['mean_excess_optimism_pp'])}</td>"
            f"<td>{_rate(cut['task']['rate'])}</td><td>{_rate(cut['reflection']['rate'])}</td></tr>")
    parts.append("</tbody></table></section>")
    if power_note is not None:
        parts.append(f"<section id=\"panel-power\"><h2>Statistical power</h2><p class=\"idle-line\">"
                     f"{escape(power_note)}</p></section>")
        return parts
    parts.append("<section id=\"panel-power\"><h2>Statistical power</h2>" + mark + "<p class=\"caption\">Minimum "
                 "detectable effect (pp) at 80 % power for the grid's design: exact McNemar per seed, Holm "
                 "over the family's tests; a difference smaller than this is not evidence of no effect.</p><ul>")
    for row in info["power"]:
        mde = row["mde_pp"]
        shown = f"{mde:.1f} pp" if mde is not None else f"none up to {100 * row['discordance']:.1f} pp"
        single = row["mde_pp_one_cell"]
        parts.append(
            f"<li>family {escape(row['family'])}: {row['cells']} cells × {row['seeds']} seeds = "
            f"{row['tests']} Holm tests, {row['problems']} problems per seed, discordance "
            f"{row['discordance']:.3f} ({escape(row['discordance_source'])}): MDE {shown} "
            f"(one cell without correction: {'none' if single is None else f'{single:.1f} pp'})</li>")
    parts.append("</ul></section>")
    return parts


# --------------------------------------------------------------------------- panels


def _grouped_bars(labels: Sequence[str], series: dict[str, list[float]], *, ylabel: str, title: str) -> Any:
    """One group of bars per label, one bar per series (legend)."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(max(5.0, 1.2 * len(labels) + 3), 3.6))
    width = 0.8 / max(1, len(series))
    for index, (name, values) in enumerate(series.items()):
        offset = (index - (len(series) - 1) / 2) * width
        axes.bar([i + offset for i in range(len(labels))], values, width=width, label=name)
    axes.axhline(0.0, color="black", linewidth=0.6)
    axes.set_xticks(range(len(labels)), labels, rotation=20, ha="right", fontsize=8)
    axes.set_ylabel(ylabel)
    axes.set_title(title, fontsize=10)
    axes.legend(fontsize=8)
    axes.grid(alpha=0.3, axis="y")
    figure.tight_layout()
    return figure


def optimism_panel(data: ReportData) -> Any:
    rows = [r for r in method_rows(cell_rows(data)) if r["optimism_gap_pp"] is not None]
    if not rows:
        return _empty("no job reports an optimism gap yet")
    return _grouped_bars(
        [f"{r['method']} ({r['selection']})" for r in rows],
        {"optimism gap": [r["optimism_gap_pp"] for r in rows],
         "excess over the seed's gap": [r["excess_optimism_pp"] or 0.0 for r in rows]},
        ylabel="pp (search rows − selection rows)", title="optimism gap of the incumbent, per method")


def truncation_panel(data: ReportData) -> Any:
    phases = (*trust.PHASES, "reflection")
    by_method: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for row in cell_rows(data):
        for phase in phases:
            cut = row["truncation"][phase]
            by_method[row["method"]][phase][0] += cut["replies"]
            by_method[row["method"]][phase][1] += cut["truncated"]
    if not any(n for per in by_method.values() for n, _ in per.values()):
        return _empty("no job reports reply truncation yet")
    methods = list(by_method)
    series = {phase: [100.0 * by_method[m][phase][1] / by_method[m][phase][0] if by_method[m][phase][0] else 0.0
                      for m in methods] for phase in phases}
    return _grouped_bars(methods, series, ylabel="% of replies cut at the token limit",
                         title="truncated replies per method and phase")


def pareto_panel(data: ReportData) -> Any:
    points = []
    for row in cell_rows(data):
        cost = row["cost"]
        total = sum(v or 0.0 for v in (cost["mean_task_tokens"], cost["mean_reflection_tokens"],
                                       cost["mean_uncharged_tokens"]))
        if row["delta_pp"] is not None:
            points.append((f"{row['method']}/{row['runtime']}/{row['model']}", total, row["delta_pp"], row["method"]))
    if not points:
        return _empty("no cell has both a cost and a test result yet")
    plt = _pyplot()
    front = set(trust.pareto_front([(label, cost, gain) for label, cost, gain, _ in points]))
    colors = _method_colors(sorted({p[3] for p in points}))
    figure, axes = plt.subplots(figsize=(7, 4.2))
    for label, cost, gain, method in points:
        axes.scatter(cost, gain, color=colors[method], s=60 if label in front else 25,
                     edgecolor="black" if label in front else "none", zorder=3)
    frontier = sorted((cost, gain) for label, cost, gain, _ in points if label in front)
    axes.plot([c for c, _ in frontier], [g for _, g in frontier], color="black", linewidth=0.8, linestyle="--",
              label="Pareto front")
    for method, color in colors.items():
        axes.scatter([], [], color=color, label=method)
    axes.axhline(0.0, color="grey", linewidth=0.6)
    axes.set_xlabel("tokens spent searching per job (task + reflection + uncharged calls)")
    axes.set_ylabel("Δpp (deployed − seed)")
    axes.set_title("cost vs gain: cells on the Pareto front are outlined", fontsize=10)
    axes.legend(fontsize=8)
    axes.grid(alpha=0.3)
    figure.tight_layout()
    return figure


TRUST_PANELS: dict[str, Panel] = {
    "cost_pareto": Panel(
        "Cost vs gain: Pareto front",
        "Mean tokens per job spent searching (task + reflection + uncharged judge/probe calls) against Δpp; "
        "outlined cells are not beaten on both.",
        pareto_panel),
    "optimism_gap": Panel(
        "Optimism gap per method",
        "Incumbent's score on the rows its method searched on minus its score on the selection rows, and the "
        "excess over the seed's own gap (pp); methods that search on validation look better there.",
        optimism_panel),
    "truncation": Panel(
        "Truncated replies",
        "Share of replies cut at the token limit, per method and phase (team replies) and reflection calls.",
        truncation_panel),
}
