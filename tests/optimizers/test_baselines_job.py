"""Matched-compute baselines and transfer jobs end to end: real teams, scripted model, real grader."""

from __future__ import annotations

from pathlib import Path

import pytest

from job_support import fast_runtime, job_config
from optimizers.journal import read_jsonl, read_sealed
from optimizers.protocol.job.errors import JobError
from optimizers.protocol.job.test_only import run_job


def test_self_consistency_matches_the_team_tokens_within_one_sample(tmp_path: Path, scripted_server) -> None:
    server = scripted_server()
    out = tmp_path / "sc"
    cfg = job_config(out, server.base_url, method="self_consistency", topology="independent", team_size=4,
                     method_params={"match": "tokens", "n": None, "max_n": 64})
    result = run_job(cfg, fast_runtime())
    matched = result["matched"]
    assert result["optimization"]["budget"]["charged"] == 0
    assert result["optimization"]["stop_reason"] == "test_only_baseline"
    team, sample, n = (matched["team_tokens_per_problem"], matched["sample_tokens_per_problem"], matched["n"])
    assert team > 1.5 * sample  # the team costs more than one sample: N > 1 is needed and chosen
    assert n > 1 and abs(n * sample - team) <= sample
    # What the N samples really spent, not only N x the first samples' mean: within one sample too.
    assert abs(matched["single_tokens_per_problem"] - team) <= sample
    samples = list(read_jsonl(out / "baseline" / "samples.jsonl"))
    assert len(samples) == n * len(result["test"]["example_ids"])
    # The team arm is the shared seed evaluation; the single arm scored what the vote chose.
    test = read_sealed(out / "test.json")
    assert test["baseline_scores"] == result["test"]["baseline_scores"]
    assert all(len(p["vote"]["groups"]) >= 1 for p in test["matched"]["problems"])
    # The single agent's samples are drawn at the replica teams' temperature floor (0.7), not
    # the optimize phase's 0.2: the vote gets the diversity the independent team's vote gets.
    from optimizers.protocol.job.matched_test import single_agent_spec

    single_prompt = next(iter(single_agent_spec(cfg).roles.values())).splitlines()[0]
    single = [r for r in server.requests if single_prompt in str((r.messages or [{}])[0].get("content", ""))]
    assert cfg.optimize_decoding.temperature == 0.2 and matched["sample_temperature"] == 0.7
    assert len(single) >= len(samples) and {r.body.get("temperature") for r in single} == {0.7}
    # Resuming a finished job asks the model nothing.
    requests = server.request_count
    assert run_job(cfg, fast_runtime()) == result and server.request_count == requests


def test_a_fixed_n_is_used_as_given(tmp_path: Path, scripted_server) -> None:
    server = scripted_server()
    cfg = job_config(tmp_path / "bon", server.base_url, method="best_of_n",
                     method_params={"match": "fixed", "n": 3, "max_n": 64})
    result = run_job(cfg, fast_runtime())
    assert result["matched"]["n"] == 3 and result["matched"]["selection_rule"] == "examples"


def test_a_baseline_refuses_several_test_samples(tmp_path: Path, scripted_server) -> None:
    from dataclasses import replace

    from optimizers.protocol.grid.config import TestDesign

    server = scripted_server()
    cfg = job_config(tmp_path / "sc", server.base_url, method="self_consistency",
                     method_params={"match": "fixed", "n": 2, "max_n": 64},
                     test=TestDesign(samples=2, temperature=0.2))
    cfg = replace(cfg, eval_decoding=replace(cfg.eval_decoding, temperature=0.2))
    with pytest.raises(JobError, match="test.samples=2 is not supported"):
        run_job(cfg, fast_runtime())
    assert server.request_count == 0


def test_a_transfer_job_has_its_own_identity_and_never_optimizes(tmp_path: Path, scripted_server) -> None:
    server = scripted_server()
    source_dir = tmp_path / "source"
    source = run_job(job_config(source_dir, server.base_url, method="scripted_search", budget=12), fast_runtime())
    assert source["selection"]["selected_candidate"] == "incumbent"
    target_dir = tmp_path / "target"
    cfg = job_config(target_dir, server.base_url, method="scripted_search", budget=12, deploy_from=source_dir)
    requests = server.request_count
    result = run_job(cfg, fast_runtime())
    assert result["job_id"] != source["job_id"] and result["cell_id"] != source["cell_id"]
    assert read_sealed(target_dir / "job.json")["spec"]["deploy_from"]["job_id"] == source["job_id"]
    assert result["optimization"]["stop_reason"] == "transfer"
    assert result["optimization"]["budget"]["charged"] == 0
    assert not (target_dir / "optimization" / "attempts.jsonl").exists()  # no charged rollout at all
    assert result["selection"]["deployed_candidate_id"] == source["selection"]["deployed_candidate_id"]
    # Same model, same seed, same problems: the same shared evaluations, so the same Δ.
    assert result["test"]["delta_pp"] == source["test"]["delta_pp"]
    del requests
    # Other problems (or scoring) than the source's: refused before anything runs.
    other = job_config(tmp_path / "other", server.base_url, method="scripted_search", budget=12,
                       deploy_from=source_dir, optimize_max_tests=2)
    with pytest.raises(JobError, match=r"other problems or rules \(optimize_max_tests: source 3, here 2\)"):
        run_job(other, fast_runtime())
    assert not (tmp_path / "other" / "result.json").exists()


def test_deploy_from_a_folder_without_a_finished_job_is_one_clear_error(tmp_path: Path, scripted_server) -> None:
    server = scripted_server()
    (tmp_path / "empty").mkdir()
    cfg = job_config(tmp_path / "t", server.base_url, deploy_from=tmp_path / "empty")
    with pytest.raises(JobError, match="no result.json"):
        run_job(cfg, fast_runtime())


def test_the_job_page_shows_the_prompts_run_and_every_proposal_against_its_parent(tmp_path: Path,
                                                                                   scripted_server) -> None:
    import html

    from optimizers.protocol.report.job_data import job_story
    from optimizers.protocol.report.job_page import render_job_page

    server = scripted_server()
    searched = tmp_path / "searched"
    run_job(job_config(searched, server.base_url, method="scripted_search", budget=12,
                       method_params={"variants": 2}), fast_runtime())
    page = render_job_page(job_story(searched), style="")
    # Both proposals tie on train, the earlier is kept: the rejected one's text is still on the page.
    assert html.escape("<<solve-all>> v1") in page and html.escape("<<solve-all>> v0") in page
    assert page.count('<details class="cand-diff">') == 2
    assert '<details class="ran-with">' in page and "the deployed prompts" in page
    kept = tmp_path / "kept"
    run_job(job_config(kept, server.base_url), fast_runtime())
    story = job_story(kept)
    page = render_job_page(story, style="")
    assert story.kept_seed and "the seed prompts (1 field)" in page
    seed_prompt = next(d.seed for d in story.diffs if d.kind == "role")
    assert html.escape(seed_prompt) in page  # the unchanged seed prompt itself, folded


def test_test_only_job_pages_say_what_was_tested(tmp_path: Path, scripted_server) -> None:
    import html

    from optimizers.protocol.report.job_data import job_story
    from optimizers.protocol.report.job_page import render_job_page

    server = scripted_server()
    baseline = tmp_path / "bon"
    run_job(job_config(baseline, server.base_url, method="best_of_n",
                       method_params={"match": "fixed", "n": 2, "max_n": 64}), fast_runtime())
    page = html.unescape(render_job_page(job_story(baseline), style=""))
    assert "Matched-compute baseline" in page and "sampled N = 2 times" in page
    assert "python_exec checks" in page
    source_dir = tmp_path / "source"
    source = run_job(job_config(source_dir, server.base_url, method="scripted_search", budget=12), fast_runtime())
    target = tmp_path / "target"
    run_job(job_config(target, server.base_url, method="scripted_search", budget=12, deploy_from=source_dir),
            fast_runtime())
    page = html.unescape(render_job_page(job_story(target), style=""))
    assert "Transfer job" in page and source["job_id"] in page and str(source_dir.resolve()) in page
    assert "(tuned on scripted--team-model)" in page
    plain = html.unescape(render_job_page(job_story(source_dir), style=""))
    assert "Transfer job" not in plain and "Matched-compute baseline" not in plain and "tuned on" not in plain
