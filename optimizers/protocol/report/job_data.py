"""What one job found, read from its folder (no HTML here): the story a job page tells.

- the stop reason and budget use (``optimization.json``, else ``result.json``);
- the learning curve (``optimization/learning_curve.jsonl``, the committed incumbent's score);
- every candidate the method noted, in order (``optimization/candidates.jsonl``), with its parent,
  what it changed against that parent (role prompt, protocol part, setting, demos), the charged
  rollouts it got (``optimization/tracker.jsonl``, else ``rollouts.jsonl``) and whether the
  method accepted it (committed it as its incumbent, or returned it);
- the deployed and the seed candidate (``selection.json``) and the fallback reason;
- per test problem, the seed's and the deployed prompts' verdicts (``test.json`` and the two
  evaluation records it names), with the graded program and the first failing test's kind.

Every reader tolerates a partial or older job folder: what is missing is left empty, never raised.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from optimizers.candidate import PROTOCOL_PREFIX, ROLE_PREFIX
from optimizers.journal import read_json_object

ACCEPTED = "accepted"  # committed as the method's incumbent at some point
RETURNED = "returned"  # the method's final incumbent
SEED = "seed"
NOT_ACCEPTED = "not accepted"


@dataclass(frozen=True, slots=True)
class Change:
    """One field a candidate changed: ``kind`` is role, protocol, setting or demos."""

    kind: str
    name: str
    before: str = field(default="", repr=False)
    after: str = field(default="", repr=False)

    @property
    def label(self) -> str:
        if self.kind == "setting":
            return f"setting {self.name}: {self.before} → {self.after}"
        if self.kind == "demos":
            return f"demos: {self.before} → {self.after}"
        return f"{self.kind} {self.name}"


@dataclass(frozen=True, slots=True)
class CandidateStep:
    """One candidate of the search, in the order the method noted it."""

    index: int
    candidate_id: str
    parent: str | None
    compared_with: str | None  # the candidate its changes are against (the parent, else the seed)
    changes: tuple[Change, ...]
    rollouts: int  # charged rollouts it got
    mean_score: float | None
    first_charged: int | None  # the budget count at its first and last charged rollout
    last_charged: int | None
    status: str  # seed, accepted, returned, not accepted
    deployed: bool

    @property
    def evaluated(self) -> bool:
        return self.rollouts > 0


@dataclass(frozen=True, slots=True)
class FieldDiff:
    """One role prompt or protocol part (or the settings/demos) of the seed and the deployed team."""

    kind: str  # role, protocol, setting, demos
    name: str
    seed: str
    deployed: str

    @property
    def changed(self) -> bool:
        return self.seed != self.deployed


@dataclass(frozen=True, slots=True)
class Verdict:
    """One side (seed or deployed) of one test problem."""

    score: float | None
    outcome: str  # passed, wrong_answer, ..., or the rollout status when there is no verdict
    passed: int | None
    total: int | None
    first_failure: str | None  # e.g. "wrong_answer on test 3 (functional)"
    program: str | None

    @property
    def solved(self) -> bool:
        return bool(self.score)


@dataclass(frozen=True, slots=True)
class ProblemVerdicts:
    problem_id: str
    difficulty: str
    seed: Verdict
    deployed: Verdict

    @property
    def flip(self) -> str | None:
        """'gained' or 'lost' when seed and deployed prompts disagree, else None."""
        if self.seed.score is None or self.deployed.score is None or self.seed.solved == self.deployed.solved:
            return None
        return "gained" if self.deployed.solved else "lost"


@dataclass(frozen=True, slots=True)
class JobStory:
    folder: Path
    job_id: str
    method: str
    runtime: str
    model: str
    seed: int | None
    conformant: bool
    status: str
    stop_reason: str | None
    failure_kind: str | None
    budget: Mapping[str, Any]  # maximum, charged, infrastructure_failures, retries, unusable_rollouts
    elapsed_seconds: float | None
    curve: tuple[tuple[int, float], ...]
    curve_rows: int  # rows in learning_curve.jsonl, scored or not (a method may commit no score)
    candidates: tuple[CandidateStep, ...]
    selected: str | None  # incumbent or seed
    fallback_reason: str | None
    validation: Mapping[str, Any]  # baseline/incumbent validation score and delta
    diffs: tuple[FieldDiff, ...]
    verdicts: tuple[ProblemVerdicts, ...]
    test: Mapping[str, Any]  # baseline_mean, deployed_mean, delta_pp
    # What a test-only job tested instead of a search (empty for every other job):
    # {"matched": result.json "matched"} for a matched-compute baseline,
    # {"transfer": source job id, folder, its own Δpp, "tuned": cell.transfer_from} for a transfer job.
    origin: Mapping[str, Any] = field(default_factory=dict)

    @property
    def kept_seed(self) -> bool:
        return self.selected != "incumbent" or not any(d.changed for d in self.diffs)

    @property
    def flipped(self) -> tuple[ProblemVerdicts, ...]:
        return tuple(v for v in self.verdicts if v.flip)


# --------------------------------------------------------------------------- JSONL


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Complete JSON-object lines of a journal (a torn last line of a killed job is skipped)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


# --------------------------------------------------------------------------- candidates


def changes_between(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[Change, ...]:
    """What ``after`` (a candidate record) changed against ``before``: components, settings, demos."""
    out: list[Change] = []
    old, new = before.get("components") or {}, after.get("components") or {}
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            kind, name = component_field(key)
            out.append(Change(kind, name, str(old.get(key, "")), str(new.get(key, ""))))
    old_settings, new_settings = before.get("settings") or {}, after.get("settings") or {}
    for key in sorted(set(old_settings) | set(new_settings)):
        if old_settings.get(key) != new_settings.get(key):
            out.append(Change("setting", key, str(old_settings.get(key, "–")), str(new_settings.get(key, "–"))))
    old_demos, new_demos = before.get("demos") or [], after.get("demos") or []
    if old_demos != new_demos:
        out.append(Change("demos", "demos", f"{len(old_demos)} demo(s)", f"{len(new_demos)} demo(s)"))
    return tuple(out)


def component_field(key: str) -> tuple[str, str]:
    """``role/solver`` -> ('role', 'solver'); ``protocol/handoff`` -> ('protocol', 'handoff')."""
    for prefix in (ROLE_PREFIX, PROTOCOL_PREFIX):
        if key.startswith(prefix):
            return prefix.rstrip("/"), key[len(prefix):]
    return "component", key


@dataclass(slots=True)
class _Spend:
    rollouts: int = 0
    total: float = 0.0
    first: int | None = None
    last: int | None = None

    def add(self, charged: int, score: float) -> None:
        self.rollouts += 1
        self.total += score
        self.first = charged if self.first is None else min(self.first, charged)
        self.last = charged if self.last is None else max(self.last, charged)


def charged_rollouts(optimization_dir: Path) -> tuple[dict[str, _Spend], list[str]]:
    """Per candidate: its charged rollouts (count, score sum, budget count at first/last one), and
    the candidates the method committed as incumbent, in order.

    The tracker journal has one small line per charged rollout (the budget count, the candidate,
    the score) and one per incumbent commit; jobs without it fall back to ``rollouts.jsonl``.
    """
    spend: dict[str, _Spend] = {}
    commits: list[str] = []
    seen: set[tuple[Any, ...]] = set()
    for row in read_jsonl(optimization_dir / "tracker.jsonl"):
        if row.get("kind") != "log":
            continue
        metrics = row.get("metrics") or {}
        candidate = metrics.get("rollout/candidate_id")
        score = metrics.get("rollout/score")
        if candidate is not None and isinstance(score, int | float):
            step = int(metrics.get("budget/charged", row.get("step", 0)) or 0)
            key = (candidate, metrics.get("rollout/problem_id"), step)
            if key not in seen:  # a resumed job replays its journal into the tracker again
                seen.add(key)
                spend.setdefault(str(candidate), _Spend()).add(step, float(score))
        committed = metrics.get("incumbent/candidate_id")
        if committed is not None and (not commits or commits[-1] != committed):
            commits.append(str(committed))
    if not spend:
        for charged, row in enumerate((r for r in read_jsonl(optimization_dir / "rollouts.jsonl")
                                       if r.get("charged")), start=1):
            spend.setdefault(str(row.get("candidate_id")), _Spend()).add(charged, float(row.get("score", 0.0)))
    return spend, commits


def candidate_steps(
    folder: Path, *, seed: Mapping[str, Any] | None, incumbent_id: str | None, deployed_id: str | None,
) -> tuple[CandidateStep, ...]:
    records: dict[str, dict[str, Any]] = {}
    for row in read_jsonl(folder / "optimization" / "candidates.jsonl"):
        if row.get("id") and row["id"] not in records:
            records[str(row["id"])] = row
    spend, commits = charged_rollouts(folder / "optimization")
    seed_id = (seed or {}).get("id")
    accepted = set(commits)
    steps = []
    for index, (candidate_id, record) in enumerate(records.items(), start=1):
        parent = record.get("parent")
        base = records.get(str(parent)) if parent else None
        compared = parent if base is not None else None
        if base is None and seed and candidate_id != seed_id:
            base, compared = seed, seed_id
        used = spend.get(candidate_id, _Spend())
        if candidate_id == seed_id:
            status = SEED
        elif candidate_id == incumbent_id:
            status = RETURNED
        elif candidate_id in accepted:
            status = ACCEPTED
        else:
            status = NOT_ACCEPTED
        steps.append(CandidateStep(
            index=index, candidate_id=candidate_id, parent=parent, compared_with=compared,
            changes=changes_between(base, record) if base is not None else (),
            rollouts=used.rollouts, mean_score=used.total / used.rollouts if used.rollouts else None,
            first_charged=used.first, last_charged=used.last, status=status,
            deployed=candidate_id == deployed_id,
        ))
    return tuple(steps)


# --------------------------------------------------------------------------- deployed vs seed


def field_diffs(seed: Mapping[str, Any], deployed: Mapping[str, Any]) -> tuple[FieldDiff, ...]:
    """Every role prompt and protocol part, side by side (roles first), then settings and demos."""
    out: list[FieldDiff] = []
    old, new = seed.get("components") or {}, deployed.get("components") or {}
    keys = sorted(set(old) | set(new), key=lambda k: (not k.startswith(ROLE_PREFIX), k))
    for key in keys:
        kind, name = component_field(key)
        out.append(FieldDiff(kind, name, str(old.get(key, "")), str(new.get(key, ""))))
    old_settings, new_settings = seed.get("settings") or {}, deployed.get("settings") or {}
    for key in sorted(set(old_settings) | set(new_settings)):
        out.append(FieldDiff("setting", key, str(old_settings.get(key, "–")), str(new_settings.get(key, "–"))))
    if seed.get("demos") or deployed.get("demos"):
        out.append(FieldDiff("demos", "demos", json.dumps(seed.get("demos") or [], indent=1, sort_keys=True),
                             json.dumps(deployed.get("demos") or [], indent=1, sort_keys=True)))
    return tuple(out)


# --------------------------------------------------------------------------- test verdicts

_FIRST_FAILURE = re.compile(r"first failure: ([a-z_]+) on test (\d+) \(([a-z_]+)\)")


def first_failure(feedback: str) -> str | None:
    """The grader's 'first failure: <outcome> on test <n> (<kind>)' as '<outcome> on test <n> (<kind>)';
    None when no test ran (no code, a passed program), where the outcome alone says it."""
    found = _FIRST_FAILURE.search(feedback or "")
    return f"{found.group(1)} on test {found.group(2)} ({found.group(3)})" if found else None


@lru_cache(maxsize=4096)
def _evaluation_records(path: str) -> Mapping[str, Mapping[str, Any]]:
    """problem id -> record of one sealed evaluation (shared by every job of a condition, so cached)."""
    evaluation = read_json_object(path) or {}
    return {str(r.get("problem_id")): r for r in evaluation.get("records") or () if isinstance(r, Mapping)}


def _verdict(record: Mapping[str, Any] | None, score: Any, status: Any) -> Verdict:
    record = record or {}
    verdict = record.get("verdict") or {}
    outcome = str(verdict.get("outcome") or record.get("status") or status or "unknown")
    return Verdict(
        score=None if score is None else float(score), outcome=outcome,
        passed=verdict.get("passed"), total=verdict.get("total"),
        first_failure=first_failure(str(record.get("feedback") or "")),
        program=record.get("answer"),
    )


def problem_verdicts(test: Mapping[str, Any], evaluations: Path,
                     difficulty: Mapping[str, str]) -> tuple[ProblemVerdicts, ...]:
    """One row per test problem, flipped ones first (gains, then losses), then in test order."""
    ids = [str(i) for i in test.get("example_ids") or ()]
    if not ids:
        return ()

    def side(prefix: str) -> list[Verdict]:
        evaluation_id = test.get(f"{prefix}_evaluation_id")
        records = _evaluation_records(str(evaluations / f"{evaluation_id}.json")) if evaluation_id else {}
        scores = list(test.get(f"{prefix}_scores") or [None] * len(ids))
        statuses = list(test.get(f"{prefix}_status") or [None] * len(ids))
        return [_verdict(records.get(pid), score, status) for pid, score, status in zip(ids, scores, statuses)]

    rows = [ProblemVerdicts(pid, difficulty.get(pid, "unknown"), seed, deployed)
            for pid, seed, deployed in zip(ids, side("baseline"), side("deployed"))]
    order = {"gained": 0, "lost": 1, None: 2}
    return tuple(sorted(rows, key=lambda row: order[row.flip]))


# --------------------------------------------------------------------------- the whole story


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def job_story(folder: Path, result: Mapping[str, Any] | None = None, *,
              difficulty: Mapping[str, str] | None = None, evaluations: Path | None = None) -> JobStory:
    """Everything the job page shows, from a (possibly partial) job folder."""
    from optimizers.protocol.grid import cells
    from optimizers.protocol.report.data import evaluation_dir, learning_curve

    folder = Path(folder)
    result = result if result is not None else (read_json_object(folder / "result.json") or {})
    optimization = read_json_object(folder / "optimization.json") or {}
    selection = read_json_object(folder / "selection.json") or {}
    test = read_json_object(folder / "test.json") or {}
    job = read_json_object(folder / "job.json") or {}
    cell = result.get("cell") or job.get("cell") or {}
    summary_optimization = result.get("optimization") or {}
    summary_selection = result.get("selection") or {}
    seed = selection.get("seed_candidate") or optimization.get("seed_candidate") or {}
    deployed = selection.get("deployed_candidate") or {}
    incumbent = optimization.get("incumbent_candidate") or selection.get("incumbent_candidate") or {}
    curve = learning_curve(folder)
    ids = [str(i) for i in test.get("example_ids") or ()]
    listed = test.get("difficulties")
    known = dict(difficulty or {})
    if isinstance(listed, list) and len(listed) == len(ids):
        known.update({i: str(d).lower() for i, d in zip(ids, listed) if d})
    return JobStory(
        folder=folder,
        job_id=str(_first(result.get("job_id"), job.get("job_id"), folder.name)),
        method=str(cell.get("method", "?")),
        runtime=str(cell.get("registry_key") or cell.get("topology") or "?"),
        model=cells.model_key(str(cell.get("model", "?"))),
        seed=_first(result.get("seed"), (job.get("spec") or {}).get("seed")),
        conformant=bool(result.get("conformant", job.get("conformant", False))),
        status=str(_first(optimization.get("status"), summary_optimization.get("status"), "unfinished")),
        stop_reason=_first(optimization.get("stop_reason"), summary_optimization.get("stop_reason")),
        failure_kind=_first(optimization.get("failure_kind"), summary_optimization.get("failure_kind")),
        budget=dict(optimization.get("budget") or summary_optimization.get("budget") or {}),
        elapsed_seconds=_first(optimization.get("elapsed_seconds"), summary_optimization.get("elapsed_seconds")),
        curve=curve,
        curve_rows=len(read_jsonl(folder / "optimization" / "learning_curve.jsonl")),
        candidates=candidate_steps(folder, seed=seed or None, incumbent_id=incumbent.get("id"),
                                   deployed_id=deployed.get("id")),
        selected=_first(selection.get("selected_candidate"), summary_selection.get("selected_candidate")),
        fallback_reason=_first(selection.get("fallback_reason"), summary_selection.get("fallback_reason")),
        validation={key: _first(selection.get(key), summary_selection.get(key))
                    for key in ("baseline_validation_score", "incumbent_validation_score", "validation_delta")},
        diffs=field_diffs(seed, deployed) if seed and deployed else (),
        verdicts=problem_verdicts(test, evaluations or evaluation_dir(folder), known),
        test={key: test.get(key, (result.get("test") or {}).get(key))
              for key in ("baseline_mean", "deployed_mean", "delta_pp", "valid_for_aggregation")},
        origin=_origin(result, test, cell),
    )


def _origin(result: Mapping[str, Any], test: Mapping[str, Any], cell: Mapping[str, Any]) -> dict[str, Any]:
    matched = result.get("matched") or test.get("matched")
    if isinstance(matched, Mapping):
        return {"matched": {k: v for k, v in matched.items() if k != "problems"}}
    tuned = cell.get("transfer_from")
    if isinstance(tuned, Mapping):
        source = result.get("transfer") if isinstance(result.get("transfer"), Mapping) else {}
        return {"transfer": {**source, "tuned": dict(tuned)}}
    return {}


def changed_fields(diffs: Sequence[FieldDiff]) -> list[FieldDiff]:
    return [d for d in diffs if d.changed]
