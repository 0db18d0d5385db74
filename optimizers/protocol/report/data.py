"""What the comparison report draws, read from job folders (no plotting here).

Each job folder gives its sealed ``result.json`` (through ``optimizers.protocol.aggregate``, so the
report and the aggregate table agree on which results count), its learning curve, its token and
wall-time costs, and the per-problem records of its test evaluations (for pass@1 by difficulty).
Cells are grouped and compared with the aggregate's own functions; a cell that misses seeds is
still shown, marked partial, from the seeds it has. A folder with no conformant result (local
runs, small budgets) is drawn from its non-conformant results, which the report then marks on
every panel; once conformant results exist they alone are drawn unless asked otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optimizers.journal import read_json_object
from optimizers.protocol.aggregate import summary as aggregate
from optimizers.protocol.grid import cells

UNKNOWN_DIFFICULTY = "unknown"
DIFFICULTIES = ("easy", "medium", "hard", UNKNOWN_DIFFICULTY)


@dataclass(frozen=True, slots=True)
class JobView:
    """One finished job as the report sees it."""

    folder: Path
    result: aggregate.JobResult
    curve: tuple[tuple[int, float], ...]  # (charged rollouts, committed incumbent's score)
    optimize_tokens: int  # task + reflection + judge/probe model tokens spent while optimizing
    optimize_seconds: float | None
    difficulty: Mapping[str, str]  # test problem id -> easy/medium/hard/unknown
    uncharged_calls: int = 0  # judge/probe calls that are not charged rollouts (result.json)
    uncharged_tokens: int = 0

    @property
    def method(self) -> str:
        return self.result.method

    @property
    def runtime(self) -> str:
        return self.result.registry_key

    @property
    def model(self) -> str:
        return self.result.model_key

    @property
    def fell_back(self) -> bool:
        return self.result.selected_candidate != "incumbent"


@dataclass(frozen=True, slots=True)
class CellView:
    """A grid cell (method x runtime x model) over the seeds it has."""

    method: str
    runtime: str
    model: str
    jobs: tuple[JobView, ...]
    comparison: aggregate.Comparison | None  # None when no seed is usable
    complete: bool  # every grid seed present and usable, same problems
    problems: tuple[str, ...]

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(sorted(j.result.seed for j in self.jobs))


@dataclass(slots=True)
class ReportData:
    jobs: list[JobView] = field(default_factory=list)
    cells: list[CellView] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    nonconformant_jobs: int = 0  # drawn jobs that ran off the grid protocol
    matched: list[dict[str, Any]] = field(default_factory=list)  # aggregate.matched rows
    transfer: dict[str, Any] = field(default_factory=dict)  # aggregate.transfer matrices
    designs: list[dict[str, Any]] = field(default_factory=list)  # aggregate.designs rows (clustered, cutoff)

    @property
    def nonconformant_label(self) -> str | None:
        """The warning every panel carries when non-conformant jobs are drawn, else None."""
        if not self.nonconformant_jobs:
            return None
        share = "all" if self.nonconformant_jobs == len(self.jobs) else f"{self.nonconformant_jobs} of {len(self.jobs)}"
        return (f"NON-CONFORMANT: {share} job(s) ran off the grid protocol (cell, budget or data); "
                "not comparable with grid results")

    @property
    def methods(self) -> list[str]:
        return _ordered({c.method for c in self.cells}, cells.GRID_METHODS)

    @property
    def runtimes(self) -> list[str]:
        return sorted({c.runtime for c in self.cells}, key=_runtime_order)

    @property
    def models(self) -> list[str]:
        return sorted({c.model for c in self.cells})


def _ordered(values: set[str], preferred: Sequence[str]) -> list[str]:
    return sorted(values, key=lambda v: (preferred.index(v) if v in preferred else len(preferred), v))


def _runtime_order(key: str) -> tuple[Any, ...]:
    base = key.split("_", 1)[0]
    rank = cells.TOPOLOGIES.index(base) if base in cells.TOPOLOGIES else len(cells.TOPOLOGIES)
    return (rank, key)


# --------------------------------------------------------------------------- one job


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return rows
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a torn last line of a killed job
        if isinstance(row, dict):
            rows.append(row)
    return rows


def curve_score(row: Mapping[str, Any]) -> float | None:
    """A learning-curve row's score: the committed incumbent's (schema 2) or the best-seen mean
    of older journals (schema 1)."""
    score = row.get("incumbent_score", row.get("best_score"))
    return None if score is None else float(score)


def learning_curve(folder: Path) -> tuple[tuple[int, float], ...]:
    """(charged rollouts, committed incumbent's score) points; the method's final 'stop' row last."""
    points: dict[int, float] = {}
    for row in _read_jsonl(folder / "optimization" / "learning_curve.jsonl"):
        score = curve_score(row)
        if score is None or row.get("reason") not in ("grid", "stop", "initial_state"):
            continue
        points[int(row.get("charged_rollouts", 0))] = float(score)
    return tuple(sorted(points.items()))


def _tokens(usage: Any) -> int:
    if not isinstance(usage, Mapping):
        return 0
    return int(usage.get("prompt_tokens", 0) or 0) + int(usage.get("completion_tokens", 0) or 0)


def evaluation_dir(folder: Path) -> Path:
    """The job's evaluation cache: ``evaluation_cache`` of its config.yaml, else ``<job>/evaluations``."""
    config = folder / "config.yaml"
    if config.is_file():
        try:
            import yaml

            data = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
        except Exception:  # noqa: BLE001 - a broken config.yaml only loses the shared-cache lookup
            data = {}
        shared = data.get("evaluation_cache") if isinstance(data, dict) else None
        if shared:
            path = Path(str(shared))
            return path if path.is_absolute() or path.exists() else folder / path
    return folder / "evaluations"


def _builtin_difficulties() -> dict[str, str]:
    try:
        from lcb.data import load_problems

        return {p.id: str(p.difficulty) for p in load_problems("builtin").problems}
    except Exception:  # noqa: BLE001 - without the built-in set every problem is 'unknown'
        return {}


_BUILTIN: dict[str, str] | None = None


def test_difficulties(folder: Path, test: Mapping[str, Any], data_source: str | None) -> dict[str, str]:
    """Difficulty of each test problem: from the test records when the engine stored it there,
    else from the built-in problem set for ``data=builtin`` jobs, else 'unknown'."""
    global _BUILTIN
    ids = [str(i) for i in test.get("example_ids") or ()]
    found: dict[str, str] = {}
    listed = test.get("difficulties")
    if isinstance(listed, list) and len(listed) == len(ids):
        found.update({i: str(d) for i, d in zip(ids, listed) if d})
    evaluation_id = test.get("deployed_evaluation_id")
    if evaluation_id and len(found) < len(ids):
        evaluation = read_json_object(evaluation_dir(folder) / f"{evaluation_id}.json") or {}
        for record in evaluation.get("records") or ():
            difficulty = record.get("difficulty") or (record.get("details") or {}).get("difficulty")
            if difficulty and record.get("problem_id"):
                found.setdefault(str(record["problem_id"]), str(difficulty))
    if len(found) < len(ids) and data_source == "builtin":
        if _BUILTIN is None:
            _BUILTIN = _builtin_difficulties()
        for problem_id in ids:
            if problem_id in _BUILTIN:
                found.setdefault(problem_id, _BUILTIN[problem_id])
    return {i: found.get(i, UNKNOWN_DIFFICULTY).lower() for i in ids}


def job_view(result: aggregate.JobResult) -> JobView:
    folder = result.path.parent
    raw = read_json_object(result.path) or {}
    optimization = raw.get("optimization") or {}
    usage = optimization.get("usage") or {}
    test = read_json_object(folder / "test.json") or {}
    job = read_json_object(folder / "job.json") or {}
    data_source = (job.get("spec") or {}).get("data")
    elapsed = optimization.get("elapsed_seconds")
    uncharged = [c for c in (raw.get("uncharged_calls") or {}).values() if isinstance(c, Mapping)]
    uncharged_tokens = sum(_tokens(c) for c in uncharged)
    return JobView(
        folder=folder,
        result=result,
        curve=learning_curve(folder),
        optimize_tokens=_tokens(usage.get("task")) + _tokens(usage.get("reflection")) + uncharged_tokens,
        optimize_seconds=None if elapsed is None else float(elapsed),
        uncharged_calls=sum(int(c.get("calls", 0) or 0) for c in uncharged),
        uncharged_tokens=uncharged_tokens,
        difficulty=test_difficulties(folder, test, data_source),
    )


# --------------------------------------------------------------------------- all jobs


def load(
    roots: Sequence[Path], *, include_nonconformant: bool | None = None, replicates: int = 2000,
    seeds: Sequence[int] = cells.GRID_SEEDS, deployments: int = 1000,
) -> ReportData:
    """Every result under ``roots`` -> jobs and cells (never raises for a bad or partial job).

    ``include_nonconformant``: True draws every result, False the conformant ones only, None (the
    default) the conformant ones when there are any, else the non-conformant ones.
    """
    data = ReportData()
    readable: list[aggregate.JobResult] = []
    for path in aggregate.find_results(roots):
        try:
            readable.append(aggregate.read_result(path))
        except aggregate.ResultError as exc:
            data.skipped.append(str(exc))
    if include_nonconformant is None:
        include_nonconformant = not any(r.conformant for r in readable)
    results: list[aggregate.JobResult] = []
    for result in readable:
        if not result.conformant and not include_nonconformant:
            data.skipped.append(f"{result.path}: non-conformant (use --include-nonconformant)")
            continue
        results.append(result)
    data.nonconformant_jobs = sum(1 for r in results if not r.conformant)
    views = {r.path: job_view(r) for r in results}
    data.jobs = list(views.values())
    groups = aggregate.group_cells(results, seeds)
    stats: dict[Any, aggregate.Comparison] = {}
    for group in groups:
        label = group.label()
        comparison = None
        if group.by_seed and "the seeds were tested on different problems" not in group.problems:
            comparison = aggregate.cell_comparison(group, replicates)
            stats[group.key] = comparison
        data.cells.append(CellView(
            method=label["method"], runtime=label["runtime"], model=label["model"],
            jobs=tuple(views[j.path] for j in group.jobs), comparison=comparison,
            complete=not group.problems, problems=tuple(group.problems),
        ))
        if group.problems:
            data.notes.append(f"{label['method']} on {label['runtime']}/{label['model']}: "
                              + "; ".join(group.problems))
    from optimizers.protocol.aggregate import matched, transfer

    # Partial cells take part from the seeds they have, as everywhere in the report.
    data.matched = matched.matched_rows(groups, stats, aggregate.compare, replicates=replicates,
                                        deployments=deployments)
    data.transfer = transfer.transfer_matrix(groups, stats)
    data.notes.extend(data.transfer["notes"])
    from optimizers.protocol.aggregate import designs

    complete = {g.key: stats[g.key] for g in groups if g.key in stats and not g.problems}
    data.designs = designs.design_rows([g for g in groups if g.key in complete], complete,
                                       lambda row: (row["task"], row["model"]), replicates)
    return data
