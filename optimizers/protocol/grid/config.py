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
SELECTION_MODES = ("val", "heldout")
GRID_BUDGET = 600
# Reply limits per phase (reference protocol, spec 1.7): task rollouts in every phase and the
# reflection model. A model's own cap (conf/model/*.yaml ``max_tokens``, e.g. the embedded
# model's 1024) still bounds them. A reply that hits its limit is recorded as truncated, never
# silently parsed as if it were complete.
TASK_MAX_TOKENS = 32768
REFLECTION_MAX_TOKENS = 48000


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A model as configured: alias (``qwen``, ``local``, …), full id and optional endpoints.

    ``cutoff``: the model's training-data cutoff (ISO date, conf/model/*.yaml) when known, so a
    test window can start after it (``test.after=cutoff``)."""

    alias: str
    id: str
    endpoints: tuple[str, ...] = ()
    cutoff: str | None = None


TEST_DESIGNS = ("lcb50", "window")


@dataclass(frozen=True, slots=True)
class TestDesign:
    """Which problems the test phase rolls, and how often (``conf/test/*.yaml``).

    ``lcb50`` (the default, conformant): the reference's 50 eval ids, one greedy roll each.
    ``window``: LCB problems by contest date, strictly after ``after`` and strictly before
    ``before`` (ISO dates; ``after`` may be ``cutoff``, the model's training cutoff), from the
    configured release, never a train or validation id; ``size`` caps it with a seeded draw
    stratified by platform × difficulty. ``samples`` rolls per test problem (``val_samples`` per
    validation problem) with distinct request seeds; more than one needs ``temperature`` > 0
    (LiveCodeBench's convention: 10 samples at 0.2), which then replaces the evaluation
    temperature of validation and test.
    """

    __test__ = False  # not a pytest class

    design: str = "lcb50"
    after: str | None = None
    before: str | None = None
    size: int | None = None
    samples: int = 1
    val_samples: int = 1
    temperature: float | None = None
    draw_seed: int = 0  # the stratified draw's seed: one test set for every method and job seed

    @property
    def is_default(self) -> bool:
        return self == TestDesign()

    def identity(self) -> dict[str, object]:
        """What enters a job's identity (a default design adds nothing, so old job ids hold)."""
        return {"design": self.design, "after": self.after, "before": self.before, "size": self.size,
                "samples": self.samples, "val_samples": self.val_samples, "temperature": self.temperature,
                "draw_seed": self.draw_seed}


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
    optimize_decoding: Decoding = Decoding(temperature=0.2, top_p=0.9, max_tokens=TASK_MAX_TOKENS)
    eval_decoding: Decoding = Decoding(temperature=0.0, top_p=0.9, max_tokens=TASK_MAX_TOKENS)
    reflection_decoding: Decoding = Decoding(temperature=1.0, top_p=1.0, max_tokens=REFLECTION_MAX_TOKENS)
    max_infrastructure_retries: int = 2
    # Keep-or-reject rows: "val" (the reference) decides on all of validation, which methods may
    # also search on; "heldout" keeps ``selection_size`` validation problems out of every
    # method's reach and decides on them alone.
    selection: str = "val"
    selection_size: int = 25
    test: TestDesign = TestDesign()  # test problems and samples per problem (conf/test)
    force_resume: bool = False  # continue a job folder made by other code versions (marked in result)
    # Transfer job: test the deployed candidate of the finished job in this folder under this
    # job's model and topology (never optimizes; optimizers/protocol/job/transfer.py).
    deploy_from: Path | None = None
    tracker: TrackerSpec = TrackerSpec()
    quiet: bool = False
    verbose: bool = False  # third-party chatter (W&B, LangChain) on stderr too
    log_level: str = "INFO"
