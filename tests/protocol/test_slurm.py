"""The cluster path on a real SLURM (scripts/slurm-local.sh start; .ci/run starts it when root).

Sweeps go through ``hydra/launcher=submitit_slurm`` and ``sbatch`` against the scripted models
(tests/optimizers/scripted_world.py): a 2 methods x 2 seeds sweep lands 4 results, the command
returning while jobs are still queued and ``grid --status`` showing them; a job ``scontrol
requeue``d mid-optimize resumes to the result of an uninterrupted run without charging a rollout
twice and continues its W&B run; a job sent the pre-timeout signal requeues itself. Skipped when
no local SLURM answers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "optimizers"))

from tracking_support import REPO, app_env, run_app  # noqa: E402

from optimizers.journal import read_jsonl, read_sealed  # noqa: E402

SLURM_LOCAL = REPO / "scripts" / "slurm-local.sh"
STATE_DIR = Path(os.environ.get("LCB_SLURM_DIR", "/tmp/lcb-grid-slurm"))
# Timings, seals, and which process made a model call (a requeued job replays the calls its
# first run made live); the outcome's ids are not among them.
VOLATILE = {"sha256", "elapsed_seconds", "optimization_sha256", "live_calls", "replayed_calls"}
BUDGET = 18


def _slurm_env() -> dict[str, str]:
    env = app_env()
    if "SLURM_CONF" not in env and (STATE_DIR / "slurm.conf").is_file():
        env["SLURM_CONF"] = str(STATE_DIR / "slurm.conf")
    return env


def _slurm_up() -> str | None:
    """None when a local SLURM answers, else why the tests skip."""
    if shutil.which("sbatch") is None:
        return "SLURM is not installed (scripts/slurm-local.sh start installs it as root)"
    status = subprocess.run(["bash", str(SLURM_LOCAL), "status"], capture_output=True, text=True, timeout=60,
                            env=_slurm_env(), check=False)
    if status.returncode != 0:
        return "the local SLURM is not running (scripts/slurm-local.sh start)"
    return None


pytestmark = pytest.mark.skipif(_slurm_up() is not None, reason=str(_slurm_up()))


def slurm(*args: str) -> str:
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=60, env=_slurm_env(), check=False)
    assert done.returncode == 0, f"{' '.join(args)}: {done.stderr}"
    return done.stdout


def job_fields(job_id: str) -> dict[str, str]:
    line = slurm("scontrol", "show", "job", "-o", job_id).splitlines()[0]
    return dict(token.split("=", 1) for token in line.split() if "=" in token)


def wait_for(what: str, condition: Callable[[], bool], timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def world() -> Iterator[Any]:
    from scripted_world import start_world

    # Latency keeps a job's optimization running long enough to be interrupted in the middle.
    server = start_world(latency_s=0.1)
    try:
        yield server
    finally:
        server.stop()


def overrides(world: Any, root: Path, *extra: str) -> list[str]:
    from scripted_world import MODEL_ID, REFLECTION_ID

    url = world.base_url
    return ["topology=single", "model=custom", f"model.id={MODEL_ID}", f"task_endpoints=[{url}]",
            f"reflection.id={REFLECTION_ID}", f"reflection.endpoints=[{url}]", "data=builtin",
            "allow_any_cell=true", f"runs_root={root}", "quiet=true", "concurrency=2", *extra]


def submit(world: Any, root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """The sweep command on SLURM (one CPU and 2 GB per job: the CI node is small)."""
    args = ["-m", "hydra/launcher=submitit_slurm", "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=2",
            *overrides(world, root, *extra)]
    return subprocess.run([sys.executable, "-m", "optimizers.protocol.run", *args], cwd=REPO, env=_slurm_env(),
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, check=False)


def grid_status(root: Path) -> list[list[str]]:
    done = subprocess.run([sys.executable, "-m", "optimizers.protocol.grid", "--status", str(root)], cwd=REPO,
                          env=_slurm_env(), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return [line.split("\t") for line in done.stdout.splitlines()[1:] if line and not line.startswith("done=")]


def manifest_jobs(root: Path) -> list[dict[str, Any]]:
    manifests = sorted((root / ".sweeps").glob("*.json"))
    assert manifests, "the launcher wrote no sweep manifest"
    return [job for path in manifests for job in json.loads(path.read_text())["jobs"]]


def no_console_noise(done: subprocess.CompletedProcess[str]) -> None:
    console = done.stdout + done.stderr
    assert "deprecated" not in console, console[-2000:]  # Hydra's schema-matching warning
    assert "sacct" not in console, console[-2000:]  # submitit's polling errors without accounting


def stable(value: Any) -> Any:
    from optimizers.journal import without_keys

    return without_keys(value, VOLATILE)


def job_folder(root: Path, method: str, seed: int = 0) -> Path:
    return root / method / "lcb" / "single" / "scripted--team-model" / str(seed)


def charged_once(out: Path, result: dict[str, Any]) -> None:
    """Every charged rollout of the journals once, and as many as the result says were charged."""
    total = result["optimization"]["budget"]["charged"]
    assert 0 < total <= BUDGET
    charged = [(a["candidate_id"], a["problem_id"], a["phase"], a["sample"])
               for a in read_jsonl(out / "optimization" / "attempts.jsonl") if a["charged"]]
    assert len(charged) == len(set(charged)) == total
    rollouts = [(r["candidate_id"], r["problem_id"]) for r in read_jsonl(out / "optimization" / "rollouts.jsonl")]
    assert len(rollouts) == len(set(rollouts)) == total


@pytest.fixture(scope="module")
def uninterrupted(world: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The same gepa job run straight through on this machine (no SLURM, no interruption)."""
    root = tmp_path_factory.mktemp("reference")
    done = run_app(["method=gepa", "seed=0", f"budget={BUDGET}", "tracker=jsonl", *overrides(world, root)],
                   timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return read_sealed(job_folder(root, "gepa") / "result.json")


def test_sweep_returns_while_queued_then_lands_four_results(world: Any, tmp_path: Path) -> None:
    started = time.monotonic()
    # At most 2 array tasks at once: the other two are certainly still queued when the command returns.
    done = submit(world, tmp_path, "method=identity,gepa", "seed=0,1", "budget=4", "tracker=jsonl",
                  "hydra.launcher.array_parallelism=2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "submitted 4 job(s) as SLURM array" in done.stderr
    assert time.monotonic() - started < 60
    no_console_noise(done)
    jobs = manifest_jobs(tmp_path)
    assert len(jobs) == 4 and all(job["out"] for job in jobs)
    rows = {row[5]: row for row in grid_status(tmp_path)}
    ours = [rows[job["out"]] for job in jobs]
    assert sum(row[0] == "queued" for row in ours) >= 2, ours
    assert all(row[0] in ("queued", "running", "done") for row in ours), ours
    assert all(row[6].startswith(f"slurm {job['slurm_job_id']} ") for row, job in zip(ours, jobs) if row[0] == "queued")

    wait_for("4 results", lambda: len(list(tmp_path.rglob("result.json"))) == 4, timeout_s=400)
    results = [read_sealed(path) for path in tmp_path.rglob("result.json")]
    assert sorted((r["cell"]["method"], r["seed"]) for r in results) == [
        ("gepa", 0), ("gepa", 1), ("identity", 0), ("identity", 1)]
    assert all(r["status"] == "completed" for r in results)
    final = {row[5]: row for row in grid_status(tmp_path)}
    assert [final[job["out"]][0] for job in jobs] == ["done"] * 4


def test_waiting_sweep_polls_without_accounting_noise(world: Any, tmp_path: Path) -> None:
    done = submit(world, tmp_path, "method=identity", "seed=0", "budget=4", "tracker=jsonl",
                  "hydra.launcher.wait=true")
    assert done.returncode == 0, done.stderr[-3000:]
    no_console_noise(done)
    assert (job_folder(tmp_path, "identity") / "result.json").is_file()


def test_resources_no_node_has_are_refused_in_one_line(world: Any, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "optimizers.protocol.run", "-m", "hydra/launcher=submitit_slurm",
         "hydra.launcher.cpus_per_task=4096", *overrides(world, tmp_path, "method=identity", "seed=0")],
        cwd=REPO, env=_slurm_env(), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "4096 CPUs" in lines[0] and "cpus_per_task" in lines[0], done.stderr[-2000:]
    assert not (tmp_path / ".sweeps").exists()  # nothing was submitted


def _mid_optimize(out: Path) -> bool:
    attempts = out / "optimization" / "attempts.jsonl"
    return attempts.is_file() and sum(1 for _ in attempts.open()) >= 4


def _release(job_id: str) -> None:
    """SLURM holds a requeued job for about two minutes (reason BeginTime); the test need not wait
    that long. The hold is set once the job is pending again (after its first run has ended)."""
    pending = False

    def released() -> bool:
        nonlocal pending
        fields = job_fields(job_id)
        if fields.get("JobState") != "PENDING":
            return pending  # still the first run ending, or already the second run
        pending = True
        if fields.get("Reason") == "BeginTime":
            # Not in the same second as the kill: slurmd refuses a launch whose credential is no
            # newer than the revocation of the killed run's ("Job credential revoked").
            time.sleep(3)
            slurm("scontrol", "update", f"JobId={job_id}", "StartTime=now")
            return False
        return True

    wait_for("the requeued job to be released", released, timeout_s=120)


def _submit_one(world: Any, root: Path, *extra: str) -> str:
    done = submit(world, root, "method=gepa", "seed=0", f"budget={BUDGET}", *extra)
    assert done.returncode == 0, done.stderr[-3000:]
    (job,) = manifest_jobs(root)
    return str(job["slurm_job_id"])


def test_requeued_mid_optimize_resumes_to_the_uninterrupted_result(world: Any, uninterrupted: dict[str, Any],
                                                                     tmp_path: Path) -> None:
    job_id = _submit_one(world, tmp_path, "tracker=wandb")
    out = job_folder(tmp_path, "gepa")
    wait_for("the middle of optimize", lambda: _mid_optimize(out))
    assert not (out / "optimization.json").exists(), "too late: the optimization had already ended"
    slurm("scontrol", "requeue", job_id)
    wait_for("the requeue", lambda: int(job_fields(job_id).get("Restarts", "0")) >= 1, timeout_s=60)
    rows = {row[5]: row for row in grid_status(tmp_path)}
    assert rows[str(out.resolve())][0] in ("requeued", "running"), rows[str(out.resolve())]
    _release(job_id)
    wait_for("the resumed job's result", lambda: (out / "result.json").is_file(), timeout_s=300)

    result = read_sealed(out / "result.json")
    assert stable(result) == stable(uninterrupted)
    charged_once(out, result)
    # One W&B run continued, not a new one: every attempt's offline run carries the job id.
    runs = sorted((out / "wandb").glob("offline-run-*"))
    assert len(runs) >= 2, runs
    assert {run.name.rsplit("-", 1)[1] for run in runs} == {result["job_id"]}


def test_pre_timeout_signal_makes_the_job_requeue_itself(world: Any, uninterrupted: dict[str, Any],
                                                          tmp_path: Path) -> None:
    job_id = _submit_one(world, tmp_path, "tracker=jsonl")
    out = job_folder(tmp_path, "gepa")
    wait_for("the middle of optimize", lambda: _mid_optimize(out))
    # What SLURM sends signal_delay_s before the time limit (submitit's --signal=USR2@...).
    slurm("scancel", "--signal=USR2", job_id)
    # Nobody but the job itself asks SLURM to requeue it: its signal handler checkpoints, then
    # runs `scontrol requeue` (which may die with the job it requeues, before logging so).
    wait_for("the job to requeue itself", lambda: int(job_fields(job_id).get("Restarts", "0")) >= 1, timeout_s=60)
    logs = "".join(path.read_text(errors="replace") for path in tmp_path.rglob("*_log.err"))
    assert "Caught signal SIGUSR2" in logs and "Calling checkpoint method" in logs, logs[-3000:]
    _release(job_id)
    wait_for("the resumed job's result", lambda: (out / "result.json").is_file(), timeout_s=300)
    result = read_sealed(out / "result.json")
    assert stable(result) == stable(uninterrupted)
    charged_once(out, result)


def test_starting_a_running_cluster_changes_nothing() -> None:
    again = subprocess.run(["bash", str(SLURM_LOCAL), "start"], capture_output=True, text=True, timeout=120,
                           env=_slurm_env(), check=False)
    assert again.returncode == 0 and "already running" in again.stderr, again.stderr
    assert "idle" in slurm("sinfo", "-h", "-o", "%T") or "mixed" in slurm("sinfo", "-h", "-o", "%T")
