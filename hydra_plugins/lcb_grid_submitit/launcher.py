"""Submitit launchers for lcb-grid sweeps.

What they add to hydra-submitit-launcher's (whose task function, ``__call__``, they keep):

- **Submit and leave** (``wait: false``, SLURM's default): the command returns once the array is
  submitted; jobs are idempotent and resume from their journals, so nothing needs the submitting
  process. A manifest, ``<runs_root>/.sweeps/<array id>.json``, names every job's SLURM id,
  overrides and folder, so ``python -m optimizers.protocol.grid --status <runs_root>`` can tell
  queued, running, requeued and failed jobs apart. Sweepers that need the jobs' return values
  (Optuna) always wait.
- **Resources that fit**: before submitting, the request (CPUs and memory per node) is compared
  with the partition's nodes (``sinfo``); a request no node can satisfy is one error line instead
  of a job pending forever with reason ``PartitionConfig``.
- **Preemption and time limits**: submitit requeues a job that receives the pre-timeout signal
  (``signal_delay_s`` before the limit) or a preemption signal, up to ``max_num_timeout`` time-outs
  and ``max_num_preemption`` preemptions; the requeued job resumes from its journals (no rollout
  is charged twice) and continues its W&B run (the run id is the job id).
- **No accounting needed**: without ``sacct`` (no slurmdbd, as on a single-node SLURM) job states
  come from ``squeue`` instead of submitit's sacct calls, which fail there with a warning per poll.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra.errors import HydraException
from hydra_plugins.hydra_submitit_launcher import submitit_launcher as upstream
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

log = logging.getLogger(__name__)

OWN_KEYS = ("wait", "max_num_preemption", "check_resources")
MANIFEST_DIR = ".sweeps"
MANIFEST_SCHEMA = "lcb-grid/sweep-manifest/v1"


class LaunchError(HydraException, ValueError):
    """A sweep that cannot be submitted; one line (the app prints HydraExceptions as ``error:``)."""


# ------------------------------------------------------------------------------------ resources


def node_capacities(partition: str | None) -> list[tuple[int, int]] | None:
    """(CPUs, memory MB) of every node of ``partition`` (default: the default partition); None
    when SLURM cannot be asked."""
    if shutil.which("sinfo") is None:
        return None
    try:
        listed = subprocess.run(["sinfo", "-h", "-N", "-o", "%c|%m|%P"], capture_output=True, text=True,
                                timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listed.returncode != 0:
        return None
    nodes = []
    for line in listed.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3:
            continue
        cpus, memory, name = parts
        default = name.endswith("*")
        if (partition is None and not default) or (partition is not None and name.rstrip("*") != partition):
            continue
        try:
            nodes.append((int(cpus.rstrip("+")), int(memory.rstrip("+"))))
        except ValueError:
            continue
    return nodes


def _memory_mb(text: Any) -> int | None:
    """SLURM memory strings (``4G``, ``512M``, ``2048``) in MB."""
    if text is None:
        return None
    value = str(text).strip().upper()
    scale = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}.get(value[-1:], None)
    number = value[:-1] if scale is not None else value
    try:
        return int(float(number) * (scale if scale is not None else 1))
    except ValueError:
        return None


def check_resources(params: Mapping[str, Any]) -> None:
    """Raise ``LaunchError`` when no node of the partition has the CPUs and memory one job asks."""
    nodes = node_capacities(params.get("partition"))
    if nodes is None:
        return
    where = f"partition {params['partition']!r}" if params.get("partition") else "the default partition"
    if not nodes:
        raise LaunchError(f"SLURM lists no node in {where} (hydra.launcher.partition=NAME picks another)")
    tasks = int(params.get("tasks_per_node") or 1)
    cpus = int(params.get("cpus_per_task") or 1) * tasks
    memory = None
    if params.get("mem_gb"):
        memory = int(params["mem_gb"]) * 1024
    elif params.get("mem_per_cpu"):
        per_cpu = _memory_mb(params["mem_per_cpu"])
        memory = per_cpu * cpus if per_cpu is not None else None
    if any(cpus <= node_cpus and (memory is None or memory <= node_memory) for node_cpus, node_memory in nodes):
        return
    most_cpus = max(c for c, _ in nodes)
    most_memory = max(m for _, m in nodes)
    asked = f"{cpus} CPUs" + (f" and {memory / 1024:g} GB" if memory is not None else "")
    raise LaunchError(
        f"each job asks {asked} per node, but no node of {where} has that (the largest have {most_cpus} CPUs "
        f"and {most_memory / 1024:.1f} GB): lower hydra.launcher.cpus_per_task / hydra.launcher.mem_gb "
        f"(or set hydra.launcher.check_resources=false)")


# ------------------------------------------------------------------------------ state polling


def accounting_available() -> bool:
    """Whether ``sacct`` answers (it needs slurmdbd; a single-node SLURM usually has none)."""
    if shutil.which("sacct") is None:
        return False
    try:
        probe = subprocess.run(["sacct", "-n", "-X", "-o", "JobID", "-S", "now"], capture_output=True,
                               text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def _squeue_watcher_class() -> type:
    from submitit.slurm.slurm import SlurmInfoWatcher

    class SqueueInfoWatcher(SlurmInfoWatcher):
        """submitit's watcher, reading ``squeue`` (every state, array tasks one per line) instead
        of ``sacct``. A job that was listed and no longer is has finished (its record aged out of
        the controller's memory); its result file says how."""

        def __init__(self, delay_s: int = 60) -> None:
            super().__init__(delay_s)
            self._listed: set[str] = set()

        def _make_command(self) -> list[str] | None:
            if not self._registered - self._finished:
                return None
            return ["squeue", "-h", "-r", "-t", "all", "-o", "%i|%T|%N"]

        def read_info(self, string: bytes | str) -> dict[str, dict[str, str]]:
            text = string.decode() if isinstance(string, bytes) else string
            info = super().read_info("JobID|State|NodeList\n" + text)
            for job_id in (self._registered - self._finished) & self._listed:
                info.setdefault(job_id, {"JobID": job_id, "State": "COMPLETED", "NodeList": ""})
            self._listed |= set(info)
            return info

    return SqueueInfoWatcher


def use_squeue_without_accounting() -> None:
    from submitit.slurm import slurm

    watcher = _squeue_watcher_class()
    if type(slurm.SlurmJob.watcher).__name__ == watcher.__name__:
        return
    if not accounting_available():
        slurm.SlurmJob.watcher = watcher(delay_s=60)


# ---------------------------------------------------------------------------------- manifest


class JobFolders:
    """Where each job of a sweep will write (its folder is a function of its config).

    Composing a job's config takes Hydra a few hundred milliseconds, too slow for a 396-job array
    that should return at once. Jobs of a sweep mostly differ in plain values (``seed=1``), so the
    config is composed once per distinct set of config-group choices (``method=gepa``) and the
    plain values are then set on a copy, as Hydra itself applies them after composing.
    """

    def __init__(self, launcher: Any) -> None:
        self.launcher = launcher
        self._composed: dict[tuple[str, ...], Any] = {}

    def _compose(self, overrides: Sequence[str]) -> Any:
        from omegaconf import open_dict

        launcher = self.launcher
        cfg = launcher.hydra_context.config_loader.load_sweep_config(launcher.config, list(overrides))
        with open_dict(cfg):
            del cfg["hydra"]  # what the task function receives
        return cfg

    def _config(self, overrides: Sequence[str]) -> Any:
        import copy

        from hydra.core.override_parser.overrides_parser import OverridesParser
        from hydra.core.override_parser.types import OverrideType
        from omegaconf import OmegaConf

        loader = self.launcher.hydra_context.config_loader
        parsed = OverridesParser.create(config_loader=loader).parse_overrides(list(overrides))
        groups, values = [], []
        for override in parsed:
            plain = (override.type is OverrideType.CHANGE and override.package is None
                     and not override.is_hydra_override() and not override.is_sweep_override()
                     and not loader.repository.group_exists(override.key_or_group))
            (values if plain else groups).append(override)
        key = tuple(str(o.input_line) for o in groups)
        if key not in self._composed:
            self._composed[key] = self._compose(key)
        cfg = copy.deepcopy(self._composed[key])
        for override in values:
            OmegaConf.update(cfg, override.key_or_group, override.value(), merge=True)
        return cfg

    def entry(self, overrides: Sequence[str]) -> dict[str, Any]:
        from optimizers.protocol.grid import cells
        from optimizers.protocol.run.hydra_config import job_config

        try:
            try:
                job = job_config(self._config(overrides))
            except Exception:  # noqa: BLE001 - an unusual override: compose this job on its own
                job = job_config(self._compose(overrides))
        except Exception as exc:  # noqa: BLE001 - the job itself will report its config error
            return {"out": None, "error": " ".join(str(exc).split())[:300]}
        return {"out": str(Path(job.out).resolve()), "method": job.method,
                "registry_key": job.registry_key or job.topology, "model": cells.model_key(job.model.id),
                "seed": job.seed}


def write_manifest(launcher: Any, jobs: Sequence[Any], job_overrides: Sequence[Sequence[str]]) -> Path | None:
    from optimizers.journal import write_text_atomic

    runs_root = Path(str(launcher.config.get("runs_root") or "runs")).resolve()
    folders = JobFolders(launcher)
    array_id = str(jobs[0].job_id).split("_")[0]
    manifest = {
        "schema": MANIFEST_SCHEMA,
        "array_job_id": array_id,
        "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "sweep_dir": str(Path(str(launcher.config.hydra.sweep.dir)).resolve()),
        "jobs": [{"slurm_job_id": str(job.job_id), "overrides": list(overrides), **folders.entry(overrides)}
                 for job, overrides in zip(jobs, job_overrides)],
    }
    path = runs_root / MANIFEST_DIR / f"{array_id}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(manifest, indent=1) + "\n")
    except OSError as exc:
        log.warning(f"could not write the sweep manifest {path}: {exc}")
        return None
    return path


# --------------------------------------------------------------------------------- launchers


def _timed_out(started: float, timeout_min: float) -> bool:
    # submitit's own rule: past 80 % of the limit (or within 10 minutes of it) it is a time-out.
    limit = timeout_min * 60
    return time.time() - started >= min(limit * 0.8, limit - 600)


def _freeze_writes_on_sigterm() -> None:
    """SLURM signals every process of a job when it requeues, preempts or cancels it, the job's
    sandboxed programs included: from the first SIGTERM on, the job writes nothing more (a program
    killed under it is not a failed rollout; optimizers/journal.py). submitit's own handler (it logs
    and keeps running, waiting for its requeue signal) still runs after ours."""
    import signal

    from optimizers.journal import freeze_writes

    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: Any) -> None:
        freeze_writes()
        if callable(previous):
            previous(signum, frame)

    signal.signal(signal.SIGTERM, on_sigterm)


class _Launcher(upstream.BaseSubmititLauncher):
    def __init__(self, **params: Any) -> None:
        own = {key: params.pop(key) for key in OWN_KEYS if key in params}
        super().__init__(**params)
        self.wait = bool(own.get("wait", True))
        self.max_num_preemption = int(own.get("max_num_preemption", 0) or 0)
        self.resource_check = bool(own.get("check_resources", False))
        self.preemptions = 0  # carried through checkpoints: the launcher is pickled with the job
        self._started = 0.0

    def __call__(self, *args: Any, **kwargs: Any) -> JobReturn:
        self._started = time.time()
        _freeze_writes_on_sigterm()
        return super().__call__(*args, **kwargs)

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Requeue with the same arguments (the job resumes from its journals), unless this is a
        preemption beyond ``max_num_preemption`` (time-outs are counted by submitit itself)."""
        from optimizers.journal import freeze_writes

        freeze_writes()  # the job stops here: what it wrote so far is what it resumes from
        if not _timed_out(self._started, float(self.params.get("timeout_min") or 60)):
            self.preemptions += 1
            if self.preemptions > self.max_num_preemption:
                sys.stderr.write(f"error: preempted {self.preemptions} times (max_num_preemption="
                                 f"{self.max_num_preemption}); not requeued\n")
                return None
        return super().checkpoint(*args, **kwargs)

    def _executor(self) -> Any:
        import submitit

        params = dict(self.params)
        folder = params.pop("submitit_folder")
        init = {}
        if "max_num_timeout" in params:
            init[f"{self._EXECUTOR}_max_num_timeout"] = params.pop("max_num_timeout")
        executor = submitit.AutoExecutor(folder=folder, cluster=self._EXECUTOR, **init)
        shared = {f.name for f in fields(BaseQueueConf)}
        executor.update_parameters(**{key if key in shared else f"{self._EXECUTOR}_{key}": value
                                      for key, value in params.items()})
        return executor

    def _must_wait(self) -> bool:
        # Only Hydra's basic sweeper ignores return values; Optuna's needs each job's objective.
        sweeper = str(self.config.hydra.sweeper.get("_target_", "")) if self.config is not None else ""
        return self.wait or not sweeper.endswith("BasicSweeper")

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        assert self.config is not None and job_overrides
        if self.resource_check:
            check_resources(self.params)
        if self._EXECUTOR == "slurm":
            use_squeue_without_accounting()
        executor = self._executor()
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        log.info(f"Submitit '{self._EXECUTOR}' sweep output dir : {sweep_dir}")
        arguments = []
        for offset, overrides in enumerate(job_overrides):
            number = initial_job_idx + offset
            log.info(f"\t#{number} : {' '.join(filter_overrides(overrides))}")
            arguments.append((list(overrides), "hydra.sweep.dir", number, f"job_id_for_{number}",
                              Singleton.get_state()))
        jobs = executor.map_array(self, *zip(*arguments))
        manifest = write_manifest(self, jobs, job_overrides) if self._EXECUTOR == "slurm" else None
        if self._must_wait():
            return [job.results()[0] for job in jobs]
        return self._submitted(jobs, job_overrides, manifest)

    def _submitted(self, jobs: Sequence[Any], job_overrides: Sequence[Sequence[str]],
                   manifest: Path | None) -> list[JobReturn]:
        assert self.config is not None
        array_id = str(jobs[0].job_id).split("_")[0]
        root = str(self.config.get("runs_root") or "runs")
        sys.stderr.write(
            f"submitted {len(jobs)} job(s) as SLURM array {array_id}; this command returns now (jobs resume "
            f"from their journals if requeued).\n"
            f"  progress: {_python()} -m optimizers.protocol.grid --status {root}"
            + (f"\n  manifest: {manifest}" if manifest is not None else "") + "\n")
        sys.stderr.flush()
        return [JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED,
                          _return_value={"status": "submitted", "slurm_job_id": str(job.job_id)})
                for job, overrides in zip(jobs, job_overrides)]


def _python() -> str:
    try:
        return str(Path(sys.executable).relative_to(Path.cwd()))
    except ValueError:
        return "python"


class LocalLauncher(_Launcher):
    _EXECUTOR = "local"


class SlurmLauncher(_Launcher):
    _EXECUTOR = "slurm"


