"""``grid --plan``: counts, cost and MDE per sweep before any model call; ``--status`` reruns;
the calibration command that measures token profiles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from optimizers.journal import write_sealed
from optimizers.protocol.aggregate import plan as planning
from optimizers.protocol.aggregate import power
from optimizers.protocol.aggregate.summary import RESULT_SCHEMA
from optimizers.protocol.grid.profiles import PROFILE_SCHEMA
from optimizers.protocol.grid_command import cli


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_json_has_one_object_per_reference_experiment(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--plan", "--json")
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["experiment"] for r in rows] == [p.stem for p in cli.experiment_files()]
    assert "lcb_grid_powered" not in {r["experiment"] for r in rows}  # another design, not a reference sweep
    assert sum(r["jobs"] for r in rows) == 396
    for row in rows:
        assert {"experiment", "jobs", "mde_pp", "calls", "tokens", "endpoint_hours"} <= set(row)
        assert row["mde_pp"] > 5 and "warning" in row and row["smallest_design"]["mde_pp"] <= 5
    grid = rows[[r["experiment"] for r in rows].index("lcb_grid")]
    assert grid["jobs"] == 96 and grid["charged_rollouts"] == 96 * 600
    assert grid["holm_family_size"] == 114  # every qwen cell of the grid, as the aggregate's task family


def test_plan_counts_by_hand(capsys: pytest.CaptureFixture[str]) -> None:
    """lcb_grid_single: gepa and mipro on the single agent, 3 seeds; default profile 1 call per
    rollout, 900 + 2000 tokens per call. Optimize 6 x 600; validation and test 50 problems each:
    the seed prompts once per seed (3 x 50), the deployed prompts per job (6 x 50)."""
    code, out, _ = run(capsys, "--plan", "--json", "experiment=lcb_grid_single", "--tokens-per-second", "1000")
    assert code == 0
    row = json.loads(out)
    assert row["phases"]["optimize"] == {"rollouts": 3600, "calls": 3600, "prompt_tokens": 3600 * 900,
                                         "completion_tokens": 3600 * 2000, "tokens": 3600 * 2900}
    assert row["phases"]["test"]["rollouts"] == 450 and row["phases"]["validate"]["rollouts"] == 450
    assert row["phases"]["reflection"]["calls"] == 360  # one per 10 charged rollouts
    completion = (3600 + 450 + 450) * 2000 + 360 * 2000
    assert row["endpoint_hours"] == pytest.approx(completion / 1000 / 3600, abs=0.06)
    assert row["holm_family_size"] == 2  # planned alone: its own two cells
    assert row["mde_pp"] == power.mde_pp(power.Design(50, 3, 1, tests=2), power.Assumptions())


def test_powered_design_reaches_five_pp(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--plan", "--json", "experiment=lcb_grid_powered")
    assert code == 0
    row = json.loads(out)
    assert row["jobs"] == 27 and row["design"]["label"] == "800x3x1" and row["holm_family_size"] == 8
    assert row["mde_pp"] <= 5 and "warning" not in row
    # The same sweep on 50 problems, one greedy sample, cannot: a warning and a design that can.
    code, out, err = run(capsys, "--plan", "experiment=lcb_grid_powered", "test.size=50", "test.samples=1",
                         "test.temperature=null")
    assert code == 0 and "warning: lcb_grid_powered: MDE" in err and "smallest design reaching it" in out


def test_plan_uses_calibrated_profiles_and_refuses_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profiles = tmp_path / "profiles.json"
    profiles.write_text(json.dumps({"schema": PROFILE_SCHEMA, "profiles": {"single": {
        "calls_per_rollout": 2, "prompt_tokens_per_call": 100, "completion_tokens_per_call": 50, "team_size": 1}}}))
    code, out, _ = run(capsys, "--plan", "--json", "experiment=lcb_grid_single", "--profiles", str(profiles))
    assert code == 0 and json.loads(out)["phases"]["optimize"]["completion_tokens"] == 3600 * 2 * 50
    assert run(capsys, "--plan", "experiment=nope")[0] == 2
    code, _, err = run(capsys, "--plan", "seed=3")
    assert code == 2 and err.count("\n") == 1 and "unknown plan override" in err
    assert run(capsys, "--plan", "experiment=lcb_grid", "--discordance", "0.9")[0] == 2  # impossible at 0.4
    code, _, err = run(capsys, "--plan", "experiment=lcb_grid_powered", "test.samples=3", "test.temperature=0")
    assert code == 2 and "temperature" in err


def test_plan_from_finished_jobs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ids = [f"p{i}" for i in range(8)]
    for seed in range(3):
        folder = tmp_path / "gepa" / "lcb" / "single" / "qwen" / str(seed)
        folder.mkdir(parents=True)
        base = [1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
        deployed = [1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0]
        write_sealed(folder / "result.json", {
            "schema": RESULT_SCHEMA, "status": "completed", "seed": seed, "conformant": True,
            "cell": {"method": "gepa", "dataset": "lcb", "topology": "single", "team_size": 1,
                     "communication": "freeform", "rounds": 2, "model": "Qwen/Qwen3.5-9B"},
            "optimization": {"status": "completed"}, "selection": {},
            "test": {"example_ids": ids, "baseline_scores": base, "deployed_scores": deployed,
                     "valid_for_aggregation": True}})
    code, out, _ = run(capsys, "--plan", "--json", "experiment=lcb_grid_single", "--from-runs", str(tmp_path))
    assumptions = json.loads(out)["assumptions"]
    assert code == 0 and assumptions["source"] == "observed (3 jobs)"
    assert assumptions["pass_rate"] == pytest.approx(0.5) and assumptions["discordance"] == pytest.approx(0.25)
    assert assumptions["icc"] == pytest.approx(1.0)  # the same problems flip in every seed


def test_status_lists_infrastructure_failed_jobs_for_a_rerun(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for seed, status in ((0, "completed"), (1, "failed")):
        folder = tmp_path / "gepa" / "lcb" / "sequential" / "qwen" / str(seed)
        folder.mkdir(parents=True)
        write_sealed(folder / "result.json", {
            "schema": RESULT_SCHEMA, "status": "completed", "seed": seed,
            "cell": {"method": "gepa", "topology": "sequential", "registry_key": "sequential", "model": "Qwen/Qwen3.5-9B"},
            "optimization": {"status": status, "failure_kind": None if status == "completed" else "infrastructure_invalid",
                             "error": "endpoint down"},
            "test": {"valid_for_aggregation": True}})
    code, out, _ = run(capsys, "--status", str(tmp_path))
    assert code == 0
    reruns = [line for line in out.splitlines() if line.startswith("infrastructure_failed")]
    assert len(reruns) == 1 and "\t1\t" in reruns[0] and "endpoint down" in reruns[0]
    assert "intent-to-treat" in out


def test_smallest_design_keeps_the_seeds() -> None:
    from optimizers.protocol.grid.config import TestDesign
    from optimizers.protocol.grid.profiles import DEFAULT_PROFILES

    condition = planning.Condition("single", 1, "freeform", "qwen")
    jobs = tuple(planning.PlannedJob("gepa", condition, seed) for seed in range(3))
    sweep = planning.Sweep("x", jobs, 600, TestDesign(), 50, 50, frozenset({"gepa"}))
    row = planning.plan_sweep(sweep, profiles=DEFAULT_PROFILES, families={"qwen": 1}, assumptions=power.Assumptions())
    assert row["smallest_design"]["seeds"] == 3 and row["smallest_design"]["mde_pp"] <= 5


def test_calibrate_measures_profiles_on_a_scripted_endpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from topologies.scripted import FunctionRule, Script, ScriptedServer, builtin_answers

    from optimizers.protocol.run import calibrate

    script = Script([FunctionRule("solve", builtin_answers(lambda request, pid: True))], default=None)
    server = ScriptedServer(script).start()
    try:
        out = tmp_path / "profiles.json"
        code = calibrate.main(["--topology", "single,sequential", "--model", "scripted/model", "--task-endpoints",
                               server.base_url, "--data", "builtin", "--problems", "2", "--out", str(out)])
    finally:
        server.stop()
    assert code == 0 and capsys.readouterr().out.strip() == str(out)
    data = json.loads(out.read_text())
    single, sequential = data["profiles"]["single"], data["profiles"]["sequential"]
    assert single["rollouts_measured"] == 2 and single["calls_per_rollout"] == pytest.approx(1.0)
    assert sequential["calls_per_rollout"] > single["calls_per_rollout"]
    assert single["prompt_tokens_per_call"] > 0
    code, plan_out, _ = run(capsys, "--plan", "--json", "experiment=lcb_grid_single", "--profiles", str(out))
    assert code == 0 and json.loads(plan_out)["phases"]["optimize"]["calls"] == 3600


def test_plan_designs_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--plan", "experiment=lcb_grid_powered", "--designs", "50x3x1,600x3x10")
    assert code == 0
    header, *rows = [line.split("\t") for line in out.splitlines()]
    assert header[0] == "experiment" and len(rows) == 2
    assumptions = power.Assumptions()
    assert float(rows[0][6]) == power.mde_pp(power.Design(50, 3, 1, tests=8), assumptions) > 5
    assert float(rows[1][6]) == power.mde_pp(power.Design(600, 3, 10, tests=8), assumptions) <= 5
    assert float(rows[1][7]) > float(rows[0][7])  # more rolls, more hours
    assert run(capsys, "--plan", "--designs", "600x3")[0] == 2
