"""``python -m optimizers.protocol.aggregate ROOT...``: pair seeds, compare arms, print the table.

For every grid cell (method × runtime condition) it pairs the three seeds' test results and
reports the deployed-vs-seed difference: per-seed Δpp, mean and sample std over seeds, a
seed-stratified paired bootstrap CI (95 %), an exact McNemar test per seed and Holm-adjusted
p-values within the chosen family. Beyond the reference it also compares methods with each other
on the same runtime condition (same seeds, same problems): Δpp between the two methods' deployed
scores, with the same CI and tests.

Families for Holm's correction (``--family``): ``task`` (default) — one family per task and model;
``method`` — cell tests per task, model and method, method comparisons per task, model and runtime
condition; ``none`` — one family for all cell tests and one for all method comparisons.

Only sealed, conformant ``result.json`` files are used unless ``--include-nonconformant``; skipped
files are logged on stderr. The table is tab-separated on stdout; ``--out`` writes the JSON summary.
Exit status 1 when no usable result is found.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from optimizers.protocol.grid import cells
from optimizers.protocol.aggregate import designs as test_designs
from optimizers.protocol.aggregate import matched as matched_compute
from optimizers.protocol.aggregate import stats
from optimizers.protocol.aggregate import transfer as transfer_matrix
from optimizers.protocol.aggregate import trust

log = logging.getLogger("aggregate")
SCHEMA = "lcb-grid-aggregate/v1"
RESULT_SCHEMA = "lcb-grid-result/v1"
FAMILIES = ("task", "method", "none")
CELL_FIELDS = ("method", "dataset", "topology", "team_size", "communication", "rounds", "model")


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one ``error: ...`` line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {message} (see {self.prog} --help)\n")
        raise SystemExit(2)


class ResultError(ValueError):
    """A result.json that cannot be used (unreadable, seal mismatch, wrong schema, fields missing)."""


@dataclass(frozen=True, slots=True)
class JobResult:
    """What the aggregate needs from one job's result.json."""

    path: Path
    cell: Mapping[str, Any]  # method, dataset, topology, team_size, communication, rounds, model (id)
    registry_key: str
    seed: int
    conformant: bool
    status: str
    valid: bool
    example_ids: tuple[str, ...]
    baseline: tuple[float | None, ...]
    deployed: tuple[float | None, ...]
    selected_candidate: str | None
    fallback_reason: str | None
    charged: int | None
    stop_reason: str | None
    cost: Mapping[str, Any] = field(default_factory=dict)  # optimizers.protocol.aggregate.trust.job_cost
    truncation: Mapping[str, Any] = field(default_factory=dict)  # result.json "truncation"
    optimism: Mapping[str, Any] = field(default_factory=dict)  # result.json selection.optimism
    # Mean prompt+completion tokens per test problem of each arm ({} for results without usage).
    tokens_per_problem: Mapping[str, float] = field(default_factory=dict)
    matched: Mapping[str, Any] = field(default_factory=dict)  # result.json "matched" (baseline jobs)
    # Test design (optimizers.protocol.aggregate.designs): each problem's rolls per arm (its samples;
    # one roll without samples), contest dates, the model's cutoff, the optimization's status.
    baseline_rolls: tuple[tuple[float | None, ...], ...] = ()
    deployed_rolls: tuple[tuple[float | None, ...], ...] = ()
    contest_dates: tuple[str, ...] = ()
    model_cutoff: str | None = None
    optimization_status: str = "completed"
    failure_kind: str | None = None

    @property
    def transfer_from(self) -> Mapping[str, Any]:
        """Where a transfer job's prompts were tuned ({} for every other job)."""
        return self.cell.get("transfer_from") or {}

    @property
    def method(self) -> str:
        return str(self.cell["method"])

    @property
    def selection_mode(self) -> str:
        return str((self.cell.get("selection") or {}).get("mode", "val"))

    @property
    def variant(self) -> str:
        """Non-default method knobs and selection rule, e.g. ``components=all,selection=heldout``."""
        knobs = [f"{k}={v}" for k, v in sorted((self.cell.get("method_variant") or {}).items())]
        if self.selection_mode != "val":
            knobs.append(f"selection={self.selection_mode}")
        if self.transfer_from:
            knobs.append(f"from={cells.model_key(str(self.transfer_from.get('model')))}")
        return ",".join(knobs)

    @property
    def cell_key(self) -> tuple[Any, ...]:
        # A method variant or another selection rule is another cell (never pooled seeds).
        return (*(self.cell.get(name) for name in CELL_FIELDS), self.variant)

    @property
    def condition_key(self) -> tuple[Any, ...]:
        # Methods are compared under the same selection rule (and transfer source) only.
        return (*(self.cell.get(name) for name in CELL_FIELDS if name != "method"), self.selection_mode,
                str(self.transfer_from.get("model", "")))

    @property
    def model_key(self) -> str:
        return cells.model_key(str(self.cell["model"]))

    @property
    def usable(self) -> bool:
        return (
            self.status == "completed"
            and self.valid
            and None not in self.baseline
            and None not in self.deployed
            and len(self.example_ids) == len(self.baseline) == len(self.deployed) > 0
        )


def read_result(path: Path) -> JobResult:
    """A sealed result.json -> JobResult (``ResultError`` says what is wrong)."""
    from optimizers.journal import SealError, read_sealed

    try:
        data = read_sealed(path)
    except SealError as exc:
        raise ResultError(str(exc)) from None
    except OSError as exc:
        raise ResultError(f"{path}: {exc.strerror or exc}") from None
    if data.get("schema") != RESULT_SCHEMA:
        raise ResultError(f"{path}: schema {data.get('schema')!r}, expected {RESULT_SCHEMA!r}")
    try:
        cell = data["cell"]
        test = data.get("test") or {}
        selection = data.get("selection") or {}
        optimization = data.get("optimization") or {}
        missing = [name for name in ("method", "dataset", "topology", "team_size", "communication", "model")
                   if name not in cell]
        if missing:
            raise ResultError(f"{path}: cell lacks {', '.join(missing)}")
        key = cell.get("registry_key") or cells.registry_key(
            cell["topology"], int(cell["team_size"]), cell["communication"]
        )
        return JobResult(
            path=path,
            cell=dict(cell),
            registry_key=str(key),
            seed=int(data["seed"]),
            conformant=bool(data.get("conformant")),
            status=str(data.get("status")),
            valid=bool(test.get("valid_for_aggregation")),
            example_ids=tuple(str(i) for i in test.get("example_ids") or ()),
            baseline=tuple(test.get("baseline_scores") or ()),
            deployed=tuple(test.get("deployed_scores") or ()),
            selected_candidate=selection.get("selected_candidate"),
            fallback_reason=selection.get("fallback_reason"),
            charged=(optimization.get("budget") or {}).get("charged"),
            stop_reason=optimization.get("stop_reason"),
            cost=trust.job_cost(data),
            truncation=data.get("truncation") or {},
            optimism=selection.get("optimism") or {},
            tokens_per_problem=_tokens_per_problem(path, test, data.get("test_tokens_per_problem")),
            matched=data.get("matched") or {},
            baseline_rolls=_rolls(test, "baseline"),
            deployed_rolls=_rolls(test, "deployed"),
            contest_dates=tuple(str(d) for d in test.get("contest_dates") or ()),
            model_cutoff=test.get("model_cutoff"),
            optimization_status=str(optimization.get("status") or "completed"),
            failure_kind=optimization.get("failure_kind"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, ResultError):
            raise
        raise ResultError(f"{path}: malformed result ({exc.__class__.__name__}: {exc})") from None


def _rolls(test: Mapping[str, Any], arm: str) -> tuple[tuple[float | None, ...], ...]:
    """Per problem, the arm's rolls: its samples when the job took several, else its one score."""
    samples = test.get(f"{arm}_samples")
    if isinstance(samples, list):
        return tuple(tuple(row) for row in samples)
    return tuple((score,) for score in test.get(f"{arm}_scores") or ())


def _tokens_per_problem(path: Path, test: Mapping[str, Any], stored: Any) -> dict[str, float]:
    """Per arm, mean tokens per test problem: result.json's own figure, else the job's test.json
    usage (results sealed before the figure existed)."""
    if isinstance(stored, Mapping):
        return {str(k): float(v) for k, v in stored.items() if v is not None}
    n = len(test.get("example_ids") or ())
    sibling = path.with_name("test.json")
    if not n or not sibling.is_file():
        return {}
    import json

    try:
        usage = json.loads(sibling.read_text(encoding="utf-8")).get("usage") or {}
    except (OSError, ValueError):
        return {}
    return {arm: trust.tokens(usage.get(arm)) / n for arm in ("baseline", "deployed") if usage.get(arm)}


def find_results(roots: Iterable[Path]) -> list[Path]:
    """Every result.json under the roots (a root may itself be a job folder), each once, sorted."""
    found: set[Path] = set()
    for root in roots:
        if root.is_file() and root.name == "result.json":
            found.add(root.resolve())
        elif root.is_dir():
            found.update(p.resolve() for p in root.rglob("result.json"))
    return sorted(found)


# --------------------------------------------------------------------------- statistics


@dataclass(frozen=True, slots=True)
class SeedStat:
    seed: int
    n: int
    a_mean: float
    b_mean: float
    delta_pp: float
    wins: int | None
    losses: int | None
    p_value: float | None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Comparison:
    """Arm a vs arm b on paired problems over the seeds (a = seed prompts or method A)."""

    kind: str  # "cell" (deployed vs seed) or "pair" (method B vs method A)
    label: Mapping[str, Any]
    seeds: list[SeedStat]
    mean_delta_pp: float
    std_delta_pp: float | None
    ci95_pp: tuple[float, float]
    macro_a: float
    macro_b: float
    family: tuple[Any, ...] = ()
    p_holm: dict[int, float | None] = field(default_factory=dict)

    @property
    def min_p_holm(self) -> float | None:
        values = [p for p in self.p_holm.values() if p is not None]
        return min(values) if values else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            **self.label,
            "seeds": [
                {"seed": s.seed, "n": s.n, "a_mean": s.a_mean, "b_mean": s.b_mean, "delta_pp": s.delta_pp,
                 "wins": s.wins, "losses": s.losses, "exact_mcnemar_p": s.p_value,
                 "exact_mcnemar_p_holm": self.p_holm.get(s.seed), **s.extra}
                for s in self.seeds
            ],
            "mean_delta_pp": self.mean_delta_pp,
            "std_delta_pp": self.std_delta_pp,
            "ci95_delta_pp": list(self.ci95_pp),
            "macro_a": self.macro_a,
            "macro_b": self.macro_b,
            "holm_family": list(self.family),
            "min_p_holm": self.min_p_holm,
        }


def compare(
    kind: str,
    label: Mapping[str, Any],
    pairs: Mapping[int, tuple[Sequence[float], Sequence[float]]],
    *,
    replicates: int,
    extras: Mapping[int, Mapping[str, Any]] | None = None,
) -> Comparison:
    """Paired statistics of b − a over seeds; ``pairs[seed] = (a scores, b scores)``."""
    seeds: list[SeedStat] = []
    strata: list[list[float]] = []
    for seed in sorted(pairs):
        a, b = pairs[seed]
        binary = stats.is_binary(a) and stats.is_binary(b)
        wins, losses = stats.discordant(a, b) if binary else (None, None)
        seeds.append(SeedStat(
            seed=seed, n=len(a), a_mean=stats.mean(a), b_mean=stats.mean(b), delta_pp=stats.delta_pp(a, b),
            wins=wins, losses=losses,
            p_value=stats.exact_mcnemar(wins, losses) if wins is not None and losses is not None else None,
            extra=dict((extras or {}).get(seed, {})),
        ))
        strata.append(stats.paired_differences(a, b))
    deltas = [s.delta_pp for s in seeds]
    return Comparison(
        kind=kind,
        label=dict(label),
        seeds=seeds,
        mean_delta_pp=stats.mean(deltas),
        std_delta_pp=stats.sample_std(deltas),
        ci95_pp=stats.stratified_bootstrap_ci(strata, replicates=replicates),
        macro_a=stats.mean([s.a_mean for s in seeds]),
        macro_b=stats.mean([s.b_mean for s in seeds]),
    )


def apply_holm(comparisons: Sequence[Comparison], family_of: Any) -> None:
    """Holm within each family over all (comparison, seed) McNemar p-values."""
    families: dict[tuple[Any, ...], list[tuple[Comparison, int, float]]] = defaultdict(list)
    for comparison in comparisons:
        comparison.family = family_of(comparison)
        for s in comparison.seeds:
            comparison.p_holm[s.seed] = None
            if s.p_value is not None:
                families[comparison.family].append((comparison, s.seed, s.p_value))
    for members in families.values():
        adjusted = stats.holm([p for _, _, p in members])
        for (comparison, seed, _), value in zip(members, adjusted):
            comparison.p_holm[seed] = value


def _study(label: Mapping[str, Any]) -> str:
    """Which question a comparison answers: the grid's (optimized vs seed, method vs method),
    ``matched`` (a matched-compute baseline is in it: single agent vs team) or ``transfer``
    (prompts tuned on another model). Each is its own Holm family, so running the baselines or a
    transfer sweep never changes the grid's own adjusted p-values."""
    cell = label.get("cell") or {}
    if cell.get("transfer_from"):
        return "transfer"
    methods = (cell.get("method"), label.get("method_a"), label.get("method_b"))
    return "matched" if any(m in matched_compute.MATCHED_METHODS for m in methods) else ""


def _family(kind: str, family: str, comparison: Comparison) -> tuple[Any, ...]:
    return _family_of_label(kind, family, comparison.label)


def _family_of_label(kind: str, family: str, label: Mapping[str, Any]) -> tuple[Any, ...]:
    base = (kind, label["task"], label["model"], _study(label))
    if family == "none":
        return (kind,)
    if family == "method":
        return (*base, label["method"]) if kind == "cell" else (*base, label["runtime"])
    return base


# --------------------------------------------------------------------------- grouping


@dataclass(slots=True)
class CellGroup:
    key: tuple[Any, ...]
    jobs: list[JobResult]
    problems: list[str] = field(default_factory=list)
    by_seed: dict[int, JobResult] = field(default_factory=dict)

    @property
    def first(self) -> JobResult:
        return self.jobs[0]

    def label(self) -> dict[str, Any]:
        job = self.first
        method = f"{job.method}[{job.variant}]" if job.variant else job.method
        return {"method": method, "task": job.cell["dataset"], "runtime": job.registry_key,
                "model": job.model_key, "model_id": job.cell["model"], "cell": dict(job.cell),
                "selection": job.selection_mode}

    def trust(self, mean_delta_pp: float | None) -> dict[str, Any]:
        """Cost, optimism and truncation of the cell over the jobs it has."""
        return {"cost": trust.cell_cost([j.cost for j in self.jobs], mean_delta_pp),
                "optimism": trust.cell_optimism([j.optimism for j in self.jobs]),
                "truncation": trust.cell_truncation([j.truncation for j in self.jobs])}


def group_cells(results: Sequence[JobResult], seeds: Sequence[int] = cells.GRID_SEEDS) -> list[CellGroup]:
    """One group per cell; a group is complete when each wanted seed has one usable result and
    all seeds share the same problems."""
    groups: dict[tuple[Any, ...], CellGroup] = {}
    for result in results:
        groups.setdefault(result.cell_key, CellGroup(result.cell_key, [])).jobs.append(result)
    for group in groups.values():
        counts = defaultdict(list)
        for job in group.jobs:
            counts[job.seed].append(job)
        for seed, jobs in sorted(counts.items()):
            if len(jobs) > 1:
                group.problems.append(f"seed {seed} has {len(jobs)} results ({', '.join(str(j.path) for j in jobs)})")
            elif not jobs[0].usable:
                group.problems.append(f"seed {seed}: {_why_unusable(jobs[0])}")
            else:
                group.by_seed[seed] = jobs[0]
        missing = [s for s in seeds if s not in counts]
        if missing:
            group.problems.append(f"missing seed(s) {', '.join(map(str, missing))}")
        id_sets = {tuple(sorted(job.example_ids)) for job in group.by_seed.values()}
        if len(id_sets) > 1:
            group.problems.append("the seeds were tested on different problems")
    return sorted(groups.values(), key=_group_order)


def _why_unusable(job: JobResult) -> str:
    if job.status != "completed":
        return f"status {job.status}"
    if not job.valid:
        return "test data not valid for aggregation"
    return "missing or unscored test items"


def _group_order(group: CellGroup) -> tuple[Any, ...]:
    job = group.first
    method_rank = cells.GRID_METHODS.index(job.method) if job.method in cells.GRID_METHODS else len(cells.GRID_METHODS)
    topo_rank = cells.TOPOLOGIES.index(job.cell["topology"]) if job.cell["topology"] in cells.TOPOLOGIES else 99
    return (str(job.cell["dataset"]), job.model_key, method_rank, job.method, topo_rank, job.registry_key)


def cell_comparison(group: CellGroup, replicates: int) -> Comparison:
    pairs = {seed: (list(job.baseline), list(job.deployed)) for seed, job in group.by_seed.items()}
    extras = {
        seed: {"fallback_reason": job.fallback_reason, "selected_candidate": job.selected_candidate,
               "charged_rollouts": job.charged, "stop_reason": job.stop_reason}
        for seed, job in group.by_seed.items()
    }
    return compare("cell", group.label(), pairs, replicates=replicates, extras=extras)


def method_comparisons(groups: Sequence[CellGroup], replicates: int) -> tuple[list[Comparison], list[str]]:
    """Every pair of methods on the same runtime condition whose seeds and problems match."""
    by_condition: dict[tuple[Any, ...], list[CellGroup]] = defaultdict(list)
    for group in groups:
        if not group.problems:
            by_condition[group.first.condition_key].append(group)
    comparisons: list[Comparison] = []
    notes: list[str] = []
    for members in by_condition.values():
        for first, second in itertools.combinations(members, 2):
            name_a, name_b = first.label()["method"], second.label()["method"]
            label = {**first.label(), "method": f"{name_a}|{name_b}", "method_a": name_a, "method_b": name_b}
            pairs: dict[int, tuple[list[float], list[float]]] = {}
            for seed in sorted(set(first.by_seed) & set(second.by_seed)):
                a, b = first.by_seed[seed], second.by_seed[seed]
                a_scores, b_scores = dict(zip(a.example_ids, a.deployed)), dict(zip(b.example_ids, b.deployed))
                if set(a_scores) != set(b_scores):
                    pairs = {}
                    notes.append(f"{label['method']} on {label['runtime']}/{label['model']}: seed {seed} "
                                 "was tested on different problems; not compared")
                    break
                ids = sorted(a_scores)
                pairs[seed] = ([a_scores[i] for i in ids], [b_scores[i] for i in ids])
            if pairs and set(pairs) == set(first.by_seed) == set(second.by_seed):
                comparisons.append(compare("pair", label, pairs, replicates=replicates))
    return comparisons, notes


# --------------------------------------------------------------------------- output


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _fmt_pp(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}"


def _fmt_p(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def render_table(groups: Sequence[CellGroup], cell_stats: Mapping[tuple[Any, ...], Comparison],
                 pairs: Sequence[Comparison]) -> str:
    lines = ["\t".join(("method", "task", "runtime", "model", "seeds", "base", "deployed", "delta_pp",
                        "std_pp", "ci95_pp", "fallbacks", "min_p_holm"))]
    for group in groups:
        label = group.label()
        head = [label["method"], label["task"], label["runtime"], label["model"]]
        comparison = cell_stats.get(group.key)
        if comparison is None:
            lines.append("\t".join([*head, ",".join(map(str, sorted(group.by_seed))) or "-",
                                    "incomplete: " + "; ".join(group.problems)]))
            continue
        fallbacks = sum(1 for s in comparison.seeds if s.extra.get("selected_candidate") != "incumbent")
        lines.append("\t".join([
            *head, ",".join(str(s.seed) for s in comparison.seeds), _fmt(comparison.macro_a),
            _fmt(comparison.macro_b), _fmt_pp(comparison.mean_delta_pp), _fmt(comparison.std_delta_pp, 2),
            f"[{comparison.ci95_pp[0]:+.2f}, {comparison.ci95_pp[1]:+.2f}]",
            f"{fallbacks}/{len(comparison.seeds)}", _fmt_p(comparison.min_p_holm),
        ]))
        for s in comparison.seeds:
            lines.append("\t".join([
                "", f"seed={s.seed}", f"base={_fmt(s.a_mean)}", f"deployed={_fmt(s.b_mean)}",
                f"delta={_fmt_pp(s.delta_pp)}", f"n={s.n}", f"fallback={s.extra.get('fallback_reason') or '-'}",
                f"p={_fmt_p(s.p_value)}", f"p_holm={_fmt_p(comparison.p_holm.get(s.seed))}",
            ]))
    if pairs:
        lines.append("")
        lines.append("\t".join(("method_a", "method_b", "task", "runtime", "model", "seeds", "a", "b",
                                "delta_pp", "std_pp", "ci95_pp", "min_p_holm")))
        for c in pairs:
            label = c.label
            lines.append("\t".join([
                label["method_a"], label["method_b"], label["task"], label["runtime"], label["model"],
                ",".join(str(s.seed) for s in c.seeds), _fmt(c.macro_a), _fmt(c.macro_b),
                _fmt_pp(c.mean_delta_pp), _fmt(c.std_delta_pp, 2),
                f"[{c.ci95_pp[0]:+.2f}, {c.ci95_pp[1]:+.2f}]", _fmt_p(c.min_p_holm),
            ]))
    return "\n".join(lines) + "\n"


def _fmt_int(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _fmt_rate(value: float | None) -> str:
    return "-" if value is None else f"{100.0 * value:.1f}%"


def render_trust_table(groups: Sequence[CellGroup], cell_stats: Mapping[tuple[Any, ...], Comparison]) -> str:
    """Per cell: what the search cost, how optimistic its incumbent looked, how often replies were cut."""
    lines = ["\t".join(("method", "runtime", "model", "selection", "charged", "task_tokens", "reflection_tokens",
                        "uncharged_calls", "wall_s", "dpp_per_M_reflection_tokens", "optimism_gap_pp",
                        "excess_optimism_pp", "truncated_task", "truncated_reflection"))]
    for group in groups:
        label = group.label()
        comparison = cell_stats.get(group.key)
        info = group.trust(comparison.mean_delta_pp if comparison else None)
        cost, optimism, cut = info["cost"], info["optimism"], info["truncation"]
        lines.append("\t".join([
            label["method"], label["runtime"], label["model"], label["selection"],
            _fmt_int(cost["mean_charged_rollouts"]), _fmt_int(cost["mean_task_tokens"]),
            _fmt_int(cost["mean_reflection_tokens"]), _fmt_int(cost["mean_uncharged_calls"]),
            _fmt(cost["mean_wall_s"], 1), _fmt_pp(cost["delta_pp_per_million_reflection_tokens"]),
            _fmt_pp(optimism["mean_optimism_gap_pp"]), _fmt_pp(optimism["mean_excess_optimism_pp"]),
            _fmt_rate(cut["task"]["rate"]), _fmt_rate(cut["reflection"]["rate"]),
        ]))
    return "\n".join(lines) + "\n"


def render_power(power: Sequence[Mapping[str, Any]]) -> str:
    """One line per Holm family: the minimum detectable effect of the grid's design."""
    lines = []
    for row in power:
        mde = row["mde_pp"]
        shown = f"{mde:.1f}" if mde is not None else f"none up to {100 * row['discordance']:.1f}"
        lines.append(
            f"power\tfamily={row['family']}\tcells={row['cells']}\tseeds={row['seeds']}\tproblems={row['problems']}"
            f"\tholm_tests={row['tests']}\talpha={row['alpha']}\tpower={row['power']}"
            f"\tdiscordance={row['discordance']:.3f} ({row['discordance_source']})\tmde_pp={shown}"
            f"\tmde_pp_without_correction={_fmt(row['mde_pp_one_cell'], 1)}")
    return "\n".join(lines) + ("\n" if lines else "")


def design_power(groups: Sequence[CellGroup], cell_stats: Mapping[tuple[Any, ...], Comparison],
                 family: str) -> list[dict[str, Any]]:
    """MDE at 80 % power for the grid's design, with the data's problems per seed and discordance."""
    sizes = [s.n for c in cell_stats.values() for s in c.seeds] or [len(j.example_ids) for g in groups for j in g.jobs]
    problems = max(set(sizes), key=sizes.count) if sizes else 50
    models = {g.first.model_key for g in groups}
    return trust.power_table(family, problems=problems, seeds=len(cells.GRID_SEEDS),
                             discordance=trust.observed_discordance(cell_stats.values()), models=models)


@dataclass(slots=True)
class Aggregate:
    groups: list[CellGroup]
    cells: dict[tuple[Any, ...], Comparison]
    pairs: list[Comparison]
    skipped: list[str]
    notes: list[str]
    power: list[dict[str, Any]] = field(default_factory=list)
    matched: list[dict[str, Any]] = field(default_factory=list)  # team vs matched single agent rows
    transfer: dict[str, Any] = field(default_factory=dict)  # the transfer matrices
    designs: list[dict[str, Any]] = field(default_factory=list)  # clustered tests, ITT/PP, cutoff split

    def summary(self, *, family: str, replicates: int, include_nonconformant: bool) -> dict[str, Any]:
        cells_out = []
        for group in self.groups:
            comparison = self.cells.get(group.key)
            entry: dict[str, Any] = {"status": "complete" if comparison else "incomplete",
                                     **{k: v for k, v in group.label().items()},
                                     "jobs": [str(j.path) for j in group.jobs]}
            if comparison is None:
                entry["problems"] = list(group.problems)
            else:
                entry.update(comparison.as_dict())
                entry["fallbacks"] = [s.seed for s in comparison.seeds
                                      if s.extra.get("selected_candidate") != "incumbent"]
            entry.update(group.trust(comparison.mean_delta_pp if comparison else None))
            cells_out.append(entry)
        return {
            "schema": SCHEMA,
            "family": family,
            "bootstrap_replicates": replicates,
            "include_nonconformant": include_nonconformant,
            "cells": cells_out,
            "method_comparisons": [c.as_dict() for c in self.pairs],
            "skipped": list(self.skipped),
            "notes": list(self.notes),
            "power": list(self.power),
            "matched": list(self.matched),
            "transfer": dict(self.transfer),
            "designs": list(self.designs),
        }


def aggregate(
    roots: Sequence[Path],
    *,
    replicates: int = 10000,
    family: str = "task",
    include_nonconformant: bool = False,
    deployments: int = matched_compute.DEFAULT_DEPLOYMENTS,
    seeds: Sequence[int] = cells.GRID_SEEDS,
) -> Aggregate:
    results: list[JobResult] = []
    skipped: list[str] = []
    for path in find_results(roots):
        try:
            result = read_result(path)
        except ResultError as exc:
            skipped.append(str(exc))
            continue
        if not result.conformant and not include_nonconformant:
            skipped.append(f"{path}: non-conformant (use --include-nonconformant)")
            continue
        results.append(result)
    groups = group_cells(results, seeds)
    cell_stats = {g.key: cell_comparison(g, replicates) for g in groups if not g.problems}
    apply_holm(list(cell_stats.values()), lambda c: _family("cell", family, c))
    pairs, notes = method_comparisons(groups, replicates)
    apply_holm(pairs, lambda c: _family("pair", family, c))
    power = design_power(groups, cell_stats, family) if groups else []
    matched = matched_compute.matched_rows(groups, cell_stats, compare, replicates=replicates,
                                           deployments=deployments)
    transfer = transfer_matrix.transfer_matrix(groups, cell_stats)
    notes.extend(transfer["notes"])
    designs = test_designs.design_rows(groups, cell_stats, lambda row: _family_of_label("cell", family, row),
                                       replicates)
    return Aggregate(groups, cell_stats, pairs, skipped, notes, power, matched, transfer, designs)


def build_parser() -> OneLineParser:
    parser = OneLineParser(
        prog="python -m optimizers.protocol.aggregate",
        description="Pair the seeds of each grid cell and compare deployed vs seed prompts "
        "(and methods with each other) on the test problems.",
    )
    parser.add_argument("roots", nargs="+", type=Path, metavar="ROOT",
                        help="job folders or folders searched recursively for result.json")
    parser.add_argument("--out", type=Path, help="write the JSON summary here")
    parser.add_argument("--bootstrap", type=int, default=10000, help="bootstrap replicates (>= 100)")
    parser.add_argument("--family", choices=FAMILIES, default="task", help="Holm family (default: task)")
    parser.add_argument("--include-nonconformant", action="store_true",
                        help="also use results that are off-grid or not run under the protocol")
    parser.add_argument("--seeds", default=",".join(map(str, cells.GRID_SEEDS)),
                        help="the seeds a complete cell has (default: the grid's, "
                             f"{','.join(map(str, cells.GRID_SEEDS))}); e.g. 0,1 for a small run")
    parser.add_argument("--deployments", type=int, default=matched_compute.DEFAULT_DEPLOYMENTS,
                        help="problems the deployed team is run on, to amortise the optimization's tokens "
                             f"over (default {matched_compute.DEFAULT_DEPLOYMENTS})")
    parser.add_argument("--log-level", default="INFO", help="stderr log level")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.bootstrap < 100:
        parser.error(f"--bootstrap must be >= 100, not {args.bootstrap}")
    if args.deployments < 1:
        parser.error(f"--deployments must be >= 1, not {args.deployments}")
    try:
        seeds = tuple(int(s) for s in str(args.seeds).split(",") if s.strip())
    except ValueError:
        parser.error(f"--seeds must be comma-separated integers, not {args.seeds!r}")
    if not seeds:
        parser.error("--seeds needs at least one seed")
    level = logging.getLevelName(str(args.log_level).upper())
    if not isinstance(level, int):
        parser.error(f"unknown log level {args.log_level!r}")
    logging.basicConfig(level=level, format="[aggregate] %(message)s", stream=sys.stderr)
    missing = [str(r) for r in args.roots if not r.exists()]
    for root in missing:
        log.warning("%s does not exist", root)
    result = aggregate(args.roots, replicates=args.bootstrap, family=args.family,
                       include_nonconformant=args.include_nonconformant, deployments=args.deployments,
                       seeds=seeds)
    for reason in result.skipped:
        log.warning("skipped %s", reason)
    for note in result.notes:
        log.warning("%s", note)
    if not result.groups:
        log.error("no usable result.json under %s", ", ".join(map(str, args.roots)))
        return 1
    log.info("%d result(s) in %d cell(s): %d complete, %d method comparison(s)",
             sum(len(g.jobs) for g in result.groups), len(result.groups), len(result.cells), len(result.pairs))
    sys.stdout.write(render_table(result.groups, result.cells, result.pairs))
    sys.stdout.write("\n" + render_trust_table(result.groups, result.cells))
    sys.stdout.write("\n" + render_power(result.power))
    if result.designs:
        sys.stdout.write("\n" + test_designs.render_designs(result.designs))
    if result.matched:
        sys.stdout.write("\n" + matched_compute.render_matched(result.matched))
    if result.transfer.get("matrices"):
        sys.stdout.write("\n" + transfer_matrix.render_transfer(result.transfer))
    if args.out is not None:
        import json

        from optimizers.journal import write_text_atomic

        summary = result.summary(family=args.family, replicates=args.bootstrap,
                                 include_nonconformant=args.include_nonconformant)
        write_text_atomic(args.out, json.dumps(summary, indent=2, sort_keys=True) + "\n")
        log.info("summary written to %s", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
