"""The job page's story in W&B, logged once at the end of a job (``WandbTracker.finish``):

- ``tables/candidate_steps``: every candidate in order, its parent, what it changed (role prompt,
  protocol part, setting, demos), its charged rollouts and mean score, accepted or not, deployed;
- ``panels/deployed_vs_seed``: the deployed prompts as a side-by-side diff against the seed (an
  "unchanged" line with the fallback reason when the seed was kept), as an HTML panel;
- ``tables/test_verdicts``: per test problem, the seed's and the deployed prompts' verdicts, the
  first failing test's kind and the graded programs, flipped problems first.

Read from the job folder with the report's own reader, so W&B and the HTML report tell the same story.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from optimizers.protocol.report.job_data import JobStory, job_story

CANDIDATE_COLUMNS = ["order", "candidate_id", "parent", "changed", "rollouts", "mean_score", "first_charged",
                     "last_charged", "accepted", "deployed"]
VERDICT_COLUMNS = ["problem_id", "difficulty", "seed_verdict", "seed_first_failure", "deployed_verdict",
                   "deployed_first_failure", "flipped", "seed_program", "deployed_program"]


def candidate_rows(story: JobStory) -> list[list[Any]]:
    return [[step.index, step.candidate_id, step.parent,
             "; ".join(change.label for change in step.changes) or ("seed" if step.status == "seed" else ""),
             step.rollouts, step.mean_score, step.first_charged, step.last_charged, step.status,
             step.deployed] for step in story.candidates]


def verdict_rows(story: JobStory) -> list[list[Any]]:
    return [[row.problem_id, row.difficulty, row.seed.outcome, row.seed.first_failure, row.deployed.outcome,
             row.deployed.first_failure, row.flip or "", row.seed.program or "", row.deployed.program or ""]
            for row in story.verdicts]


def diff_page(story: JobStory) -> str:
    from optimizers.protocol.report.job_page import PANEL_STYLE, STYLE, diff_section

    return f"<style>{PANEL_STYLE}{STYLE}</style>{diff_section(story)}"


def log_job_story(run: Any, wandb: Any, folder: Path) -> JobStory:
    """Log the three records above to ``run`` (a started W&B run); returns the story it logged."""
    story = job_story(folder)
    records: dict[str, Any] = {}
    if story.candidates:
        records["tables/candidate_steps"] = wandb.Table(columns=CANDIDATE_COLUMNS, data=candidate_rows(story))
    if story.diffs:
        records["panels/deployed_vs_seed"] = wandb.Html(diff_page(story), inject=False)
    if story.verdicts:
        records["tables/test_verdicts"] = wandb.Table(columns=VERDICT_COLUMNS, data=verdict_rows(story))
    if records:
        run.log(records)
    return story
