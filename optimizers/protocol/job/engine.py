"""One job of the grid: optimize -> validate (keep or reject) -> test, resumable at any point.

``run_job(cfg)`` is the API the Hydra app calls; it returns the ``result.json`` payload (phase
``all``/``test``) or a short phase record (``optimize``/``validate``). Every phase first looks for
its sealed output and reuses it, so running the same command again continues a killed job, and a
finished job returns at once. The optimizer never sees test ids; test problems are loaded only
after ``selection.json`` is sealed.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from optimizers.base import (
    FanoutTracker,
    JsonlTracker,
    OptimizationResult,
    OptimizeContext,
    OptimizerInfrastructureError,
    Tracker,
)
from optimizers.budget import Budget
from optimizers.candidate import Candidate
from optimizers.evaluator import MODE_OPTIMIZE, BudgetedEvaluator, Rollout
from optimizers.journal import canonical_json, read_jsonl, short_hash
from optimizers.protocol.grid.cells import Conformance
from optimizers.protocol.grid.config import JobConfig
from optimizers.protocol.job.errors import JobError, PhaseOrderError
from optimizers.protocol.job.evaluation import Evaluation, EvaluationCache
from optimizers.protocol.job.jobspec import PROTOCOL_ID, JobIdentity, json_safe, registry_key, validate_config
from optimizers.protocol.job.learning_curve import LearningCurve
from optimizers.protocol.job.optimism import optimism
from optimizers.protocol.job.seeds import evaluation_seed, request_seed
from optimizers.protocol.job.selection import decide, find_forbidden_keys
from optimizers.protocol.job.splits import SplitData, SplitIds, lcb_loader, selection_split, split_ids_for
from optimizers.protocol.job.store import JobStore
from optimizers.protocol.job.truncation import (
    count_replies,
    job_truncation,
    reflection_truncation,
    summary_metrics,
)
from optimizers.registry import get_optimizer_class
from topologies import aio

LEARNING_CURVE_EVERY = 10


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
    extra: Mapping[str, Any] = field(default_factory=dict)


def _log(cfg: JobConfig, text: str) -> None:
    if not cfg.quiet:
        print(f"[job] {text}", file=sys.stderr, flush=True)


class Job:
    """A job bound to its folder; ``await job.run()`` runs the configured phase(s)."""

    forced_resume: Mapping[str, Any] | None = None  # set when --force-resume crossed code versions

    def __init__(self, cfg: JobConfig, runtime: JobRuntime | None = None) -> None:
        validate_config(cfg)
        self.cfg = cfg
        self.runtime = runtime or JobRuntime()
        self.store = JobStore(cfg.out, evaluation_cache=cfg.evaluation_cache)
        splits_file = getattr(cfg, "splits", None)
        self.split_ids: SplitIds = split_ids_for(cfg.data, splits_file)
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
            seed_for=lambda split, problem_id: evaluation_seed(self.condition_id, split, problem_id, cfg.seed),
            concurrency=cfg.concurrency,
            max_infrastructure_retries=cfg.max_infrastructure_retries,
            retry_delay_s=self.runtime.retry_delay_s,
            progress=None if cfg.quiet else _progress,
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
                    _log(self.cfg, f"job {self.job_id} already complete; returning its result")
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
        _log(self.cfg, f"forced resume: job {stored['job_id']} was started by code versions {theirs}, "
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

    async def optimize(self) -> dict[str, Any]:
        existing = self.store.read("optimization")
        if existing is not None:
            return existing
        cfg = self.cfg
        search = self.data.search_problems()  # fail early on data problems
        del search
        budget = Budget(cfg.budget)
        evaluator = BudgetedEvaluator(
            self.system,
            budget,
            seed_for=lambda phase, cid, pid, sample: request_seed(self.job_id, phase, cid, pid, sample),
            allowed_ids=self.split_ids.train + self.rows.search,  # never the held-out selection rows
            journal_dir=self.store.optimization_dir,
            concurrency=cfg.concurrency,
            max_infrastructure_retries=cfg.max_infrastructure_retries,
            retry_delay_s=self.runtime.retry_delay_s,
            mode=MODE_OPTIMIZE,
        )
        resumed = evaluator.resumed_rollouts
        curve = LearningCurve(
            self.store.learning_curve_path,
            maximum=cfg.budget,
            seed_candidate_id=self.seed_candidate.id,
            every=LEARNING_CURVE_EVERY,
        )
        curve.start()
        evaluator.add_observer(curve)
        tracker = self._tracker()

        def on_incumbent(candidate: Candidate, score: float | None, charged: int) -> None:
            curve.commit(candidate.id, score, charged)
            tracker.log(charged, {"incumbent/score": score, "incumbent/candidate_id": candidate.id})

        evaluator.add_observer(_tracking_observer(tracker))
        optimizer_cls = get_optimizer_class(cfg.method)
        needs_reflection = getattr(optimizer_cls, "needs_reflection", True)
        ctx = OptimizeContext(
            evaluator=evaluator,
            budget=budget,
            seed=cfg.seed,
            workdir=self.store.native_dir,
            reflection=self.reflection if needs_reflection else None,
            tracker=tracker,
            method_params=dict(cfg.method_params),
            reflection_decoding=cfg.reflection_decoding,
            on_incumbent=on_incumbent,
            team=_team_roster(self.base_spec),
            task_model=self.client,
        )
        _log(cfg, f"optimizing {cfg.method} on {registry_key(cfg)} model={cfg.model.id} seed={cfg.seed} "
                  f"B={cfg.budget}" + (f" (resuming: {resumed} finished rollouts in the journal)" if resumed else ""))
        self.store.native_dir.mkdir(parents=True, exist_ok=True)
        bar = None if cfg.quiet else _progress(f"optimize {cfg.method}", cfg.budget)
        if bar is not None:
            evaluator.add_observer(lambda rollout, b: bar.update(1) if rollout.charged else None)
        started = time.monotonic()
        status, failure_kind, error = "completed", None, None
        try:
            result = await optimizer_cls().optimize(
                self.seed_candidate, train=list(self.split_ids.train), val=list(self.rows.search), ctx=ctx
            )
            await evaluator.drain()
        except OptimizerInfrastructureError as exc:
            await evaluator.drain()
            status, failure_kind, error = "failed", "infrastructure_invalid", str(exc)[:2000]
            result = OptimizationResult(best=self.seed_candidate, stop_reason="infrastructure_failure")
        except JobError:
            raise
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            raise JobError(
                f"optimization failed ({type(exc).__name__}: {exc}); its journals are kept, "
                "rerun the same command to resume"
            ) from None
        finally:
            if bar is not None:
                bar.close()
        if error is not None:
            # One line, also in quiet runs (after the bar): the job goes on with the seed, and says why.
            print(f"warning: optimization failed: {' '.join(error.split())}", file=sys.stderr, flush=True)
        self._check_result(result, budget)
        snapshot = budget.snapshot()
        evaluator.note_candidate(result.best)
        final_score = (result.metadata or {}).get("incumbent_val_score")
        curve.finish(charged=snapshot["charged"], final_candidate_id=result.best.id,
                     final_score=final_score if isinstance(final_score, int | float) else None,
                     stop_reason=result.stop_reason)
        reflection_usage = _reflection_usage(result, ctx.reflection)
        payload = {
            "job_id": self.job_id,
            "cell_id": self.cell_id,
            "method": cfg.method,
            "status": status,
            "failure_kind": failure_kind,
            "error": error,
            "stop_reason": result.stop_reason,
            "seed_candidate": self.seed_candidate.to_dict(),
            "incumbent_candidate": result.best.to_dict(),
            "budget": snapshot,
            "usage": {"task": attempts_usage(self.store.optimization_dir / "attempts.jsonl"),
                      "reflection": reflection_usage},
            "uncharged_calls": uncharged_calls(result),
            "proposals": proposals_evaluated(self.store.optimization_dir / "rollouts.jsonl", self.seed_candidate.id),
            "elapsed_seconds": round(time.monotonic() - started, 3),
            "history": json_safe(list(result.history)),
            "metadata": json_safe(dict(result.metadata)),
            "training_ids": list(self.split_ids.train),
            "validation_ids": list(self.rows.search),  # what the method was given
            "selection_mode": self.rows.mode,
        }
        # What the outcome is, without timings: equal for an interrupted and an uninterrupted run.
        payload["optimization_id"] = short_hash(
            {k: payload[k] for k in ("job_id", "status", "failure_kind", "stop_reason", "incumbent_candidate",
                                     "budget", "history", "metadata")}, 24)
        payload["truncation"] = {
            "task": count_replies(read_jsonl(self.store.optimization_dir / "rollouts.jsonl")),
            "reflection": reflection_truncation(reflection_usage),
        }
        record = self.store.write("optimization", payload)
        tracker.summary({"optimization/charged": snapshot["charged"], "optimization/status": status,
                         "optimization/stop_reason": result.stop_reason,
                         **uncharged_summary(payload["uncharged_calls"])})
        _log(cfg, f"optimization {status}: stop={result.stop_reason} charged={snapshot['charged']}/{cfg.budget} "
                  f"infra={snapshot['infrastructure_failures']}")
        return record

    def _check_result(self, result: Any, budget: Budget) -> None:
        from optimizers.protocol.job.lcb_system import apply_candidate

        if not isinstance(result, OptimizationResult) or not isinstance(result.best, Candidate):
            raise JobError(f"method {self.cfg.method} returned {type(result).__name__}, not an OptimizationResult")
        if budget.reserved:
            raise JobError(f"method {self.cfg.method} left {budget.reserved} rollout(s) running")
        if budget.charged > budget.maximum:  # the budget makes this impossible; keep the guard
            raise JobError("budget overspent")
        leaks = list(find_forbidden_keys({"history": list(result.history), "metadata": dict(result.metadata)}))
        if leaks:
            raise JobError(f"method {self.cfg.method} output has test-only keys: {', '.join(leaks[:5])}")
        try:
            canonical_json({"history": list(result.history), "metadata": dict(result.metadata)})
        except (TypeError, ValueError) as exc:
            raise JobError(f"method {self.cfg.method} returned history/metadata that is not JSON: {exc}") from None
        try:
            apply_candidate(self.base_spec, result.best)
        except ValueError as exc:
            raise JobError(f"method {self.cfg.method} returned an unusable candidate: {exc}") from None

    def _tracker(self) -> Tracker:
        base = JsonlTracker(self.store.tracker_path)
        return FanoutTracker(base, self.runtime.tracker) if self.runtime.tracker is not None else base

    # ---------------------------------------------------------------- validate

    async def validate(self, optimization: Mapping[str, Any]) -> dict[str, Any]:
        existing = self.store.read("selection")
        if existing is not None:
            return existing
        from optimizers.protocol.job.lcb_system import apply_candidate

        cfg = self.cfg
        self.data.search_problems()
        seed = self.seed_candidate
        incumbent = Candidate.from_dict(optimization["incumbent_candidate"])
        forced: str | None = None
        if optimization["status"] != "completed":
            forced = "infrastructure_invalid_optimization"
        elif incumbent == seed:
            forced = "identical_candidate"
        else:
            try:
                apply_candidate(self.base_spec, incumbent)
            except ValueError:
                forced = "invalid_incumbent_candidate"
        val_ids = list(self.rows.selection)
        _log(cfg, f"validating seed vs incumbent on {len(val_ids)} problems ({self.rows.mode} selection)")
        baseline = await self.evaluations.evaluate(seed, "val", val_ids, evaluation_seed=cfg.seed)
        candidate_eval: Evaluation | None = None
        if forced is None:
            candidate_eval = await self.evaluations.evaluate(incumbent, "val", val_ids, evaluation_seed=cfg.seed)
        elif forced == "identical_candidate":
            candidate_eval = baseline
        decision = decide(
            val_ids, baseline.rollouts, candidate_eval.rollouts if candidate_eval else None, forced_reason=forced
        )
        deployed = incumbent if decision.deploy_incumbent else seed
        payload: dict[str, Any] = {
            "job_id": self.job_id,
            "cell_id": self.cell_id,
            "condition_id": self.condition_id,
            "optimization_id": optimization["optimization_id"],
            "seed_candidate": seed.to_dict(),
            "incumbent_candidate": incumbent.to_dict(),
            "deployed_candidate": deployed.to_dict(),
            "selected_candidate": decision.selected_candidate,
            "fallback_reason": decision.fallback_reason,
            "baseline_validation_score": decision.baseline_score,
            "incumbent_validation_score": decision.incumbent_score,
            "validation_delta": decision.validation_delta,
            "baseline_validation_id": baseline.evaluation_id,
            "incumbent_validation_id": candidate_eval.evaluation_id if candidate_eval else None,
            "validation_ids": val_ids,
            "baseline_validation_scores": _scores(baseline.rollouts),
            "incumbent_validation_scores": _scores(candidate_eval.rollouts) if candidate_eval else None,
            "evaluation_seed": cfg.seed,
            "test_exposed": False,
        }
        payload["selection_id"] = short_hash(payload, 24)
        payload["optimization_sha256"] = optimization["sha256"]  # verified before test, not hashed
        # Diagnostics (not part of the decision, so not hashed).
        payload["selection_mode"] = self.rows.mode
        payload["optimism"] = optimism(
            read_jsonl(self.store.optimization_dir / "rollouts.jsonl"),
            incumbent_id=incumbent.id, seed_id=seed.id,
            incumbent_selection_score=decision.incumbent_score if forced != "identical_candidate"
            else decision.baseline_score,
            seed_selection_score=decision.baseline_score,
        )
        payload["truncation"] = count_replies(
            list(baseline.rollouts) + (list(candidate_eval.rollouts) if candidate_eval is not baseline and
                                       candidate_eval is not None else []))
        record = self.store.write("selection", payload)
        _log(cfg, f"selection sealed: {decision.selected_candidate} (fallback={decision.fallback_reason}, "
                  f"seed={decision.baseline_score}, incumbent={decision.incumbent_score})")
        return record

    # ---------------------------------------------------------------- test

    async def test(self, optimization: Mapping[str, Any], selection: Mapping[str, Any]) -> dict[str, Any]:
        if selection.get("optimization_sha256") != optimization.get("sha256"):
            raise JobError("selection.json was made from a different optimization.json; remove selection.json")
        if selection.get("condition_id") != self.condition_id:
            raise JobError("selection.json belongs to a different runtime condition")
        test = self.store.read("test")
        if test is None or test.get("selection_id") != selection["selection_id"]:
            test = await self._run_test(selection)
        return self._write_result(optimization, selection, test)

    async def _run_test(self, selection: Mapping[str, Any]) -> dict[str, Any]:
        cfg = self.cfg
        self.data.unlock_test(selection, self.rows.selection)
        self.data.test_problems()
        seed = self.seed_candidate
        deployed = Candidate.from_dict(selection["deployed_candidate"])
        ids = list(self.split_ids.test)
        _log(cfg, f"testing seed vs deployed ({selection['selected_candidate']}) on {len(ids)} problems")
        baseline = await self.evaluations.evaluate(seed, "test", ids, evaluation_seed=cfg.seed)
        # The same candidate is the same content-addressed evaluation: a kept seed has delta 0.
        deployed_eval = await self.evaluations.evaluate(deployed, "test", ids, evaluation_seed=cfg.seed)
        valid = baseline.valid and deployed_eval.valid
        baseline_mean, deployed_mean = baseline.mean, deployed_eval.mean
        delta = round(100.0 * (deployed_mean - baseline_mean), 6) if valid else None  # type: ignore[operator]
        payload = {
            "job_id": self.job_id,
            "selection_id": selection["selection_id"],
            "condition_id": self.condition_id,
            "evaluation_seed": cfg.seed,
            "baseline_evaluation_id": baseline.evaluation_id,
            "deployed_evaluation_id": deployed_eval.evaluation_id,
            "example_ids": ids,
            # Aligned with example_ids, so reports can break pass@1 down without reloading data.
            "difficulties": [self.data.problem(pid).difficulty for pid in ids],
            "platforms": [self.data.problem(pid).platform for pid in ids],
            "baseline_scores": _scores(baseline.rollouts),
            "deployed_scores": _scores(deployed_eval.rollouts),
            "baseline_status": [r.status.value for r in baseline.rollouts],
            "deployed_status": [r.status.value for r in deployed_eval.rollouts],
            "valid_for_aggregation": valid,
            "baseline_mean": baseline_mean,
            "deployed_mean": deployed_mean,
            "delta_pp": delta,
            "fallback_reason": selection["fallback_reason"],
            "selected_candidate": selection["selected_candidate"],
            "usage": {"baseline": baseline.usage(), "deployed": deployed_eval.usage()},
            "search_budget_charged": 0,
            "truncation": count_replies(list(baseline.rollouts) + (
                list(deployed_eval.rollouts) if deployed_eval.evaluation_id != baseline.evaluation_id else [])),
        }
        record = self.store.write("test", payload)
        _log(cfg, f"test: seed={baseline_mean} deployed={deployed_mean} delta_pp={delta}")
        return record

    def _write_result(
        self, optimization: Mapping[str, Any], selection: Mapping[str, Any], test: Mapping[str, Any]
    ) -> dict[str, Any]:
        budget = optimization["budget"]
        truncation = job_truncation(
            optimize=(optimization.get("truncation") or {}).get("task") or {},
            validation=selection.get("truncation") or {},
            test=test.get("truncation") or {},
            reflection=(optimization.get("truncation") or {}).get("reflection") or {},
        )
        payload = {
            "protocol": PROTOCOL_ID,
            "status": "completed",
            "job_id": self.job_id,
            "cell": self.cell,
            "cell_id": self.cell_id,
            "seed": self.cfg.seed,
            "condition_id": self.condition_id,
            "conformant": self.conformant,
            "in_grid": self.in_grid,
            "optimization": {
                "status": optimization["status"],
                "failure_kind": optimization["failure_kind"],
                "error": optimization.get("error"),  # the cause when the optimization failed
                "stop_reason": optimization["stop_reason"],
                "budget": {
                    "maximum": budget["maximum"],
                    "charged": budget["charged"],
                    "infrastructure_failures": budget["infrastructure_failures"],
                    "retries": budget["retries"],
                    "unusable_rollouts": budget["unusable_rollouts"],
                },
                "usage": optimization["usage"],
                "proposals": optimization.get("proposals"),  # absent in jobs optimized before it existed
                "elapsed_seconds": optimization["elapsed_seconds"],
                "incumbent_candidate_id": optimization["incumbent_candidate"]["id"],
                "optimization_id": optimization["optimization_id"],
            },
            "selection": {
                "selection_id": selection["selection_id"],
                "selected_candidate": selection["selected_candidate"],
                "deployed_candidate_id": selection["deployed_candidate"]["id"],
                "fallback_reason": selection["fallback_reason"],
                "baseline_validation_score": selection["baseline_validation_score"],
                "incumbent_validation_score": selection["incumbent_validation_score"],
                "validation_delta": selection["validation_delta"],
                "mode": selection.get("selection_mode", "val"),
                "validation_ids": selection["validation_ids"],
                "optimism": selection.get("optimism"),
            },
            # Judge/probe model calls that are not charged rollouts (COST_SCHEMA); {} when none.
            "uncharged_calls": optimization.get("uncharged_calls") or {},
            "test": {
                key: test[key]
                for key in ("example_ids", "baseline_scores", "deployed_scores", "baseline_mean",
                            "deployed_mean", "delta_pp", "valid_for_aggregation")
            },
            "truncation": truncation,
            "code_versions": self.identity.spec.get("code_versions"),
            **({"forced_resume": dict(self.forced_resume)} if self.forced_resume else {}),
        }
        record = self.store.write("result", payload)
        self._tracker().summary({"test/baseline_mean": test["baseline_mean"],
                                 "test/deployed_mean": test["deployed_mean"], "test/delta_pp": test["delta_pp"],
                                 "selection/fallback_reason": selection["fallback_reason"],
                                 "selection/optimism_gap_pp": (selection.get("optimism") or {}).get("optimism_gap_pp"),
                                 **summary_metrics(truncation)})
        return record


# ------------------------------------------------------------------------------------- helpers


def _scores(rollouts: tuple[Rollout, ...]) -> list[float | None]:
    return [r.score if r.usable else None for r in rollouts]


def attempts_usage(path: Path) -> dict[str, int]:
    """Token/call totals over every journaled attempt (also those of earlier, killed processes)."""
    total: dict[str, int] = {"attempts": 0}
    for record in read_jsonl(path):
        total["attempts"] += 1
        for key, value in (record.get("usage") or {}).items():
            total[key] = total.get(key, 0) + int(value)
    return total


def proposals_evaluated(path: Path, seed_id: str) -> dict[str, int]:
    """How many candidates other than the seed got charged rollouts, and how many rollouts they
    got: the first thing to check in a small run is that the method proposed something and tested it."""
    per_candidate: dict[str, int] = {}
    for record in read_jsonl(path):
        if record.get("charged") and record.get("candidate_id") != seed_id:
            per_candidate[record["candidate_id"]] = per_candidate.get(record["candidate_id"], 0) + 1
    return {"candidates_evaluated": len(per_candidate), "rollouts": sum(per_candidate.values())}


def _reflection_usage(result: Any, client: Any) -> dict[str, Any] | None:
    """The method's own reflection totals when it reports them (they include calls replayed from
    its journal after a resume); else what the client counted in this process."""
    reported = (result.metadata or {}).get("reflection") if result is not None else None
    if isinstance(reported, Mapping) and "calls" in reported:
        return json_safe(dict(reported))
    return _client_usage(client)


UNCHARGED_KEYS = ("calls", "failed", "truncated", "prompt_tokens", "completion_tokens")  # truncated: cut, still used


def uncharged_calls(result: Any) -> dict[str, dict[str, int]]:
    """``metadata["uncharged_calls"]`` of a method, checked and normalised (COST_SCHEMA):
    ``{purpose: {calls, failed, truncated, prompt_tokens, completion_tokens}}``; {} when it reports none."""
    reported = (result.metadata or {}).get("uncharged_calls") if result is not None else None
    if not isinstance(reported, Mapping):
        return {}
    out: dict[str, dict[str, int]] = {}
    for purpose, counts in sorted(reported.items()):
        if not isinstance(counts, Mapping):
            raise JobError(f"metadata.uncharged_calls.{purpose} is not an object")
        out[str(purpose)] = {key: int(counts.get(key, 0) or 0) for key in UNCHARGED_KEYS}
    return out


def uncharged_summary(calls: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    """W&B summary keys ``uncharged/<purpose>/<calls|prompt_tokens|completion_tokens>``."""
    return {f"uncharged/{purpose}/{key}": int(counts.get(key, 0))
            for purpose, counts in calls.items() for key in ("calls", "prompt_tokens", "completion_tokens")}


def _client_usage(client: Any) -> dict[str, int] | None:
    usage_by_role = getattr(client, "usage_by_role", None)
    if usage_by_role is None:
        return None
    total: dict[str, int] = {}
    for usage in usage_by_role().values():
        for key in ("calls", "prompt_tokens", "completion_tokens", "tool_calls"):
            total[key] = total.get(key, 0) + int(getattr(usage, key, 0))
    return total


def _team_roster(spec: Any) -> Any:
    from topologies.teams.layouts import team_roster

    return team_roster(spec.topology, spec.team_size)


def _tracking_observer(tracker: Tracker) -> Callable[[Rollout, Budget], None]:
    def observe(rollout: Rollout, budget: Budget) -> None:
        if rollout.charged:
            tracker.log(budget.charged, {"rollout/score": rollout.score, "budget/charged": budget.charged,
                                         "rollout/problem_id": rollout.problem_id,
                                         "rollout/candidate_id": rollout.candidate_id})
        else:
            tracker.log(budget.charged, {"rollout/unusable": 1, "rollout/status": rollout.status.value})

    return observe


def _progress(description: str, total: int) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=description, file=sys.stderr, leave=False, dynamic_ncols=True)


# ------------------------------------------------------------------------------------- API


async def run_job_async(cfg: JobConfig, runtime: JobRuntime | None = None) -> dict[str, Any]:
    return await Job(cfg, runtime).run()


def run_job(cfg: JobConfig, runtime: JobRuntime | None = None) -> dict[str, Any]:
    """Run the configured phase(s); returns result.json's payload (or a phase record)."""
    return aio.run(run_job_async(cfg, runtime))


def summary_line(result: Mapping[str, Any]) -> dict[str, Any]:
    """The one JSON line the app prints on stdout."""
    if "phase" in result:
        return {k: result.get(k) for k in ("phase", "status", "cell_id", "out", "stop_reason",
                                          "selected_candidate", "fallback_reason") if k in result}
    test = result.get("test", {})
    return {
        "status": result.get("status"),
        "cell_id": result.get("cell_id"),
        "baseline_mean": test.get("baseline_mean"),
        "deployed_mean": test.get("deployed_mean"),
        "delta_pp": test.get("delta_pp"),
        "valid_for_aggregation": test.get("valid_for_aggregation"),
        "fallback_reason": result.get("selection", {}).get("fallback_reason"),
    }

