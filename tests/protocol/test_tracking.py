"""WandbTracker: mode choice, a real offline W&B run per job read back from its .wandb log,
resume into the same run id, and that tracking failures never fail a job."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tracking_support import MODEL_ID, register_probe, team_script  # noqa: E402

from optimizers.candidate import Candidate  # noqa: E402
from optimizers.protocol.grid.config import JobConfig, ModelSpec, TrackerSpec  # noqa: E402
from optimizers.protocol.report.tracking import (  # noqa: E402
    TrackingError,
    WandbTracker,
    deployed_prompts_score,
    has_api_key,
    make_tracker,
    offline_run_dirs,
    read_offline_run,
    resolve_mode,
)


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))


def _job(out: Path, **overrides: Any) -> JobConfig:
    values: dict[str, Any] = {
        "method": "tracking_probe", "topology": "single", "model": ModelSpec("scripted", MODEL_ID, ()),
        "seed": 0, "out": out, "team_size": 1, "data": "builtin", "budget": 12, "concurrency": 4,
        "quiet": True, "tracker": TrackerSpec(kind="wandb", project="lcb-grid-test"),
    }
    values.update(overrides)
    return JobConfig(**values)


# --------------------------------------------------------------------------- mode


def test_mode_is_offline_unless_online_is_asked_and_a_key_exists(tmp_path: Path) -> None:
    assert resolve_mode("offline", {}) == ("offline", None)
    mode, notice = resolve_mode("online", {"NETRC": str(tmp_path / "none")})
    assert mode == "offline" and "no W&B API key" in notice
    assert resolve_mode("online", {"WANDB_API_KEY": "k" * 40}) == ("online", None)
    assert resolve_mode("online", {"WANDB_API_KEY": "k" * 40, "WANDB_MODE": "disabled"}) == ("disabled", None)
    with pytest.raises(TrackingError, match="tracker.mode"):
        resolve_mode("sometimes", {})


def test_a_netrc_entry_counts_as_a_key(tmp_path: Path) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine api.wandb.ai\n  login user\n  password abc123\n")
    netrc.chmod(0o600)
    assert has_api_key({"NETRC": str(netrc)})
    assert not has_api_key({"NETRC": str(tmp_path / "missing")})


def test_factory_picks_by_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert make_tracker(_job(tmp_path, tracker=TrackerSpec(kind="jsonl"))) is None
    assert isinstance(make_tracker(_job(tmp_path)), WandbTracker)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert make_tracker(_job(tmp_path)) is None
    with pytest.raises(TrackingError, match="unknown tracker 'mlflow'"):
        make_tracker(_job(tmp_path, tracker=TrackerSpec(kind="mlflow")))


def test_deployed_score_follows_the_selection() -> None:
    assert deployed_prompts_score({"selected_candidate": "incumbent", "incumbent_validation_score": 0.7,
                                   "baseline_validation_score": 0.5}) == 0.7
    assert deployed_prompts_score({"selected_candidate": "seed", "incumbent_validation_score": 0.7,
                                   "baseline_validation_score": 0.5}) == 0.5


# --------------------------------------------------------------------------- a hand-made job folder


def _fake_job_folder(folder: Path) -> Candidate:
    seed = Candidate(components={"role/solver": "Solve it."})
    better = seed.with_component("role/solver", "Solve it carefully.")
    (folder / "optimization").mkdir(parents=True)
    (folder / "job.json").write_text(json.dumps({
        "job_id": "job0123456789abcdef000000", "cell_id": "cell42", "conformant": False,
        "cell": {"method": "tracking_probe", "topology": "single", "model": MODEL_ID, "registry_key": "single"},
    }))
    (folder / "optimization" / "candidates.jsonl").write_text(
        "".join(json.dumps(c.to_dict()) + "\n" for c in (seed, better)))
    (folder / "selection.json").write_text(json.dumps({
        "selected_candidate": "incumbent", "fallback_reason": None, "baseline_validation_score": 0.25,
        "incumbent_validation_score": 0.75, "validation_delta": 0.5, "deployed_candidate": better.to_dict(),
    }))
    (folder / "test.json").write_text(json.dumps({"baseline_mean": 0.5, "deployed_mean": 0.75, "delta_pp": 25.0,
                                                  "valid_for_aggregation": True}))
    (folder / "optimization.json").write_text(json.dumps({
        "status": "completed", "stop_reason": "budget", "elapsed_seconds": 3.5,
        "budget": {"maximum": 4, "charged": 4}, "usage": {"task": {"attempts": 4, "prompt_tokens": 400},
                                                          "reflection": {"calls": 1, "prompt_tokens": 50}}}))
    return better


def test_offline_run_records_everything_and_reads_back(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    better = _fake_job_folder(folder)
    tracker = WandbTracker(_job(folder), {"method": {"name": "tracking_probe"}, "seed": 0})
    attempts = folder / "optimization" / "attempts.jsonl"
    curve = folder / "optimization" / "learning_curve.jsonl"
    for charged in range(1, 5):
        with attempts.open("a") as handle:
            handle.write(json.dumps({"usage": {"calls": 1, "prompt_tokens": 100, "completion_tokens": 10}}) + "\n")
        if charged % 2 == 0:
            with curve.open("a") as handle:
                handle.write(json.dumps({"reason": "grid", "charged_rollouts": charged, "best_score": charged / 4,
                                         "best_candidate_id": better.id, "candidates_seen": 2}) + "\n")
        tracker.log(charged, {"rollout/score": float(charged % 2), "budget/charged": charged,
                              "rollout/candidate_id": better.id, "rollout/problem_id": "p"})
    tracker.log_candidate(better, train_score=0.5)
    tracker.summary({"optimization/charged": 4})
    tracker.finish("completed")
    tracker.finish("completed")  # idempotent

    runs = offline_run_dirs(folder)
    assert len(runs) == 1 and runs[0].parent == folder / "wandb"
    run = read_offline_run(runs[0])
    assert run.run["run_id"] == "job0123456789abcdef000000"
    assert run.run["display_name"] == "job0123456789abcdef000000"
    assert run.run["run_group"] == "tracking_probe|single|scripted--team-model"
    assert run.run["job_type"] == "tracking_probe"
    assert {"method:tracking_probe", "topology:single", "seed:0"} <= set(run.run["tags"])
    assert run.config["method"] == {"name": "tracking_probe"}
    assert run.config["job"]["cell_id"] == "cell42"
    scores = [row["rollout/score"] for row in run.history if "rollout/score" in row]
    assert scores == [1.0, 0.0, 1.0, 0.0]
    tokens = [row["usage/task/prompt_tokens"] for row in run.history if "usage/task/prompt_tokens" in row]
    assert tokens[:4] == [100, 200, 300, 400]
    assert [row["curve/incumbent_score"] for row in run.history if "curve/incumbent_score" in row] == [0.5, 1.0]
    assert run.summary["test/delta_pp"] == 25.0
    assert run.summary["selection/deployed_validation_score"] == 0.75
    assert run.summary["usage/reflection/calls"] == 1
    candidates = run.table("tables/candidates")
    assert candidates["columns"] == ["candidate_id", "parent", "component", "text", "deployed"]
    assert [row[3] for row in candidates["data"]] == ["Solve it.", "Solve it carefully."]
    assert [row[4] for row in candidates["data"]] == [False, True]
    artifact = next(a for a in run.artifacts if a["type"] == "prompts")
    paths = {entry["path"] for entry in artifact["manifest"]["contents"]}
    assert {"candidate.json", "role__solver.md"} <= paths
    local = {Path(entry["local_path"]) for entry in artifact["manifest"]["contents"]}
    assert all(folder in path.parents for path in local)  # referenced in the job folder, not copied
    assert (folder / "wandb" / "deployed" / better.id / "role__solver.md").read_text() == "Solve it carefully."
    assert run.exit_code == 0


def test_a_resumed_job_continues_the_same_run_id(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    _fake_job_folder(folder)
    for charged in (1, 2):
        tracker = WandbTracker(_job(folder))
        tracker.log(charged, {"rollout/score": 1.0})
        tracker.finish("completed")
    runs = [read_offline_run(path) for path in offline_run_dirs(folder)]
    assert len(runs) == 2
    assert {r.run["run_id"] for r in runs} == {"job0123456789abcdef000000"}
    assert all(r.run.get("resume") for r in runs)


def test_tracking_failures_never_fail_the_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    class BrokenWandb:
        Settings = dict

        @staticmethod
        def init(**kwargs: Any) -> Any:
            raise ConnectionError("no route to host")

    tracker = WandbTracker(_job(tmp_path), wandb_module=BrokenWandb)
    tracker.log(1, {"rollout/score": 1.0})
    tracker.summary({"x": 1})
    tracker.finish("completed")
    err = capsys.readouterr().err
    assert err.count("W&B log failed (ConnectionError: no route to host)") == 1


def test_online_without_a_reachable_server_falls_back_to_offline(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import wandb

    calls: list[str] = []

    class OnlineUnreachable:
        Settings = wandb.Settings
        Table = wandb.Table
        Artifact = wandb.Artifact

        @staticmethod
        def init(**kwargs: Any) -> Any:
            calls.append(kwargs["mode"])
            if kwargs["mode"] == "online":
                raise TimeoutError("init timed out")
            return wandb.init(**kwargs)

    folder = tmp_path / "job"
    _fake_job_folder(folder)
    tracker = WandbTracker(_job(folder), mode="online", init_timeout_s=5, wandb_module=OnlineUnreachable)
    tracker.log(1, {"rollout/score": 1.0})
    tracker.finish("completed")
    assert calls == ["online", "offline"]
    assert "logging offline instead" in capsys.readouterr().err
    assert len(offline_run_dirs(folder)) == 1


# --------------------------------------------------------------------------- a real job (engine API)


def test_a_real_job_gets_curves_tables_and_artifact(tmp_path: Path) -> None:
    from optimizers.protocol.job.engine import JobRuntime, run_job
    from topologies.scripted import ScriptedServer

    register_probe()
    with ScriptedServer(team_script()) as server:
        job = _job(tmp_path / "job", model=ModelSpec("scripted", MODEL_ID, (server.base_url,)))
        tracker = make_tracker(job, {"method": {"name": "tracking_probe"}, "seed": 0})
        assert isinstance(tracker, WandbTracker)
        runtime = JobRuntime(tracker=tracker, retry_delay_s=0.0, client_max_retries=0, client_backoff_s=0.0)
        try:
            result = run_job(job, runtime)
        finally:
            tracker.finish("completed")
    assert result["status"] == "completed"
    (path,) = offline_run_dirs(job.out)
    run = read_offline_run(path)
    charged = result["optimization"]["budget"]["charged"]
    assert charged > 0
    assert run.run["run_id"] == result["job_id"]
    assert len([row for row in run.history if "rollout/score" in row]) == charged
    assert any("curve/incumbent_score" in row for row in run.history)
    assert run.table("tables/candidates")["data"]
    assert run.table("tables/learning_curve")["data"]
    assert any(a["type"] == "prompts" for a in run.artifacts)
    assert run.summary["test/delta_pp"] == result["test"]["delta_pp"]
    assert run.summary["budget/charged"] == charged
    # Truncation per phase and role reaches W&B (the scripted model never cuts a reply).
    assert run.summary["truncation/test/all"] == 0.0 and run.summary["truncation/optimize/solver"] == 0.0
    # The job page's story: candidate steps with parent and changed field, the deployed-vs-seed diff
    # as an HTML panel, and the per-problem verdicts with flipped problems first.
    steps = run.table("tables/candidate_steps")
    assert steps["columns"][:4] == ["order", "candidate_id", "parent", "changed"]
    seed_row, child_row = steps["data"]
    assert seed_row[3] == "seed" and seed_row[8] == "seed"
    assert child_row[2] == seed_row[1] and child_row[3] == "role solver" and child_row[8] == "returned"
    assert child_row[4] > 0 and child_row[9] is True  # evaluated (charged rollouts) and deployed
    diff = run.media_text("panels/deployed_vs_seed")
    assert re.findall(r'<td class="ln add">(.*?)</td>', diff) == ["&lt;&lt;solve-all&gt;&gt;"]
    verdicts = run.table("tables/test_verdicts")
    flips = [row[verdicts["columns"].index("flipped")] for row in verdicts["data"]]
    assert "gained" in flips and flips == sorted(flips, key=lambda flip: flip != "gained")
    assert len(verdicts["data"]) == len(result["test"]["example_ids"])


def test_reflection_calls_reach_wandb_as_they_are_journaled(tmp_path: Path) -> None:
    logged: list[dict[str, Any]] = []

    class RecordingWandb:
        class Settings(dict):
            def __init__(self, **kwargs: Any) -> None:
                super().__init__(kwargs)

        @staticmethod
        def init(**kwargs: Any) -> Any:
            class Run:
                summary: dict[str, Any] = {}

                def log(self, row: dict[str, Any]) -> None:
                    logged.append(dict(row))

                def define_metric(self, *args: Any, **kwargs: Any) -> None:
                    return None

            return Run()

    native = tmp_path / "optimization" / "native"
    native.mkdir(parents=True)
    journal = native / "reflection.jsonl"
    tracker = WandbTracker(_job(tmp_path), wandb_module=RecordingWandb)
    journal.write_text(json.dumps({"usage": {"prompt_tokens": 100, "completion_tokens": 7}}) + "\n")
    tracker.log(1, {"rollout/score": 1.0})
    with journal.open("a") as handle:
        handle.write(json.dumps({"usage": {"prompt_tokens": 50, "completion_tokens": 3}}) + "\n")
    tracker.log(2, {"rollout/score": 0.0})
    rows = [row for row in logged if "usage/reflection/calls" in row]
    assert [(r["usage/reflection/calls"], r["usage/reflection/prompt_tokens"],
             r["usage/reflection/completion_tokens"]) for r in rows] == [(1, 100, 7), (2, 150, 10)]
