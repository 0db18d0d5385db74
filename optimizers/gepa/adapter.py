"""The seam between the ``gepa`` engine (synchronous, in a worker thread) and our async job.

- ``LcbGEPAAdapter`` is gepa's adapter: ``evaluate`` runs a candidate's rollouts through the
  job's budgeted evaluator (on the job's event loop), ``make_reflective_dataset`` turns the
  rollouts into what the reflection model reads: the problem, what the role did, the submitted
  program and *our verdict feedback* (score, outcome kind, passed k/n), not only the score.
- ``GEPAReflectionLM`` is the callable gepa expects as its reflection LM, backed by the job's
  counted and journaled reflection model.
- ``GEPAWatch`` collects what the engine cannot know (budget exhausted, plateau, a fatal
  error) and is gepa's stopper, so the engine stops between iterations with a clear reason.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from optimizers.base import OptimizerInfrastructureError
from optimizers.candidate import Candidate
from optimizers.evaluator import Evaluator, Rollout
from optimizers.reflection import (
    ReflectionModel,
    ReflectionUnavailable,
    RolloutGuard,
    agents_in_trace,
    clip,
    outcome_line,
    render_trace,
    task_text,
)

STOP_BUDGET = "rollout_budget_spent"
STOP_PLATEAU = "full_eval_plateau"
STOP_MAX_FULL_EVALS = "max_full_evals"
STOP_STALLED = "stalled_without_rollouts"
STOP_INFRASTRUCTURE = "infrastructure_failure"


class EngineCancelled(RuntimeError):
    """The job stopped waiting for the engine (cancellation); end the engine thread."""


class NoUsableProposal(RuntimeError):
    """The reflection model's reply was empty, failed or cut off: there is no proposal to read."""


class MetricCallCapReached(RuntimeError):
    """A batch would cross a hard metric-call cap: the engine ends here (a stop, not an error)."""


@dataclass
class GEPAWatch:
    """State shared by the adapter, the callbacks and the stopper (all in the engine thread)."""

    budget: Any
    min_budget_for_iteration: int
    plateau_patience: int | None
    metric_call_cap: int | None
    max_idle_iterations: int
    cap_stop_reason: str = STOP_MAX_FULL_EVALS
    hard_metric_cap: bool = False  # True: ``admit`` refuses a batch that would cross the cap
    # What the cap counts: the engine's metric calls (GEPA, like gepa's own max_metric_calls), or
    # charged rollouts since the engine started (MAMUT-GEPA: a call served from the rollout cache
    # costs nothing, so it does not use up the cap).
    cap_counts_charged: bool = False
    charged_at_start: int = 0
    metric_calls: int = 0  # problem evaluations the engine asked the adapter for
    exhausted: bool = False
    fatal: BaseException | None = None
    cancelled: bool = False
    stop_reason: str | None = None
    best_full_eval: float | None = None
    evals_without_improvement: int = 0
    idle_iterations: int = 0
    _charged_at_iteration_start: int = 0
    full_evals: int = 0

    # -- gepa stopper protocol ------------------------------------------------------------------

    def __call__(self, state: Any) -> bool:
        reason = self._reason(state)
        if reason is not None and self.stop_reason is None:
            self.stop_reason = reason
        return reason is not None

    def _reason(self, state: Any) -> str | None:
        if self.fatal is not None or self.cancelled:
            return STOP_INFRASTRUCTURE
        if self.exhausted or self.budget.remaining < self.min_budget_for_iteration:
            return STOP_BUDGET
        if self.plateau_patience is not None and self.evals_without_improvement >= self.plateau_patience:
            return STOP_PLATEAU
        if self.metric_call_cap is not None and self.cap_usage(state) >= self.metric_call_cap:
            return self.cap_stop_reason
        if self.idle_iterations >= self.max_idle_iterations:
            return STOP_STALLED
        return None

    @property
    def charged_since_start(self) -> int:
        return self.budget.charged - self.charged_at_start

    def cap_usage(self, state: Any) -> int:
        """What the metric-call cap has used up so far."""
        return self.charged_since_start if self.cap_counts_charged else int(state.total_num_evals)

    def admit(self, batch_size: int, new_rollouts: int | None = None) -> None:
        """Count a batch of metric calls; under a hard cap, refuse one that would cross it.

        ``new_rollouts``: how many of the batch are not served from the rollout cache (each may
        be charged); what a batch adds to the cap when it counts charged rollouts."""
        cap = self.metric_call_cap
        if self.cap_counts_charged:
            used, adds = self.charged_since_start, batch_size if new_rollouts is None else new_rollouts
        else:
            used, adds = self.metric_calls, batch_size
        if self.hard_metric_cap and cap is not None and used + adds > cap:
            self.stop_reason = self.stop_reason or self.cap_stop_reason
            raise MetricCallCapReached(f"{used} + {adds} would cross the metric-call cap {cap}")
        self.metric_calls += batch_size

    # -- gepa callbacks -------------------------------------------------------------------------

    def on_iteration_start(self, event: Mapping[str, Any]) -> None:
        self._charged_at_iteration_start = self.budget.charged

    def on_iteration_end(self, event: Mapping[str, Any]) -> None:
        # An iteration that charged nothing (all cached, skipped, nothing proposed) makes no
        # progress; many in a row mean the engine is spinning.
        if self.budget.charged == self._charged_at_iteration_start:
            self.idle_iterations += 1
        else:
            self.idle_iterations = 0

    def note_full_eval(self, average: float, *, seed: bool) -> None:
        if seed:
            self.best_full_eval = average
            return
        self.full_evals += 1
        if self.best_full_eval is None or average > self.best_full_eval:
            self.best_full_eval = average
            self.evals_without_improvement = 0
        else:
            self.evals_without_improvement += 1


class LoopBridge:
    """Runs coroutines on the job's event loop from the engine's worker thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, watch: GEPAWatch) -> None:
        self.loop = loop
        self.watch = watch
        self._pending: set[Future[Any]] = set()
        self._lock = threading.Lock()

    def run(self, coroutine: Any) -> Any:
        if self.watch.cancelled:
            coroutine.close()
            raise EngineCancelled("the optimization was cancelled")
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        with self._lock:
            self._pending.add(future)
        try:
            return future.result()
        finally:
            with self._lock:
                self._pending.discard(future)

    def call_soon(self, function: Any, *args: Any) -> None:
        self.loop.call_soon_threadsafe(function, *args)


@dataclass
class _Trace:
    """What one rollout contributes to a reflective dataset."""

    rollout: Rollout
    phase: str


@dataclass
class CandidateBook:
    """Our own record of every candidate gepa evaluated (the incumbent is chosen from it)."""

    seed: Candidate
    keys: tuple[str, ...]
    by_texts: dict[str, Candidate] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    val_scores: dict[str, dict[str, float]] = field(default_factory=dict)
    val_incomplete: set[str] = field(default_factory=set)
    current_parent: Candidate | None = None

    def candidate(self, texts: Mapping[str, str]) -> Candidate:
        fingerprint = json.dumps({k: texts[k] for k in self.keys}, sort_keys=True)
        known = self.by_texts.get(fingerprint)
        if known is not None:
            return known
        base = self.current_parent or self.seed
        updates = {k: texts[k] for k in self.keys if texts[k] != base.components[k]}
        candidate = base.with_components(updates) if updates else base
        if candidate == self.seed:
            candidate = self.seed
        self.by_texts[fingerprint] = candidate
        if candidate.id not in self.order:
            self.order.append(candidate.id)
        return candidate

    def val_aggregate(self, candidate_id: str, val_ids: Sequence[str]) -> float | None:
        """Mean over a complete validation evaluation; None when it is partial or missing."""
        scores = self.val_scores.get(candidate_id, {})
        if not val_ids or candidate_id in self.val_incomplete or any(v not in scores for v in val_ids):
            return None
        return sum(scores[v] for v in val_ids) / len(val_ids)

    def best(self, val_ids: Sequence[str]) -> tuple[Candidate, float | None]:
        """Best mean over complete validation evaluations; ties keep the earlier candidate."""
        by_id = {c.id: c for c in self.by_texts.values()}
        best, best_score = self.seed, None
        for candidate_id in self.order:
            score = self.val_aggregate(candidate_id, val_ids)
            if score is not None and (best_score is None or score > best_score):
                best, best_score = by_id[candidate_id], score
        return best, best_score


class LcbGEPAAdapter:
    """gepa adapter over the job's evaluator. Data instances are problem ids.

    How a repeated engine call is served is the one thing the methods on this seam disagree on,
    so it is a class attribute:

    - ``every_call_charged = False`` (GEPA): the same candidate on the same problem is one
      rollout; a repeat is served from the rollout cache, free and identical;
    - ``every_call_charged = True`` (MAMUT-GEPA, the reference's ``cache_evaluation=False``):
      every slot of every batch is a fresh rollout with a new seed (the evaluator's ``sample``
      counts the earlier runs of that candidate on that problem), charged; engine calls and
      charged rollouts are then the same count.
    """

    propose_new_texts = None  # gepa proposes with its reflective proposer and our reflection LM
    every_call_charged = False

    def __init__(
        self,
        *,
        evaluator: Evaluator,
        book: CandidateBook,
        train_ids: Sequence[str],
        val_ids: Sequence[str],
        bridge: LoopBridge,
        guard: RolloutGuard,
    ) -> None:
        self.evaluator = evaluator
        self.book = book
        self.train_ids = frozenset(train_ids)
        self.val_ids = frozenset(val_ids)
        self.bridge = bridge
        self.guard = guard
        self.watch = bridge.watch
        self._served: set[tuple[str, str]] = set()  # (candidate id, problem id) already run: cache hits
        self._runs: dict[tuple[str, str], int] = {}  # (candidate id, problem id) -> rollouts requested so far

    def _phase(self, problem_id: str) -> str:
        if problem_id in self.train_ids:
            return "train"
        if problem_id in self.val_ids:
            return "val"
        raise ValueError(f"gepa asked for problem {problem_id!r}, which is neither train nor val")

    def _requests(self, candidate_id: str, batch: Sequence[str]) -> tuple[list[tuple[str, int]], int]:
        """One (problem id, sample) request per slot of ``batch``, and how many of them are new
        rollouts (what the batch can add to the charged count)."""
        if self.every_call_charged:
            slots = []
            for problem_id in batch:
                sample = self._runs.get((candidate_id, problem_id), 0)
                self._runs[(candidate_id, problem_id)] = sample + 1
                slots.append((problem_id, sample))
            return slots, len(slots)
        # gepa's epoch sampler pads the last minibatch of an epoch with ids already in it when the
        # train set is not a multiple of the minibatch size: a repeat is the same rollout (same
        # candidate, problem and seed), so each distinct id runs once and its result fills every slot.
        slots = [(problem_id, 0) for problem_id in batch]
        distinct = list(dict.fromkeys(batch))
        return slots, sum(1 for p in distinct if (candidate_id, p) not in self._served)

    def evaluate(self, batch: list[str], candidate: dict[str, str], capture_traces: bool = False) -> Any:
        from gepa.core.adapter import EvaluationBatch

        ours = self.book.candidate(candidate)
        slots, new_rollouts = self._requests(ours.id, batch)
        self.watch.admit(len(batch), new_rollouts)
        groups: dict[tuple[str, int], list[str]] = {}  # one evaluator call per (phase, sample)
        for problem_id, sample in dict.fromkeys(slots):
            groups.setdefault((self._phase(problem_id), sample), []).append(problem_id)
        results: dict[tuple[str, int], _Trace] = {}
        for (phase, sample), ids in groups.items():
            rollouts = self.bridge.run(self.evaluator.evaluate(ours, ids, phase=phase, sample=sample))
            try:
                self.guard.check(rollouts)
            except OptimizerInfrastructureError as exc:
                self.watch.fatal = exc
            for rollout in rollouts:
                results[(rollout.problem_id, sample)] = _Trace(rollout, phase)
                if rollout.budget_exhausted:
                    self.watch.exhausted = True
                else:
                    self._served.add((ours.id, rollout.problem_id))
                if phase == "val":
                    if rollout.usable:
                        # the latest run of a problem stands for it (one entry per problem)
                        self.book.val_scores.setdefault(ours.id, {})[rollout.problem_id] = rollout.score
                    else:
                        self.book.val_incomplete.add(ours.id)
        ordered = [results[slot] for slot in slots]
        scores = [t.rollout.score if t.rollout.usable else 0.0 for t in ordered]
        outputs = [t.rollout.answer or "" for t in ordered]
        return EvaluationBatch(outputs=outputs, scores=scores, trajectories=ordered if capture_traces else None)

    def make_reflective_dataset(
        self, candidate: dict[str, str], eval_batch: Any, components_to_update: list[str]
    ) -> dict[str, list[dict[str, Any]]]:
        dataset: dict[str, list[dict[str, Any]]] = {}
        for key in components_to_update:
            records = []
            for trace in eval_batch.trajectories or ():
                if not trace.rollout.usable:
                    continue  # a rollout that never ran has nothing to reflect on
                record = self._record(key, trace.rollout)
                if record is not None:  # None: this row has nothing for this component
                    records.append(record)
            dataset[key] = records
        return dataset

    def _record(self, key: str, rollout: Rollout) -> dict[str, Any] | None:
        trace = rollout.trace
        record: dict[str, Any] = {"Problem": task_text(trace, 1800)}
        if key.startswith("role/"):
            role = key[len("role/"):]
            record[f"What the {role} role wrote"] = render_trace(trace, role=role, each=1500, total=4000) or (
                "(this role did not speak in this run)")
            if agents_in_trace(trace) > 1:
                record["Rest of the team conversation"] = render_trace(trace, each=600, total=2500)
        else:
            record["Team conversation"] = render_trace(trace, each=800, total=5000)
        record["Submitted program"] = clip(rollout.answer, 2500) if rollout.answer else "(no program was extracted)"
        record["Result and grader feedback"] = outcome_line(rollout)
        return record


class GEPAReflectionLM:
    """The ``LanguageModel`` callable gepa's proposer calls, backed by our reflection model."""

    total_cost = 0.0  # gepa wraps callables without it; our usage is counted by ReflectionModel

    def __init__(self, model: ReflectionModel, bridge: LoopBridge) -> None:
        self.model = model
        self.bridge = bridge

    @property
    def total_tokens_in(self) -> int:
        return int(self.model.usage()["prompt_tokens"])

    @property
    def total_tokens_out(self) -> int:
        return int(self.model.usage()["completion_tokens"])

    def __call__(self, prompt: str | list[dict[str, Any]]) -> str:
        text = prompt if isinstance(prompt, str) else json.dumps(prompt, ensure_ascii=False)
        return ask_for_proposal(self.model, self.bridge, text)


def ask_for_proposal(model: ReflectionModel, bridge: LoopBridge, prompt: str, **options: Any) -> str:
    """One proposal call from the engine thread. A dead reflection model is fatal for the run;
    an empty or failed reply raises, and gepa then drops the proposal (no child, no rollouts)."""
    try:
        reply = bridge.run(model.ask(prompt, purpose="propose", **options))
    except ReflectionUnavailable as exc:
        bridge.watch.fatal = exc
        raise
    if not reply or not reply.strip():
        raise NoUsableProposal("the reflection model gave no usable proposal")
    return reply


def reflection_templates(keys: Sequence[str], role_names: Sequence[str]) -> dict[str, str]:
    """One gepa reflection template per component (``<curr_param>`` / ``<side_info>``)."""
    team = (f"an LLM agent system whose role prompts are: {', '.join(role_names)} "
            "(several agents may share one role prompt)")
    templates = {}
    for key in keys:
        if key.startswith("role/"):
            what = f"system prompt of the `{key[len('role/'):]}` role"
        else:
            what = f"team protocol text `{key[len('protocol/'):]}` (shown to agents when they hand work over)"
        templates[key] = (
            f"You are improving the {what} in {team}. The team solves competitive programming problems "
            "(standard-input programs or LeetCode-style class methods) graded by hidden tests.\n\n"
            f"The current {what}:\n```\n<curr_param>\n```\n\n"
            "Problems the team attempted with it: the problem, what the agents wrote, the submitted "
            "program and the grader's feedback (score 1 means every graded hidden test passed; the "
            "feedback gives counts and failure kinds, never the hidden tests):\n```\n<side_info>\n```\n\n"
            f"Write an improved {what}. Keep what works, correct the behaviours that led to failures "
            "and add concrete, general strategies (never solutions to these particular problems). "
            "Do not change the answer format the team is told to follow. Reply with the complete new "
            "text inside one ``` block."
        )
    return templates
