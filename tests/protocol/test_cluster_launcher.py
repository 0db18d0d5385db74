"""The cluster pieces that need no SLURM: resource check, SLURM state parsing and its mapping to
``grid --status``, sweep manifests, and the journal freeze a terminated job relies on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hydra_plugins.lcb_grid_submitit import launcher
from optimizers.protocol.grid import cells
from optimizers.protocol.grid_command import cli as grid
from optimizers.protocol.grid_command.sweep_state import (
    SlurmState,
    SubmittedJob,
    parse_scontrol,
    status_from_scheduler,
    submitted_jobs,
)

REPO = Path(__file__).resolve().parents[2]


def test_resources_beyond_every_node_are_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher, "node_capacities", lambda partition: [(2, 22_000), (8, 4_000)])
    launcher.check_resources({"cpus_per_task": 2, "mem_gb": 16})  # the 2-CPU node has the memory
    launcher.check_resources({"cpus_per_task": 8, "mem_gb": 3})  # the 8-CPU node fits
    with pytest.raises(launcher.LaunchError, match=r"asks 8 CPUs and 16 GB .* largest have 8 CPUs"):
        launcher.check_resources({"cpus_per_task": 8, "mem_gb": 16})
    with pytest.raises(launcher.LaunchError, match="4 CPUs and 8 GB"):
        launcher.check_resources({"cpus_per_task": 2, "tasks_per_node": 2, "mem_per_cpu": "2G"})
    monkeypatch.setattr(launcher, "node_capacities", lambda partition: [])
    with pytest.raises(launcher.LaunchError, match="no node in partition 'gpu'"):
        launcher.check_resources({"partition": "gpu", "cpus_per_task": 1})
    monkeypatch.setattr(launcher, "node_capacities", lambda partition: None)  # no SLURM: no check
    launcher.check_resources({"cpus_per_task": 4096})


def test_memory_strings() -> None:
    assert [launcher._memory_mb(v) for v in ("4G", "512M", "2048", "1T", "x", None)] == [
        4096, 512, 2048, 1024 * 1024, None, None]


def test_scontrol_lines_give_each_array_task_its_state() -> None:
    text = ("JobId=12 ArrayJobId=12 ArrayTaskId=2-3%2 JobName=run JobState=PENDING Reason=JobArrayTaskLimit "
            "Requeue=1 Restarts=0\n"
            "JobId=14 ArrayJobId=12 ArrayTaskId=1 JobState=PENDING Reason=BeginTime Requeue=1 Restarts=1\n"
            "JobId=13 ArrayJobId=12 ArrayTaskId=0 JobState=RUNNING Reason=None Restarts=0\n"
            "JobId=20 JobName=solo JobState=FAILED Reason=NonZeroExitCode Restarts=0\n")
    states = parse_scontrol(text)
    assert states["12_2"] == states["12_3"] == SlurmState("PENDING", "JobArrayTaskLimit", 0)
    assert states["12_1"] == SlurmState("PENDING", "BeginTime", 1)
    job = SubmittedJob("12_1", None, "gepa", "single", "qwen", "0")
    assert status_from_scheduler(job, states["12_1"])[0] == "requeued"
    assert status_from_scheduler(job, states["12_2"]) == ("queued", "slurm 12_1 PENDING (JobArrayTaskLimit)")
    assert status_from_scheduler(job, states["12_0"])[0] == "running"
    assert status_from_scheduler(job, states["20"])[0] == "failed"
    assert status_from_scheduler(job, SlurmState("COMPLETED")) is None  # the folder decides
    assert status_from_scheduler(job, None) is None


def _manifest(root: Path, array: str, jobs: list[dict[str, object]]) -> None:
    (root / ".sweeps").mkdir(parents=True, exist_ok=True)
    (root / ".sweeps" / f"{array}.json").write_text(json.dumps({"array_job_id": array, "jobs": jobs}))


def test_status_merges_manifest_jobs_with_the_scheduler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cell = cells.grid()[0]
    in_grid = cell.job_dir(tmp_path, 0)
    extra = tmp_path / "identity" / "lcb" / "single" / "scripted" / "0"
    _manifest(tmp_path, "7", [
        {"slurm_job_id": "7_0", "out": str(in_grid), "method": cell.method, "registry_key": cell.registry_key,
         "model": cell.model, "seed": 0},
        {"slurm_job_id": "7_1", "out": str(extra), "method": "identity", "registry_key": "single",
         "model": "scripted", "seed": 0},
        {"slurm_job_id": "7_2", "out": None, "error": "bad config"},
    ])
    assert {job.slurm_job_id for job in submitted_jobs(tmp_path)} == {"7_0", "7_1", "7_2"}
    states = {"7_0": SlurmState("PENDING", "BeginTime", 1), "7_1": SlurmState("PENDING", "Priority")}
    def known(ids: object) -> dict[str, SlurmState]:
        wanted = set(ids)  # type: ignore[arg-type]
        return {k: v for k, v in states.items() if k in wanted}

    monkeypatch.setattr(grid, "scheduler_states", known)
    rows = {row.path: row for row in grid.grid_status(tmp_path)}
    assert rows[in_grid].status == "requeued" and "requeued 1x" in rows[in_grid].detail
    assert rows[extra].status == "queued" and rows[extra].method == "identity"
    assert len(rows) == len(list(cells.grid_jobs())) + 1
    # without the scheduler's word the folders speak: nothing there yet
    assert grid.grid_status(tmp_path, scheduler=False)[0].status == "missing"
    # a job SLURM says completed but that left no result failed
    states["7_1"] = SlurmState("COMPLETED")
    rows = {row.path: row for row in grid.grid_status(tmp_path)}
    assert rows[extra].status == "failed" and "without result.json" in rows[extra].detail


def test_a_frozen_process_writes_nothing_more(tmp_path: Path) -> None:
    # In a child: freezing is for the rest of the process's life.
    code = (
        "import sys; from pathlib import Path; from optimizers import journal as j\n"
        "root = Path(sys.argv[1]); log = j.JsonlJournal(root / 'a.jsonl')\n"
        "log.append({'n': 1}); j.write_json_atomic(root / 'before.json', {})\n"
        "j.freeze_writes(); assert j.writes_frozen()\n"
        "log.append({'n': 2}); j.write_json_atomic(root / 'after.json', {}); j.write_sealed(root / 's.json', {})\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "a.jsonl").read_text().splitlines() == ['{"n": 1}']
    assert (tmp_path / "before.json").exists()
    assert not (tmp_path / "after.json").exists() and not (tmp_path / "s.json").exists()


def test_launcher_configs_compose_without_the_deprecation_warning(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "optimizers.protocol.run", "hydra/launcher=submitit_slurm",
         "method=identity", "topology=single", "seed=0", "--cfg", "hydra", "-p", "hydra.launcher"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "deprecated" not in done.stderr, done.stderr
    launched = done.stdout
    for line in ("max_num_timeout: 3", "max_num_preemption: 10", "wait: false", "check_resources: true",
                 "cpus_per_task: 2", "mem_gb: 8", "_target_: hydra_plugins.lcb_grid_submitit.launcher.SlurmLauncher"):
        assert line in launched, launched


def test_preemptions_beyond_the_limit_are_not_requeued_and_time_outs_are_not_preemptions() -> None:
    # In a child: checkpointing freezes the process's journal writes (the job is stopping).
    code = (
        "import time\n"
        "from hydra_plugins.lcb_grid_submitit.launcher import SlurmLauncher\n"
        "job = SlurmLauncher(submitit_folder='x', timeout_min=60, max_num_preemption=2)\n"
        "job._started = time.time()\n"
        "print([job.checkpoint(['seed=0'], 'k', 0, 'id', {}) is not None for _ in range(3)], job.preemptions)\n"
        "late = SlurmLauncher(submitit_folder='x', timeout_min=60, max_num_preemption=0)\n"
        "late._started = time.time() - 55 * 60  # past 80 % of the limit: a time-out\n"
        "print(late.checkpoint(['seed=0'], 'k', 0, 'id', {}) is not None, late.preemptions)\n"
        "from optimizers.journal import writes_frozen; print(writes_frozen())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["[True, True, False] 3", "True 0", "True"]
    assert "preempted 3 times (max_num_preemption=2); not requeued" in done.stderr


def test_slurm_local_script_refuses_unknown_commands_and_names_its_configuration(tmp_path: Path) -> None:
    script = REPO / "scripts" / "slurm-local.sh"
    bad = subprocess.run(["bash", str(script), "restart"], capture_output=True, text=True, timeout=30, check=False)
    assert bad.returncode == 2 and bad.stderr.startswith("usage:")
    env = {"PATH": "/usr/bin:/bin", "LCB_SLURM_DIR": str(tmp_path / "state")}
    shown = subprocess.run(["bash", str(script), "env"], capture_output=True, text=True, timeout=30, env=env,
                           check=False)
    assert shown.stdout.strip() == f"export SLURM_CONF={tmp_path / 'state' / 'slurm.conf'}"
    # nothing runs from an empty state folder: status says so and fails
    status = subprocess.run(["bash", str(script), "status"], capture_output=True, text=True, timeout=30, env=env,
                            check=False)
    assert status.returncode == 1 and "slurmctld: stopped" in status.stdout
