"""GEPA: reflective prompt evolution with a per-instance Pareto front (Agrawal et al., 2025).

Built on the ``gepa`` package's engine (not DSPy). Each iteration the engine picks a parent from
the Pareto front over validation problems, picks the next component round-robin, runs the parent
on a train minibatch (3 rollouts) with traces, asks the reflection model for a new text of that
component from the traces *and our grader feedback*, runs the child on the same minibatch, and
if the child is strictly better evaluates it on all of validation and adds it to the pool.
Merges of two lineages are tried occasionally.

Budget: the engine's metric calls are problem evaluations; ours are charged rollouts (cached
repeats are free). The engine never gets more than the job's budget: it stops between iterations
when the budget cannot pay one proposal (``rollout_budget_spent``), after ``early_stop_patience``
full validation evaluations without a new best (``full_eval_plateau``), or when its metric
calls reach ``max_full_evals`` x (|train| + |val|) (``max_full_evals``). A rollout requested past
the budget comes back unrun; the candidate it belonged to is then never chosen.

The incumbent is the candidate with the best mean over a *complete* validation evaluation
(ties keep the earlier one, so the seed wins ties). Resume: the engine is deterministic given its
seed, the rollout journal and the reflection journal, so a restarted job replays both and goes
on where it stopped (no pickled engine state).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optimizers.base import OptimizationResult, OptimizeContext, Optimizer, OptimizerInfrastructureError
from optimizers.candidate import PROTOCOL_PREFIX, ROLE_PREFIX, Candidate
from optimizers.gepa.adapter import (
    STOP_BUDGET,
    CandidateBook,
    GEPAReflectionLM,
    GEPAWatch,
    LcbGEPAAdapter,
    LoopBridge,
    reflection_templates,
)
from optimizers.journal import JsonlJournal
from optimizers.reflection import ReflectionModel, RolloutGuard, params_from
from optimizers.registry import register_optimizer

COMPONENT_SETS = {
    "all": (ROLE_PREFIX, PROTOCOL_PREFIX),  # role prompts and editable protocol parts
    "roles": (ROLE_PREFIX,),
}


@dataclass(frozen=True, slots=True)
class GEPAParams:
    """Knobs (conf/method/gepa.yaml). Defaults follow the reference's GEPA policy."""

    max_full_evals: int | None = 5  # metric-call cap = max_full_evals x (|train| + |val|); null: none
    reflection_minibatch_size: int = 3
    candidate_selection_strategy: str = "pareto"  # pareto | current_best | epsilon_greedy | top_k_pareto
    component_selector: str = "round_robin"  # round_robin | all
    components: str = "roles"  # roles: role prompts only (the reference, spec 2.2) | all: + protocol/*
    use_merge: bool = True
    max_merge_invocations: int = 5
    early_stop_patience: int | None = 3  # full validation evals without a new best; null: off
    skip_perfect_score: bool = True
    perfect_score: float = 1.0
    seed: int = 0  # added to the job seed
    max_idle_iterations: int = 20  # iterations in a row that charge nothing before giving up
    max_unusable_rollouts: int = 0  # infrastructure-failed rollouts tolerated before failing

    def check(self) -> None:
        if self.reflection_minibatch_size < 1:
            raise ValueError("gepa: reflection_minibatch_size must be >= 1")
        if self.components not in COMPONENT_SETS:
            raise ValueError(f"gepa: components must be one of {', '.join(COMPONENT_SETS)}")
        if self.component_selector not in ("round_robin", "all"):
            raise ValueError("gepa: component_selector must be round_robin or all")
        if self.candidate_selection_strategy not in ("pareto", "current_best", "epsilon_greedy", "top_k_pareto"):
            raise ValueError("gepa: unknown candidate_selection_strategy")
        if self.max_full_evals is not None and self.max_full_evals < 1:
            raise ValueError("gepa: max_full_evals must be >= 1 (or null)")


class _EngineLog:
    """gepa's logger: its lines go to a journal in the method's folder (stdout is for JSON)."""

    def __init__(self, journal: JsonlJournal) -> None:
        self.journal = journal

    def log(self, message: str) -> None:
        self.journal.append({"time": time.time(), "message": str(message)})


class _Progress:
    """gepa callbacks -> our history, tracker and JSON state (one row per validation evaluation)."""

    def __init__(self, ctx: OptimizeContext, book: CandidateBook, watch: GEPAWatch, bridge: LoopBridge,
                 val_ids: Sequence[str]) -> None:
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
        self.ctx.tracker.log(row["charged"], {f"gepa/{k}": v for k, v in row.items()
                                              if isinstance(v, (int, float)) and v is not None})
        self.ctx.tracker.log_candidate(candidate, method="gepa", val_score=row["val_score"])
        self.ctx.save_state("gepa", {"history": self.history, "candidates": self.book.order})


@register_optimizer("gepa")
class GEPAOptimizer(Optimizer):
    @classmethod
    def check_params(cls, params: Mapping[str, Any]) -> None:
        """Refuse unknown or malformed knobs before a job starts (ValueError, one line)."""
        params_from(GEPAParams, params, "gepa")

    async def optimize(
        self, seed: Candidate, *, train: Sequence[str], val: Sequence[str], ctx: OptimizeContext
    ) -> OptimizationResult:
        params: GEPAParams = params_from(GEPAParams, ctx.method_params, "gepa")
        from gepa import optimize as gepa_optimize

        keys = tuple(k for k in seed.components if k.startswith(COMPONENT_SETS[params.components]))
        role_names = sorted(seed.roles())
        metric_cap = None if params.max_full_evals is None else params.max_full_evals * (len(train) + len(val))
        watch = GEPAWatch(
            budget=ctx.budget,
            min_budget_for_iteration=2 * params.reflection_minibatch_size,
            plateau_patience=params.early_stop_patience,
            metric_call_cap=metric_cap,
            max_idle_iterations=params.max_idle_iterations,
        )
        loop = asyncio.get_running_loop()
        bridge = LoopBridge(loop, watch)
        book = CandidateBook(seed=seed, keys=keys)
        book.candidate({k: seed.components[k] for k in keys})
        reflection = ReflectionModel.from_context(ctx, "gepa")
        guard = RolloutGuard("gepa", params.max_unusable_rollouts)
        adapter = LcbGEPAAdapter(evaluator=ctx.evaluator, book=book, train_ids=train, val_ids=val,
                                 bridge=bridge, guard=guard)
        progress = _Progress(ctx, book, watch, bridge, val)
        ctx.workdir.mkdir(parents=True, exist_ok=True)
        engine_log = _EngineLog(JsonlJournal(ctx.workdir / "gepa_engine.jsonl"))

        def run_engine() -> Any:
            return gepa_optimize(
                seed_candidate={k: seed.components[k] for k in keys},
                trainset=list(train),
                valset=list(val),
                adapter=adapter,
                reflection_lm=GEPAReflectionLM(reflection, bridge),
                reflection_prompt_template=reflection_templates(keys, role_names),
                candidate_selection_strategy=params.candidate_selection_strategy,
                skip_perfect_score=params.skip_perfect_score,
                perfect_score=params.perfect_score,
                reflection_minibatch_size=params.reflection_minibatch_size,
                module_selector=params.component_selector,
                use_merge=params.use_merge,
                max_merge_invocations=params.max_merge_invocations,
                stop_callbacks=[watch],
                logger=engine_log,
                callbacks=[progress],
                run_dir=None,  # gepa would pickle its state there; we resume by replay instead
                track_best_outputs=False,
                display_progress_bar=False,
                seed=ctx.seed + params.seed,
                raise_on_exception=True,
            )

        engine_error: BaseException | None = None
        engine_best: int | None = None
        if ctx.budget.remaining < len(val):
            # Not even the seed's validation pass fits: spend nothing, keep the seed.
            watch.stop_reason = STOP_BUDGET
        else:
            try:
                result = await asyncio.to_thread(run_engine)
                engine_best = int(result.best_idx)
            except BaseException as exc:  # noqa: BLE001 - classified below
                engine_error = exc
            finally:
                watch.cancelled = True  # an engine thread still running stops at its next call
        if watch.fatal is not None:
            if isinstance(watch.fatal, OptimizerInfrastructureError):
                raise watch.fatal
            raise OptimizerInfrastructureError(str(watch.fatal)) from watch.fatal
        if engine_error is not None:
            raise engine_error
        best, best_score = book.best(val)
        metadata = {
            "engine": "gepa",
            "stop_detail": watch.stop_reason,
            "components": list(keys),
            "metric_call_cap": metric_cap,
            "candidates": len(book.order),
            "full_validation_evals": watch.full_evals,
            "proposals": progress.proposals,
            "merge_attempts": progress.merges,
            "incumbent_val_score": best_score,
            "engine_best_candidate_index": engine_best,
            "charged_rollouts": ctx.budget.charged,
            "reflection": reflection.usage(),
            "params": {k: getattr(params, k) for k in params.__dataclass_fields__},
        }
        return OptimizationResult(best=best, stop_reason=watch.stop_reason or "max_full_evals",
                                  history=progress.history, metadata=metadata)
