"""Which report panels have nothing to say for these jobs, and the one line that says why.

A panel built for a grid of hundreds of jobs is noise on one job: a heatmap with one cell, a
power statement about a family of cells that were never run, an optimism chart whose bars are all
zero. ``idle_reason(panel_id, data)`` is None when the panel is worth drawing, else the sentence
shown in its place (the page keeps the panel's heading, so every panel is still accounted for).
"""

from __future__ import annotations

from collections.abc import Callable

from optimizers.protocol.report.data import ReportData

Reason = Callable[[ReportData], str | None]


def _compared(data: ReportData) -> list:
    return [c for c in data.cells if c.comparison is not None]


def _one_cell_words(data: ReportData) -> str:
    cells = _compared(data)
    if not cells:
        return "no cell has a usable test result yet"
    cell = cells[0]
    delta = cell.comparison.mean_delta_pp  # type: ignore[union-attr]
    return (f"one cell ({cell.method} on {cell.runtime}/{cell.model}, Δpp {delta:+.2f}, in the Cells table "
            "above)")


def _needs_cells(what: str) -> Reason:
    def reason(data: ReportData) -> str | None:
        if len(_compared(data)) >= 2:
            return None
        return (f"Nothing to compare: {what} needs at least two cells with test results; this report has "
                f"{_one_cell_words(data)}.")

    return reason


def _learning_curves(data: ReportData) -> str | None:
    if not any(job.curve for job in data.jobs):
        return ("No job committed an incumbent with a score yet, so there is no curve to draw (the job pages "
                "list every candidate and its rollouts).")
    if len(data.jobs) == 1:
        return "One job: its learning curve is drawn in the job's story above."
    return None


def _fallback_rate(data: ReportData) -> str | None:
    if len(data.jobs) >= 2:
        return None
    if not data.jobs:
        return "No jobs."
    job = data.jobs[0]
    kept = (f"kept the seed prompts ({job.result.fallback_reason or 'no reason recorded'})" if job.fell_back
            else "deployed its optimized prompts")
    return f"One job, which {kept}: a rate needs several jobs."


def _optimism(data: ReportData) -> str | None:
    from optimizers.protocol.report.trust_panels import cell_rows, method_rows

    gaps = [r for r in method_rows(cell_rows(data)) if r["optimism_gap_pp"] is not None]
    if not gaps:
        return "No job reports an optimism gap (its selection.json has no optimism record)."
    if all(abs(r["optimism_gap_pp"]) < 1e-9 and abs(r["excess_optimism_pp"] or 0.0) < 1e-9 for r in gaps):
        return ("Every optimism gap is 0 pp: each incumbent scored the same on the rows its method searched on "
                "as on the selection rows.")
    return None


def _truncation(data: ReportData) -> str | None:
    from optimizers.protocol.report.trust_panels import cell_rows

    replies = cut = 0
    for row in cell_rows(data):
        for phase, counts in row["truncation"].items():
            if phase != "task":  # 'task' pools the phases already counted one by one
                replies += counts["replies"]
                cut += counts["truncated"]
    if not replies:
        return "No job reports reply truncation (no reply counts in its result.json)."
    if not cut:
        return f"No reply was cut at the token limit ({replies} replies and reflection calls counted)."
    return None


def _power(data: ReportData) -> str | None:
    if len(data.cells) >= 2:
        return None
    return ("Statistical power is a statement about the grid's families of cells; this report has "
            f"{len(data.cells)} cell, so there is no family to correct over and no grid design to size.")


IDLE_REASONS: dict[str, Reason] = {
    "delta_heatmap": _needs_cells("a method × topology heatmap"),
    "learning_curves": _learning_curves,
    "cost_vs_gain": _needs_cells("cost vs gain"),
    "fallback_rate": _fallback_rate,
    "cost_pareto": _needs_cells("a Pareto front"),
    "optimism_gap": _optimism,
    "truncation": _truncation,
    "power": _power,
}


def idle_reason(panel_id: str, data: ReportData) -> str | None:
    reason = IDLE_REASONS.get(panel_id)
    return None if reason is None else reason(data)
