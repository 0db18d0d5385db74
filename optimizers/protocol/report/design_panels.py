"""The report's test-design panels (HTML tables, no figure): what each cell's design lets it say.

- ``panel-clustered``: deployed vs seed with problems as clusters (every seed and sample of a
  problem is one cluster; the test each cell can validly use), and the intent-to-treat next to the
  per-protocol Δpp with the seeds whose optimization failed on infrastructure.
- ``panel-cutoff``: for cells whose test problems span the model's training cutoff, pass@1 of both
  arms before and after it side by side (a contamination check in one table).
Rows come from ``optimizers.protocol.aggregate.designs``, as in the aggregate's table.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any


def _f(value: Any, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def _tr(cells: list[str], *, labels: int) -> str:
    """One table row; the first ``labels`` cells are text (left-aligned), the rest numbers."""
    left = ' class="l"'
    return "<tr>" + "".join(f"<td{left if i < labels else ''}>{html.escape(v)}</td>"
                            for i, v in enumerate(cells)) + "</tr>"


def _clustered_row(row: Mapping[str, Any]) -> str:
    c = row.get("clustered") or {}
    ci = c.get("ci95_pp")
    cells = [row["method"], row["runtime"], row["model"], str(c.get("problems", "–")),
             _f(c.get("rolls_per_problem"), ".1f"), _f(c.get("a_rate"), ".3f"), _f(c.get("b_rate"), ".3f"),
             _f(c.get("delta_pp"), "+.2f"), f"[{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else "–",
             str(c.get("test", "–")), _f(c.get("p_holm"), ".4g"), _f(row.get("itt_delta_pp"), "+.2f"),
             _f(row.get("pp_delta_pp"), "+.2f"), ",".join(map(str, row.get("infra_failed_seeds") or [])) or "–"]
    return _tr(cells, labels=3)


def _cutoff_row(row: Mapping[str, Any]) -> str:
    t = row["cutoff"]
    cells = [row["method"], row["runtime"], row["model"], t["cutoff"]]
    for side in ("before", "after"):
        s = t[side]
        cells += [str(s["problems"]), f"{s['base']:.3f}", f"{s['deployed']:.3f}", f"{s['delta_pp']:+.2f}"]
    return _tr(cells, labels=4)


def html_sections(data: Any) -> list[str]:
    rows = list(getattr(data, "designs", None) or [])
    if not rows:
        return []
    parts = [
        "<section id=\"panel-clustered\"><h2>Deployed vs seed, problems as clusters</h2>"
        "<p class=\"caption\">Each problem's rolls (seeds × samples) form one cluster: Δpp is the mean over "
        "problems, the CI a paired cluster bootstrap, the test exact McNemar only with one binary roll per "
        "problem, else a paired t-test over per-problem pass rates (Holm-adjusted per model). Intent-to-treat "
        "keeps jobs whose optimization failed on infrastructure (they deployed the seed); per-protocol leaves "
        "them out.</p><table><thead><tr><th class=\"l\">method</th><th class=\"l\">runtime</th>"
        "<th class=\"l\">model</th><th>problems</th><th>rolls/problem</th><th>seed pass@1</th>"
        "<th>deployed pass@1</th><th>Δpp</th><th>95 % CI (pp)</th><th>test</th><th>p (Holm)</th>"
        "<th>ITT Δpp</th><th>per-protocol Δpp</th><th>infra-failed seeds</th></tr></thead><tbody>",
        *(_clustered_row(row) for row in rows),
        "</tbody></table></section>",
    ]
    spanning = [row for row in rows if row.get("cutoff")]
    parts.append("<section id=\"panel-cutoff\"><h2>Before and after the model's cutoff</h2>")
    if not spanning:
        parts.append("<p class=\"idle-line\">No cell's test problems span its model's training cutoff "
                     "(set model.cutoff and test a window that crosses it).</p></section>")
        return parts
    parts += [
        "<p class=\"caption\">pass@1 of both arms on test problems released on or before the model's training "
        "cutoff and after it: a gain that holds only before the cutoff is suspect.</p><table><thead><tr>"
        "<th class=\"l\">method</th><th class=\"l\">runtime</th><th class=\"l\">model</th><th class=\"l\">cutoff</th>"
        "<th>before: problems</th><th>seed</th><th>deployed</th><th>Δpp</th>"
        "<th>after: problems</th><th>seed</th><th>deployed</th><th>Δpp</th></tr></thead><tbody>",
        *(_cutoff_row(row) for row in spanning),
        "</tbody></table></section>",
    ]
    return parts
