"""Gym jobs end to end: every metric derived by hand on tiny worlds, every method on a CI-sized
run (and a job that did not complete counts as a failure), the ranks the statistics give to a
seed copier and to blind search, and the CLI (instances, summary, figures, resume, bad input)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from benchmarks.gym.cli import all_rows
from optimizers.base import OptimizationResult, Optimizer, OptimizerInfrastructureError
from optimizers.gym.lexicon import generated
from optimizers.gym.runner import GymJob, run_job, split
from optimizers.gym.world import Distractor, Fact, World
from optimizers.gym.worlds import builtin_problems
from optimizers.registry import register_optimizer

REPO = Path(__file__).resolve().parents[2]
KEYS = generated().keys
HOME = "role/solver"


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def tiny_world(*, seed_has_fact: bool) -> World:
    """One fact (+2 in the solver's prompt), one distractor (-1.5 anywhere), base -1, every
    problem of difficulty 0: success is sigmoid of the logit, by hand."""
    return World(name="tiny" + ("-optimal" if seed_has_fact else ""), topology="single", team_size=1,
                 facts=(Fact("good", HOME, 2.0, KEYS[0]),), distractors=(Distractor("bad", 1.5, KEYS[1]),),
                 base=-1.0, difficulties=dict.fromkeys(builtin_problems(), 0.0), components=(HOME,),
                 seed_facts=frozenset({"good"}) if seed_has_fact else frozenset())


def _with(seed, *keys: int):
    text = seed.components[HOME] + "".join("\n" + generated().concepts[k].forms[-1] for k in keys)
    return seed.with_component(HOME, text)


@register_optimizer("gym_test_detour")
class Detour(Optimizer):
    """Finds the fact (commit at 2 charged), adds the distractor (commit at 4), drops it again
    (commit at 6) and returns the good candidate after 7 charged rollouts."""

    needs_reflection = False

    async def optimize(self, seed, *, train, val, ctx) -> OptimizationResult:
        good, worse = _with(seed, 0), _with(seed, 0, 1)
        await ctx.evaluator.evaluate(seed, train[:2])
        ctx.commit_incumbent(good, None)
        await ctx.evaluator.evaluate(good, train[:2])
        ctx.commit_incumbent(worse, None)
        await ctx.evaluator.evaluate(worse, train[:2])
        ctx.commit_incumbent(good, None)
        await ctx.evaluator.evaluate(good, val[:1])
        return OptimizationResult(best=good, stop_reason="done")


@register_optimizer("gym_test_wrecker")
class Wrecker(Optimizer):
    """Adds the distractor to the seed after 3 charged rollouts and deploys that."""

    needs_reflection = False

    async def optimize(self, seed, *, train, val, ctx) -> OptimizationResult:
        await ctx.evaluator.evaluate(seed, train[:3])
        worse = _with(seed, 1)
        ctx.commit_incumbent(worse, None)
        return OptimizationResult(best=worse, stop_reason="done")


@register_optimizer("gym_test_broken")
class Broken(Optimizer):
    """A method whose reflection model always fails (it gives up, as the real ones do)."""

    needs_reflection = False

    async def optimize(self, seed, *, train, val, ctx) -> OptimizationResult:
        await ctx.evaluator.evaluate(seed, train[:1])
        raise OptimizerInfrastructureError("the reflection model failed 3 times in a row")


def test_every_metric_by_hand_on_a_tiny_world(tmp_path: Path) -> None:
    world = tiny_world(seed_has_fact=False)
    seed, optimum = sigmoid(-1.0), sigmoid(1.0)  # 0.268941..., 0.731058...
    worse = sigmoid(1.0 - 1.5)  # fact and distractor: 0.377540...
    r = run_job(GymJob("tiny", "gym_test_detour", 20, 0), tmp_path, world=world)
    assert r["status"] == "completed" and r["charged"] == 7 and r["budget_share"] == pytest.approx(7 / 20)
    assert r["seed_success"] == pytest.approx(seed, abs=1e-12)
    assert r["optimal_success"] == pytest.approx(optimum, abs=1e-12)
    assert (r["regret"], r["seed_regret"]) == (pytest.approx(0.0, abs=1e-12), pytest.approx(optimum - seed))
    assert r["gain_share"] == pytest.approx(1.0)
    assert r["curve"] == [[0, round(seed, 6)], [2, round(optimum, 6)], [4, round(worse, 6)], [6, round(optimum, 6)],
                          [7, round(optimum, 6)]]
    # 50 %: the target is seed + 0.5 x gap = 0.5; the detour (0.378) falls below it, so the
    # incumbent reaches it for good only at 6. Same for 90 % and 100 %.
    assert (r["rollouts_to_50"], r["rollouts_to_90"], r["rollouts_to_100"]) == (6, 6, 6)
    assert dict(map(tuple, r["anytime"]))[5] == round(worse, 6) and r["anytime"][-1] == [20, round(optimum, 6)]
    assert r["deployed_configuration"] == {"facts": ["good"], "distractors": []}
    assert r["uncharged_calls"] == 0 and r["reflection_calls"] == 0


def test_a_method_that_worsens_an_optimal_seed_never_gets_there(tmp_path: Path) -> None:
    world = tiny_world(seed_has_fact=True)
    r = run_job(GymJob("tiny-optimal", "gym_test_wrecker", 20, 0), tmp_path, world=world)
    assert r["seed_regret"] == pytest.approx(0.0, abs=1e-12)
    assert r["regret"] == pytest.approx(sigmoid(1.0) - sigmoid(-0.5), abs=1e-12)  # 0.353518...
    assert r["gain_share"] is None
    assert (r["rollouts_to_50"], r["rollouts_to_90"], r["rollouts_to_100"]) == (None, None, None)
    identity = run_job(GymJob("tiny-optimal", "identity", 20, 0), tmp_path, world=world)
    assert identity["rollouts_to_90"] == 0 and identity["regret"] == pytest.approx(0.0, abs=1e-12)


def failures(results: Sequence[dict]) -> dict[str, str]:
    """Jobs that did not complete (crashed, infrastructure_invalid, unavailable): each a failure."""
    return {f"{r['world']}/{r['method']}/b{r['budget']}": f"{r['status']}: {r.get('error')}" for r in results
            if r["status"] != "completed"}


def test_a_job_whose_reflection_always_fails_is_a_failure(tmp_path: Path) -> None:
    r = run_job(GymJob("tiny", "gym_test_broken", 20, 0), tmp_path, world=tiny_world(seed_has_fact=False))
    assert r["status"] == "infrastructure_invalid"
    assert failures([r]) == {"tiny/gym_test_broken/b20": f"infrastructure_invalid: {r['error']}"}


WORLDS = ("credit@0", "seed_optimal@1")
BUDGET = 50


@pytest.fixture(scope="module")
def every_method(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("gym")
    return [run_job(GymJob(world, method, BUDGET, 0), out) for world in WORLDS for method in all_rows()]


def test_every_method_completes_within_its_budget(every_method: list[dict]) -> None:
    assert not failures(every_method)
    assert all(r["charged"] <= BUDGET and r["budget_share"] <= 1.0 for r in every_method)
    assert {r["method"] for r in every_method} == set(all_rows()) and "random" in all_rows()
    assert all(not r["unknown_reply_shapes"] for r in every_method)
    identity = [r for r in every_method if r["method"] == "identity"]
    assert all(r["regret"] == r["seed_regret"] and r["charged"] == 0 for r in identity)
    assert all(r["regret"] >= -1e-12 for r in every_method)  # nothing beats the optimum


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "benchmarks.gym", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=600, check=False)


# The ranks a seed copier (identity) and blind search (random) get against a method that reads
# failing turns (TAVO), on clean symptoms (no decoys, no wrong-way lines): 10 paired instances.
RANKED = ("identity", "random", "tavo")
RANKED_ARGS = ("--methods", ",".join(RANKED), "--budgets", "100", "--instances", "10", "--worlds", "credit",
               "--knob", "decoy_rate=0", "--knob", "wrong_rate=0", "--bootstrap", "200")


@pytest.fixture(scope="module")
def ranked_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    from benchmarks.gym.cli import main

    out = tmp_path_factory.mktemp("ranked")
    assert main([*RANKED_ARGS, "--out", str(out)]) == 0  # in process: CI pays the imports once
    return out, json.loads((out / "summary.json").read_text())


def rank_violations(cell: dict) -> list[str]:
    """What would contradict the statistics: random ranked at or above a method the paired
    Wilcoxon-Holm test finds significantly better than it."""
    ranks = cell["average_ranks"]
    return [f"{better} (rank {ranks[better]:.2f}) is significantly better than random (rank {ranks['random']:.2f})"
            for better, worse in cell["significantly_better"] if worse == "random" and ranks[better] >= ranks["random"]]


def test_the_seed_copier_and_blind_search_rank_as_the_statistics_say(ranked_run: tuple[Path, dict]) -> None:
    out, summary = ranked_run
    (cell,) = summary["cells"]
    assert cell["blocks"] == 10 and set(cell["methods"]) == set(RANKED)
    results = [json.loads(p.read_text()) for p in out.glob("jobs/*/*/b100/*/result.json")]
    assert len(results) == 30 and not failures(results)
    identity = [r for r in results if r["method"] == "identity"]
    assert all(r["regret"] == pytest.approx(r["seed_regret"]) and r["regret"] > 0 for r in identity)
    assert not rank_violations(cell)
    beaten = [b for b, w in cell["significantly_better"] if w == "random"]
    assert beaten, cell  # the check is not vacuous: some method is significantly better than blind search
    rows = {r["method"]: r for r in summary["rows"]}
    assert all(rows[m]["instances"] == 10 and rows[m]["budget_share"] <= 1 for m in RANKED)
    assert rows["identity"]["budget_share"] == 0 and rows["random"]["budget_share"] > 0.9
    # Positive control: the same cell with random's rank moved to the top is flagged.
    doctored = {**cell, "average_ranks": {**cell["average_ranks"], "random": 0.5}}
    assert rank_violations(doctored)


def test_the_cli_writes_summary_and_figures_resumes_and_refuses_bad_input(ranked_run: tuple[Path, dict]) -> None:
    out, summary = ranked_run
    for name in ("regret_vs_budget.png", "cd.png", "ecdf.png", "anytime.png"):
        assert (out / name).stat().st_size > 10_000, name
    assert summary["jobs_with_results"] == summary["jobs_requested"] == 30
    assert "| credit~decoy_rate=0,wrong_rate=0 | random |" in (out / "table.md").read_text()
    again = _cli(*RANKED_ARGS, "--out", str(out))
    assert again.returncode == 0 and "30/30 jobs (30 done before" in again.stderr
    for bad, message in ((["--methods", "nope"], "unknown method"), (["--worlds", "credit@3"], "give kinds"),
                         (["--knob", "decoy_rate=2"], "rates must be in"), (["--instances", "0"], "--instances")):
        done = _cli(*bad, "--out", str(out))
        assert done.returncode == 2 and message in done.stderr.strip().splitlines()[-1], done.stderr
        assert "Traceback" not in done.stderr


def test_a_killed_job_starts_afresh_and_a_finished_one_is_skipped(tmp_path: Path) -> None:
    job = GymJob("credit@0", "random", 12, 0)
    directory = job.directory(tmp_path)
    (directory / "optimization").mkdir(parents=True)
    (directory / "optimization" / "attempts.jsonl").write_text('{"cut short by a kill')  # no result.json
    first = run_job(job, tmp_path)
    assert first["status"] == "completed" and not first.get("skipped") and first["charged"] == 12
    assert not (directory / "optimization").exists()  # journals are dropped once the result is written
    again = run_job(job, tmp_path)
    assert again["skipped"] and again["deployed_success"] == first["deployed_success"]
    stale = {**json.loads((directory / "result.json").read_text()), "method_version": "0"}
    (directory / "result.json").write_text(json.dumps(stale))
    assert not run_job(job, tmp_path).get("skipped")  # another method version: rerun


class SeedOnly(Optimizer):
    """Runs the seed on two training problems, samples 0 and 1, and deploys it."""

    needs_reflection = False

    async def optimize(self, seed, *, train, val, ctx) -> OptimizationResult:
        for sample in (0, 1):
            await ctx.evaluator.evaluate(seed, train[:2], sample=sample)
        return OptimizationResult(best=seed, stop_reason="done")


register_optimizer("gym_test_seed_a")(type("SeedA", (SeedOnly,), {}))
register_optimizer("gym_test_seed_b")(type("SeedB", (SeedOnly,), {}))


def test_common_random_numbers_do_not_depend_on_method_or_budget(tmp_path: Path) -> None:
    """The seed candidate's rollouts are the same draws whichever method and budget asks, and
    another sample is another draw."""
    seen = {}
    for method, budget in (("gym_test_seed_a", 10), ("gym_test_seed_a", 40), ("gym_test_seed_b", 10)):
        out = tmp_path / f"{method}{budget}"
        assert run_job(GymJob("credit@0", method, budget, 0), out, keep_journals=True)["charged"] == 4
        (journal,) = out.glob("jobs/*/*/*/*/optimization/rollouts.jsonl")
        rows = [json.loads(line) for line in journal.read_text().splitlines()]
        seen[(method, budget)] = {(r["problem_id"], r["sample"]): r["seed"] for r in rows}
    first, *rest = seen.values()
    assert len(first) == 4 and all(other == first for other in rest)
    assert len(set(first.values())) == 4
