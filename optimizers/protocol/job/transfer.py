"""Transfer jobs: test another job's deployed candidate under this job's model and topology.

``--deploy-from JOB_DIR`` (``deploy_from=``) makes a job test-only: it never calls the method;
its "incumbent" is the source job's *deployed* candidate (the prompts the source would ship,
the seed when it fell back), deployed unconditionally and tested against this job's own seed
team on this job's test problems with this job's seed (the same shared seed evaluation every
other job of the condition uses). The identity records the source job (``spec.deploy_from``,
``cell.transfer_from``), so a transfer job never shares an id or a cell with its source or
with an ordinary job of the target condition.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from optimizers.candidate import Candidate
from optimizers.journal import SealError, read_sealed
from optimizers.protocol.job.errors import JobError

STOP_REASON = "transfer"
SELECTION_MODE = "transfer"


@dataclass(frozen=True, slots=True)
class TransferSource:
    """What a transfer job takes from its source job folder."""

    folder: Path
    job_id: str
    cell: Mapping[str, Any]
    cell_id: str
    seed: int
    deployed: Candidate
    selected_candidate: str
    delta_pp: float | None
    spec: Mapping[str, Any] = field(default_factory=dict)  # the source's job.json "spec"

    def identity(self) -> dict[str, Any]:
        """``spec.deploy_from``: which job, and exactly which prompts."""
        return {"job_id": self.job_id, "cell_id": self.cell_id, "deployed_candidate_id": self.deployed.id}

    def cell_record(self) -> dict[str, Any]:
        """``cell.transfer_from``: where the prompts were tuned (model, method, runtime)."""
        return {key: self.cell.get(key) for key in ("method", "model", "registry_key", "topology", "team_size")}


def _sealed(folder: Path, name: str) -> dict[str, Any]:
    path = folder / f"{name}.json"
    if not path.is_file():
        raise JobError(f"--deploy-from {folder}: no {name}.json (the source job must be finished)")
    try:
        return read_sealed(path)
    except (SealError, OSError, ValueError) as exc:
        raise JobError(f"--deploy-from {folder}: {name}.json is unusable ({exc})") from None


@lru_cache(maxsize=64)
def load_source(folder: Path) -> TransferSource:
    """The finished source job in ``folder`` (``JobError`` in one line when it is not usable)."""
    folder = Path(folder).resolve()
    if not folder.is_dir():
        raise JobError(f"--deploy-from {folder}: not a job folder")
    result = _sealed(folder, "result")
    selection = _sealed(folder, "selection")
    if result.get("status") != "completed":
        raise JobError(f"--deploy-from {folder}: the source job is {result.get('status')}, not completed")
    if selection.get("job_id") != result.get("job_id"):
        raise JobError(f"--deploy-from {folder}: selection.json and result.json belong to different jobs")
    if result.get("cell", {}).get("transfer_from"):
        raise JobError(f"--deploy-from {folder}: the source is itself a transfer job; deploy from the job it came from")
    deployed = Candidate.from_dict(selection["deployed_candidate"])
    return TransferSource(
        folder=folder, job_id=str(result["job_id"]), cell=dict(result["cell"]), cell_id=str(result["cell_id"]),
        seed=int(result["seed"]), deployed=deployed, selected_candidate=str(selection["selected_candidate"]),
        delta_pp=(result.get("test") or {}).get("delta_pp"), spec=dict(_sealed(folder, "job").get("spec") or {}),
    )


# What fixes the test problems and how they are scored: a transfer job must share them with its
# source, or its delta and the source's own are not measured on the same problems.
# ("test": the test design, absent for the default one.)
SAME_PROBLEMS = ("dataset", "data", "release", "split_hash", "selection", "optimize_max_tests", "eval_decoding",
                 "test")


def check_same_problems(source: TransferSource, spec: Mapping[str, Any]) -> None:
    """``JobError`` in one line when this job would test other problems (or score them otherwise)."""
    differ = [key for key in SAME_PROBLEMS if source.spec.get(key) != spec.get(key)]
    if differ:
        shown = "; ".join(f"{key}: source {source.spec.get(key)!r}, here {spec.get(key)!r}" for key in differ)
        raise JobError(f"--deploy-from {source.folder}: the source job ran on other problems or rules ({shown}); "
                       "run this job with the source's (e.g. --data builtin)")


def source_of(cfg: Any) -> TransferSource | None:
    deploy_from = getattr(cfg, "deploy_from", None)
    return load_source(Path(deploy_from)) if deploy_from else None


def check_compatible(source: TransferSource, base_spec: Any, method: str) -> None:
    """The source's prompts must fit this job's team (same roles) and come from the same method."""
    from optimizers.protocol.job.lcb_system import apply_candidate

    if source.cell.get("method") != method:
        raise JobError(f"--deploy-from: the source job ran {source.cell.get('method')}, this job is {method} "
                       "(leave --method out or use the source's)")
    try:
        apply_candidate(base_spec, source.deployed)
    except ValueError as exc:
        raise JobError(f"--deploy-from: the source's prompts do not fit this team ({exc})") from None


def optimization_payload(source: TransferSource, seed: Candidate, budget_snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of optimization.json for a transfer job: nothing searched, nothing charged."""
    return {
        "status": "completed",
        "failure_kind": None,
        "error": None,
        "stop_reason": STOP_REASON,
        "seed_candidate": seed.to_dict(),
        "incumbent_candidate": source.deployed.to_dict(),
        "budget": dict(budget_snapshot),
        "usage": {"task": {"attempts": 0}, "reflection": None},
        "uncharged_calls": {},
        "proposals": {"candidates_evaluated": 0, "rollouts": 0},
        "history": [],
        "metadata": {"transfer_from": source.identity()},
    }


def decision_fields(source: TransferSource, seed: Candidate) -> dict[str, Any]:
    """What selection.json says for a transfer job: the source's prompts are deployed as they are."""
    same = source.deployed == seed
    return {"selected_candidate": "seed" if same else "incumbent",
            "fallback_reason": "identical_candidate" if same else None}


def finished_sources(root: Path) -> list[Path]:
    """Every finished job folder under ``root`` whose prompts can be transferred: a sealed,
    completed result that is neither a transfer job nor a matched-compute baseline (those have
    no prompts of their own). Sorted, so a sweep's job numbers are stable."""
    found = []
    for path in sorted(Path(root).rglob("result.json")):
        try:
            result = read_sealed(path)
        except (SealError, OSError, ValueError):
            continue
        if result.get("status") != "completed" or (result.get("cell") or {}).get("transfer_from"):
            continue
        if result.get("matched"):
            continue
        found.append(path.parent.resolve())
    return found
