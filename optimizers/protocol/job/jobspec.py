"""A job's identity: what it computes (spec -> job_id), its grid cell and runtime condition.

Only result-relevant configuration enters ``spec``; endpoints, concurrency, tracking and the
output folder do not, so a moved or re-launched job keeps its id. ``condition`` is what a seed
evaluation depends on (method-independent): it keys the shared evaluation cache.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from optimizers.candidate import Candidate
from optimizers.journal import canonical_json, short_hash
from optimizers.protocol.grid.config import PHASES, SELECTION_MODES, JobConfig
from optimizers.protocol.job.errors import JobError
from optimizers.protocol.job.splits import SplitIds
from optimizers.registry import MethodUnavailable, UnknownMethod, get_optimizer_class
from topologies.types import TeamSpec

if TYPE_CHECKING:
    from optimizers.protocol.grid.cells import Conformance

PROTOCOL_ID = "lcb-grid-protocol/v1"
SCORER_ID = "lcb.grading/hidden-tests"


def runtime_versions() -> dict[str, str]:
    """Behaviour versions of what a seed evaluation depends on: the scorer and the team runtime."""
    from lcb.version import SCORER_VERSION
    from topologies.version import TEAM_RUNTIME_VERSION

    return {"scorer": SCORER_VERSION, "team_runtime": TEAM_RUNTIME_VERSION}


def code_versions(method: str) -> dict[str, str]:
    """Scorer, team runtime and the method's implementation version (``Optimizer.version``)."""
    return {**runtime_versions(), "method": str(get_optimizer_class(method).version)}


def registry_key(cfg: JobConfig) -> str:
    """``centralized``, ``centralized_r8``, ``decentralized_communications_structured_soft``."""
    if cfg.registry_key:
        return cfg.registry_key
    from optimizers.protocol.grid import cells

    return cells.registry_key(cfg.topology, cfg.team_size, cfg.communication)


def code_version() -> str:
    """The git commit of the checkout (metadata only: a new commit does not invalidate jobs)."""
    root = Path(__file__).resolve().parents[3]
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def validate_config(cfg: JobConfig) -> None:
    if cfg.phase not in PHASES:
        raise JobError(f"phase must be one of {', '.join(PHASES)}, not {cfg.phase!r}")
    if cfg.dataset != "lcb":
        raise JobError(f"dataset {cfg.dataset!r} is not supported (only lcb)")
    if cfg.budget < 0:
        raise JobError("budget must be >= 0")
    if cfg.seed < 0:
        raise JobError("seed must be >= 0")
    if cfg.concurrency < 1:
        raise JobError("concurrency must be >= 1")
    if cfg.max_infrastructure_retries < 0:
        raise JobError("max_infrastructure_retries must be >= 0")
    if cfg.selection not in SELECTION_MODES:
        raise JobError(f"selection must be one of {', '.join(SELECTION_MODES)}, not {cfg.selection!r}")
    if cfg.selection == "heldout" and cfg.selection_size < 1:
        raise JobError("selection_size must be >= 1 (validation problems kept for keep-or-reject)")
    if max(cfg.test.samples, cfg.test.val_samples) > 1 and cfg.eval_decoding.temperature <= 0:
        raise JobError(f"test.samples={cfg.test.samples} / test.val_samples={cfg.test.val_samples} at evaluation "
                       "temperature 0: greedy samples are copies; set test.temperature (e.g. 0.2)")
    if min(cfg.test.samples, cfg.test.val_samples) < 1:
        raise JobError("test.samples and test.val_samples must be >= 1")
    if cfg.optimize_max_tests is not None and cfg.optimize_max_tests < 1:
        raise JobError("optimize_max_tests must be >= 1 (or null for all hidden tests)")
    try:
        get_optimizer_class(cfg.method)
    except (UnknownMethod, MethodUnavailable) as exc:
        raise JobError(str(exc)) from None


def grid_standing(cfg: JobConfig, override_in_grid: bool | None = None,
                  standing: Conformance | None = None) -> tuple[bool | None, bool, tuple[str, ...]]:
    """(in grid, conformant, reasons) from the grid definition (or the app's ``cells.Conformance``
    of this config, when it computed one); the app enforces ``allow_any_cell``."""
    try:
        from optimizers.protocol.grid import cells
    except ImportError:
        return override_in_grid, False, ("the grid definition is not available",)
    standing = standing or cells.conformance(cfg)
    in_grid = standing.in_grid if override_in_grid is None else override_in_grid
    return in_grid, bool(standing.conformant and in_grid), tuple(standing.reasons)


def json_safe(value: Any) -> Any:
    """Round-trip through canonical JSON (tuples -> lists); raises on non-JSON values."""
    return json.loads(canonical_json(value))



@dataclass(frozen=True, slots=True)
class JobIdentity:
    condition: dict[str, Any]
    condition_id: str
    spec: dict[str, Any]
    job_id: str
    cell: dict[str, Any]
    cell_id: str
    in_grid: bool | None
    conformant: bool
    nonconformant_reasons: tuple[str, ...] = field(default=())

    @classmethod
    def build(
        cls,
        cfg: JobConfig,
        *,
        base_spec: TeamSpec,
        seed_candidate: Candidate,
        split_ids: SplitIds,
        override_in_grid: bool | None = None,
        standing: Conformance | None = None,
    ) -> JobIdentity:
        condition = _condition(cfg, base_spec, split_ids)
        condition_id = short_hash(condition, 24)
        spec = _spec(cfg, base_spec, seed_candidate, split_ids, condition_id)
        cell = _cell(cfg, base_spec)
        in_grid, conformant, reasons = grid_standing(cfg, override_in_grid, standing)
        return cls(condition, condition_id, spec, short_hash(spec, 24), cell, short_hash(cell, 24),
                   in_grid, conformant, reasons)

    def record(self, seed_candidate: Candidate, split_ids: SplitIds) -> dict[str, Any]:
        """The payload of job.json."""
        return {
            "job_id": self.job_id,
            "spec": self.spec,
            "cell": self.cell,
            "cell_id": self.cell_id,
            "condition": self.condition,
            "condition_id": self.condition_id,
            "seed_candidate": seed_candidate.to_dict(),
            "split_sizes": {k: len(v) for k, v in split_ids.as_dict().items()},
            "conformant": self.conformant,
            "nonconformant_reasons": list(self.nonconformant_reasons),
            "in_grid": self.in_grid,
            "code_version": code_version(),
            "code_versions": self.spec["code_versions"],
        }

    def adopt(self, stored: Mapping[str, Any]) -> JobIdentity:
        """This identity under a stored job's ids (``--force-resume`` across a version change)."""
        from dataclasses import replace

        return replace(self, condition=stored["condition"], condition_id=stored["condition_id"],
                       spec=stored["spec"], job_id=stored["job_id"])


def _condition(cfg: JobConfig, base_spec: TeamSpec, split_ids: SplitIds) -> dict[str, Any]:
    """What a seed evaluation depends on (method-independent; keys the evaluation cache)."""
    return {
        "protocol": PROTOCOL_ID,
        "dataset": cfg.dataset,
        "topology": cfg.topology,
        "team_size": base_spec.team_size,
        "communication": cfg.communication,
        "rounds": cfg.rounds,
        "max_turns": base_spec.max_turns,
        "model": cfg.model.id,
        "data": cfg.data,
        "release": cfg.release,
        "eval_decoding": asdict(cfg.eval_decoding),
        "scorer": {"id": SCORER_ID, "tests": "hidden", "max_tests": None},
        "max_infrastructure_retries": cfg.max_infrastructure_retries,
        "splits": split_ids.as_dict(),
        "code_versions": runtime_versions(),
        **_test_design(cfg),
    }


def _test_design(cfg: JobConfig) -> dict[str, Any]:
    """``{"test": ...}`` for a test design other than the default (so default jobs keep their ids)."""
    return {} if cfg.test.is_default else {"test": cfg.test.identity()}


def _spec(
    cfg: JobConfig, base_spec: TeamSpec, seed_candidate: Candidate, split_ids: SplitIds, condition_id: str
) -> dict[str, Any]:
    """The result-relevant configuration: equal specs compute equal results."""
    from optimizers.protocol.job.transfer import source_of

    source = source_of(cfg)
    # Only transfer jobs carry the key, so every other job keeps its id.
    transfer = {"deploy_from": source.identity()} if source is not None else {}
    return {
        **transfer,
        "protocol": PROTOCOL_ID,
        "method": cfg.method,
        "dataset": cfg.dataset,
        "topology": cfg.topology,
        "team_size": base_spec.team_size,
        "communication": cfg.communication,
        "rounds": cfg.rounds,
        "max_turns": base_spec.max_turns,
        "model": cfg.model.id,
        "reflection_model": cfg.reflection.id,
        "seed": cfg.seed,
        "budget": cfg.budget,
        "data": cfg.data,
        "release": cfg.release,
        "method_params": json_safe(dict(cfg.method_params)),
        "split_hash": split_ids.split_hash,
        "optimize_max_tests": cfg.optimize_max_tests,
        "optimize_decoding": asdict(cfg.optimize_decoding),
        "eval_decoding": asdict(cfg.eval_decoding),
        "reflection_decoding": asdict(cfg.reflection_decoding),
        "max_infrastructure_retries": cfg.max_infrastructure_retries,
        "seed_candidate_id": seed_candidate.id,
        "selection": {"mode": cfg.selection, "size": cfg.selection_size if cfg.selection != "val" else None},
        "condition_id": condition_id,
        "code_versions": code_versions(cfg.method),
        **_test_design(cfg),
    }


def method_variant(cfg: JobConfig) -> dict[str, Any]:
    """The method knobs that differ from ``conf/method/<method>.yaml`` (e.g. GEPA editing protocol
    texts): a different variant of the method, so a different cell."""
    from optimizers.protocol.grid import cells

    defaults = cells.method_defaults(cfg.method) or {}
    params = json_safe(dict(cfg.method_params))
    return {k: params[k] for k in sorted(params) if k not in defaults or params[k] != defaults[k]}


def _cell(cfg: JobConfig, base_spec: TeamSpec) -> dict[str, Any]:
    """The grid cell (method variant x runtime condition x selection rule), shared by the seeds
    of one cell. Keys with their default value are left out, so default cells keep their ids."""
    variant = method_variant(cfg)
    extra: dict[str, Any] = {}
    if variant:
        extra["method_variant"] = variant
    if cfg.selection != "val":
        extra["selection"] = {"mode": cfg.selection, "size": cfg.selection_size}
    extra.update(_test_design(cfg))  # another test design is another cell (never pooled)
    from optimizers.protocol.job.transfer import source_of

    source = source_of(cfg)
    if source is not None:  # tuned elsewhere: its own cell, never pooled with the target's
        extra["transfer_from"] = source.cell_record()
    return {**extra, **{
        "method": cfg.method,
        "dataset": cfg.dataset,
        "topology": cfg.topology,
        "team_size": base_spec.team_size,
        "communication": cfg.communication,
        "rounds": cfg.rounds,
        "model": cfg.model.id,
        "registry_key": registry_key(cfg),
    }}
