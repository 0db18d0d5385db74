"""What SLURM says about the jobs of submitted sweeps (for ``grid --status``).

The submitit launcher (hydra_plugins/lcb_grid_submitit) leaves a manifest per submitted array in
``<runs_root>/.sweeps/<array id>.json``: each job's SLURM id and folder. Folders say what is done;
the scheduler says what is queued, running, requeued or failed before a folder can. States come
from ``scontrol show job`` (the controller remembers finished jobs for MinJobAge), else from
``sacct`` where accounting runs; without SLURM (or once it forgot a job) the folder alone speaks.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

MANIFEST_DIR = ".sweeps"

# SLURM job states -> our status; anything not listed (COMPLETED, unknown) defers to the folder.
_QUEUED = frozenset({"PENDING", "CONFIGURING"})
_REQUEUED = frozenset({"REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
_RUNNING = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING"})
_FAILED = frozenset({"FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE",
                     "PREEMPTED", "SPECIAL_EXIT", "REVOKED"})


@dataclass(frozen=True, slots=True)
class SubmittedJob:
    slurm_job_id: str
    out: Path | None
    method: str
    registry_key: str
    model: str
    seed: str


@dataclass(frozen=True, slots=True)
class SlurmState:
    state: str
    reason: str = ""
    restarts: int = 0


def submitted_jobs(runs_root: Path) -> list[SubmittedJob]:
    """Every job of every manifest under ``runs_root``; for a folder submitted twice, the latest."""
    by_out: dict[object, SubmittedJob] = {}
    manifests = sorted((runs_root / MANIFEST_DIR).glob("*.json"), key=lambda p: (p.stat().st_mtime, p.name))
    for manifest in manifests:
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for entry in data.get("jobs") or ():
            if not isinstance(entry, Mapping) or not entry.get("slurm_job_id"):
                continue
            out = Path(entry["out"]) if entry.get("out") else None
            job = SubmittedJob(str(entry["slurm_job_id"]), out, str(entry.get("method") or "?"),
                               str(entry.get("registry_key") or "?"), str(entry.get("model") or "?"),
                               str(entry.get("seed", "?")))
            by_out[out.resolve() if out is not None else job.slurm_job_id] = job
    return list(by_out.values())


def _fields(line: str) -> dict[str, str]:
    out = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if sep:
            out[key] = value
    return out


def _task_ids(text: str) -> list[str]:
    """``3`` / ``2-5%4`` / ``1,4-6`` -> the task numbers."""
    ids: list[str] = []
    for part in text.split("%")[0].split(","):
        low, _, high = part.partition("-")
        if low.isdigit() and high.isdigit():
            ids.extend(str(n) for n in range(int(low), int(high) + 1))
        elif low.isdigit():
            ids.append(low)
    return ids


def parse_scontrol(text: str) -> dict[str, SlurmState]:
    """``scontrol show job -o`` lines -> state per job id (array tasks as ``<array>_<task>``)."""
    states: dict[str, SlurmState] = {}
    for line in text.splitlines():
        info = _fields(line)
        if "JobState" not in info:
            continue
        state = SlurmState(info["JobState"], info.get("Reason", ""), int(info.get("Restarts", "0") or 0))
        array, task = info.get("ArrayJobId"), info.get("ArrayTaskId")
        if array and task:
            for number in _task_ids(task):
                states[f"{array}_{number}"] = state
        elif "JobId" in info:
            states[info["JobId"]] = state
    return states


def _run(command: list[str]) -> str | None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def scheduler_states(job_ids: Iterable[str]) -> dict[str, SlurmState]:
    """What SLURM knows about these jobs; empty without SLURM."""
    wanted = sorted(set(job_ids))
    if not wanted or shutil.which("scontrol") is None:
        return {}
    states: dict[str, SlurmState] = {}
    for array in sorted({job_id.split("_")[0] for job_id in wanted}):
        text = _run(["scontrol", "show", "job", "-o", array])
        if text:
            states.update(parse_scontrol(text))
    missing = [job_id for job_id in wanted if job_id not in states]
    if missing and shutil.which("sacct") is not None:
        text = _run(["sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", ",".join(missing)])
        for line in (text or "").splitlines():
            job_id, _, state = line.partition("|")
            if job_id in missing and state:
                states[job_id] = SlurmState(state.split()[0])  # "CANCELLED by 0" -> CANCELLED
    return states


def status_from_scheduler(job: SubmittedJob, state: SlurmState | None) -> tuple[str, str] | None:
    """(status, detail) the scheduler gives, or None when the job folder should decide."""
    if state is None:
        return None
    requeues = f", requeued {state.restarts}x" if state.restarts else ""
    reason = f" ({state.reason})" if state.reason and state.reason != "None" else ""
    detail = f"slurm {job.slurm_job_id} {state.state}{reason}{requeues}"
    if state.state in _REQUEUED or (state.state in _QUEUED and state.restarts):
        return "requeued", detail
    if state.state in _QUEUED:
        return "queued", detail
    if state.state in _RUNNING:
        return "running", detail
    if state.state in _FAILED:
        return "failed", detail
    return None
