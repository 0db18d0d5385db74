"""The job page: what one job's optimizer found, as self-contained HTML (no script, no fetch).

Top to bottom: the outcome (stop reason, budget use, what was deployed and why, seed vs deployed
pass@1 on test), the learning curve, every candidate in order, the deployed prompts as a
side-by-side diff against the seed per role and protocol field, and the per-problem test verdicts
(flipped problems first) linking to the graded programs at the foot of the page. The comparison
report links one page per job (``jobs/<name>.html``) and, given a single job, shows this story
first.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from optimizers.protocol.report.job_data import (
    NOT_ACCEPTED,
    RETURNED,
    SEED,
    CandidateStep,
    FieldDiff,
    JobStory,
    ProblemVerdicts,
    Verdict,
)
from optimizers.protocol.report.job_diff import side_by_side
from optimizers.protocol.report.job_svg import curve_svg

JOBS_DIR = "jobs"
escape = html.escape

# selection.json's fallback_reason -> what it means for the reader (prefix match for the
# parameterised record problems such as "invalid_record:<problem>:<status>").
FALLBACK_REASONS: dict[str, str] = {
    "identical_candidate": "the method returned the seed prompts themselves",
    "validation_tie": "the optimized prompts only tied the seed on the validation problems",
    "validation_regression": "the optimized prompts scored lower than the seed on the validation problems",
    "infrastructure_invalid_optimization": "the optimization failed on infrastructure errors",
    "invalid_incumbent_candidate": "the method returned a candidate the team cannot use",
    "no_incumbent": "the method returned no candidate",
    "empty_validation": "there were no validation problems to compare on",
    "unpaired_validation_ids": "the validation records of seed and incumbent were not paired",
    "invalid_record": "a validation run gave no usable record",
    "duplicate_example": "a validation problem was recorded twice",
    "score_out_of_range": "a validation score was outside [0, 1]",
}

# The page basics an embedded panel (the W&B HTML panel) needs without the report's own stylesheet.
PANEL_STYLE = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; color: #222; }
table { border-collapse: collapse; font-size: 0.85rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; } th { background: #f3f3f3; }
.caption { color: #555; font-size: 0.9rem; }
"""

STYLE = """
.job-facts td, .job-facts th { text-align: left; vertical-align: top; }
.job-facts th { width: 13rem; background: #f7f7f7; }
.kept { color: #6b4e00; } .deployed-new { color: #0b6b2b; }
table.cands td.changes { text-align: left; max-width: 22rem; }
tr.deployed-row td { background: #eef7ee; }
table.diff { width: 100%; table-layout: fixed; font-family: ui-monospace, SFMono-Regular, Menlo, monospace;
             font-size: 0.78rem; margin-bottom: 0.6rem; }
table.diff td.ln { text-align: left; white-space: pre-wrap; word-break: break-word; vertical-align: top; }
td.del { background: #fde8e8; } td.add { background: #e5f6e5; } td.empty { background: #f4f4f4; }
tr.fold td { text-align: center; color: #777; background: #fafafa; font-style: italic; }
.unchanged { color: #555; margin: 0.2rem 0; }
.field-name { font-weight: 600; margin: 0.8rem 0 0.2rem; }
tr.flip-gained td { background: #dff3e4; } tr.flip-lost td { background: #fbe3e0; }
table.verdicts td { text-align: left; }
div.program pre { background: #f6f6f6; padding: 0.5rem; overflow: auto; max-height: 16em; font-size: 0.78rem; }
div.program p { margin: 0.8rem 0 0.2rem; font-size: 0.85rem; } div.program:target pre { outline: 2px solid #1f77b4; }
table.verdicts th, table.cands th.l { text-align: left; }
.idle-line { color: #555; font-style: italic; }
svg.curve { border: 1px solid #eee; background: white; }
pre.prompt { background: #f6f6f6; padding: 0.5rem; white-space: pre-wrap; font-size: 0.78rem; max-height: 24em;
             overflow: auto; }
details.cand-diff summary, details.ran-with summary { cursor: pointer; color: #1f4e8c; }
details.cand-diff table.diff { min-width: 40rem; }
"""


def page_name(story: JobStory) -> str:
    """``jobs/<method>-<runtime>-<model>-s<seed>-<job id>.html``: readable and unique per job."""
    raw = f"{story.method}-{story.runtime}-{story.model}-s{story.seed}-{story.job_id[:12]}"
    return f"{JOBS_DIR}/{re.sub(r'[^A-Za-z0-9_.-]+', '_', raw)}.html"


def anchor(*parts: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", "-".join(parts))


def _score(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def explain_fallback(reason: str | None) -> str:
    if not reason:
        return "no reason recorded"
    explained = FALLBACK_REASONS.get(reason) or FALLBACK_REASONS.get(reason.split(":", 1)[0])
    return f"{reason}: {explained}" if explained else reason


# --------------------------------------------------------------------------- sections


def outcome_section(story: JobStory) -> str:
    budget = story.budget
    maximum, charged = budget.get("maximum"), budget.get("charged")
    used = f"{charged} of {maximum} charged rollouts" if maximum else f"{charged if charged is not None else '–'}"
    if maximum and charged is not None:
        used += f" ({100.0 * charged / maximum:.0f} %)"
    extras = [f"{budget[k]} {label}" for k, label in (("infrastructure_failures", "infrastructure failures (free)"),
                                                       ("unusable_rollouts", "unusable rollouts"))
              if budget.get(k)]
    if extras:
        used += "; " + ", ".join(extras)
    proposals = [c for c in story.candidates if c.evaluated and c.status != SEED]
    best = max(proposals, key=lambda c: (c.mean_score or 0.0, -c.index), default=None)
    best_text = "" if best is None else (
        f"; best proposal {best.candidate_id[:8]} ({', '.join(c.label for c in best.changes) or 'no change'}): "
        f"mean {_score(best.mean_score)} over {best.rollouts} rollout(s)")
    if story.kept_seed:
        deployed = (f'<span class="kept">seed prompts kept</span> — '
                    f'{escape(explain_fallback(story.fallback_reason))}')
    else:
        changed = ", ".join(f"{d.kind} {d.name}" for d in story.diffs if d.changed)
        deployed = f'<span class="deployed-new">optimized prompts deployed</span> (changed: {escape(changed)})'
    validation = story.validation
    test = story.test
    gained = sum(1 for v in story.verdicts if v.flip == "gained")
    lost = sum(1 for v in story.verdicts if v.flip == "lost")
    delta = test.get("delta_pp")
    rows = [
        ("stop reason", escape(str(story.stop_reason or "–")) + (
            f" (optimization {escape(story.status)}{', ' + escape(story.failure_kind) if story.failure_kind else ''})"
            if story.status != "completed" else "")),
        ("budget used", escape(used) + (f"; {story.elapsed_seconds:.0f} s" if story.elapsed_seconds else "")),
        ("candidates", escape(f"{len(story.candidates)} noted, {len(proposals)} proposed and evaluated{best_text}")),
        ("deployed", deployed),
        ("validation (seed → incumbent)",
         f"{_score(validation.get('baseline_validation_score'))} → {_score(validation.get('incumbent_validation_score'))}"),
        ("test pass@1 (seed → deployed)",
         f"{_score(test.get('baseline_mean'))} → {_score(test.get('deployed_mean'))}"
         + ("" if delta is None else f" ({delta:+.1f} pp)")
         + (f"; {gained} problem(s) gained, {lost} lost" if story.verdicts else "")),
    ]
    body = "".join(f"<tr><th>{label}</th><td>{value}</td></tr>" for label, value in rows)
    return f'<section id="job-outcome"><table class="job-facts"><tbody>{body}</tbody></table></section>'


def curve_section(story: JobStory) -> str:
    caption = ("The score the method committed its incumbent with (its own measure: a minibatch or "
               "validation mean), against charged rollouts; dots mark where it changed.")
    if story.curve:
        figure = curve_svg(story.curve, budget=story.budget.get("maximum"), title=f"{story.method} learning curve")
        if len(story.curve) == 1:
            caption += " One committed point, drawn as a marker."
    elif story.curve_rows:
        figure = (f'<p class="idle-line">No scored point: the method committed no incumbent with a score '
                  f'({story.curve_rows} learning-curve row(s), every score unknown).</p>')
    else:
        figure = '<p class="idle-line">No learning curve: the job has no optimization/learning_curve.jsonl.</p>'
    return (f'<section id="job-curve"><h2>Learning curve</h2><p class="caption">{escape(caption)}</p>'
            f"{figure}</section>")


def _charged_span(step: CandidateStep) -> str:
    if not step.evaluated:
        return "not evaluated"
    if step.first_charged == step.last_charged:
        return f"#{step.first_charged}"
    return f"#{step.first_charged}–{step.last_charged}"


def _changes(step: CandidateStep, short: Callable[[str | None], str]) -> str:
    if step.status == SEED:
        return "the seed prompts"
    if step.compared_with is None:
        return "–"
    against = "" if step.compared_with == step.parent else f" (against the seed {short(step.compared_with)})"
    if not step.changes:
        return "nothing" + against
    return escape(", ".join(change.label for change in step.changes)) + against + _candidate_diff(step, short)


def _candidate_diff(step: CandidateStep, short: Callable[[str | None], str]) -> str:
    """The candidate's text against the one it changed (its parent, else the seed), folded: every
    proposal's wording stays on the page, accepted or not."""
    texts = [c for c in step.changes if c.kind in ("role", "protocol")]
    if not texts:
        return ""
    base = "parent" if step.compared_with == step.parent else "seed"
    left, right = f"{base} {short(step.compared_with)}", f"candidate {short(step.candidate_id)}"
    blocks = "".join(f'<p class="field-name">{escape(c.kind)} {escape(c.name)}</p>'
                     + side_by_side(c.before, c.after, left=left, right=right) for c in texts)
    return f'<details class="cand-diff"><summary>diff against its {base}</summary>{blocks}</details>'


def candidates_section(story: JobStory) -> str:
    if not story.candidates:
        return ('<section id="job-candidates"><h2>Candidates</h2><p class="idle-line">No candidate journal '
                "(optimization/candidates.jsonl) in this job folder.</p></section>")

    def short(candidate_id: str | None) -> str:
        return "–" if not candidate_id else escape(candidate_id[:8])

    rows = []
    for step in story.candidates:
        status = {RETURNED: "accepted (returned)", NOT_ACCEPTED: "no"}.get(step.status, step.status)
        rows.append(
            f'<tr class="{"deployed-row" if step.deployed else ""}"><td>{step.index}</td>'
            f'<td class="l"><code>{short(step.candidate_id)}</code>{" (deployed)" if step.deployed else ""}</td>'
            f'<td class="l"><code>{short(step.parent)}</code></td><td class="changes">{_changes(step, short)}</td>'
            f"<td>{step.rollouts}</td><td>{_score(step.mean_score)}</td><td>{_charged_span(step)}</td>"
            f'<td class="l">{escape(status)}</td></tr>')
    return ('<section id="job-candidates"><h2>Candidates, in the order the method made them</h2>'
            '<p class="caption">Changed: what differs from the parent (role prompt, protocol part, setting, '
            "demos). Rollouts and mean: its charged rollouts and their mean score; charged at: the budget "
            "count when they ran. Accepted: the method committed it as its incumbent.</p>"
            '<table class="cands"><thead><tr><th>#</th><th class="l">candidate</th><th class="l">parent</th>'
            '<th class="l">changed</th><th>rollouts</th><th>mean score</th><th>charged at</th>'
            f'<th class="l">accepted</th></tr></thead><tbody>{"".join(rows)}</tbody></table></section>')


def _field_block(diff: FieldDiff) -> str:
    title = f'<p class="field-name">{escape(diff.kind)} {escape(diff.name)}</p>'
    if not diff.changed:
        return f'{title}<p class="unchanged">unchanged</p>'
    return title + side_by_side(diff.seed, diff.deployed)


def diff_section(story: JobStory) -> str:
    head = '<section id="job-diff"><h2>Deployed prompts vs the seed</h2>'
    if not story.diffs:
        return head + '<p class="idle-line">No selection.json yet: nothing was deployed.</p></section>'
    if story.kept_seed:
        reason = explain_fallback(story.fallback_reason)
        return (head + f'<p class="unchanged"><strong>unchanged</strong>: the seed prompts were deployed '
                f"({escape(reason)}).</p>" + _incumbent_note(story) + _ran_with(story.diffs, seed=True)
                + "</section>")
    blocks = [_field_block(d) for d in story.diffs if d.changed]
    same = [d for d in story.diffs if not d.changed]
    if same:
        blocks.append('<p class="unchanged">unchanged: ' + escape(", ".join(f"{d.kind} {d.name}" for d in same))
                      + "</p>")
    return head + "".join(blocks) + _ran_with(story.diffs, seed=False) + "</section>"


def _ran_with(diffs: Sequence[FieldDiff], *, seed: bool) -> str:
    """The full prompts the deployed team ran with, folded (the seed's when nothing changed)."""
    texts = [d for d in diffs if d.kind in ("role", "protocol")]
    if not texts:
        return ""
    what = "the seed prompts" if seed else "the deployed prompts"
    fields = "".join(f'<p class="field-name">{escape(d.kind)} {escape(d.name)}'
                     f'{"" if seed or d.changed else " (as in the seed)"}</p><pre class="prompt">'
                     f"{escape(d.deployed)}</pre>" for d in texts)
    return (f'<details class="ran-with"><summary>The prompts the team ran with: {what} '
            f"({len(texts)} field{'s' if len(texts) != 1 else ''})</summary>{fields}</details>")


def _incumbent_note(story: JobStory) -> str:
    """For a kept seed: what the method had proposed (so the rejected change is still visible)."""
    returned = next((c for c in story.candidates if c.status == RETURNED), None)
    if returned is None or not returned.changes:
        return ""
    return ('<p class="caption">The method\'s incumbent (rejected) changed: '
            + escape(", ".join(change.label for change in returned.changes)) + ".</p>")


def _verdict_cell(verdict: Verdict, link: str) -> str:
    text = verdict.outcome.replace("_", " ")
    if verdict.total:
        text += f" {verdict.passed}/{verdict.total}"
    failure = f"<br><small>first failing test: {escape(verdict.first_failure)}</small>" if (
        verdict.first_failure and not verdict.solved) else ""
    if verdict.program is None:
        return f"<td>{escape(text)}{failure}</td>"
    return f'<td><a href="{escape(link)}">{escape(text)}</a>{failure}</td>'


def verdicts_section(story: JobStory, *, programs_page: str = "") -> str:
    if not story.verdicts:
        return ('<section id="job-verdicts"><h2>Test verdicts</h2><p class="idle-line">No test.json yet: the '
                "job has not been tested.</p></section>")
    rows = []
    for row in story.verdicts:
        flip = {"gained": "gained", "lost": "lost"}.get(row.flip or "", "")
        rows.append(f'<tr class="{"flip-" + flip if flip else ""}"><td><code>{escape(row.problem_id)}</code></td>'
                    f"<td>{escape(row.difficulty)}</td>"
                    f"{_verdict_cell(row.seed, programs_page + '#' + anchor('program', 'seed', row.problem_id))}"
                    f"{_verdict_cell(row.deployed, programs_page + '#' + anchor('program', 'deployed', row.problem_id))}"
                    f"<td>{escape(flip or '–')}</td></tr>")
    return ('<section id="job-verdicts"><h2>Test verdicts: seed vs deployed prompts</h2>'
            '<p class="caption">One row per test problem, flipped ones first; a verdict links to the graded '
            f"program{' on the job page' if programs_page else ' below'}.</p><table class=\"verdicts\"><thead><tr><th>problem</th><th>difficulty</th>"
            "<th>seed prompts</th><th>deployed prompts</th><th>flipped</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></section>")


def programs_section(story: JobStory) -> str:
    blocks = []
    for row in story.verdicts:
        for side, verdict in (("seed", row.seed), ("deployed", row.deployed)):
            if verdict.program is None:
                continue
            summary = f"{row.problem_id}, {side} prompts: {verdict.outcome.replace('_', ' ')}"
            if verdict.first_failure and not verdict.solved:
                summary += f" (first failing test: {verdict.first_failure})"
            blocks.append(f'<div class="program" id="{anchor("program", side, row.problem_id)}">'
                          f"<p>{escape(summary)}</p><pre>{escape(verdict.program)}</pre></div>")
    if not blocks:
        return ""
    return f'<section id="job-programs"><h2>Graded programs</h2>{"".join(blocks)}</section>'


def job_heading(story: JobStory) -> str:
    tuned = (story.origin.get("transfer") or {}).get("tuned") or {}
    source = f" (tuned on {model_key(str(tuned.get('model')))})" if tuned else ""
    return f"{story.method}{source} on {story.runtime} / {story.model}, seed {story.seed}"


def model_key(model: str) -> str:
    from optimizers.protocol.grid import cells

    return cells.model_key(model)


_CHOICE = {"vote": "the behavioural vote (the largest group of programs printing the same outputs on the "
                   "statement's sample inputs)",
           "examples": "the agent's own python_exec checks (the program passing most of the statement's "
                       "examples)"}


def origin_section(story: JobStory) -> str:
    """What a test-only job tested in place of a search: a matched-compute baseline's single agent
    and its N, or a transfer job's source. Empty for every other job."""
    matched, transfer = story.origin.get("matched"), story.origin.get("transfer")
    if matched:
        def tokens(key: str) -> str:
            value = matched.get(key)
            return "–" if value is None else f"{float(value):,.0f}"

        how = "matched to the team's tokens" if matched.get("match") == "tokens" else "fixed"
        return (f'<p class="origin"><strong>Matched-compute baseline</strong> ({escape(str(matched.get("method")))}'
                f", test only, no search): the deployed column is the condition's single agent (the single "
                f"topology's seed prompt) sampled N = {escape(str(matched.get('n')))} times per problem ({how}), "
                f"one program submitted by {_CHOICE.get(str(matched.get('selection_rule')), 'its rule')}. "
                f"Tokens per problem: team {tokens('team_tokens_per_problem')}, single agent "
                f"{tokens('single_tokens_per_problem')} (one sample {tokens('sample_tokens_per_problem')}).</p>")
    if transfer:
        tuned = transfer.get("tuned") or {}
        delta = transfer.get("source_delta_pp")
        own = "–" if delta is None else f"{float(delta):+.2f} pp"
        return (f'<p class="origin"><strong>Transfer job</strong>: the prompts {escape(str(tuned.get("method")))} '
                f"deployed on {escape(model_key(str(tuned.get('model'))))} (job "
                f"<code>{escape(str(transfer.get('job_id', '?')))}</code>, its own Δ {own}; "
                f"{escape(str(transfer.get('source_folder', '')))}) tested unchanged under this model against its "
                "own seed team; no search, nothing charged.</p>")
    return ""


def job_body(story: JobStory, *, level: str = "h1", programs_page: str = "") -> list[str]:
    """The job's sections: on its own page (with the graded programs at the foot), or atop a
    one-job report (``programs_page``: the job page the verdicts then link into)."""
    return [f'<{level} id="job-title">{escape(job_heading(story))}</{level}>',
            f'<p class="caption">job <code>{escape(story.job_id)}</code> · {escape(str(story.folder))}</p>',
            origin_section(story), outcome_section(story), curve_section(story), candidates_section(story), diff_section(story),
            verdicts_section(story, programs_page=programs_page),
            "" if programs_page else programs_section(story)]


NONCONFORMANT_JOB = ("NON-CONFORMANT: this job ran off the grid protocol (cell, budget or data); "
                     "not comparable with grid results")


def nonconformant_mark(story: JobStory) -> str:
    return "" if story.conformant else f'<p class="nonconformant">{escape(NONCONFORMANT_JOB)}</p>'


def render_job_page(story: JobStory, *, style: str, back: str | None = "../report.html") -> str:
    """A whole page for one job, its non-conformant mark (if any) once, under the title."""
    nav = f'<p><a href="{escape(back)}">← comparison report</a></p>' if back else ""
    title, *rest = job_body(story)
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(job_heading(story))}</title>", f"<style>{style}{STYLE}</style></head><body>",
        nav, title, nonconformant_mark(story), *rest, "</body></html>"]) + "\n"


def write_job_pages(stories: Sequence[JobStory], out: Path, *, style: str) -> Mapping[Path, str]:
    """One page per job under ``out/jobs/``; returns job folder -> page path relative to ``out``."""
    from optimizers.journal import write_text_atomic

    (out / JOBS_DIR).mkdir(parents=True, exist_ok=True)
    pages: dict[Path, str] = {}
    for story in stories:
        name = page_name(story)
        write_text_atomic(out / name, render_job_page(story, style=style))
        pages[story.folder] = name
    return pages
