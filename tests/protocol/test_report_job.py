"""The job page: scripted jobs (real engine, teams and grader) whose deployed prompts differ from
the seed in one role, or keep the seed; the diff, the candidates, the verdicts (flipped first),
the one-job report, idle panels, and the page in headless Chromium."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from report_fixtures import CHROMIUM, screenshot, write_grid, write_job  # noqa: E402
from report_job_support import run_edit_job  # noqa: E402
from tracking_support import SOLVE_ALL, team_script  # noqa: E402

from optimizers.protocol.report import page as report  # noqa: E402
from optimizers.protocol.report.data import load  # noqa: E402
from optimizers.protocol.report.idle import idle_reason  # noqa: E402
from optimizers.protocol.report.job_page import diff_section, render_job_page, verdicts_section  # noqa: E402
from optimizers.protocol.report.job_data import job_story, problem_verdicts  # noqa: E402
from optimizers.protocol.report.job_svg import curve_svg  # noqa: E402


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Centralized teams of two (manager + one coder): 'edited' deploys a manager prompt with the
    marker (the team then solves everything); 'kept' returns a coder edit that only ties the seed."""
    from topologies.scripted import ScriptedServer

    root = tmp_path_factory.mktemp("jobs")
    with ScriptedServer(team_script()) as server:
        edited = run_edit_job(root / "edited", server.base_url, topology="centralized", team_size=2, role="manager")
        kept = run_edit_job(root / "kept", server.base_url, topology="centralized", team_size=2,
                            role="coder_worker", always=True)
    assert edited["selection"]["selected_candidate"] == "incumbent"
    assert (kept["selection"]["selected_candidate"], kept["selection"]["fallback_reason"]) == ("seed", "validation_tie")
    yield {"edited": root / "edited", "kept": root / "kept"}


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).replace("&lt;", "<").replace("&gt;", ">")


def test_the_diff_shows_exactly_the_one_role_that_changed(jobs: dict[str, Path]) -> None:
    story = job_story(jobs["edited"])
    assert [(d.kind, d.name) for d in story.diffs if d.changed] == [("role", "manager")]
    html = diff_section(story)
    added = re.findall(r'<td class="ln add">(.*?)</td>', html)
    assert added == ["&lt;&lt;solve-all&gt;&gt;"]  # the one line the method appended, and nothing else
    assert '<td class="ln del">' not in html
    assert html.count('<table class="diff">') == 1 and "<p class=\"field-name\">role manager</p>" in html
    assert "unchanged: role coder_worker, protocol handoff" in _text(html)
    seed_step, child = story.candidates
    assert seed_step.status == "seed" and seed_step.rollouts > 0
    assert child.parent == seed_step.candidate_id and [c.label for c in child.changes] == ["role manager"]
    assert child.deployed and child.status == "returned" and child.first_charged == seed_step.rollouts + 1


def test_a_kept_seed_job_says_unchanged_and_why(jobs: dict[str, Path]) -> None:
    story = job_story(jobs["kept"])
    assert story.kept_seed and story.fallback_reason == "validation_tie"
    text = _text(diff_section(story))
    assert "unchanged : the seed prompts were deployed (validation_tie: the optimized prompts only tied the seed" \
           in text
    assert "The method's incumbent (rejected) changed: role coder_worker." in text
    assert '<table class="diff">' not in diff_section(story)
    page = _text(render_job_page(story, style=""))
    assert "seed prompts kept — validation_tie" in page


def test_verdicts_list_flipped_problems_first(jobs: dict[str, Path]) -> None:
    story = job_story(jobs["edited"])
    test = json.loads((jobs["edited"] / "test.json").read_text())
    gained = [pid for pid, a, b in zip(test["example_ids"], test["baseline_scores"], test["deployed_scores"]) if b > a]
    assert gained and test["example_ids"][: len(gained)] != gained  # in test order they are not first
    assert [v.problem_id for v in story.verdicts[: len(gained)]] == gained
    assert all(v.flip == "gained" for v in story.verdicts[: len(gained)])
    assert all(v.flip is None for v in story.verdicts[len(gained):])
    first = story.verdicts[0]
    assert first.seed.outcome == "wrong_answer" and re.fullmatch(r"wrong_answer on test \d+ \((functional|stdin)\)",
                                                                 first.seed.first_failure or "")
    assert first.deployed.outcome == "passed" and first.deployed.first_failure is None
    page = render_job_page(story, style="")
    rows = re.findall(r"<tr class=\"[^\"]*\"><td><code>([^<]+)</code>", verdicts_section(story))
    assert rows == [v.problem_id for v in story.verdicts]
    for side in ("seed", "deployed"):  # each verdict links to its graded program on the page
        target = f"program-{side}-{first.problem_id}"
        assert f'href="#{target}"' in page and f'id="{target}"' in page
    assert "class Solution" in page or "input()" in page


def test_flips_order_gained_then_lost_then_the_rest(tmp_path: Path) -> None:
    test = {"example_ids": ["a", "b", "c", "d"], "baseline_scores": [1.0, 0.0, 1.0, 0.0],
            "deployed_scores": [1.0, 0.0, 0.0, 1.0], "baseline_status": ["success"] * 4}
    rows = problem_verdicts(test, tmp_path, {"d": "hard"})
    assert [(r.problem_id, r.flip) for r in rows] == [("d", "gained"), ("c", "lost"), ("a", None), ("b", None)]
    assert rows[0].difficulty == "hard" and rows[1].difficulty == "unknown"


def test_a_one_job_report_opens_with_its_story_and_idle_panels_say_why(
        jobs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report"
    assert report.main([str(jobs["edited"]), "--out", str(out), "--bootstrap", "100"]) == 0
    capsys.readouterr()
    html = (out / "report.html").read_text()
    assert html.index('id="job-outcome"') < html.index('id="job-diff"') < html.index('id="panel-summary"')
    assert html.count("NON-CONFORMANT") == 1  # once per page, not once per panel
    summary = json.loads((out / "report.json").read_text())
    page = out / summary["job_pages"][str(jobs["edited"])]
    assert page.is_file() and f'href="{summary["job_pages"][str(jobs["edited"])]}"' in html
    assert page.read_text().count("NON-CONFORMANT") == 1
    idle = summary["idle_panels"]
    assert {"delta_heatmap", "cost_vs_gain", "cost_pareto", "fallback_rate", "learning_curves", "truncation"} <= set(idle)
    assert "power" not in summary["panels"] and "Statistical power is a statement about the grid" in html
    for panel_id, reason in idle.items():
        section = re.search(rf'<section id="panel-{panel_id}"[^>]*>(.*?)</section>', html, flags=re.S)
        assert section and "<img" not in section.group(1) and "idle-line" in section.group(1)
        assert not (out / f"{panel_id}.png").exists()
    assert "one cell (one_role_edit" in idle["delta_heatmap"]
    assert "<script" not in html and 'src="http' not in html


def test_a_single_committed_point_is_a_marker(tmp_path: Path) -> None:
    svg = curve_svg([(6, 0.5)], budget=6)
    assert svg.count("<circle") == 1 and "<path" not in svg
    assert curve_svg([(0, 0.2), (4, 0.5), (6, 0.75)], budget=6).count("<circle") == 3
    folder = write_job(tmp_path / "runs", method="tavo", topology="single", seed=0, gain=1)
    (folder / "optimization" / "learning_curve.jsonl").write_text(
        json.dumps({"schema": 2, "reason": "stop", "charged_rollouts": 6, "incumbent_score": 0.5}) + "\n")
    write_job(tmp_path / "runs", method="gepa", topology="single", seed=0, gain=1)
    from optimizers.protocol.report.plots import learning_curves

    data = load([tmp_path / "runs"], replicates=100)
    figure = learning_curves(data)
    single = [line for axes in figure.axes for line in axes.lines if len(line.get_xdata()) == 1]
    assert len(single) == 1 and single[0].get_marker() == "o" and single[0].get_markersize() >= 6


def test_idle_reasons_follow_the_data(tmp_path: Path) -> None:
    write_grid(tmp_path / "grid")
    grid = load([tmp_path / "grid"], replicates=100)
    assert idle_reason("delta_heatmap", grid) is None and idle_reason("power", grid) is None
    assert idle_reason("learning_curves", grid) is None and idle_reason("fallback_rate", grid) is None
    assert idle_reason("optimism_gap", grid).startswith("No job reports an optimism gap")
    zero = {"optimism_gap_pp": 0.0, "excess_optimism_pp": 0.0}
    for first, idle in ((zero, True), ({"optimism_gap_pp": 12.5, "excess_optimism_pp": 4.0}, False)):
        root = tmp_path / f"optimism-{idle}"
        write_job(root, method="gepa", topology="single", seed=0, gain=1, optimism=first)
        write_job(root, method="tavo", topology="single", seed=0, gain=1, optimism=zero)
        assert (idle_reason("optimism_gap", load([root], replicates=100)) is not None) is idle


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_the_job_page_shows_the_diff_and_the_candidates_in_chromium(jobs: dict[str, Path], tmp_path: Path) -> None:
    from PIL import Image

    from optimizers.protocol.report.page import _STYLE

    page = tmp_path / "job.html"
    page.write_text(render_job_page(job_story(jobs["edited"]), style=_STYLE))
    dom = screenshot(page, tmp_path / "shot.png")
    for section in ("job-outcome", "job-curve", "job-candidates", "job-diff", "job-verdicts", "job-programs"):
        assert f'id="{section}"' in dom
    assert SOLVE_ALL.replace("<", "&lt;").replace(">", "&gt;") in dom
    colors = {color for _, color in Image.open(tmp_path / "shot.png").convert("RGB").getcolors(1 << 20)}
    assert (229, 246, 229) in colors, "the diff's added line is not drawn"  # td.add
    assert (238, 247, 238) in colors, "the candidate table's deployed row is not drawn"  # tr.deployed-row
    assert (253, 232, 232) not in colors  # nothing was removed from the seed (td.del)


def test_the_side_by_side_diff_pairs_changes_and_folds_long_equal_runs() -> None:
    from optimizers.protocol.report.job_diff import side_by_side

    seed = "\n".join(f"line {i}" for i in range(20))
    deployed = seed.replace("line 10\n", "line ten\n").replace("line 14\n", "") + "\nnew last line"
    html = side_by_side(seed, deployed)
    assert re.findall(r'<td class="ln del">(.*?)</td>', html) == ["line 10", "line 14"]
    assert re.findall(r'<td class="ln add">(.*?)</td>', html) == ["line ten", "new last line"]
    assert html.count("unchanged line") == 1 and "… 8 unchanged lines …" in html  # 0-7 folded, 8-9 kept
    assert side_by_side("same", "same").count('<td class="ln same">') == 2


def test_candidate_rollouts_come_from_rollouts_jsonl_without_a_tracker_journal(
        jobs: dict[str, Path], tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "job"
    shutil.copytree(jobs["edited"], copy, ignore=shutil.ignore_patterns(".lock", "*.lock"))
    with_tracker = job_story(copy).candidates
    (copy / "optimization" / "tracker.jsonl").unlink()
    without = job_story(copy).candidates
    assert [(c.candidate_id, c.rollouts, c.mean_score) for c in without] == \
        [(c.candidate_id, c.rollouts, c.mean_score) for c in with_tracker]
    assert sum(c.rollouts for c in without) == json.loads((copy / "result.json").read_text())[
        "optimization"]["budget"]["charged"]
