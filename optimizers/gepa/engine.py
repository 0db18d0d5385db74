"""One run of the ``gepa`` engine inside a job: what every method built on it shares.

GEPA and MAMUT-GEPA differ in their adapter (what the reflection model reads, who writes the
proposal) and in their limits; everything else is this module:

- ``EngineRun`` builds the candidate book, the watch (stopper), the bridge to the job's event
  loop, the counted reflection model, the rollout guard, the progress callbacks and the engine
  log; ``run`` drives the engine in a worker thread and turns its ending into a stop reason or
  an ``OptimizerInfrastructureError``;
- ``EngineProgress`` turns gepa callbacks into the method's history, tracker rows and JSON state.

Resume is by replay (the engine is deterministic given its seed, the rollout journal and the
reflection journal), so no engine state is pickled.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from optimizers.base import OptimizeContext, OptimizerInfrastructureError
from optimizers.candidate import Candidate
from optimizers.gepa.adapter import (
    STOP_BUDGET,
    CandidateBook,
    GEPAWatch,
    LoopBridge,
    MetricCallCapReached,
)
from optimizers.journal import JsonlJournal
from optimizers.reflection import ReflectionModel, RolloutGuard


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """The engine knobs every method on it has (each method names them in its own yaml)."""

    candidate_selection: str  # pareto | current_best | epsilon_greedy | top_k_pareto
    module_selector: str  # round_robin | all
    use_merge: bool
    max_merge_invocations: int
    reflection_minibatch_size: int
    skip_perfect_score: bool
    perfect_score: float
    seed_offset: int  # added to the job seed
    plateau_patience: int | None  # full validation evals without a new best; None: off
    metric_call_cap: int | None
    cap_stop_reason: str
    hard_metric_cap: bool  # True: refuse a batch that would cross the cap (not only between iterations)
    cap_counts_charged: bool  # True: the cap counts charged rollouts (cache hits are free), else engine calls
    max_idle_iterations: int
    max_unusable_rollouts: int


class _EngineLog:
    """gepa's logger: its lines go to a journal in the method's folder (stdout is for JSON)."""

    def __init__(self, journal: JsonlJournal) -> None:
        self.journal = journal

    def log(self, message: str) -> None:
        self.journal.append({"time": time.time(), "message": str(message)})


class EngineProgress:
    """gepa callbacks -> our history, tracker and JSON state (one row per validation evaluation)."""

    def __init__(self, method: str, ctx: OptimizeContext, book: CandidateBook, watch: GEPAWatch,
                 bridge: LoopBridge, val_ids: Sequence[str]) -> None:
        self.method = method
        self.ctx = ctx
        self.book = book
        self.watch = watch
        self.bridge = bridge
        self.val_ids = list(val_ids)
        self.history: list[dict[str, Any]] = []
        self.proposals = 0
        self.merges = 0

    def on_candidate_selected(self, event: Any) -> None:
        self.book.current_parent = self.book.candidate(event["candidate"])

    def on_proposal_end(self, event: Any) -> None:
        self.proposals += 1

    def on_merge_attempted(self, event: Any) -> None:
        self.merges += 1

    def on_iteration_start(self, event: Any) -> None:
        self.watch.on_iteration_start(event)

    def on_iteration_end(self, event: Any) -> None:
        self.watch.on_iteration_end(event)

    def on_valset_evaluated(self, event: Any) -> None:
        candidate = self.book.candidate(event["candidate"])
        seed = event["iteration"] == 0
        complete = candidate.id not in self.book.val_incomplete and event["num_examples_evaluated"] == len(
            self.val_ids)
        average = float(event["average_score"])
        if complete:
            self.watch.note_full_eval(average, seed=seed)
        best, best_score = self.book.best(self.val_ids)
        row = {
            "event": "seed_validation" if seed else "validation",
            "iteration": int(event["iteration"]),
            "candidate_id": candidate.id,
            "parent_id": candidate.parent,
            "val_score": average if complete else None,
            "complete": complete,
            "incumbent_id": best.id,
            "incumbent_val_score": best_score,
            "charged": self.ctx.budget.charged,
        }
        self.history.append(row)
        self.bridge.call_soon(self._publish, row, candidate, best)

    def _publish(self, row: dict[str, Any], candidate: Candidate, incumbent: Candidate) -> None:
        # On the job's loop: trackers need not be thread-safe.
        self.ctx.commit_incumbent(incumbent, row["incumbent_val_score"], charged=row["charged"])
        self.ctx.tracker.log(row["charged"], {f"{self.method}/{k}": v for k, v in row.items()
                                              if isinstance(v, (int, float)) and v is not None})
        self.ctx.tracker.log_candidate(candidate, method=self.method, val_score=row["val_score"])
        self.ctx.save_state(self.method, {"history": self.history, "candidates": self.book.order})


class EngineRun:
    """Everything one method's run of the gepa engine needs besides its adapter."""

    def __init__(self, method: str, seed: Candidate, keys: Sequence[str], *, train: Sequence[str],
                 val: Sequence[str], ctx: OptimizeContext, settings: EngineSettings) -> None:
        self.method = method
        self.ctx = ctx
        self.seed = seed
        self.keys = tuple(keys)
        self.train = list(train)
        self.val = list(val)
        self.settings = settings
        self.watch = GEPAWatch(
            budget=ctx.budget,
            min_budget_for_iteration=2 * settings.reflection_minibatch_size,  # a parent and a child minibatch
            plateau_patience=settings.plateau_patience,
            metric_call_cap=settings.metric_call_cap,
            max_idle_iterations=settings.max_idle_iterations,
            cap_stop_reason=settings.cap_stop_reason,
            hard_metric_cap=settings.hard_metric_cap,
            cap_counts_charged=settings.cap_counts_charged,
            charged_at_start=ctx.budget.charged,
        )
        self.bridge = LoopBridge(asyncio.get_running_loop(), self.watch)
        self.book = CandidateBook(seed=seed, keys=self.keys)
        self.book.candidate(self.seed_texts())
        self.reflection = ReflectionModel.from_context(ctx, method)
        self.guard = RolloutGuard(method, settings.max_unusable_rollouts)
        self.progress = EngineProgress(method, ctx, self.book, self.watch, self.bridge, val)
        ctx.workdir.mkdir(parents=True, exist_ok=True)
        self.engine_log = _EngineLog(JsonlJournal(ctx.workdir / f"{method}_engine.jsonl"))
        self.engine_best: int | None = None

    def seed_texts(self) -> dict[str, str]:
        return {k: self.seed.components[k] for k in self.keys}

    async def run(self, adapter: Any, **method_options: Any) -> None:
        """Run ``gepa.optimize`` over ``adapter`` in a worker thread (``method_options``: the
        method's own engine arguments, e.g. its reflection LM and templates).

        Nothing runs when not even the seed's validation pass fits in the budget. A fatal
        condition the adapter noted (infrastructure, dead reflection model) is raised as
        ``OptimizerInfrastructureError``; the engine's own errors propagate unchanged, except
        ``MetricCallCapReached``, which is a stop.
        """
        if self.ctx.budget.remaining < len(self.val):
            self.watch.stop_reason = STOP_BUDGET
            return
        from gepa import optimize as gepa_optimize

        settings = self.settings

        def start_engine() -> Any:
            return gepa_optimize(
                seed_candidate=self.seed_texts(),
                trainset=self.train,
                valset=self.val,
                adapter=adapter,
                candidate_selection_strategy=settings.candidate_selection,
                skip_perfect_score=settings.skip_perfect_score,
                perfect_score=settings.perfect_score,
                reflection_minibatch_size=settings.reflection_minibatch_size,
                module_selector=settings.module_selector,
                use_merge=settings.use_merge,
                max_merge_invocations=settings.max_merge_invocations,
                seed=self.ctx.seed + settings.seed_offset,
                stop_callbacks=[self.watch],
                logger=self.engine_log,
                callbacks=[self.progress],
                run_dir=None,  # gepa would pickle its state there; we resume by replay instead
                track_best_outputs=False,
                display_progress_bar=False,
                raise_on_exception=True,
                **method_options,
            )

        engine_error: BaseException | None = None
        try:
            result = await asyncio.to_thread(start_engine)
            self.engine_best = int(result.best_idx)
        except MetricCallCapReached:
            self.watch.stop_reason = self.watch.stop_reason or self.watch.cap_stop_reason
        except BaseException as exc:  # noqa: BLE001 - classified below
            engine_error = exc
        finally:
            self.watch.cancelled = True  # an engine thread still running stops at its next call
        if self.watch.fatal is not None:
            if isinstance(self.watch.fatal, OptimizerInfrastructureError):
                raise self.watch.fatal
            raise OptimizerInfrastructureError(str(self.watch.fatal)) from self.watch.fatal
        if engine_error is not None:
            raise engine_error

    def metadata(self, params: Any) -> dict[str, Any]:
        """What every method on the engine reports (the method adds its own keys)."""
        _, best_score = self.book.best(self.val)
        return {
            "engine": "gepa",
            "stop_detail": self.watch.stop_reason,
            "components": list(self.keys),
            "metric_call_cap": self.watch.metric_call_cap,
            "candidates": len(self.book.order),
            "full_validation_evals": self.watch.full_evals,
            "proposals": self.progress.proposals,
            "merge_attempts": self.progress.merges,
            "incumbent_val_score": best_score,
            "engine_best_candidate_index": self.engine_best,
            "charged_rollouts": self.ctx.budget.charged,
            "reflection": self.reflection.usage(),
            "params": params_dict(params),
        }


# Engine knobs that GEPA and MAMUT-GEPA name alike in their yaml (yaml name -> EngineSettings field).
_SHARED_KNOBS = {"use_merge": "use_merge", "max_merge_invocations": "max_merge_invocations",
                 "reflection_minibatch_size": "reflection_minibatch_size", "skip_perfect_score": "skip_perfect_score",
                 "perfect_score": "perfect_score", "seed": "seed_offset", "early_stop_patience": "plateau_patience",
                 "max_idle_iterations": "max_idle_iterations", "max_unusable_rollouts": "max_unusable_rollouts"}


def shared_knobs(params: Any) -> dict[str, Any]:
    """The ``EngineSettings`` fields a method's params give under the shared knob names."""
    return {field: getattr(params, knob) for knob, field in _SHARED_KNOBS.items()}


def params_dict(params: Any) -> dict[str, Any]:
    return {k: getattr(params, k) for k in params.__dataclass_fields__}


def component_keys(seed: Candidate, prefixes: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(k for k in seed.components if k.startswith(prefixes))

