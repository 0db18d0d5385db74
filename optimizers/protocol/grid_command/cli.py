"""The grid command (``python -m optimizers.protocol.grid``, the top room: it reads every room
below it and nothing imports it): list the LCB grid, show what a runs folder holds, print
the sweep commands that run it.

    python -m optimizers.protocol.grid --list            # one cell per line, then the counts
    python -m optimizers.protocol.grid --status runs/    # done / failed / running / requeued / queued / missing
    python -m optimizers.protocol.grid --commands        # the six Hydra sweeps that make the grid
    python -m optimizers.protocol.grid --check           # compose + pre-flight every sweep job, no model
    python -m optimizers.protocol.grid --plan [experiment=NAME] [--json]  # cost and MDE, no model call

The grid is defined in ``optimizers.protocol.grid.cells``; the sweeps are ``conf/experiment/lcb_grid*.yaml``
(Hydra's basic sweeper takes cartesian products and the grid is a union of tables, so there is one
sweep per table; together they are exactly the grid, which a test checks). Run them all with::

    for e in lcb_grid lcb_grid_single lcb_grid_communication lcb_grid_team_size lcb_grid_llama \\
             lcb_grid_llama_single; do
        python -m optimizers.protocol.run experiment=$e hydra/launcher=joblib hydra.launcher.n_jobs=4 \\
            task_endpoints=[http://host:8000/v1] reflection.endpoints=[http://host:8200/v1]
    done

Jobs already finished return their saved result at once, so a re-launch runs only what is missing.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optimizers.protocol.aggregate.summary import RESULT_SCHEMA, OneLineParser
from optimizers.protocol.grid import cells
from optimizers.protocol.grid_command.plan import reference_experiment_files
from optimizers.protocol.grid_command.reruns import rerun_lines
from optimizers.protocol.grid_command.sweep_state import (
    SlurmState,
    SubmittedJob,
    scheduler_states,
    status_from_scheduler,
    submitted_jobs,
)
from optimizers.protocol.run.app import to_overrides
from optimizers.protocol.run.hydra_config import job_config
from optimizers.protocol.run.preflight import MethodNotLoadable, PreflightError, preflight

EXPERIMENTS_DIR = cells.CONF_DIR / "experiment"
GRID_EXPERIMENT_PREFIX = "lcb_grid"
STATUSES = ("done", "failed", "running", "requeued", "queued", "missing")


# --------------------------------------------------------------------------- --list


def list_lines() -> Iterator[str]:
    yield "\t".join(("method", "registry_key", "model", "seeds", "tables"))
    for cell in cells.grid():
        yield "\t".join((cell.method, cell.registry_key, cell.model, ",".join(map(str, cells.GRID_SEEDS)),
                         ",".join(cell.tables)))
    counts = cells.grid_counts()
    yield ""
    yield f"configurations\t{counts['configurations']}"
    yield f"jobs\t{counts['jobs']}"
    yield f"runtime_conditions\t{counts['conditions']}"
    for name in ("per_model", "per_method", "per_table"):
        yield f"{name}\t" + " ".join(f"{k}={v}" for k, v in counts[name].items())


# --------------------------------------------------------------------------- --status


@dataclass(frozen=True, slots=True)
class JobStatus:
    status: str  # one of STATUSES
    method: str
    registry_key: str
    model: str
    seed: int | str
    path: Path
    detail: str = ""


def job_status(path: Path) -> tuple[str, str]:
    """(status, detail) of one job folder."""
    from optimizers.journal import SealError, read_sealed

    if not path.is_dir():
        return "missing", ""
    result = path / "result.json"
    if result.is_file():
        try:
            data = read_sealed(result)
        except (SealError, OSError) as exc:
            return "failed", f"result.json unreadable: {exc}"
        if data.get("schema") != RESULT_SCHEMA:
            return "failed", f"result.json has schema {data.get('schema')!r}"
        if data.get("status") != "completed":
            return "failed", f"result status {data.get('status')}"
        if not (data.get("test") or {}).get("valid_for_aggregation", True):
            return "done", "test data not valid for aggregation (unusable test rollouts)"
        return "done", ""
    if _locked(path / ".lock"):
        return "running", "job folder locked by a running job"
    return "failed", "no result.json (interrupted or failed; re-run to resume)"


def _locked(lock: Path) -> bool:
    """True while a job process holds the folder's lock (the engine's flock)."""
    if not lock.is_file():
        return False
    fd = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def grid_status(runs_root: Path, *, scheduler: bool = True) -> list[JobStatus]:
    """Every grid job, then every other job of a submitted sweep (``allow_any_cell`` jobs); the
    folder decides what is done, SLURM (when it knows the job) what is queued, running, requeued or
    failed before that (optimizers/protocol/grid_command/sweep_state.py)."""
    submitted = {job.out.resolve(): job for job in submitted_jobs(runs_root) if job.out is not None}
    states = scheduler_states(job.slurm_job_id for job in submitted.values()) if scheduler else {}
    rows = []
    for cell, seed in cells.grid_jobs():
        path = cell.job_dir(runs_root, seed)
        status, detail = _combined(path, submitted.pop(path.resolve(), None), states)
        rows.append(JobStatus(status, cell.method, cell.registry_key, cell.model, seed, path, detail))
    for path, job in submitted.items():
        status, detail = _combined(path, job, states)
        rows.append(JobStatus(status, job.method, job.registry_key, job.model, job.seed, path, detail))
    return rows


def _combined(path: Path, job: SubmittedJob | None, states: dict[str, SlurmState]) -> tuple[str, str]:
    status, detail = job_status(path)
    if status == "done" or job is None:
        return status, detail
    state = states.get(job.slurm_job_id)
    from_scheduler = status_from_scheduler(job, state)
    if from_scheduler is not None:
        return from_scheduler
    if state is not None and state.state == "COMPLETED":  # the job ended without a result
        return "failed", f"slurm {job.slurm_job_id} COMPLETED without result.json (see its submitit log)"
    return status, detail


def status_lines(statuses: Sequence[JobStatus]) -> Iterator[str]:
    yield "\t".join(("status", "method", "registry_key", "model", "seed", "path", "detail"))
    for s in statuses:
        yield "\t".join((s.status, s.method, s.registry_key, s.model, str(s.seed), str(s.path), s.detail))
    counts = Counter(s.status for s in statuses)
    yield ""
    yield "\t".join(f"{name}={counts.get(name, 0)}" for name in STATUSES) + f"\ttotal={len(statuses)}"


# --------------------------------------------------------------------------- --commands


def experiment_files() -> list[Path]:
    """The reference grid's sweeps (other designs, e.g. lcb_grid_powered, are planned, not listed)."""
    return reference_experiment_files()


def sweep_params(path: Path) -> dict[str, list[str]]:
    """An experiment file's ``hydra.sweeper.params``, each value split into its choices."""
    import yaml

    data: Any = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    params = (((data.get("hydra") or {}).get("sweeper") or {}).get("params")) or {}
    return {str(k): [v.strip() for v in str(value).split(",")] for k, value in params.items()}


def sweep_jobs(path: Path) -> Iterator[tuple[str, cells.Condition, int]]:
    """The (method, condition, seed) jobs one experiment file's cartesian sweep launches."""
    return cells.jobs_of_sweep(sweep_params(path))


def sweep_choices(path: Path) -> Iterator[dict[str, str]]:
    """Every override combination of one experiment file's cartesian sweep."""
    import itertools

    params = sweep_params(path)
    keys = list(params)
    for values in itertools.product(*(params[k] for k in keys)):
        yield dict(zip(keys, values))


# --------------------------------------------------------------------------- --check


@dataclass(frozen=True, slots=True)
class CheckFailure:
    experiment: str
    overrides: str
    reason: str
    method: str
    unloadable_method: bool = False


def check_grid(paths: Sequence[Path] | None = None) -> tuple[int, list[CheckFailure]]:
    """Compose every job of every ``lcb_grid*`` sweep as the app would and run its pre-flight
    checks (no model is called). Returns (jobs checked, failures)."""
    import dataclasses

    from hydra import compose, initialize_config_dir

    checked, failures = 0, []
    with initialize_config_dir(config_dir=str(cells.CONF_DIR), version_base="1.3"):
        for path in paths if paths is not None else experiment_files():
            by_seedless: dict[tuple[tuple[str, str], ...], list[int]] = {}
            for choice in sweep_choices(path):
                seed = int(choice.pop("seed", "0"))
                by_seedless.setdefault(tuple(sorted(choice.items())), []).append(seed)
            for items, seeds in by_seedless.items():
                choice = dict(items)
                label = " ".join(f"{k}={v}" for k, v in items)
                checked += len(seeds)
                method = choice.get("method", "?")
                try:
                    overrides = to_overrides([f"experiment={path.stem}", *(f"{k}={v}" for k, v in items),
                                              f"seed={seeds[0]}"])
                    base = job_config(compose(config_name="config", overrides=overrides))
                except Exception as exc:  # noqa: BLE001 - ours (UsageError, CellError, ConfigError) or Hydra's
                    # A method without conf/method/<name>.yaml is one this build does not have yet.
                    missing = not (cells.CONF_DIR / "method" / f"{method}.yaml").is_file()
                    failures.append(CheckFailure(path.stem, label, _line(exc), method, missing))
                    continue
                for seed in seeds:
                    job = dataclasses.replace(base, seed=seed,
                                              out=cells.job_dir("runs", base.method, cells.condition_of(base), seed))
                    try:
                        preflight(job)
                    except MethodNotLoadable as exc:
                        failures.append(CheckFailure(path.stem, f"{label} seed={seed}", str(exc), method, True))
                        break
                    except PreflightError as exc:
                        failures.append(CheckFailure(path.stem, f"{label} seed={seed}", str(exc), method))
    return checked, failures


def _line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


def check_lines(checked: int, failures: Sequence[CheckFailure]) -> Iterator[str]:
    """One line per failing job, one per method that cannot be loaded, then the counts."""
    other = [f for f in failures if not f.unloadable_method]
    for failure in other:
        yield "\t".join(("fail", failure.experiment, failure.overrides, failure.reason))
    by_method: dict[str, list[CheckFailure]] = {}
    for failure in failures:
        if failure.unloadable_method:
            by_method.setdefault(failure.method, []).append(failure)
    unloadable = sorted(by_method)
    for method in unloadable:
        rows = by_method[method]
        yield "\t".join(("unloadable", method, f"{len(rows)} sweep entries", rows[0].reason))
    yield ""
    yield f"jobs\t{checked}\tfailed\t{len(other)}\tunloadable_methods\t{','.join(unloadable) or '-'}"
    if unloadable:
        yield f"methods not loadable in this build (their jobs cannot start yet): {', '.join(unloadable)}"


def command_lines() -> Iterator[str]:
    for path in experiment_files():
        count = sum(1 for _ in sweep_jobs(path))
        yield (f"python -m optimizers.protocol.run experiment={path.stem}  "
               f"# {count} jobs; add hydra/launcher=joblib hydra.launcher.n_jobs=N to run them in parallel")


# --------------------------------------------------------------------------- CLI


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="python -m optimizers.protocol.grid",
                           description="The LCB experiment grid: cells, job status, sweep commands.")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--list", action="store_true", help="print every grid cell and the counts")
    mode.add_argument("--status", type=Path, metavar="RUNS_ROOT",
                      help="print done / failed / running / requeued / queued / missing for every grid job "
                           "under RUNS_ROOT and every job of a sweep submitted there (SLURM's state when it "
                           "knows the job)")
    mode.add_argument("--commands", action="store_true", help="print the Hydra sweeps that run the grid")
    mode.add_argument("--check", action="store_true",
                      help="compose every job of every lcb_grid* sweep and run its pre-flight checks "
                           "(no model call); exit 1 if any job could not start")
    mode.add_argument("--plan", action="store_true",
                      help="per sweep, before any model call: jobs, rollouts, calls and tokens per phase, "
                           "endpoint-hours, and the MDE at 80%% power (overrides: experiment=NAME, budget=N, "
                           "test=NAME, test.KEY=V)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="--plan only: what to plan")
    plan = parser.add_argument_group("--plan")
    plan.add_argument("--json", action="store_true", help="one JSON object per experiment")
    plan.add_argument("--profiles", type=Path, metavar="FILE",
                      help="token profiles measured by python -m optimizers.protocol.run.calibrate "
                           "(default: the documented default profile)")
    plan.add_argument("--tokens-per-second", type=float, default=2000.0,
                      help="generated tokens per second one endpoint sustains (default 2000)")
    plan.add_argument("--pass-rate", type=float, help="assumed pass@1 of the seed prompts (default 0.4)")
    plan.add_argument("--discordance", type=float,
                      help="assumed share of paired rolls where the arms differ (default 0.2)")
    plan.add_argument("--icc", type=float, help="assumed correlation of two paired rolls of a problem (default 0.5)")
    plan.add_argument("--from-runs", type=Path, metavar="RUNS_ROOT",
                      help="take pass rate, discordance and icc from the finished jobs there")
    plan.add_argument("--designs", metavar="PxSxK,...",
                      help="instead of the plan: MDE and endpoint-hours of each design (problems x seeds x "
                           "samples) for the planned experiments, e.g. 50x3x1,600x3x10")
    plan.add_argument("--mde-threshold", type=float, default=5.0,
                      help="warn above this MDE (pp) and print the smallest design that reaches it (default 5)")
    return parser


def plan_main(args: Any) -> int:
    """``--plan``: the plan lines (or JSON objects) on stdout; one error line and 2 on bad input."""
    from optimizers.protocol.aggregate import power
    from optimizers.protocol.grid.profiles import ProfileError
    from optimizers.protocol.grid_command import plan

    if args.tokens_per_second <= 0:
        sys.stderr.write("error: --tokens-per-second must be > 0\n")
        return 2
    try:
        measured = plan.observed(args.from_runs) if args.from_runs is not None else None
        if args.from_runs is not None and measured is None:
            sys.stderr.write(f"warning: no usable finished job under {args.from_runs}; using the assumptions\n")
        base = measured or power.Assumptions()
        assumptions = power.Assumptions(
            args.pass_rate if args.pass_rate is not None else base.pass_rate,
            args.discordance if args.discordance is not None else base.discordance,
            args.icc if args.icc is not None else base.icc,
            base.source if all(v is None for v in (args.pass_rate, args.discordance, args.icc)) else "assumed")
        if args.designs:
            lines = list(plan.design_rows(args.overrides, plan.parse_designs(args.designs),
                                          profiles_path=args.profiles, tokens_per_second=args.tokens_per_second,
                                          assumptions=assumptions))
            sys.stdout.write("\n".join(lines) + "\n")
            return 0
        results = plan.plans(args.overrides, profiles_path=args.profiles, tokens_per_second=args.tokens_per_second,
                             assumptions=assumptions, threshold_pp=args.mde_threshold)
    except (plan.PlanError, ProfileError, ValueError) as exc:
        sys.stderr.write(f"error: {' '.join(str(exc).split())}\n")
        return 2
    for line in plan.plan_output(results, as_json=args.json):
        sys.stdout.write(line + "\n")
    for result in results:
        if "warning" in result and not args.json:
            sys.stderr.write(f"warning: {result['experiment']}: {result['warning']}\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.overrides and not args.plan:
        parser.error("KEY=VALUE overrides go with --plan")
    if args.plan:
        return plan_main(args)
    if args.check:
        checked, failures = check_grid()
        for line in check_lines(checked, failures):
            sys.stdout.write(line + "\n")
        return 1 if failures else 0
    if args.list:
        lines: Iterator[str] = list_lines()
    elif args.commands:
        lines = command_lines()
    else:
        if not args.status.is_dir():
            sys.stderr.write(f"error: {args.status} is not a folder\n")
            return 2
        lines = itertools.chain(status_lines(grid_status(args.status)), rerun_lines(args.status))
    for line in lines:
        sys.stdout.write(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
