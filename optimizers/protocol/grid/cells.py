"""The LCB experiment grid: registry keys, grid cells, and whether a job is conformant.

A *runtime condition* is what the team runs under, independent of the method: topology, team size,
communication format and task model. A *grid cell* is a method on a condition; a *job* is a grid
cell with one optimizer seed. The grid is built table by table (each table varies one axis) and
deduplicated, so a cell that several tables ask for is one job whose ``tables`` name all of them.

Tables (LangGraph teams only; the reference's native-framework table is not part of this grid):

========================  =======================================  =====================================
table                     methods                                  conditions
========================  =======================================  =====================================
``methods``               all eight                                4 multi-agent topologies, size 4,
                                                                   freeform, qwen
``single``                gepa, mipro                              single, qwen
``communication``         gepa, mipro, mapro, maspo                4 multi-agent × 3 formats, size 4, qwen
``team_size``             gepa, mipro, mapro, maspo                4 multi-agent × sizes 2/4/8/10, qwen
``llama``                 gepa, mipro, mapro, maspo                the base conditions (single only for
                                                                   gepa/mipro), llama
========================  =======================================  =====================================

That is 132 configurations and 396 jobs (see ``grid_counts``). ``identity`` is not a grid method:
it may run on any condition some grid cell uses (it measures the seed prompts there).

Registry keys name a condition's team shape in one token: the bare topology for the default shape,
``<topology>_r<N>`` for another team size, ``<topology>_communications_<format>`` for another
format, and both suffixes in that order for an off-grid combination.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from optimizers.protocol.grid.config import GRID_BUDGET, JobConfig

# Test-only matched-compute baselines: like identity, they may run on any condition a grid cell uses.
MATCHED_BASELINES = ("self_consistency", "best_of_n")
GRID_METHODS = ("gepa", "mipro", "mapro", "maspo", "hivemind", "mamut_gepa", "maspob", "tavo")
BASELINE_METHODS = ("gepa", "mipro", "mapro", "maspo")
SINGLE_AGENT_METHODS = ("gepa", "mipro")
MULTI_AGENT_TOPOLOGIES = ("independent", "sequential", "centralized", "decentralized")
TOPOLOGIES = ("single", *MULTI_AGENT_TOPOLOGIES)
TEAM_SIZES = (2, 4, 8, 10)
DEFAULT_TEAM_SIZE = 4
COMMUNICATIONS = ("freeform", "semi_structured", "structured_soft")
DEFAULT_COMMUNICATION = "freeform"
GRID_SEEDS = (0, 1, 2)
# Model aliases (conf/model/<alias>.yaml; topologies.models.MODEL_ALIASES agrees, a test checks).
MODEL_IDS: Mapping[str, str] = {
    "qwen": "Qwen/Qwen3.5-9B",
    "llama": "meta-llama/Llama-3.1-8B-Instruct",
    "local": "qwen2.5-coder-0.5b-instruct",
    "local-1.5b": "qwen2.5-coder-1.5b-instruct",
}
GRID_MODELS = ("qwen", "llama")
CONFORMANT_REFLECTION_MODEL = "Qwen/Qwen3.5-122B-A10B-FP8"
DATASET = "lcb"
DATASET_ALIASES: Mapping[str, str] = {"lcb": "lcb", "livecodebench": "lcb"}
CONFORMANT_DATA = "hf"
CONFORMANT_RELEASE = "release_latest"

CONF_DIR = Path(__file__).resolve().parents[3] / "conf"


class CellError(ValueError):
    """A topology, registry key or team shape that does not exist; the message is one line."""


def default_team_size(topology: str) -> int:
    return 1 if topology == "single" else DEFAULT_TEAM_SIZE


# --------------------------------------------------------------------------- registry keys


@dataclass(frozen=True, slots=True)
class KeyParts:
    """What a registry key says. ``None`` = the key leaves that axis at its default."""

    topology: str
    team_size: int | None = None
    communication: str | None = None


_KEY = re.compile(
    r"^(?P<topology>" + "|".join(TOPOLOGIES) + r")"
    r"(?:_r(?P<size>\d+))?"
    r"(?:_communications_(?P<comm>" + "|".join(COMMUNICATIONS) + r"))?$"
)


def registry_key(topology: str, team_size: int, communication: str) -> str:
    key = topology
    if team_size != default_team_size(topology):
        key += f"_r{team_size}"
    if communication != DEFAULT_COMMUNICATION:
        key += f"_communications_{communication}"
    return key


def parse_registry_key(key: str) -> KeyParts:
    match = _KEY.match(key)
    if match is None:
        raise CellError(
            f"unknown topology {key!r}; expected one of {', '.join(TOPOLOGIES)}, or a registry key "
            "such as centralized_r8 or decentralized_communications_structured_soft"
        )
    size = match.group("size")
    return KeyParts(match.group("topology"), int(size) if size else None, match.group("comm"))


def is_registry_key(text: str) -> bool:
    return _KEY.match(text) is not None


# --------------------------------------------------------------------------- conditions and cells


def model_key(model_id: str) -> str:
    """The grid's name for a model id: its alias when it has one, else a path-safe slug."""
    for alias, known_id in MODEL_IDS.items():
        if known_id == model_id:
            return alias
    return _slug(model_id)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text.replace("/", "--")).strip("-") or "model"


@dataclass(frozen=True, slots=True, order=True)
class Condition:
    """A runtime condition: everything the team runs under except the prompts."""

    topology: str
    team_size: int
    communication: str
    model: str  # model key: "qwen", "llama", or the slug of a full id

    @property
    def registry_key(self) -> str:
        return registry_key(self.topology, self.team_size, self.communication)


@dataclass(frozen=True, slots=True)
class GridCell:
    method: str
    condition: Condition
    tables: tuple[str, ...]

    @property
    def registry_key(self) -> str:
        return self.condition.registry_key

    @property
    def model(self) -> str:
        return self.condition.model

    def job_dir(self, runs_root: Path | str, seed: int) -> Path:
        return job_dir(runs_root, self.method, self.condition, seed)


def job_dir(runs_root: Path | str, method: str, condition: Condition, seed: int) -> Path:
    """``<runs_root>/<method>/lcb/<registry key>/<model>/<seed>``: deterministic, so jobs resume."""
    return Path(runs_root) / method / DATASET / condition.registry_key / condition.model / str(seed)


def _base(topology: str, model: str = "qwen") -> Condition:
    return Condition(topology, default_team_size(topology), DEFAULT_COMMUNICATION, model)


def _table_methods() -> Iterator[tuple[str, Condition]]:
    for method in GRID_METHODS:
        for topology in MULTI_AGENT_TOPOLOGIES:
            yield method, _base(topology)


def _table_single() -> Iterator[tuple[str, Condition]]:
    for method in SINGLE_AGENT_METHODS:
        yield method, _base("single")


def _table_communication() -> Iterator[tuple[str, Condition]]:
    for method in BASELINE_METHODS:
        for topology in MULTI_AGENT_TOPOLOGIES:
            for communication in COMMUNICATIONS:
                yield method, Condition(topology, DEFAULT_TEAM_SIZE, communication, "qwen")


def _table_team_size() -> Iterator[tuple[str, Condition]]:
    for method in BASELINE_METHODS:
        for topology in MULTI_AGENT_TOPOLOGIES:
            for size in TEAM_SIZES:
                yield method, Condition(topology, size, DEFAULT_COMMUNICATION, "qwen")


def _table_llama() -> Iterator[tuple[str, Condition]]:
    for method in BASELINE_METHODS:
        topologies = TOPOLOGIES if method in SINGLE_AGENT_METHODS else MULTI_AGENT_TOPOLOGIES
        for topology in topologies:
            yield method, _base(topology, "llama")


TABLES = {
    "methods": _table_methods,
    "single": _table_single,
    "communication": _table_communication,
    "team_size": _table_team_size,
    "llama": _table_llama,
}


def _order(cell: GridCell) -> tuple[Any, ...]:
    c = cell.condition
    return (
        GRID_METHODS.index(cell.method),
        GRID_MODELS.index(c.model),
        TOPOLOGIES.index(c.topology),
        c.team_size,
        COMMUNICATIONS.index(c.communication),
    )


@lru_cache(maxsize=1)
def grid() -> tuple[GridCell, ...]:
    """Every grid cell, each once (tables merged), in a stable order."""
    tables: dict[tuple[str, Condition], list[str]] = {}
    for table, cells in TABLES.items():
        for method, condition in cells():
            tables.setdefault((method, condition), []).append(table)
    built = [GridCell(method, condition, tuple(names)) for (method, condition), names in tables.items()]
    return tuple(sorted(built, key=_order))


@lru_cache(maxsize=1)
def _index() -> Mapping[tuple[str, Condition], GridCell]:
    return {(cell.method, cell.condition): cell for cell in grid()}


def find_cell(method: str, condition: Condition) -> GridCell | None:
    return _index().get((method, condition))


@lru_cache(maxsize=1)
def grid_conditions() -> frozenset[Condition]:
    return frozenset(cell.condition for cell in grid())


def condition_in_grid(condition: Condition) -> bool:
    return condition in grid_conditions()


def grid_jobs() -> Iterator[tuple[GridCell, int]]:
    for cell in grid():
        for seed in GRID_SEEDS:
            yield cell, seed


def grid_counts() -> dict[str, Any]:
    cells = grid()
    per_table = {table: sum(1 for _ in make()) for table, make in TABLES.items()}
    per_model = {model: sum(1 for c in cells if c.model == model) for model in GRID_MODELS}
    per_method = {method: sum(1 for c in cells if c.method == method) for method in GRID_METHODS}
    return {
        "configurations": len(cells),
        "jobs": len(cells) * len(GRID_SEEDS),
        "seeds": len(GRID_SEEDS),
        "conditions": len(grid_conditions()),
        "per_model": per_model,
        "per_method": per_method,
        "per_table": per_table,
    }


# --------------------------------------------------------------------------- conformance


def condition_of(cfg: JobConfig) -> Condition:
    return Condition(cfg.topology, cfg.team_size, cfg.communication, model_key(cfg.model.id))


@dataclass(frozen=True, slots=True)
class Conformance:
    """Where a job stands with respect to the grid.

    ``in_grid``: the job's cell (and seed) is a grid job, or for ``identity`` its condition is one
    some grid cell uses. ``conformant``: in the grid *and* run under the protocol's settings;
    ``reasons`` says what is off when not. Only conformant results enter the default aggregate.
    """

    in_grid: bool
    conformant: bool
    tables: tuple[str, ...]
    reasons: tuple[str, ...]

    @property
    def why_not_in_grid(self) -> str:
        """Why the job is off the grid ("" when it is in it): the first reason, as grid_membership says."""
        return "" if self.in_grid else self.reasons[0]


def default_max_turns(team_size: int) -> int:
    """The centralized manager's turn budget at a team size (13 for two agents, 26 otherwise)."""
    return 13 if team_size <= 2 else 26


@lru_cache(maxsize=None)
def method_defaults(method: str) -> Mapping[str, Any] | None:
    """The knobs of ``conf/method/<method>.yaml`` (without ``name``); None when there is no file."""
    import yaml

    path = CONF_DIR / "method" / f"{method}.yaml"
    if not path.is_file():
        return None
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return MappingProxyType({k: v for k, v in data.items() if k != "name"})


def _protocol_defaults() -> Mapping[str, Any]:
    return {f.name: f.default for f in fields(JobConfig) if f.name in _PROTOCOL_FIELDS}


# JobConfig fields that change results; conformant jobs keep them at the protocol's values.
_PROTOCOL_FIELDS = ("optimize_max_tests", "optimize_decoding", "eval_decoding", "reflection_decoding")


def grid_membership(cfg: JobConfig) -> tuple[bool, tuple[str, ...], str]:
    """(in grid, source tables, why not) for the job's method, condition and seed."""
    condition = condition_of(cfg)
    if cfg.method == "identity" or cfg.method in MATCHED_BASELINES:
        if not condition_in_grid(condition):
            return False, (), f"no grid cell runs {condition.registry_key} with model {condition.model}"
    else:
        cell = find_cell(cfg.method, condition)
        if cell is None:
            return False, (), (
                f"{cfg.method} on {condition.registry_key} with model {condition.model} is not a grid cell"
            )
        if cfg.seed not in GRID_SEEDS:
            return False, cell.tables, f"seed {cfg.seed} is not a grid seed (0, 1, 2)"
        return True, cell.tables, ""
    if cfg.seed not in GRID_SEEDS:
        return False, (), f"seed {cfg.seed} is not a grid seed (0, 1, 2)"
    return True, (), ""


def conformance(cfg: JobConfig) -> Conformance:
    in_grid, tables, why = grid_membership(cfg)
    reasons: list[str] = [] if in_grid else [why]
    if cfg.budget != GRID_BUDGET:
        reasons.append(f"budget {cfg.budget} (the protocol's is {GRID_BUDGET})")
    if cfg.reflection.id != CONFORMANT_REFLECTION_MODEL:
        reasons.append(f"reflection model {cfg.reflection.id} (the protocol's is {CONFORMANT_REFLECTION_MODEL})")
    if cfg.data != CONFORMANT_DATA:
        reasons.append(f"data {cfg.data} (the protocol uses the hub's LiveCodeBench release)")
    if cfg.release != CONFORMANT_RELEASE:
        reasons.append(f"release {cfg.release} (the protocol's is {CONFORMANT_RELEASE})")
    if not cfg.test.is_default:
        reasons.append(f"test design {cfg.test.design} ({cfg.test.samples} sample(s)); the protocol's is lcb50")
    if cfg.splits is not None:
        reasons.append(f"splits file {cfg.splits} (the protocol's is benchmarks/lcb/lcb_splits.json)")
    if cfg.max_turns != default_max_turns(cfg.team_size):
        reasons.append(f"max_turns {cfg.max_turns} (the protocol's is {default_max_turns(cfg.team_size)})")
    if cfg.topology == "decentralized" and cfg.rounds != 2:
        reasons.append(f"rounds {cfg.rounds} (the protocol's is 2)")
    for name, value in _protocol_defaults().items():
        if getattr(cfg, name) != value:
            reasons.append(f"{name} changed from the protocol's {value}")
    defaults = method_defaults(cfg.method)
    if defaults is not None and dict(cfg.method_params) != dict(defaults):
        changed = sorted(k for k in set(defaults) | set(cfg.method_params)
                         if defaults.get(k) != cfg.method_params.get(k))
        reasons.append(f"method knobs changed from conf/method/{cfg.method}.yaml: {', '.join(changed)}")
    return Conformance(in_grid, not reasons, tables, tuple(reasons))


def jobs_of_sweep(params: Mapping[str, Sequence[str]]) -> Iterator[tuple[str, Condition, int]]:
    """The (method, condition, seed) jobs a cartesian sweep's parameters launch (each value list as
    Hydra's basic sweeper reads it; method, topology and seed must be swept)."""
    keys = list(params)
    for values in itertools.product(*(params[k] for k in keys)):
        choice = dict(zip(keys, values, strict=True))
        topology = choice["topology"]
        size = int(choice.get("topology.team_size", default_team_size(topology)))
        condition = Condition(topology, size, choice.get("communication", DEFAULT_COMMUNICATION),
                              choice.get("model", "qwen"))
        yield choice["method"], condition, int(choice["seed"])
