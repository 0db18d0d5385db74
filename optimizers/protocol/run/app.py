"""``python -m optimizers.protocol.run``: run one job of the LCB grid (or a sweep of them with -m).

Two command-line forms give the same job::

    python -m optimizers.protocol.run --method identity --dataset lcb --topology decentralized \\
        --model qwen --seed 0 --budget 4 --data builtin --allow-any-cell
    python -m optimizers.protocol.run method=identity topology=decentralized model=qwen seed=0 \\
        budget=4 data=builtin allow_any_cell=true

The flag form is rewritten into Hydra overrides before Hydra parses the command line (``--help``,
``--cfg job``, ``-m``/``--multirun`` and Hydra's other options pass through). ``--topology`` /
``topology=`` also take registry keys (``centralized_r8``, ``decentralized_communications_
structured_soft``), and ``--model`` / ``model=`` a full model id. A sweep::

    python -m optimizers.protocol.run -m method=identity topology=single,decentralized seed=0,1,2 \\
        data=builtin budget=4 allow_any_cell=true [hydra/launcher=joblib hydra.launcher.n_jobs=2]

puts each job in ``<runs_root>/<method>/lcb/<registry key>/<model>/<seed>``; the whole grid is
``python -m optimizers.protocol.grid --commands``. Finished jobs return their saved result.

Exit status: 0 done; 2 for a configuration that cannot run (one ``error: ...`` line on stderr,
nothing written) or an engine ``JobError``; 1 for a program failure. Each job prints the engine's
one JSON line on stdout; logs go to stderr.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import hydra

from optimizers.protocol.grid import cells

CONF_DIR = Path(__file__).resolve().parents[3] / "conf"
EXIT_USAGE = 2
log = logging.getLogger("protocol")


class UsageError(ValueError):
    """A command line that cannot be turned into a config; the message is one line."""


# --------------------------------------------------------------------------- argv shim


@dataclass(frozen=True, slots=True)
class Flag:
    """How one mission-style flag becomes an override. ``kind``: value, bool, list."""

    target: str
    kind: str = "value"


FLAGS: dict[str, Flag] = {
    "--method": Flag("method"),
    "--dataset": Flag("dataset"),
    "--topology": Flag("topology"),
    "--model": Flag("model"),
    "--seed": Flag("seed"),
    "--out": Flag("out"),
    "--runs-root": Flag("runs_root"),
    "--team-size": Flag("topology.team_size"),
    "--rounds": Flag("topology.rounds"),
    "--max-turns": Flag("topology.max_turns"),
    "--communication": Flag("communication"),
    "--budget": Flag("budget"),
    "--phase": Flag("phase"),
    "--allow-any-cell": Flag("allow_any_cell", "bool"),
    "--task-endpoints": Flag("task_endpoints", "list"),
    "--evaluation-cache": Flag("evaluation_cache"),
    "--data": Flag("data"),
    "--release": Flag("release"),
    "--splits": Flag("splits"),
    "--quiet": Flag("quiet", "bool"),
    "--verbose": Flag("verbose", "bool"),
    "--log-level": Flag("log_level"),
    "--concurrency": Flag("concurrency"),
    "--reflection-model": Flag("reflection.id"),
    "--reflection-endpoints": Flag("reflection.endpoints", "list"),
    "--tracker": Flag("tracker"),
    "--experiment": Flag("experiment"),
    "--force-resume": Flag("force_resume", "bool"),
    "--deploy-from": Flag("deploy_from"),
    "--selection": Flag("selection"),
    "--selection-size": Flag("selection.size"),
}

# Hydra's own options (passed through with whatever value follows them).
HYDRA_OPTIONS = frozenset({
    "--multirun", "-m", "--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name",
    "-cn", "--config-dir", "-cd", "--info", "-i", "--resolve", "--run", "-r", "--help", "-h",
    "--hydra-help", "--version", "--shell-completion", "-sc", "--experimental-rerun",
})

# Config groups whose options are files under conf/ (checked before Hydra composes anything).
GROUPS = ("method", "topology", "communication", "model", "tracker", "selection", "experiment")
_PLAIN_VALUE = re.compile(r"^[\w.\-/:@+~%]*$")


def _value(text: str) -> str:
    """An override value: as typed (so ``--seed 0,1,2`` still sweeps), quoted when it has spaces."""
    if _PLAIN_VALUE.match(text) or ("," in text and " " not in text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _flag_override(flag: Flag, value: str | None) -> str:
    if flag.kind == "bool":
        return f"{flag.target}={'true' if value is None else value.lower()}"
    assert value is not None
    if flag.kind == "list":
        items = [item.strip() for item in value.split(",") if item.strip()]
        return f"{flag.target}=[{','.join(_value(item) for item in items)}]"
    return f"{flag.target}={_value(value)}"


def flags_to_overrides(argv: Sequence[str]) -> list[str]:
    """Rewrite ``--method tavo`` / ``--method=tavo`` into ``method=tavo``; keep everything else."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        name, eq, inline = token.partition("=")
        flag = FLAGS.get(name) if token.startswith("--") else None
        if flag is None:
            if token.startswith("-") and name not in HYDRA_OPTIONS and not _is_negative_number(token):
                raise UsageError(f"unknown option {name}; see --help for the flags")
            out.append(token)
            i += 1
            continue
        if flag.kind == "bool":
            out.append(_flag_override(flag, inline if eq else None))
            i += 1
            continue
        if eq:
            value, i = inline, i + 1
        elif i + 1 < len(argv):
            value, i = argv[i + 1], i + 2
        else:
            raise UsageError(f"{name} needs a value")
        out.append(_flag_override(flag, value))
    return out


def _is_negative_number(token: str) -> bool:
    return re.fullmatch(r"-\d+(\.\d+)?", token) is not None


def _split_override(text: str) -> tuple[str, str] | None:
    if "=" not in text or text.startswith(("-", "+", "~")):
        return None
    key, _, value = text.partition("=")
    return key, value


def _last(overrides: Sequence[str], key: str) -> tuple[int, str] | None:
    found = None
    for index, text in enumerate(overrides):
        parts = _split_override(text)
        if parts and parts[0] == key:
            found = (index, parts[1])
    return found


def _is_sweep(value: str) -> bool:
    return "," in value or "(" in value


def resolve_registry_key(overrides: list[str]) -> list[str]:
    """``topology=centralized_r8`` -> ``topology=centralized topology.team_size=8`` (and format).

    A team size or format given next to a key that says otherwise is an error.
    """
    found = _last(overrides, "topology")
    if found is None:
        return overrides
    index, value = found
    if _is_sweep(value):
        composite = [v for v in re.split(r"[,()]", value) if v and cells.is_registry_key(v)
                     and v not in cells.TOPOLOGIES]
        if composite:
            raise UsageError(
                f"registry keys cannot be swept ({', '.join(composite)}); sweep topology=..., "
                "topology.team_size=... and communication=... instead"
            )
        return overrides
    if value in cells.TOPOLOGIES or not cells.is_registry_key(value):
        return overrides
    parts = cells.parse_registry_key(value)
    implied = [f"topology={parts.topology}"]
    for key, wanted in (("topology.team_size", parts.team_size), ("communication", parts.communication)):
        if wanted is None:
            continue
        given = _last(overrides, key)
        if given is not None and given[1].strip("'\"") != str(wanted):
            raise UsageError(f"topology {value} means {key.split('.')[-1]} {wanted}, not {given[1]}")
        implied.append(f"{key}={wanted}")
    return overrides[:index] + implied + overrides[index + 1:]


def _group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def resolve_model_id(overrides: list[str]) -> list[str]:
    """``model=org/name`` (not an alias) -> the alias with that id, else ``model=custom model.id=...``;
    ``reflection.id=<alias>`` -> that alias's id."""
    result = list(overrides)
    found = _last(result, "model")
    if found is not None and not _is_sweep(found[1]):
        index, value = found
        bare = value.strip("'\"")
        if bare not in _group_options("model"):
            alias = next((a for a, known in cells.MODEL_IDS.items() if known == bare), None)
            if alias is not None:
                result[index] = f"model={alias}"
            elif "/" in bare:
                result[index:index + 1] = ["model=custom", f"model.id={_value(bare)}"]
            else:
                raise UsageError(
                    f"unknown model {bare!r}; use an alias ({', '.join(cells.MODEL_IDS)}), a full id "
                    "such as org/name, or model=custom model.id=<id>"
                )
    found = _last(result, "reflection.id")
    if found is not None and found[1] in cells.MODEL_IDS:
        result[found[0]] = f"reflection.id={_value(cells.MODEL_IDS[found[1]])}"
    return result


def check_group_choices(overrides: Iterable[str]) -> None:
    """Unknown group options get a one-line error naming the valid ones (before Hydra runs)."""
    for text in overrides:
        parts = _split_override(text)
        if parts is None or parts[0] not in GROUPS:
            continue
        group, value = parts
        if "(" in value:  # a sweep function such as glob(*): Hydra expands it
            continue
        options = _group_options(group)
        for choice in (v.strip().strip("'\"") for v in value.split(",")):
            if choice in ("", "null") and group == "experiment":
                continue
            if choice not in options:
                raise UsageError(f"unknown {group} {choice!r}; available: {', '.join(options)}")


def check_topology_knobs(overrides: Sequence[str]) -> None:
    """``--rounds`` on a team without rounds (etc.): say so instead of Hydra's "use +key" advice."""
    import yaml

    found = _last(overrides, "topology")
    if found is None or _is_sweep(found[1]):
        return
    path = CONF_DIR / "topology" / f"{found[1]}.yaml"
    if not path.is_file():
        return
    knobs = set(yaml.safe_load(path.read_text(encoding="utf-8")) or {}) - {"name"}
    for text in overrides:
        parts = _split_override(text)
        if parts and parts[0].startswith("topology.") and parts[0].split(".", 1)[1] not in knobs:
            knob = parts[0].split(".", 1)[1]
            raise UsageError(f"{knob} does not apply to the {found[1]} team (its settings: {', '.join(sorted(knobs))})")


# Old spellings still accepted for one release: key -> the config group that replaced it.
DEPRECATED_KEYS: dict[str, str] = {"selection.mode": "selection"}


def replace_deprecated(overrides: Sequence[str]) -> list[str]:
    """``selection.mode=heldout`` -> ``selection=heldout``, with a one-line notice on stderr."""
    result = []
    for text in overrides:
        parts = _split_override(text)
        group = DEPRECATED_KEYS.get(parts[0]) if parts else None
        if group is None:
            result.append(text)
            continue
        assert parts is not None
        result.append(f"{group}={parts[1]}")
        sys.stderr.write(f"note: {text} is deprecated and will stop working; write {group}={parts[1]} "
                         f"({group} is a config group: {', '.join(_group_options(group))})\n")
    return result


def to_overrides(argv: Sequence[str]) -> list[str]:
    overrides = replace_deprecated(flags_to_overrides(argv))
    overrides = resolve_registry_key(overrides)
    overrides = resolve_model_id(overrides)
    check_group_choices(overrides)
    check_topology_knobs(overrides)
    return overrides


# --------------------------------------------------------------------------- errors


def fail(message: str) -> NoReturn:
    """One line on stderr and exit 2: the configuration cannot run."""
    sys.stderr.write(f"error: {one_line(message)}\n")
    sys.stderr.flush()
    raise SystemExit(EXIT_USAGE)


def one_line(message: str) -> str:
    lines: list[str] = []
    for line in message.splitlines():
        line = line.strip()
        if line.startswith(("Config search path", "Set the environment variable HYDRA_FULL_ERROR")):
            break
        if line:
            lines.append(line)
    return " ".join(lines) or "failed"


class _Outcome:
    """Failures counted across the jobs of this process (the basic launcher runs them here)."""

    failed = 0


def _install_error_reporter() -> None:
    """Make Hydra's composition errors one ``error:`` line with exit 2 instead of Hydra's report.

    Hydra funnels every error through ``hydra._internal.utils.run_and_report`` (pinned
    hydra-core 1.3.8). Configuration errors (Hydra's, OmegaConf's, ours) become one line; anything
    else keeps Hydra's report (program failures deserve their traceback). With HYDRA_FULL_ERROR set,
    Hydra's own behaviour is kept entirely. The same hook sees a sweep's job returns, so a sweep with
    failed jobs exits non-zero.
    """
    import hydra._internal.utils as hydra_utils

    original: Callable[[Callable[[], Any]], Any] = hydra_utils.run_and_report
    if getattr(original, "_lcb_grid", False):
        return

    def run_and_report(func: Callable[[], Any]) -> Any:
        try:
            result = func()
        except Exception as exc:  # noqa: BLE001 - sorted below; the rest goes to Hydra's report
            if os.environ.get("HYDRA_FULL_ERROR") == "1" or not _is_config_error(exc):
                return original(_reraise(exc))
            fail(str(exc))
        _count_failed_jobs(result)
        return result

    run_and_report._lcb_grid = True  # type: ignore[attr-defined]
    hydra_utils.run_and_report = run_and_report


def _is_config_error(exc: BaseException) -> bool:
    """Hydra's composition and override errors, OmegaConf's value errors, and ours."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from optimizers.protocol.run.hydra_config import ConfigError

    return isinstance(exc, (HydraException, OmegaConfBaseException, ConfigError, UsageError, cells.CellError))


def _reraise(exc: BaseException) -> Callable[[], Any]:
    def again() -> Any:
        raise exc

    return again


def _count_failed_jobs(result: Any) -> None:
    """A sweep returns batches of JobReturn; count jobs whose task reported an error."""
    if not isinstance(result, list):
        return
    from hydra.core.utils import JobReturn, JobStatus

    for batch in result:
        for job in batch if isinstance(batch, (list, tuple)) else ():
            if isinstance(job, JobReturn) and job.status == JobStatus.COMPLETED:
                value = job.return_value
                if isinstance(value, dict) and value.get("status") == "error":
                    _Outcome.failed += 1


# --------------------------------------------------------------------------- the job


def _hydra_context() -> tuple[bool, str]:
    """(multirun?, a label naming this job among the sweep's)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    label = f"job #{hc.job.num} ({' '.join(hc.overrides.task)})" if multirun else ""
    return multirun, label


def _refuse(message: str, multirun: bool, label: str) -> dict[str, Any]:
    if not multirun:
        fail(message)
    sys.stderr.write(f"error: {label}: {one_line(message)}\n")
    return {"status": "error", "error": one_line(message)}


def _write_config(cfg: Any, out: Path) -> None:
    """The resolved config, beside the job's files (only once the engine made the folder)."""
    from omegaconf import OmegaConf

    from optimizers.journal import write_text_atomic

    if not out.is_dir():
        return
    text = "# resolved config of this job (python -m optimizers.protocol.run)\n"
    text += OmegaConf.to_yaml(cfg, resolve=True)
    target = out / "config.yaml"
    if not target.is_file() or target.read_text(encoding="utf-8") != text:
        write_text_atomic(target, text)


def run_task(cfg: Any) -> dict[str, Any]:
    """Hydra's task function: config -> checks -> the engine -> one JSON line on stdout."""
    from optimizers.protocol.run.hydra_config import ConfigError, check_job, job_config

    multirun, label = _hydra_context()
    try:
        job = job_config(cfg)
        if multirun and cfg.get("out") is not None:
            raise ConfigError("out= names one job folder; a sweep places its jobs under runs_root=")
        # The job's grid cell and conformance, once: the checks and the engine reuse this record.
        standing = cells.conformance(job)
        if multirun and not standing.in_grid and not job.allow_any_cell:
            why = standing.why_not_in_grid
            sys.stderr.write(f"skip: {label}: {why} (allow_any_cell=true runs it)\n")
            return {"status": "skipped", "reason": why}
        check_job(job, standing)
    except ConfigError as exc:
        return _refuse(str(exc), multirun, label)

    logging.getLogger().setLevel(job.log_level)
    from optimizers.protocol.run.chatter import quiet_third_parties

    quiet_third_parties(job.verbose)  # before W&B or LangChain is imported
    from optimizers.journal import read_json_object
    from optimizers.protocol.job.errors import JobError
    from optimizers.protocol.run.hydra_config import to_container
    from optimizers.protocol.job.engine import JobRuntime, summary_line
    from optimizers.protocol.job.test_only import run_job
    from optimizers.protocol.report.tracking import deployed_prompts_score, make_tracker

    finished = job.phase == "all" and (job.out / "result.json").is_file()
    # The engine probes every model endpoint before it makes the job folder, so an unreachable
    # server leaves nothing behind; a finished job needs neither a server nor a tracker.
    tracker = None if finished else make_tracker(job, to_container(cfg))
    status = "failed"
    try:
        _write_config(cfg, job.out)  # a resumed job's folder exists already
        from optimizers.protocol.run.endpoint_pool import hydra_job_num

        result = run_job(job, JobRuntime(tracker=tracker, standing=standing, route_salt=hydra_job_num()))
        status = "completed"
    except JobError as exc:
        return _refuse(str(exc), multirun, label)
    finally:
        if tracker is not None:
            tracker.finish(status)
    _write_config(cfg, job.out)
    line = summary_line(result)
    sys.stdout.write(json.dumps(line, sort_keys=True) + "\n")
    sys.stdout.flush()
    if not multirun and job.phase == "all":
        point_to_report(job.out)
    selection = read_json_object(job.out / "selection.json")
    return {"status": "done", "out": str(job.out),
            "objective": deployed_prompts_score(selection) if selection else None}


def _interpreter() -> str:
    """How the user runs our Python: the venv's path relative to here (``.venv/bin/python``)."""
    try:
        return str(Path(sys.executable).relative_to(Path.cwd()))
    except ValueError:
        return "python"


def point_to_report(out: Path) -> None:
    """The last lines of a finished job: where its files are and the one command for its report."""
    import shlex

    folder = shlex.quote(str(out))
    report = shlex.quote(str(out / "report"))
    sys.stderr.write(f"job folder: {folder} (result.json, journals)\n"
                     f"its report: {_interpreter()} -m optimizers.protocol.report {folder} --out {report}\n")
    sys.stderr.flush()


def _finished_jobs(root: str) -> str:
    """``${lcb_finished_jobs:ROOT}``: the finished jobs under ROOT as one sweep value list (the
    lcb_transfer experiment sweeps ``deploy_from`` over them)."""
    from optimizers.protocol.job.transfer import finished_sources
    from optimizers.protocol.run.hydra_config import ConfigError

    folders = finished_sources(Path(root))
    if not folders:
        raise ConfigError(f"no finished job to transfer under {root}")
    return ",".join(str(folder) for folder in folders)


def _register_resolvers() -> None:
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("lcb_finished_jobs"):
        OmegaConf.register_new_resolver("lcb_finished_jobs", _finished_jobs)


# conf/hydra/launcher/ files that replace the published submitit plugin's configs of the same name
# (their schemas: hydra_plugins/lcb_grid_submitit/config.py).
OWN_LAUNCHER_CONFIGS = ("submitit_slurm", "submitit_local")


def _own_launcher_configs() -> None:
    """conf/hydra/launcher/submitit_*.yaml are the only definitions of those launchers: drop the
    published plugin's same-named schemas once Hydra has scanned its plugins (else Hydra merges
    them into our files and prints a deprecation warning three times)."""
    from hydra.core.config_store import ConfigStore
    from hydra.core.plugins import Plugins

    Plugins.instance()  # the scan: every plugin module registers its configs now
    launchers = ConfigStore.instance().repo.get("hydra", {}).get("launcher", {})
    for name in OWN_LAUNCHER_CONFIGS:
        launchers.pop(f"{name}.yaml", None)


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def _app(cfg: Any) -> dict[str, Any]:
    return run_task(cfg)


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        overrides = to_overrides(args)
    except (UsageError, cells.CellError) as exc:
        fail(str(exc))
    sys.argv = [sys.argv[0], *overrides]
    _install_error_reporter()
    _register_resolvers()
    _own_launcher_configs()
    try:
        _app()
    except KeyboardInterrupt:
        # Journals are appended atomically as work finishes, so nothing done is lost.
        sys.stderr.write("\nerror: interrupted; run the same command again to resume the job\n")
        raise SystemExit(130) from None
    if _Outcome.failed:
        sys.stderr.write(f"error: {_Outcome.failed} job(s) of the sweep failed (see the error lines above)\n")
        raise SystemExit(EXIT_USAGE)


if __name__ == "__main__":
    main()
