"""The job's configuration as frozen dataclasses.

Hydra (``optimizers.protocol.run``) composes a DictConfig and converts it into a ``JobConfig`` at
once; nothing below the entry point ever sees a DictConfig.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topologies.types import Decoding

PHASES = ("optimize", "validate", "test", "all")
GRID_BUDGET = 600


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A model as configured: alias (``qwen``, ``local``, …), full id and optional endpoints."""

    alias: str
    id: str
    endpoints: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TrackerSpec:
    """Where a job reports live progress: JSONL journals always, plus one W&B run unless ``jsonl``."""

    kind: str = "wandb"  # the default tracker; "jsonl" writes the journals only
    project: str = "lcb-grid"
    mode: str = "offline"
    entity: str | None = None


@dataclass(frozen=True, slots=True)
class JobConfig:
    """One job of the grid: method × cell × seed, plus how to run it (which never changes results)."""

    method: str
    topology: str  # base topology: single, independent, sequential, centralized, decentralized
    model: ModelSpec
    seed: int
    out: Path
    dataset: str = "lcb"
    team_size: int = 4
    communication: str = "freeform"
    rounds: int = 2
    max_turns: int = 26  # centralized manager's turn budget (13 at team size 2); conf/topology
    registry_key: str = ""  # e.g. "centralized_r8"; derived from topology/size/format when empty
    reflection: ModelSpec = ModelSpec("reflection", "Qwen/Qwen3.5-122B-A10B-FP8")
    method_params: Mapping[str, Any] = field(default_factory=dict)
    budget: int = GRID_BUDGET
    phase: str = "all"
    allow_any_cell: bool = False
    data: str = "hf"  # "hf", "builtin", or a path to a JSONL/parquet file
    release: str = "release_latest"
    splits: Path | None = None  # split-id file; default benchmarks/lcb/lcb_splits.json
    evaluation_cache: Path | None = None  # default: <out>/evaluations
    concurrency: int = 8
    optimize_max_tests: int | None = 3  # optimization rollouts: first k hidden tests
    optimize_decoding: Decoding = Decoding(temperature=0.2, top_p=0.9, max_tokens=8192)
    eval_decoding: Decoding = Decoding(temperature=0.0, top_p=0.9, max_tokens=8192)
    reflection_decoding: Decoding = Decoding(temperature=1.0, top_p=1.0, max_tokens=8192)
    max_infrastructure_retries: int = 2
    tracker: TrackerSpec = TrackerSpec()
    quiet: bool = False
    verbose: bool = False  # third-party chatter (W&B, LangChain) on stderr too
    log_level: str = "INFO"
