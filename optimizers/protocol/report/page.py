"""``python -m optimizers.protocol.report ROOT... --out DIR``: the comparison report.

Writes ``DIR/report.html`` (self-contained: every plot embedded as base64 PNG) and the same plots
as ``DIR/<panel>.png`` beside it, plus ``DIR/report.json`` (the numbers behind the page) and one
page per job under ``DIR/jobs/`` (``report.job_page``; a one-job report opens with that job's
story). Panels: the Δpp heatmap method × topology with 95 % CIs, learning curves per cell, cost
(tokens, wall time) vs gain, pass@1 by difficulty and the fallback rate; a panel with nothing to
say for these jobs is one line saying why (``report.idle``). Cells and statistics come from
``optimizers.protocol.aggregate``; a cell missing seeds is drawn from the seeds it has, marked
partial.

``--wandb`` also builds a W&B Report of the same panels; it needs an online W&B (an API key and
``WANDB_MODE`` not offline/disabled) and the ``wandb-workspaces`` package; otherwise it says so in
one line and the local report is still written.

Exit status: 0 report written; 1 nothing to report (no usable result under the roots, said in one
line); 2 bad arguments.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

log = logging.getLogger("report")
SCHEMA = "lcb-grid-report/v1"


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {message} (see {self.prog} --help)\n")
        raise SystemExit(2)


# --------------------------------------------------------------------------- rendering


def render_png(figure: Any) -> bytes:
    import io

    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight", facecolor="white")
    plt.close(figure)
    return buffer.getvalue()


def mark_nonconformant(figure: Any, label: str | None) -> Any:
    """Stamp the warning above the figure, so a PNG shown on its own still says what it is."""
    if label:
        figure.text(0.5, 1.0, label.replace("; ", "\n"), ha="center", va="bottom", color="#b00020",
                    fontsize=9, fontweight="bold")
    return figure


def _fmt_pp(value: float | None) -> str:
    return "–" if value is None else f"{value:+.2f}"


def _fmt_score(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def summary_rows(data: Any) -> list[dict[str, Any]]:
    rows = []
    for cell in data.cells:
        comparison = cell.comparison
        rows.append({
            "method": cell.method, "runtime": cell.runtime, "model": cell.model,
            "seeds": list(cell.seeds), "complete": cell.complete,
            "seed_pass1": None if comparison is None else round(comparison.macro_a, 4),
            "deployed_pass1": None if comparison is None else round(comparison.macro_b, 4),
            "delta_pp": None if comparison is None else round(comparison.mean_delta_pp, 3),
            "ci95_pp": None if comparison is None else [round(v, 3) for v in comparison.ci95_pp],
            "fallbacks": sum(1 for j in cell.jobs if j.fell_back), "jobs": len(cell.jobs),
            "problems": list(cell.problems),
            # Judge/probe calls and tokens per job (mean over seeds): compute not charged to B.
            "uncharged_calls": round(sum(j.uncharged_calls for j in cell.jobs) / max(1, len(cell.jobs)), 1),
            "uncharged_tokens": round(sum(j.uncharged_tokens for j in cell.jobs) / max(1, len(cell.jobs)), 1),
        })
    return rows


_STYLE = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 2rem auto; max-width: 1200px;
       color: #222; padding: 0 1rem; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
table { border-collapse: collapse; font-size: 0.85rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: right; }
th { background: #f3f3f3; } td.l, th.l { text-align: left; }
.partial { color: #a15c00; } .caption { color: #555; font-size: 0.9rem; }
img { max-width: 100%; border: 1px solid #eee; }
.notes li { font-size: 0.8rem; color: #555; }
.nonconformant { color: #b00020; font-weight: 600; font-size: 0.9rem; }
.idle-line { color: #555; font-style: italic; }
"""


def render_html(data: Any, images: dict[str, bytes], roots: Sequence[Path], *,
                pages: dict[Path, str] | None = None, stories: Sequence[Any] = ()) -> str:
    """The page: a panel without an image in ``images`` has nothing to say and gets its one line."""
    from optimizers.protocol.report.idle import idle_reason
    from optimizers.protocol.report.job_links import jobs_table, seed_links, single_job_story
    from optimizers.protocol.report.baseline_panels import STYLE as BASELINE_STYLE
    from optimizers.protocol.report.job_page import STYLE as JOB_STYLE
    from optimizers.protocol.report.plots import PANELS

    escape = html.escape
    pages = pages or {}
    warning = data.nonconformant_label
    parts = [
        "<!DOCTYPE html>", "<html lang=\"en\"><head><meta charset=\"utf-8\">",
        "<title>lcb-grid comparison report</title>", f"<style>{_STYLE}{JOB_STYLE}{BASELINE_STYLE}</style></head><body>",
        "<h1>lcb-grid: does optimization help the team?</h1>",
        f"<p class=\"caption\">{len(data.jobs)} job(s) in {len(data.cells)} cell(s) from "
        f"{escape(', '.join(str(r) for r in roots))}; generated {escape(time.strftime('%Y-%m-%d %H:%M:%S'))}.</p>",
        # Once per page: every panel below (and every PNG, stamped) is drawn from these jobs.
        f"<p class=\"nonconformant\">{escape(warning)}</p>" if warning else "",
        *single_job_story(stories, pages),
        "<section id=\"panel-summary\"><h2>Cells</h2><table><thead><tr>"
        "<th class=\"l\">method</th><th class=\"l\">runtime</th><th class=\"l\">model</th><th>seeds</th>"
        "<th>seed pass@1</th><th>deployed pass@1</th><th>Δpp</th><th>95 % CI (pp)</th><th>fallbacks</th>"
        "<th>judge/probe calls (tokens) per job</th></tr></thead><tbody>",
    ]
    for row, cell in zip(summary_rows(data), data.cells):
        ci = "–" if row["ci95_pp"] is None else f"[{row['ci95_pp'][0]:+.2f}, {row['ci95_pp'][1]:+.2f}]"
        seeds = seed_links(cell, pages) + ("" if row["complete"] else " (partial)")
        parts.append(
            f"<tr><td class=\"l\">{escape(row['method'])}</td><td class=\"l\">{escape(row['runtime'])}</td>"
            f"<td class=\"l\">{escape(row['model'])}</td>"
            f"<td class=\"{'' if row['complete'] else 'partial'}\">{seeds}</td>"
            f"<td>{_fmt_score(row['seed_pass1'])}</td><td>{_fmt_score(row['deployed_pass1'])}</td>"
            f"<td>{_fmt_pp(row['delta_pp'])}</td><td>{ci}</td><td>{row['fallbacks']}/{row['jobs']}</td>"
            f"<td>{row['uncharged_calls']:g} ({row['uncharged_tokens']:g})</td></tr>")
    parts.append("</tbody></table></section>")
    from optimizers.protocol.report.trust_panels import html_sections

    parts.extend(html_sections(data, power_note=idle_reason("power", data)))
    from optimizers.protocol.report import baseline_panels

    parts.extend(baseline_panels.html_sections(data))
    from optimizers.protocol.report import design_panels

    parts.extend(design_panels.html_sections(data))
    for panel_id, panel in PANELS.items():
        head = f"<section id=\"panel-{panel_id}\" class=\"panel\"><h2>{escape(panel.title)}</h2>"
        if panel_id not in images:
            reason = idle_reason(panel_id, data) or "Nothing to draw."
            parts.append(f"{head}<p class=\"idle-line\">{escape(reason)}</p></section>")
            continue
        encoded = base64.b64encode(images[panel_id]).decode("ascii")
        parts.append(
            f"{head}<p class=\"caption\">{escape(panel.caption)}</p>"
            f"<img alt=\"{escape(panel.title)}\" src=\"data:image/png;base64,{encoded}\"></section>")
    if pages:
        parts.append(jobs_table(data, stories, pages))
    if data.notes or data.skipped:
        parts.append("<section id=\"panel-notes\"><h2>Notes</h2><ul class=\"notes\">")
        parts.extend(f"<li>{escape(text)}</li>" for text in [*data.notes, *(f"skipped {s}" for s in data.skipped)])
        parts.append("</ul></section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_report(data: Any, out: Path, roots: Sequence[Path]) -> dict[str, Path]:
    """Draw every panel that has something to say, write the PNGs, one page per job under jobs/,
    report.html and report.json atomically; return their paths."""
    from optimizers.journal import write_text_atomic
    from optimizers.protocol.report.idle import idle_reason
    from optimizers.protocol.report.job_links import write_pages
    from optimizers.protocol.report.plots import PANELS

    out.mkdir(parents=True, exist_ok=True)
    images: dict[str, bytes] = {}
    written: dict[str, Path] = {}
    idle: dict[str, str] = {}
    for panel_id, panel in PANELS.items():
        target = out / f"{panel_id}.png"
        reason = idle_reason(panel_id, data)
        if reason is not None:
            idle[panel_id] = reason
            target.unlink(missing_ok=True)  # a PNG of an earlier run must not outlive its panel
            continue
        images[panel_id] = render_png(mark_nonconformant(panel.draw(data), data.nonconformant_label))
        temp = target.with_name(f".{target.name}.tmp")
        temp.write_bytes(images[panel_id])
        temp.replace(target)
        written[panel_id] = target
    stories, pages = write_pages(data, out, style=_STYLE)
    write_text_atomic(out / "report.html", render_html(data, images, roots, pages=pages, stories=stories))
    from optimizers.protocol.report.baseline_panels import payload as baseline_payload
    from optimizers.protocol.report.trust_panels import payload as trust_payload

    payload = {"schema": SCHEMA, "roots": [str(r) for r in roots], "cells": summary_rows(data),
               "trust": trust_payload(data),
               **baseline_payload(data),
               "nonconformant_jobs": data.nonconformant_jobs,
               "panels": {k: f"{k}.png" for k in images}, "idle_panels": idle,
               "job_pages": {str(folder): page for folder, page in pages.items()},
               "notes": list(data.notes), "skipped": list(data.skipped)}
    write_text_atomic(out / "report.json", json.dumps(payload, indent=2, sort_keys=True) + "\n")
    written["html"] = out / "report.html"
    written["json"] = out / "report.json"
    return written


# --------------------------------------------------------------------------- W&B report


def wandb_report_status() -> str | None:
    """None when a W&B Report can be built here, else the one-line reason why not."""
    import os

    from optimizers.protocol.report.tracking import has_api_key

    mode = os.environ.get("WANDB_MODE", "").strip().lower()
    if mode in ("offline", "disabled", "dryrun"):
        return f"--wandb: W&B is {mode} (WANDB_MODE={mode}); sync the runs (wandb sync) and rerun online"
    if not has_api_key():
        return "--wandb: no W&B API key is configured (wandb login); the local report was written"
    try:
        import wandb_workspaces  # noqa: F401
    except ImportError:
        return "--wandb: the wandb-workspaces package is not installed; the local report was written"
    return None


def build_wandb_report(data: Any, *, project: str, entity: str | None) -> str:
    """A W&B Report with the same panels (W&B line/bar plots over the runs' logged metrics)."""
    import wandb_workspaces.reports.v2 as wr

    runsets = [wr.Runset(entity=entity or "", project=project, name="lcb-grid jobs")]
    blocks: list[Any] = [
        wr.H1("lcb-grid: does optimization help the team?"),
        wr.P("Panels as in the local report (python -m optimizers.protocol.report); per-job W&B runs are "
             "grouped by grid cell."),
        wr.H2("Learning curves"),
        wr.PanelGrid(runsets=runsets, panels=[
            wr.LinePlot(x="budget/charged", y=["curve/incumbent_score"],
                        title="committed incumbent's score vs charged rollouts"),
            wr.LinePlot(x="budget/charged", y=["score/running_mean"], title="running mean rollout score"),
        ]),
        wr.H2("Δpp, cost and fallbacks"),
        wr.PanelGrid(runsets=runsets, panels=[
            wr.BarPlot(metrics=["test/delta_pp"], title="Δpp deployed − seed (per run)"),
            wr.ScatterPlot(x="usage/task/prompt_tokens", y="test/delta_pp", title="tokens vs Δpp"),
            wr.ScatterPlot(x="optimization/elapsed_seconds", y="test/delta_pp", title="wall time vs Δpp"),
            wr.BarPlot(metrics=["selection/deployed_validation_score"], title="validation score deployed"),
        ]),
    ]
    report = wr.Report(project=project, entity=entity or "", title="lcb-grid comparison",
                       description=f"{len(data.cells)} cells, {len(data.jobs)} jobs", blocks=blocks)
    report.save()
    return str(report.url)


# --------------------------------------------------------------------------- CLI


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="python -m optimizers.protocol.report",
                           description="Draw the comparison report (HTML + PNG) from job folders.")
    parser.add_argument("roots", nargs="+", type=Path, metavar="ROOT",
                        help="job folders or folders searched recursively for result.json")
    parser.add_argument("--out", type=Path, required=True, help="folder for report.html and the PNGs")
    parser.add_argument("--include-nonconformant", action="store_true",
                        help="also use results that are off-grid or not run under the protocol (a folder "
                             "with no conformant result uses its non-conformant ones anyway, marked)")
    parser.add_argument("--seeds", default=None,
                        help="the seeds a complete cell has (comma-separated; default: the grid's 0,1,2)")
    parser.add_argument("--bootstrap", type=int, default=2000, help="bootstrap replicates for the CIs (>= 100)")
    parser.add_argument("--deployments", type=int, default=1000,
                        help="deployments the optimization's tokens are amortised over (default 1000)")
    parser.add_argument("--wandb", action="store_true", help="also build a W&B Report (needs online W&B)")
    parser.add_argument("--project", default="lcb-grid", help="W&B project for --wandb")
    parser.add_argument("--entity", default=None, help="W&B entity for --wandb")
    return parser


def _seeds(text: str | None, parser: OneLineParser) -> tuple[int, ...]:
    from optimizers.protocol.grid import cells

    if text is None:
        return tuple(cells.GRID_SEEDS)
    try:
        seeds = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        parser.error(f"--seeds must be comma-separated integers, not {text!r}")
    if not seeds:
        parser.error("--seeds is empty")
    return seeds


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.bootstrap < 100:
        parser.error(f"--bootstrap must be >= 100, not {args.bootstrap}")
    seeds = _seeds(args.seeds, parser)
    if args.deployments < 1:
        parser.error(f"--deployments must be >= 1, not {args.deployments}")
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out {args.out} exists and is not a folder")
    logging.basicConfig(level=logging.INFO, format="[report] %(message)s", stream=sys.stderr)
    for root in args.roots:
        if not root.exists():
            log.warning("%s does not exist", root)
    from optimizers.protocol.report.data import load

    data = load(args.roots, include_nonconformant=True if args.include_nonconformant else None,
                replicates=args.bootstrap, seeds=seeds, deployments=args.deployments)
    if not data.jobs:
        nonconformant = sum(1 for s in data.skipped if "non-conformant" in s)
        hint = (f"; {nonconformant} non-conformant result(s) skipped (pass --include-nonconformant)"
                if nonconformant else "")
        others = len(data.skipped) - nonconformant
        hint += f"; {others} unreadable result(s) skipped" if others else ""
        sys.stderr.write(f"error: no usable result.json under {', '.join(map(str, args.roots))}{hint}\n")
        return 1
    for reason in data.skipped:
        log.warning("skipped %s", reason)
    if data.nonconformant_label:
        log.warning("%s; the page says so once, every PNG carries it", data.nonconformant_label)
    written = write_report(data, args.out, args.roots)
    log.info("%d job(s), %d cell(s): report written to %s", len(data.jobs), len(data.cells), written["html"])
    if args.wandb:
        reason = wandb_report_status()
        if reason is not None:
            sys.stderr.write(reason + "\n")
        else:
            try:
                url = build_wandb_report(data, project=args.project, entity=args.entity)
            except Exception as exc:  # noqa: BLE001 - the local report is written; say why W&B failed
                sys.stderr.write(f"--wandb: building the W&B report failed ({type(exc).__name__}: "
                                 f"{' '.join(str(exc).split())[:200]}); the local report was written\n")
            else:
                log.info("W&B report: %s", url)
    sys.stdout.write(json.dumps({"html": str(written["html"]), "cells": len(data.cells),
                                 "jobs": len(data.jobs)}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
