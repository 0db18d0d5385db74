"""The job folder: where every file of a job lives, sealed reads/writes, and the job lock.

```
<out>/
  config.yaml          resolved config (written by the app)
  job.json             sealed job identity; a different job in the same folder is refused
  optimization/        attempts.jsonl rollouts.jsonl candidates.jsonl learning_curve.jsonl
                       tracker.jsonl native/ (method state)
  optimization.json    sealed outcome of the optimize phase
  evaluations/         content-addressed uncharged evaluations (may be shared between jobs)
  selection.json       sealed deployment decision (before any test problem is loaded)
  test.json            sealed paired test scores
  result.json          sealed job summary, written last
```
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from optimizers.journal import SealError, read_sealed, write_sealed, write_text_atomic
from optimizers.protocol.job.errors import JobError, JobMismatch, VersionMismatch

SEALED_FILES = ("job", "optimization", "selection", "test", "result")
SCHEMA_PREFIX = "lcb-grid"


def schema_of(kind: str) -> str:
    return f"{SCHEMA_PREFIX}-{kind}/v1"


class JobStore:
    def __init__(self, root: Path, *, evaluation_cache: Path | None = None) -> None:
        self.root = Path(root)
        self.evaluations = Path(evaluation_cache) if evaluation_cache else self.root / "evaluations"

    # ---------------------------------------------------------------- paths

    @property
    def config_path(self) -> Path:
        return self.root / "config.yaml"

    @property
    def optimization_dir(self) -> Path:
        return self.root / "optimization"

    @property
    def native_dir(self) -> Path:
        return self.optimization_dir / "native"

    @property
    def learning_curve_path(self) -> Path:
        return self.optimization_dir / "learning_curve.jsonl"

    @property
    def tracker_path(self) -> Path:
        return self.optimization_dir / "tracker.jsonl"

    def path(self, name: str) -> Path:
        if name not in SEALED_FILES:
            raise ValueError(f"unknown job file {name!r}")
        return self.root / f"{name}.json"

    # ---------------------------------------------------------------- sealed files

    def exists(self, name: str) -> bool:
        return self.path(name).exists()

    def read(self, name: str) -> dict[str, Any] | None:
        """A sealed job file, or None if absent; a corrupt or edited file is a ``JobError``."""
        path = self.path(name)
        if not path.exists():
            return None
        try:
            data = read_sealed(path)
        except SealError as exc:
            raise JobError(f"{exc}; remove it to recompute that phase") from None
        if data.get("schema") != schema_of(name):
            raise JobError(f"{path} has schema {data.get('schema')!r}, expected {schema_of(name)!r}")
        return data

    def write(self, name: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        return write_sealed(self.path(name), {**payload, "schema": schema_of(name)})

    def write_config(self, config: Mapping[str, Any]) -> None:
        """The resolved config as YAML (for people; job.json is what the code trusts)."""
        import yaml

        write_text_atomic(self.config_path, yaml.safe_dump(_plain(config), sort_keys=False))

    # ---------------------------------------------------------------- identity

    def ensure_job(self, record: Mapping[str, Any], *, force_resume: bool = False) -> dict[str, Any]:
        """Write job.json, or check that the existing one describes the same job.

        A folder whose job differs only in code versions is refused with ``VersionMismatch``
        unless ``force_resume`` (then the stored record is returned and the caller adopts it).
        """
        existing = self.read("job")
        if existing is None:
            return self.write("job", record)
        if existing.get("job_id") != record["job_id"]:
            theirs = existing.get("spec", {})
            ours = record["spec"]
            differing = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
            if differing and set(differing) <= VERSION_KEYS:
                if force_resume:
                    return existing
                raise VersionMismatch(
                    f"{self.root} was started by other code versions ({_versions(theirs)}; this code: "
                    f"{_versions(ours)}); use a fresh output folder, or --force-resume to continue it anyway"
                )
            raise JobMismatch(
                f"{self.root} holds a different job ({existing.get('job_id')}; differs in "
                f"{', '.join(differing) or 'identity'}); use another output folder"
            )
        return existing

    # ---------------------------------------------------------------- one process per job

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Exclusive ownership of the job folder; a second process gets a ``JobError``."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise JobError(f"{self.root} is in use by another running job") from None
            yield
        finally:
            os.close(fd)


# Spec keys that only say which code computed a job (mirrors optimizers.protocol.job.jobspec).
VERSION_KEYS = frozenset({"code_versions", "condition_id"})


def _versions(spec: Mapping[str, Any]) -> str:
    versions = spec.get("code_versions") or {}
    return " ".join(f"{k}={v}" for k, v in sorted(versions.items())) or "unversioned"


def _plain(value: Any) -> Any:
    """Paths, tuples and frozen mappings -> YAML-safe builtins."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)
