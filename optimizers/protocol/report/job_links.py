"""The comparison report's links to its job pages: writing them, the seed links of the Cells table,
the Jobs table, and the one-job report that opens with that job's story.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path

from optimizers.protocol.report.data import CellView, JobView, ReportData
from optimizers.protocol.report.job_page import job_body, write_job_pages
from optimizers.protocol.report.job_data import JobStory, job_story

escape = html.escape


def stories_of(data: ReportData) -> list[JobStory]:
    """Every drawn job's story (the difficulty map the report already resolved is reused)."""
    return [job_story(job.folder, difficulty=job.difficulty) for job in data.jobs]


def write_pages(data: ReportData, out: Path, *, style: str) -> tuple[list[JobStory], Mapping[Path, str]]:
    stories = stories_of(data)
    return stories, write_job_pages(stories, out, style=style)


def _seed_order(job: JobView) -> int:
    return job.result.seed


def seed_links(cell: CellView, pages: Mapping[Path, str]) -> str:
    """The cell's seeds, each linking to its job page."""
    links = []
    for job in sorted(cell.jobs, key=_seed_order):
        page = pages.get(job.folder)
        seed = escape(str(job.result.seed))
        links.append(f'<a href="{escape(page)}">{seed}</a>' if page else seed)
    return ",".join(links)


def jobs_table(data: ReportData, stories: Sequence[JobStory], pages: Mapping[Path, str]) -> str:
    """One row per job: its cell, seed, stop reason, what was deployed and Δpp, linking its page."""
    by_folder = {story.folder: story for story in stories}
    rows = []
    for job in sorted(data.jobs, key=lambda j: (j.method, j.runtime, j.model, j.result.seed)):
        story = by_folder.get(job.folder)
        page = pages.get(job.folder)
        deployed = "seed kept" if story is None or story.kept_seed else "optimized"
        delta = None if story is None else story.test.get("delta_pp")
        evaluated = 0 if story is None else sum(1 for c in story.candidates if c.evaluated and c.status != "seed")
        name = escape(f"{job.method} · {job.runtime} · {job.model} · seed {job.result.seed}")
        link = f'<a href="{escape(page)}">{name}</a>' if page else name
        rows.append(
            f'<tr><td class="l">{link}</td>'
            f'<td class="l">{escape(str(job.result.stop_reason or "–"))}</td>'
            f"<td>{job.result.charged if job.result.charged is not None else '–'}</td><td>{evaluated}</td>"
            f'<td class="l">{deployed}</td><td>{"–" if delta is None else f"{delta:+.2f}"}</td></tr>')
    return ('<section id="panel-jobs"><h2>Jobs</h2><p class="caption">Each job\'s page: its candidates, the '
            "deployed prompts against the seed, and the per-problem test verdicts.</p><table><thead><tr>"
            '<th class="l">job</th><th class="l">stop reason</th><th>charged</th><th>candidates evaluated</th>'
            f'<th class="l">deployed</th><th>Δpp</th></tr></thead><tbody>{"".join(rows)}</tbody></table></section>')


def single_job_story(stories: Sequence[JobStory], pages: Mapping[Path, str]) -> list[str]:
    """A one-job report opens with that job's story (the comparison panels follow); its verdicts
    link to the graded programs on the job page."""
    if len(stories) != 1:
        return []
    story = stories[0]
    page = pages.get(story.folder, "")
    more = f' <a href="{escape(page)}">The job page</a> also shows the graded programs.' if page else ""
    return ['<div id="job-story" class="job-story">', *job_body(story, level="h2", programs_page=page),
            f'<p class="caption">{more}</p>' if more else "", "</div>",
            '<h2 id="comparison">Comparison panels</h2>']
