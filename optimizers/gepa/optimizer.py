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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optimizers.base import OptimizationResult, OptimizeContext, Optimizer
from optimizers.candidate import PROTOCOL_PREFIX, ROLE_PREFIX, Candidate
from optimizers.gepa.adapter import STOP_MAX_FULL_EVALS, GEPAReflectionLM, LcbGEPAAdapter, reflection_templates
from optimizers.gepa.engine import EngineRun, EngineSettings, component_keys, shared_knobs
from optimizers.reflection import params_from
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
        keys = component_keys(seed, COMPONENT_SETS[params.components])
        settings = EngineSettings(
            candidate_selection=params.candidate_selection_strategy,
            module_selector=params.component_selector,
            metric_call_cap=None if params.max_full_evals is None else params.max_full_evals * (len(train) + len(val)),
            cap_stop_reason=STOP_MAX_FULL_EVALS,
            hard_metric_cap=False,
            cap_counts_charged=False,
            **shared_knobs(params),
        )
        run = EngineRun("gepa", seed, keys, train=train, val=val, ctx=ctx, settings=settings)
        adapter = LcbGEPAAdapter(evaluator=ctx.evaluator, book=run.book, train_ids=train, val_ids=val,
                                 bridge=run.bridge, guard=run.guard)
        await run.run(adapter, reflection_lm=GEPAReflectionLM(run.reflection, run.bridge),
                      reflection_prompt_template=reflection_templates(keys, sorted(seed.roles())))
        best, _ = run.book.best(val)
        return OptimizationResult(best=best, stop_reason=run.watch.stop_reason or STOP_MAX_FULL_EVALS,
                                  history=run.progress.history, metadata=run.metadata(params))
