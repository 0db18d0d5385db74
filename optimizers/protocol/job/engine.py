"""One job of the grid: optimize -> validate (keep or reject) -> test, resumable at any point.

``run_job(cfg)`` is the API the Hydra app calls; it returns the ``result.json`` payload (phase
``all``/``test``) or a short phase record (``optimize``/``validate``). Every phase first looks for
its sealed output and reuses it, so running the same command again continues a killed job, and a
finished job returns at once. The optimizer never sees test ids; test problems are loaded only
after ``selection.json`` is sealed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from optimizers.base import FanoutTracker, JsonlTracker, Tracker
from optimizers.candidate import Candidate
from optimizers.protocol.grid.cells import Conformance
from optimizers.protocol.grid.config import JobConfig
from optimizers.protocol.job.console import log, progress
from optimizers.protocol.job.errors import JobError, PhaseOrderError
from optimizers.protocol.job.evaluation import EvaluationCache
from optimizers.protocol.job.held_out_test import run_held_out_test
from optimizers.protocol.job.jobspec import JobIdentity, validate_config
from optimizers.protocol.job.optimize import optimize_phase
from optimizers.protocol.job.result import summary_line, write_result
from optimizers.protocol.job.seeds import evaluation_seed
from optimizers.protocol.job.splits import SplitData, SplitIds, lcb_loader, selection_split
from optimizers.protocol.job.test_sets import resolve_split_ids
from optimizers.protocol.job.store import JobStore
from optimizers.protocol.job.validate import validate_phase
from optimizers.registry import get_optimizer_class
from topologies import aio

__all__ = ["Job", "JobRuntime", "run_job", "run_job_async", "summary_line"]


@dataclass(frozen=True, slots=True)
class JobRuntime:
    """How to run a job, never what it computes (so none of this is part of the job identity)."""

    tracker: Tracker | None = None  # extra tracker (e.g. W&B) next to the always-on JSONL one
    in_grid: bool | None = None  # None: from the grid definition (optimizers.protocol.grid.cells)
    standing: Conformance | None = None  # the app's cells.conformance(cfg), computed once; None: here
    retry_delay_s: float = 0.5  # pause before an infrastructure retry (times the attempt number)
    client_max_retries: int | None = None  # transport retries inside the model client
    client_backoff_s: float | None = None
    probe_endpoints: bool = True
    client_factory: Callable[[JobConfig], Any] | None = None  # tests/benchmarks: a ready ChatClient
    # Where the task client's endpoint rotation starts: the sweep's job number (jobs 0..N-1 then
    # start on successive endpoints), else the job id's hash.
    route_salt: int | str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


class Job:
    """A job bound to its folder; ``await job.run()`` runs the configured phase(s)."""

    forced_resume: Mapping[str, Any] | None = None  # set when --force-resume crossed code versions

    def __init__(self, cfg: JobConfig, runtime: JobRuntime | None = None) -> None:
        validate_config(cfg)
        self.cfg = cfg
        self.runtime = runtime or JobRuntime()
        self.store = JobStore(cfg.out, evaluation_cache=cfg.evaluation_cache)
        # The protocol's split; the test design (conf/test) may replace its test ids.
        self.split_ids: SplitIds = resolve_split_ids(cfg)
        # Which validation rows a method may search on, and which decide keep-or-reject.
        self.rows = selection_split(self.split_ids, cfg.selection, cfg.selection_size)
        self.base_spec = self._base_spec()
        from optimizers.protocol.job.lcb_system import seed_candidate

        self.seed_candidate: Candidate = seed_candidate(self.base_spec)
        self.identity = JobIdentity.build(
            cfg,
            base_spec=self.base_spec,
            seed_candidate=self.seed_candidate,
            split_ids=self.split_ids,
            override_in_grid=self.runtime.in_grid,
            standing=self.runtime.standing,
        )
        self.job_id, self.cell_id = self.identity.job_id, self.identity.cell_id
        self.condition_id, self.cell = self.identity.condition_id, self.identity.cell
        self.in_grid, self.conformant = self.identity.in_grid, self.identity.conformant

    # ---------------------------------------------------------------- identity

    def _base_spec(self) -> Any:
        from optimizers.protocol.job.lcb_system import base_team_spec

        try:
            return base_team_spec(
                self.cfg.topology,
                team_size=self.cfg.team_size,
                communication=self.cfg.communication,
                rounds=self.cfg.rounds,
                max_turns=self.cfg.max_turns,
            )
        except (ValueError, OSError) as exc:
            raise JobError(f"cannot build the {self.cfg.topology} team: {exc}") from None

    # ---------------------------------------------------------------- runtime (lazy)

    @cached_property
    def data(self) -> SplitData:
        return SplitData(self.split_ids, lcb_loader(self.cfg.data, self.cfg.release))

    @cached_property
    def client(self) -> Any:
        if self.runtime.client_factory is not None:
            return self.runtime.client_factory(self.cfg)
        from optimizers.protocol.job.lcb_system import task_client

        return task_client(
            self.cfg.model,
            max_retries=self.runtime.client_max_retries,
            backoff_s=self.runtime.client_backoff_s,
            probe=self.runtime.probe_endpoints,
            route_salt=self.runtime.route_salt if self.runtime.route_salt is not None else self.job_id,
        )

    @cached_property
    def reflection(self) -> Any:
        from optimizers.protocol.job.lcb_system import reflection_client

        return reflection_client(self.cfg.reflection, probe=self.runtime.probe_endpoints)

    @cached_property
    def system(self) -> Any:
        from optimizers.protocol.job.lcb_system import LcbTeamSystem

        return LcbTeamSystem(
            base_spec=self.base_spec,
            client=self.client,
            problem=self.data.problem,
            optimize_decoding=self.cfg.optimize_decoding,
            eval_decoding=self.cfg.eval_decoding,
            optimize_max_tests=self.cfg.optimize_max_tests,
        )

    @cached_property
    def evaluations(self) -> EvaluationCache:
        cfg = self.cfg
        return EvaluationCache(
            self.store.evaluations,
            self.system,
            condition_id=self.condition_id,
            seed_for=lambda split, problem_id, sample=0: evaluation_seed(self.condition_id, split, problem_id,
                                                                         cfg.seed, sample),
            concurrency=cfg.concurrency,
            max_infrastructure_retries=cfg.max_infrastructure_retries,
            retry_delay_s=self.runtime.retry_delay_s,
            progress=None if cfg.quiet else progress,
        )

    # ---------------------------------------------------------------- phases

    def _connect_models(self) -> None:
        """Resolve (and probe) the models a pending phase will call, before the folder exists.

        An unreachable task or reflection endpoint, from flags or from the environment, must fail
        the job with nothing written; a finished job needs no model and returns at once.
        """
        if self.cfg.phase == "all" and self.store.read("result") is not None:
            return
        _ = self.client
        if self.cfg.phase in ("optimize", "all") and self.store.read("optimization") is None:
            if getattr(get_optimizer_class(self.cfg.method), "needs_reflection", True):
                _ = self.reflection

    async def run(self) -> dict[str, Any]:
        from topologies.heap import settle_for_batches

        self._connect_models()
        settle_for_batches()
        with self.store.lock():
            stored = self.store.ensure_job(self.identity.record(self.seed_candidate, self.split_ids),
                                           force_resume=self.cfg.force_resume)
            if stored["job_id"] != self.job_id:
                self._adopt(stored)
            phase = self.cfg.phase
            if phase == "all":
                saved = self.store.read("result")
                if saved is not None:
                    log(self.cfg, f"job {self.job_id} already complete; returning its result")
                    return saved
            try:
                return await self._run_phase(phase)
            finally:
                await self._close()

    async def _run_phase(self, phase: str) -> dict[str, Any]:
        if phase == "optimize":
            optimization = await self.optimize()
            return {"phase": "optimize", "status": optimization["status"], "cell_id": self.cell_id,
                    "job_id": self.job_id, "out": "optimization.json",
                    "stop_reason": optimization["stop_reason"]}
        if phase == "validate":
            selection = await self.validate(self._require("optimization", "optimize"))
            return {"phase": "validate", "status": "completed", "cell_id": self.cell_id,
                    "job_id": self.job_id, "out": "selection.json",
                    "selected_candidate": selection["selected_candidate"],
                    "fallback_reason": selection["fallback_reason"]}
        if phase == "test":
            optimization = self._require("optimization", "optimize")
            return await self.test(optimization, self._require("selection", "validate"))
        optimization = self.store.read("optimization") or await self.optimize()
        selection = self.store.read("selection") or await self.validate(optimization)
        return await self.test(optimization, selection)

    def _adopt(self, stored: Mapping[str, Any]) -> None:
        """--force-resume: go on under the stored job's ids, and say so in the journals and result."""
        from optimizers.journal import JsonlJournal

        ours = self.identity.spec["code_versions"]
        theirs = stored["spec"].get("code_versions")
        log(self.cfg, f"forced resume: job {stored['job_id']} was started by code versions {theirs}, "
                       f"continuing with {ours}")
        JsonlJournal(self.store.root / "forced_resumes.jsonl").append(
            {"time": time.time(), "job_id": stored["job_id"], "stored_versions": theirs, "code_versions": ours})
        self.forced_resume = {"stored_versions": theirs, "code_versions": ours}
        self.identity = self.identity.adopt(stored)
        self.job_id, self.condition_id = self.identity.job_id, self.identity.condition_id
        self.conformant = False

    def _require(self, name: str, phase: str) -> dict[str, Any]:
        record = self.store.read(name)
        if record is None:
            raise PhaseOrderError(f"{name}.json is missing: run phase={phase} first")
        if record.get("job_id") != self.job_id:
            raise JobError(f"{name}.json belongs to job {record.get('job_id')}, not {self.job_id}")
        return record

    async def _close(self) -> None:
        for name in ("client", "reflection"):
            client = self.__dict__.get(name)
            close = getattr(client, "aclose", None)
            if close is not None:
                try:
                    await close()
                except Exception:  # noqa: BLE001 - closing pools must never mask the result
                    pass

    # ---------------------------------------------------------------- optimize

    # ---------------------------------------------------------------- phases (one module each)

    async def optimize(self) -> dict[str, Any]:
        return await optimize_phase(self)

    async def validate(self, optimization: Mapping[str, Any]) -> dict[str, Any]:
        return await validate_phase(self, optimization)

    async def test(self, optimization: Mapping[str, Any], selection: Mapping[str, Any]) -> dict[str, Any]:
        if selection.get("optimization_sha256") != optimization.get("sha256"):
            raise JobError("selection.json was made from a different optimization.json; remove selection.json")
        if selection.get("condition_id") != self.condition_id:
            raise JobError("selection.json belongs to a different runtime condition")
        test = self.store.read("test")
        if test is None or test.get("selection_id") != selection["selection_id"]:
            test = await self._run_test(selection)
        return self._write_result(optimization, selection, test)

    # Test-only jobs (test_only.TestOnlyJob) replace these two steps of the test phase.
    async def _run_test(self, selection: Mapping[str, Any]) -> dict[str, Any]:
        return await run_held_out_test(self, selection)

    def _write_result(
        self, optimization: Mapping[str, Any], selection: Mapping[str, Any], test: Mapping[str, Any]
    ) -> dict[str, Any]:
        return write_result(self, optimization, selection, test)

    def tracker(self) -> Tracker:
        """The always-on JSONL tracker, fanned out to the runtime's extra one (W&B) when set."""
        base = JsonlTracker(self.store.tracker_path)
        return FanoutTracker(base, self.runtime.tracker) if self.runtime.tracker is not None else base


# ------------------------------------------------------------------------------------- API


async def run_job_async(cfg: JobConfig, runtime: JobRuntime | None = None) -> dict[str, Any]:
    return await Job(cfg, runtime).run()


def run_job(cfg: JobConfig, runtime: JobRuntime | None = None) -> dict[str, Any]:
    """Run the configured phase(s); returns result.json's payload (or a phase record)."""
    return aio.run(run_job_async(cfg, runtime))

