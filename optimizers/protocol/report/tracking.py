"""W&B tracking for one job: ``make_tracker(job, resolved_config)`` -> a ``Tracker`` or None.

The engine always writes JSONL journals; this module adds one W&B run per job on top of them:

- ``project`` from ``tracker.project``; ``group`` = the grid cell (method | runtime | model);
  ``job_type`` = the method; ``id`` and ``name`` = the job id, with ``resume="allow"``, so a
  resumed job continues its run; ``config`` = the resolved Hydra config plus the job identity;
  tags for method, topology, model and seed; the run's files under ``<job folder>/wandb/``, or
  under ``$WANDB_DIR/wandb/`` when the user set ``WANDB_DIR``.
- Per charged rollout: budget used, the rollout score, the running mean and best score, the
  learning curve points and the task model's tokens and calls (read incrementally from the job's
  own journals, so nothing is counted twice and nothing needs the optimizer's help).
- At ``finish``: every candidate's prompts as a table, the learning curve as a table, the
  deployed prompts as an artifact, the job page's story (``optimizers.protocol.report.tracking_job``:
  candidate steps, the deployed-vs-seed diff as HTML, the per-problem test verdicts), and
  selection, test and usage figures in the summary; then one line says where an offline run's
  files are and the command that uploads them.

Mode: offline unless ``tracker.mode=online`` *and* an API key is configured; ``WANDB_MODE=disabled``
turns W&B off. An online init that cannot reach the server within ``init_timeout_s`` falls back
to offline with a one-line notice. Tracking never fails a job: a W&B error becomes one notice on
stderr and the tracker goes quiet. ``wandb`` is imported only when a run starts.
"""

from __future__ import annotations

import json
import netrc
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optimizers.candidate import Candidate
from optimizers.journal import read_json_object
from optimizers.protocol.grid.config import JobConfig
from optimizers.reflection import JOURNAL_NAME as REFLECTION_JOURNAL

MODES = ("offline", "online", "disabled")
DEFAULT_INIT_TIMEOUT_S = 30.0
WANDB_SUBDIR = "wandb"  # wandb.init(dir=<job>) puts its runs in <job>/wandb/
TOKEN_KEYS = ("calls", "prompt_tokens", "completion_tokens", "tool_calls")


class TrackingError(ValueError):
    """A tracker configuration that cannot work; the message is one line."""


def notice(text: str) -> None:
    print(f"[tracking] {text}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- mode


def has_api_key(env: Mapping[str, str] | None = None) -> bool:
    """Whether a W&B key is configured (``WANDB_API_KEY`` or a netrc entry for the W&B host)."""
    env = os.environ if env is None else env
    if env.get("WANDB_API_KEY", "").strip():
        return True
    host = env.get("WANDB_BASE_URL", "https://api.wandb.ai").split("://", 1)[-1].split("/", 1)[0]
    path = env.get("NETRC") or str(Path.home() / ".netrc")
    try:
        entry = netrc.netrc(path).authenticators(host.split(":", 1)[0])
    except (OSError, netrc.NetrcParseError):
        return False
    return bool(entry and entry[2])


def resolve_mode(requested: str, env: Mapping[str, str] | None = None) -> tuple[str, str | None]:
    """(the mode to use, a one-line notice or None). Online only with a key; disabled wins."""
    env = os.environ if env is None else env
    if requested not in MODES:
        raise TrackingError(f"tracker.mode must be one of {', '.join(MODES)}, not {requested!r}")
    if env.get("WANDB_MODE", "").strip().lower() == "disabled" or requested == "disabled":
        return "disabled", None
    if requested == "online":
        if has_api_key(env):
            return "online", None
        return "offline", "tracker.mode=online but no W&B API key is configured; logging offline (wandb sync later)"
    return "offline", None


# --------------------------------------------------------------------------- job folder reading


class JsonlTail:
    """Reads the complete lines appended to a JSONL file since the last call (never a partial one)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def new_records(self) -> Iterator[dict[str, Any]]:
        try:
            with self.path.open("rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1
        self._offset += end
        for line in data[:end].splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a torn line the journal repairs on its next append
            if isinstance(record, dict):
                yield record


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return list(JsonlTail(path).new_records())


def cell_label(cell: Mapping[str, Any]) -> str:
    """``tavo|centralized|qwen``: the W&B group of a grid cell (method x runtime x model)."""
    from optimizers.protocol.grid import cells

    runtime = cell.get("registry_key") or cell.get("topology", "?")
    return f"{cell.get('method', '?')}|{runtime}|{cells.model_key(str(cell.get('model', '?')))}"


def deployed_prompts_score(selection: Mapping[str, Any]) -> float | None:
    """The validation score of the deployed candidate (the seed's when the incumbent was rejected)."""
    key = "incumbent_validation_score" if selection.get("selected_candidate") == "incumbent" else (
        "baseline_validation_score")
    value = selection.get(key)
    return None if value is None else float(value)


def _flat(prefix: str, value: Any, out: dict[str, Any]) -> dict[str, Any]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            _flat(f"{prefix}/{key}" if prefix else str(key), item, out)
    elif isinstance(value, (int, float, str, bool)) or value is None:
        out[prefix] = value
    return out


# --------------------------------------------------------------------------- the tracker


@dataclass(slots=True)
class _Running:
    """Running figures over the charged rollouts this process has seen."""

    charged: int = 0
    score_total: float = 0.0
    by_candidate: dict[str, list[float]] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOKEN_KEYS, 0))
    attempts: int = 0
    reflection: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("calls", "prompt_tokens", "completion_tokens"), 0))

    def add(self, score: float, candidate_id: str | None) -> None:
        self.charged += 1
        self.score_total += score
        totals = self.by_candidate.setdefault(candidate_id or "?", [0.0, 0.0])
        totals[0] += score
        totals[1] += 1

    @property
    def mean(self) -> float:
        return self.score_total / self.charged if self.charged else 0.0

    @property
    def best_candidate_mean(self) -> float:
        return max((total / n for total, n in self.by_candidate.values() if n), default=0.0)


class WandbTracker:
    """One W&B run per job (see the module docstring). Starts lazily, at the first call.

    ``wandb_module`` exists for tests that must see what is sent without a W&B process; the
    product always uses the real ``wandb``.
    """

    def __init__(
        self,
        job: JobConfig,
        resolved_config: Mapping[str, Any] | None = None,
        *,
        mode: str = "offline",
        init_timeout_s: float = DEFAULT_INIT_TIMEOUT_S,
        wandb_module: Any = None,
    ) -> None:
        self.job = job
        self.folder = Path(job.out)
        self.resolved_config = dict(resolved_config or {})
        self.mode = mode
        self.init_timeout_s = init_timeout_s
        self._wandb = wandb_module
        self.run: Any = None
        self._dead = False
        self._finished = False
        self._running = _Running()
        self._attempts = JsonlTail(self.folder / "optimization" / "attempts.jsonl")
        self._curve = JsonlTail(self.folder / "optimization" / "learning_curve.jsonl")
        # Methods journal every reflection call there, so W&B sees them live, not only at the end.
        self._reflections = JsonlTail(self.folder / "optimization" / "native" / REFLECTION_JOURNAL)

    # ---------------------------------------------------------------- Tracker protocol

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        def send(run: Any) -> None:
            row: dict[str, Any] = {"budget/charged": int(step)}
            score = metrics.get("rollout/score")
            if isinstance(score, (int, float)) and not isinstance(score, bool):
                self._running.add(float(score), metrics.get("rollout/candidate_id"))
                row.update({"rollout/score": float(score), "score/running_mean": self._running.mean,
                            "score/best_candidate_mean": self._running.best_candidate_mean})
            for key, value in metrics.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and key not in row:
                    row[key] = value
            row.update(self._new_usage())
            run.log(row)
            for point in self._curve.new_records():
                self._log_curve_point(run, point)

        self._safely("log", send)

    def log_candidate(self, candidate: Candidate, **info: Any) -> None:
        def send(run: Any) -> None:
            numbers = {f"candidate/{k}": v for k, v in info.items()
                       if isinstance(v, (int, float)) and not isinstance(v, bool)}
            if numbers:
                run.log({"budget/charged": self._running.charged, **numbers})

        self._safely("log_candidate", send)

    def summary(self, metrics: Mapping[str, Any]) -> None:
        def send(run: Any) -> None:
            for key, value in metrics.items():
                run.summary[key] = value

        self._safely("summary", send)

    def finish(self, status: str = "completed") -> None:
        """Final tables, artifact and summary, then ``run.finish()`` (only if a run was started)."""
        if self._finished:
            return
        if self.run is not None and not self._dead:
            self._safely("final records", self._final_records)
        self._finished = True
        run = self.run
        if run is None:
            return
        offline_folder = self._offline_folder(run)
        try:
            run.finish(exit_code=0 if status in ("completed", "done", "success") else 1)
        except Exception as exc:  # noqa: BLE001 - tracking must never fail the job
            notice(f"W&B finish failed ({type(exc).__name__}: {exc}); the JSONL journals are complete")
            offline_folder = None
        finally:
            self.run = None
        if offline_folder is not None:
            notice(f"W&B offline run: {offline_folder}; upload it with: wandb sync {offline_folder}")

    def _offline_folder(self, run: Any) -> Path | None:
        """The offline run's folder (``.../wandb/offline-run-*``), relative to here when inside."""
        if self.mode != "offline":
            return None
        try:
            folder = Path(run.dir).parent  # run.dir is <run folder>/files
        except Exception:  # noqa: BLE001 - a run without a folder has nothing to sync
            return None
        try:
            return folder.resolve().relative_to(Path.cwd().resolve())
        except ValueError:
            return folder

    # ---------------------------------------------------------------- run start

    def _identity(self) -> dict[str, Any]:
        record = read_json_object(self.folder / "job.json") or {}
        cell = record.get("cell") or {
            "method": self.job.method, "topology": self.job.topology, "model": self.job.model.id,
            "registry_key": self.job.registry_key or self.job.topology,
        }
        return {"job_id": record.get("job_id"), "cell": cell, "cell_id": record.get("cell_id"),
                "conformant": record.get("conformant"), "code_version": record.get("code_version")}

    def init_arguments(self) -> dict[str, Any]:
        """What ``wandb.init`` receives (without settings/mode); public so it can be checked."""
        from optimizers.protocol.grid import cells

        identity = self._identity()
        job_id = identity["job_id"] or f"{self.job.method}-{self.job.seed}"
        cell = identity["cell"]
        config = dict(self.resolved_config) or _job_config_dict(self.job)
        config["job"] = {k: v for k, v in identity.items() if k != "cell"} | {"cell": cell}
        tracker = self.job.tracker
        return {
            "project": tracker.project,
            "entity": tracker.entity,
            "group": cell_label(cell),
            "job_type": self.job.method,
            "id": job_id,
            "name": job_id,
            "resume": "allow",
            "config": config,
            "tags": [f"method:{self.job.method}", f"topology:{cell.get('registry_key') or self.job.topology}",
                     f"model:{cells.model_key(self.job.model.id)}", f"seed:{self.job.seed}"],
            "dir": os.environ.get("WANDB_DIR") or str(self.folder),
        }

    def _start(self) -> Any:
        if self._wandb is None:
            import wandb

            self._wandb = wandb
        wandb = self._wandb
        self.folder.mkdir(parents=True, exist_ok=True)
        arguments = self.init_arguments()
        settings = dict(init_timeout=self.init_timeout_s, silent=True, console="off")
        try:
            run = wandb.init(mode=self.mode, settings=wandb.Settings(**settings), reinit="finish_previous",
                             **arguments)
        except Exception as exc:  # noqa: BLE001 - wandb raises CommError, UsageError, TimeoutError, ...
            if self.mode != "online":
                raise
            notice(f"W&B online init failed ({type(exc).__name__}); logging offline instead (wandb sync later)")
            self.mode = "offline"
            run = wandb.init(mode="offline", settings=wandb.Settings(**settings), reinit="finish_previous",
                             **arguments)
        # Every panel's x axis is the charged-rollout count, so a resumed run (which restarts W&B's
        # own step counter) continues the same curves.
        run.define_metric("budget/charged")
        run.define_metric("*", step_metric="budget/charged")
        return run

    def _safely(self, what: str, action: Callable[[Any], None]) -> None:
        if self._dead or self._finished:
            return
        try:
            if self.run is None:
                self.run = self._start()
            action(self.run)
        except Exception as exc:  # noqa: BLE001 - tracking must never fail the job
            self._dead = True
            notice(f"W&B {what} failed ({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); "
                   "W&B tracking is off for this job, the JSONL journals are complete")
            run, self.run = self.run, None
            if run is not None:
                try:
                    run.finish(exit_code=1)
                except Exception:  # noqa: BLE001
                    pass

    # ---------------------------------------------------------------- increments

    def _new_usage(self) -> dict[str, Any]:
        """Task-model tokens/calls of every attempt journaled since the last log (retries included)."""
        tokens = self._running.tokens
        for record in self._attempts.new_records():
            self._running.attempts += 1
            for key in TOKEN_KEYS:
                tokens[key] += int((record.get("usage") or {}).get(key, 0) or 0)
        reflection = self._running.reflection
        for record in self._reflections.new_records():
            reflection["calls"] += 1
            for key in ("prompt_tokens", "completion_tokens"):
                reflection[key] += int((record.get("usage") or {}).get(key, 0) or 0)
        return {"usage/task/attempts": self._running.attempts,
                **{f"usage/task/{key}": value for key, value in tokens.items()},
                **{f"usage/reflection/{key}": value for key, value in reflection.items()}}

    def _log_curve_point(self, run: Any, point: Mapping[str, Any]) -> None:
        from optimizers.protocol.report.data import curve_score

        score = curve_score(point)
        if score is None:
            return
        run.log({"budget/charged": int(point.get("charged_rollouts", 0)), "curve/incumbent_score": score,
                 "curve/staleness": int(point.get("staleness", 0))})

    # ---------------------------------------------------------------- final records

    def _final_records(self, run: Any) -> None:
        wandb = self._wandb
        for point in self._curve.new_records():
            self._log_curve_point(run, point)
        curve = _read_jsonl(self.folder / "optimization" / "learning_curve.jsonl")
        if curve:
            columns = ["charged_rollouts", "incumbent_score", "incumbent_candidate_id", "staleness", "reason"]
            run.log({"tables/learning_curve": wandb.Table(
                columns=columns, data=[[row.get(c) for c in columns] for row in curve])})
        candidates = _read_jsonl(self.folder / "optimization" / "candidates.jsonl")
        selection = read_json_object(self.folder / "selection.json") or {}
        deployed = (selection.get("deployed_candidate") or {}).get("id")
        if candidates:
            rows = []
            for record in candidates:
                for component, text in sorted((record.get("components") or {}).items()):
                    rows.append([record.get("id"), record.get("parent"), component, text,
                                 record.get("id") == deployed])
            run.log({"tables/candidates": wandb.Table(
                columns=["candidate_id", "parent", "component", "text", "deployed"], data=rows)})
        from optimizers.protocol.report.tracking_job import log_job_story

        log_job_story(run, wandb, self.folder)  # candidate steps, deployed-vs-seed diff, test verdicts
        summary = self._final_summary(selection)
        for key, value in summary.items():
            run.summary[key] = value
        if selection.get("deployed_candidate"):
            self._log_deployed_artifact(run, selection)

    def _final_summary(self, selection: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        optimization = read_json_object(self.folder / "optimization.json") or {}
        if optimization:
            out.update(_flat("usage", optimization.get("usage") or {}, {}))
            # Judge/probe calls (COST_SCHEMA): uncharged/<purpose>/<calls|prompt_tokens|completion_tokens>.
            out.update({key: value for key, value in _flat("uncharged", optimization.get("uncharged_calls") or {},
                                                            {}).items() if not key.endswith("/failed")})
            out.update(_flat("budget", {k: v for k, v in (optimization.get("budget") or {}).items()
                                        if isinstance(v, (int, float))}, {}))
            out["optimization/elapsed_seconds"] = optimization.get("elapsed_seconds")
            out["optimization/status"] = optimization.get("status")
            out["optimization/stop_reason"] = optimization.get("stop_reason")
        if selection:
            for key in ("selected_candidate", "fallback_reason", "baseline_validation_score",
                        "incumbent_validation_score", "validation_delta"):
                out[f"selection/{key}"] = selection.get(key)
            out["selection/deployed_validation_score"] = deployed_prompts_score(selection)
        test = read_json_object(self.folder / "test.json") or {}
        for key in ("baseline_mean", "deployed_mean", "delta_pp", "valid_for_aggregation"):
            if key in test:
                out[f"test/{key}"] = test[key]
        return {k: v for k, v in out.items() if v is not None}

    def _log_deployed_artifact(self, run: Any, selection: Mapping[str, Any]) -> None:
        from optimizers.journal import write_text_atomic

        candidate = selection["deployed_candidate"]
        folder = self.folder / WANDB_SUBDIR / "deployed" / str(candidate.get("id", "candidate"))
        folder.mkdir(parents=True, exist_ok=True)
        write_text_atomic(folder / "candidate.json", json.dumps(candidate, indent=2, sort_keys=True) + "\n")
        for component, text in (candidate.get("components") or {}).items():
            write_text_atomic(folder / (component.replace("/", "__") + ".md"), str(text))
        artifact = self._wandb.Artifact(
            f"deployed-prompts-{run.id}", type="prompts",
            description=f"prompts deployed by job {run.id} ({selection.get('selected_candidate')})",
            metadata={"selected_candidate": selection.get("selected_candidate"),
                      "fallback_reason": selection.get("fallback_reason"),
                      "candidate_id": candidate.get("id")},
        )
        # immutable: the artifact references the files in the job folder instead of copying them
        # to wandb's staging area in the home directory, so `wandb sync` works from the job folder.
        artifact.add_dir(str(folder), policy="immutable")
        run.log_artifact(artifact)


def _job_config_dict(job: JobConfig) -> dict[str, Any]:
    from dataclasses import asdict

    return json.loads(json.dumps(asdict(job), default=str))


# --------------------------------------------------------------------------- factory


def _wandb_tracker(job: JobConfig, resolved: Mapping[str, Any] | None) -> WandbTracker | None:
    mode, message = resolve_mode(job.tracker.mode)
    if message:
        notice(message)
    if mode == "disabled":
        return None
    try:
        import wandb  # noqa: F401 - only to know it is there
    except ImportError:
        notice("tracker=wandb but wandb is not installed; only the JSONL journals are written")
        return None
    return WandbTracker(job, resolved, mode=mode)


# tracker kind -> factory of the extra tracker (None: the engine's JSONL journals only)
TRACKERS: dict[str, Callable[[JobConfig, Mapping[str, Any] | None], Any]] = {
    "jsonl": lambda job, resolved: None,
    "wandb": _wandb_tracker,
}


def make_tracker(job: JobConfig, resolved_config: Mapping[str, Any] | None = None) -> WandbTracker | None:
    """The tracker to run next to the engine's JSONL one (``JobRuntime(tracker=...)``), or None.

    The caller must call ``finish(status)`` on it when ``run_job`` returns or raises.
    """
    factory = TRACKERS.get(job.tracker.kind)
    if factory is None:
        raise TrackingError(f"unknown tracker {job.tracker.kind!r}; expected one of {', '.join(TRACKERS)}")
    return factory(job, resolved_config)


# --------------------------------------------------------------------------- reading offline runs


@dataclass(frozen=True, slots=True)
class OfflineRun:
    """What one offline W&B run recorded, read back from its ``.wandb`` transaction log."""

    path: Path
    run: Mapping[str, Any]  # id, display_name, project, run_group, job_type, tags, config ...
    config: Mapping[str, Any]
    summary: Mapping[str, Any]
    history: tuple[Mapping[str, Any], ...]
    artifacts: tuple[Mapping[str, Any], ...]
    exit_code: int | None

    def table(self, key: str) -> dict[str, Any]:
        """A logged ``wandb.Table`` (columns/data) by its summary key, from the run's media files."""
        return json.loads(self.media_text(key))

    def media_text(self, key: str) -> str:
        """The file behind a logged media value (a table's JSON, an ``wandb.Html`` page) by its summary key."""
        entry = self.summary.get(key)
        # the transaction log flattens nested summary values into dotted keys
        media = entry.get("path") if isinstance(entry, Mapping) else self.summary.get(f"{key}.path")
        if not media:
            raise KeyError(f"no media {key!r} in the run's summary")
        return (self.path / "files" / str(media)).read_text(encoding="utf-8")


def offline_run_dirs(root: Path) -> list[Path]:
    """Every ``offline-run-*`` folder under ``root`` (job folders, sweep roots), sorted."""
    return sorted(p for p in Path(root).rglob("offline-run-*") if p.is_dir() and any(p.glob("*.wandb")))


def read_offline_run(path: Path, *, timeout_s: float = 60.0) -> OfflineRun:
    """Decode an offline run with ``wandb leet inspect --json`` (wandb 0.31 has no Python reader)."""
    import subprocess

    path = Path(path)
    command = [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise TrackingError(f"cannot read {path}: {' '.join(done.stderr.split())[:300]}")
    run: dict[str, Any] = {}
    config: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    history: list[Mapping[str, Any]] = []
    artifacts: list[Mapping[str, Any]] = []
    exit_code = None
    for line in done.stdout.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        kind = record.get("type")
        body = record.get(kind) if isinstance(kind, str) else None
        if not isinstance(body, dict):
            continue
        if kind == "run":
            run.update(body)
            config.update((body.get("config") or {}).get("update") or {})
        elif kind == "config":
            config.update(body.get("update") or {})
        elif kind == "summary":
            summary.update(body.get("update") or {})
        elif kind == "history":
            history.append(body.get("item") or {})
        elif kind == "artifact":
            artifacts.append(body)
        elif kind == "exit":
            exit_code = body.get("exit_code", 0)
    config.pop("_wandb", None)
    return OfflineRun(path, run, config, summary, tuple(history), tuple(artifacts), exit_code)
