"""Two report panels for issue 30, as HTML sections (no image: they render in milliseconds):

* **Team vs matched single agent** — per runtime condition with a matched-compute baseline: the
  seed team and each method's deployed team against the single agent sampled N times at the
  team's tokens (same problems, same seeds), with tokens per problem for both arms, beside the
  cell's "optimized vs seed" Δpp, the optimization's own tokens amortised over the stated number
  of deployments and the break-even counts (``optimizers.protocol.aggregate.matched``).
* **Transfer matrix** — per method and runtime: rows the model the prompts were tuned on, columns
  the model they were deployed on; each cell Δpp and the share of the source's own gain kept,
  coloured by Δpp (``optimizers.protocol.aggregate.transfer``).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

STYLE = """
td.gain { background: #d9f2d9; } td.loss { background: #f8d7da; } td.flat { background: #f3f3f3; }
"""


def _num(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def _break_even(row: Mapping[str, Any], key: str) -> str:
    if row["method"] == "seed team":
        return "–"
    return "never" if row[key] is None else f"{row[key]:,}"


def matched_section(rows: Sequence[Mapping[str, Any]], mark: str = "") -> list[str]:
    escape = html.escape
    if not rows:
        return ["<section id=\"panel-matched\"><h2>Team vs matched single agent</h2><p class=\"idle-line\">"
                "No matched-compute baseline (self_consistency, best_of_n) has run on these conditions.</p>"
                "</section>"]
    deployments = rows[0]["deployments"]
    parts = [
        "<section id=\"panel-matched\"><h2>Team vs matched single agent</h2>" + mark +
        "<p class=\"caption\">Each team against the condition's single agent sampled N times per problem "
        "at the team's tokens (the seed team's row is the baseline job itself; a method's row tests the team "
        "it deploys; a row method[from=X] tests prompts tuned on model X, and its optimization tokens are that "
        "search's on X). Δpp = team − single, on the same problems and seeds. Optimization tokens: the search's "
        f"charged task, reflection and uncharged tokens (mean over seeds), amortised over {deployments:,} "
        "deployments. Break-even: the deployments after which the optimized team's tokens per solved problem "
        "(optimization included) drop to the seed team's / the single agent's; never: not even for free.</p>"
        "<table><thead><tr><th class=\"l\">team</th><th class=\"l\">vs</th><th class=\"l\">runtime</th>"
        "<th class=\"l\">model</th><th>seeds</th><th>N</th><th>team pass@1</th><th>single pass@1</th>"
        "<th>team vs single Δpp</th><th>95 % CI</th><th>team tokens / problem</th>"
        "<th>single tokens / problem</th><th>optimized vs seed Δpp</th><th>optimization tokens</th>"
        f"<th>tokens / problem at {deployments:,} deployments</th><th>break-even vs seed team</th>"
        "<th>break-even vs single</th></tr></thead><tbody>",
    ]
    for row in rows:
        ci = row["ci95_pp"]
        parts.append(
            f"<tr><td class=\"l\">{escape(row['method'])}</td><td class=\"l\">{escape(row['baseline'])}</td>"
            f"<td class=\"l\">{escape(row['runtime'])}</td><td class=\"l\">{escape(row['model'])}</td>"
            f"<td>{','.join(map(str, row['seeds']))}</td><td>{','.join(map(str, row['n_samples']))}</td>"
            f"<td>{_num(row['team_mean'], '.3f')}</td><td>{_num(row['single_mean'], '.3f')}</td>"
            f"<td class=\"{_tone(row['team_vs_single_pp'])}\">{_num(row['team_vs_single_pp'], '+.2f')}</td>"
            f"<td>[{ci[0]:+.2f}, {ci[1]:+.2f}]</td>"
            f"<td>{_num(row['team_tokens_per_problem'], ',.0f')}</td>"
            f"<td>{_num(row['single_tokens_per_problem'], ',.0f')}</td>"
            f"<td>{_num(row['optimized_vs_seed_pp'], '+.2f')}</td><td>{_num(row['optimization_tokens'], ',.0f')}</td>"
            f"<td>{_num(row['amortised_tokens_per_problem'], ',.0f')}</td>"
            f"<td>{_break_even(row, 'break_even_vs_seed')}</td><td>{_break_even(row, 'break_even_vs_single')}</td>"
            "</tr>")
    parts.append("</tbody></table></section>")
    return parts


def _tone(delta: float | None) -> str:
    if delta is None or abs(delta) < 1e-9:
        return "flat"
    return "gain" if delta > 0 else "loss"


def transfer_section(matrix: Mapping[str, Any], mark: str = "") -> list[str]:
    escape = html.escape
    blocks = matrix.get("matrices") or []
    if not blocks:
        return ["<section id=\"panel-transfer\"><h2>Transfer matrix</h2><p class=\"idle-line\">No transfer job "
                "(--deploy-from) among these results.</p></section>"]
    parts = ["<section id=\"panel-transfer\"><h2>Transfer matrix</h2>" + mark +
             "<p class=\"caption\">Prompts tuned on the row's model, deployed on the column's model, against that "
             "model's own seed team on the same problems and seeds: Δpp (mean over seeds) and, in brackets, the "
             "share of the source's own gain kept. The diagonal is the source jobs' own Δpp.</p>"]
    for block in blocks:
        cells = {(e["source"], e["target"]): e for e in block["entries"]}
        parts.append(f"<h3>{escape(block['method'])} on {escape(block['runtime'])}</h3><table><thead><tr>"
                     "<th class=\"l\">tuned on ↓ / deployed on →</th>"
                     + "".join(f"<th>{escape(y)}</th>" for y in block["deployed_on"]) + "</tr></thead><tbody>")
        for x in block["tuned_on"]:
            row = [f"<td class=\"l\">{escape(x)}</td>"]
            for y in block["deployed_on"]:
                entry = cells.get((x, y))
                if entry is None:
                    row.append("<td>–</td>")
                    continue
                share = "–" if entry["share_kept"] is None else f"{100 * entry['share_kept']:.0f} %"
                row.append(f"<td class=\"{_tone(entry['delta_pp'])}\">{entry['delta_pp']:+.2f} ({share})</td>")
            parts.append("<tr>" + "".join(row) + "</tr>")
        parts.append("</tbody></table>")
    parts.append("</section>")
    return parts


def html_sections(data: Any, mark: str = "") -> list[str]:
    return [*matched_section(data.matched, mark), *transfer_section(data.transfer, mark)]


def payload(data: Any) -> dict[str, Any]:
    return {"matched": list(data.matched), "transfer": dict(data.transfer)}
