"""``grid --plan [experiment=NAME ...] [test.samples=N ...]``: cost and power of sweeps, no model call.

Reads the experiment files (``conf/experiment``): their sweep (methods × conditions × seeds), their
budget and their test design (``defaults: [override /test: ...]`` and a ``test:`` mapping), with
the command line's overrides on top; counts and MDE come from ``optimizers.protocol.aggregate.plan``.
Without ``experiment=``, the reference grid's sweeps are planned together (one Holm family per
model across them, as the aggregate tests them).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from optimizers.protocol.aggregate import plan as planning
from optimizers.protocol.aggregate import power
from optimizers.protocol.grid import cells
from optimizers.protocol.grid.config import GRID_BUDGET
from optimizers.protocol.grid.profiles import load_profiles
from optimizers.protocol.grid.config import JobConfig
from optimizers.protocol.run.hydra_config import ConfigError, parse_test_design, sampled_decoding

EXPERIMENTS_DIR = cells.CONF_DIR / "experiment"
PLAN_KEYS = ("experiment", "budget", "test")
# lcb_grid* experiments that are other designs of the same question, not sweeps of the reference grid
# (so --commands, --check and "the sweeps are exactly the grid" leave them out).
DESIGN_EXPERIMENTS = frozenset({"lcb_grid_powered"})


class PlanError(ValueError):
    """A plan that cannot be made (one line)."""


def _yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        return yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise PlanError(f"cannot read {path}: {exc}") from None


def parse_overrides(overrides: Sequence[str]) -> tuple[list[str], dict[str, Any]]:
    """``experiment=a,b budget=N test=window test.samples=10`` -> (experiments, other overrides)."""
    experiments: list[str] = []
    rest: dict[str, Any] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or key.split(".")[0] not in PLAN_KEYS:
            raise PlanError(f"unknown plan override {item!r}; use experiment=NAME, budget=N, test=NAME or test.KEY=V")
        if key == "experiment":
            experiments.extend(v.strip() for v in value.split(",") if v.strip())
        else:
            import yaml

            rest[key] = yaml.safe_load(value) if value else None  # null, numbers, dates as Hydra reads them
    return experiments, rest


def _test_mapping(data: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The experiment's test group (its default override, then its ``test:`` keys, then ours)."""
    group = "lcb50"
    for entry in data.get("defaults") or []:
        if isinstance(entry, Mapping):
            for key, value in entry.items():
                if str(key).strip() in ("override /test", "/test", "test"):
                    group = str(value)
    group = str(overrides.get("test", group))
    path = cells.CONF_DIR / "test" / f"{group}.yaml"
    if not path.is_file():
        raise PlanError(f"unknown test design {group!r} (no {path})")
    mapping = dict(_yaml(path))
    mapping.update(data.get("test") or {})
    for key, value in overrides.items():
        if key.startswith("test."):
            mapping[key[5:]] = value
    return mapping


def _model_cutoff(alias: str) -> str | None:
    path = cells.CONF_DIR / "model" / f"{alias}.yaml"
    return _yaml(path).get("cutoff") if path.is_file() else None


def _sweep_jobs(name: str, params: Mapping[str, Sequence[str]]) -> tuple[planning.PlannedJob, ...]:
    missing = [k for k in ("method", "topology", "seed") if k not in params]
    if missing:
        raise PlanError(f"experiment {name}: its sweep does not set {', '.join(missing)} (not a grid sweep)")
    return tuple(planning.PlannedJob(*job) for job in cells.jobs_of_sweep(params))


def load_sweep(name: str, overrides: Mapping[str, Any]) -> planning.Sweep:
    path = EXPERIMENTS_DIR / f"{name}.yaml"
    if not path.is_file():
        raise PlanError(f"unknown experiment {name!r} (no {path})")
    data = _yaml(path)
    params = (((data.get("hydra") or {}).get("sweeper") or {}).get("params")) or {}
    split = {str(k): [v.strip() for v in str(value).split(",")] for k, value in params.items()}
    jobs = _sweep_jobs(name, split)
    models = {job.condition.model for job in jobs}
    cutoff = _model_cutoff(sorted(models)[0]) if len(models) == 1 else None
    try:
        design = parse_test_design(_test_mapping(data, overrides), cutoff)
        sampled_decoding(JobConfig.__dataclass_fields__["eval_decoding"].default, design)  # samples need T > 0
    except ConfigError as exc:
        raise PlanError(f"experiment {name}: {exc}") from None
    budget = int(overrides.get("budget", data.get("budget", GRID_BUDGET)))
    if design.design == "lcb50":
        test_problems = 50
    elif design.size is not None:
        test_problems = design.size
    else:
        raise PlanError(f"experiment {name}: a window without test.size has an unknown number of problems; "
                        "set test.size=N (the plan assumes the window holds that many)")
    methods = {job.method for job in jobs}
    return planning.Sweep(name, jobs, budget, design, test_problems, val_problems=50,
                          reflecting=frozenset(methods - planning.TEST_ONLY_METHODS))


def reference_experiment_files() -> list[Path]:
    """The reference grid's sweeps: ``conf/experiment/lcb_grid*.yaml`` except other designs."""
    return sorted(p for p in EXPERIMENTS_DIR.glob("lcb_grid*.yaml") if p.stem not in DESIGN_EXPERIMENTS)


def reference_experiments() -> list[str]:
    return [path.stem for path in reference_experiment_files()]


def observed(runs: Path) -> power.Assumptions | None:
    """Pass rate, discordance and icc measured on the finished jobs under ``runs``."""
    from optimizers.protocol.aggregate import summary
    from optimizers.protocol.aggregate.designs import cell_rolls

    results = []
    for path in summary.find_results([runs]):
        try:
            results.append(summary.read_result(path))
        except summary.ResultError:
            continue
    groups = summary.group_cells([r for r in results if r.usable], seeds=())
    pairs = []
    for group in groups:
        rolls = cell_rolls(group)
        if rolls is not None:
            a, b = rolls
            pairs.append(([a[p] for p in sorted(a)], [b[p] for p in sorted(a)]))
    return power.observed_assumptions(pairs, jobs=len(results))


def plans(overrides: Sequence[str], *, profiles_path: Path | None, tokens_per_second: float,
          assumptions: power.Assumptions, threshold_pp: float) -> list[dict[str, Any]]:
    experiments, rest = parse_overrides(overrides)
    sweeps = [load_sweep(name, rest) for name in (experiments or reference_experiments())]
    profiles = load_profiles(profiles_path)
    families = planning.family_sizes(sweeps)
    return [planning.plan_sweep(sweep, profiles=profiles, families=families, assumptions=assumptions,
                                tokens_per_second=tokens_per_second, threshold_pp=threshold_pp)
            for sweep in sweeps]


def plan_output(results: Sequence[Mapping[str, Any]], *, as_json: bool) -> Iterator[str]:
    if as_json:
        for result in results:
            yield json.dumps(result, sort_keys=True)
        return
    for index, result in enumerate(results):
        if index:
            yield ""
        yield from planning.plan_lines(result)
    if len(results) > 1:
        yield ""
        yield (f"all: {sum(r['jobs'] for r in results)} jobs, {sum(r['calls'] for r in results)} calls, "
               f"{sum(r['tokens'] for r in results)} tokens, "
               f"{round(sum(r['endpoint_hours'] for r in results), 1)} endpoint-hours")


def parse_designs(text: str) -> list[tuple[int, int, int]]:
    """``50x3x1,600x3x10`` -> [(problems, seeds, samples), ...]."""
    out = []
    for item in text.split(","):
        parts = item.strip().lower().split("x")
        try:
            problems, seeds, samples = (int(p) for p in parts)
        except ValueError:
            raise PlanError(f"design {item!r} is not PROBLEMSxSEEDSxSAMPLES (e.g. 600x3x10)") from None
        out.append((problems, seeds, samples))
    return out


def design_rows(overrides: Sequence[str], designs: Sequence[tuple[int, int, int]], *, profiles_path: Path | None,
                tokens_per_second: float, assumptions: power.Assumptions) -> Iterator[str]:
    """The README's table: for each planned experiment, each design's MDE and endpoint-hours."""
    experiments, rest = parse_overrides(overrides)
    sweeps = [load_sweep(name, rest) for name in (experiments or reference_experiments())]
    profiles = load_profiles(profiles_path)
    families = planning.family_sizes(sweeps)
    yield "\t".join(("experiment", "problems", "seeds", "samples", "holm_family", "mde_pp_cell", "mde_pp",
                     "endpoint_hours"))
    for sweep in sweeps:
        tests = max([families.get(c.model, 1) for _, c in sweep.cells] or [1])
        rows = planning.design_table(
            designs, tests=tests, assumptions=assumptions,
            hours=lambda d, sweep=sweep: sum(planning.endpoint_hours(u, tokens_per_second) for u in
                                             planning.sweep_usage(planning.resized(sweep, d), profiles).values()))
        for row in rows:
            yield "\t".join(str(v) for v in (sweep.name, row["problems"], row["seeds"], row["samples"], tests,
                                              row["mde_pp_cell"], row["mde_pp"], row["endpoint_hours"]))
