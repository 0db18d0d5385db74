"""Test-only jobs: matched-compute baselines and transfer jobs, on the ordinary job's folder,
journals and phases, minus the search and the keep-or-reject decision.

* A **baseline** job (``self_consistency``, ``best_of_n``: ``optimizers.matched``) writes an
  optimization record that spent nothing, a selection record that keeps the seed, and a test
  record from ``matched_test``: seed team vs matched single agent, paired per problem.
* A **transfer** job (``deploy_from``) never calls its method: its incumbent is the source job's
  deployed candidate, deployed unconditionally, and its test is the ordinary one (this model's
  own seed team vs those prompts, on the shared seed evaluations).

Both are recognisable on disk: ``optimization.stop_reason`` is ``test_only_baseline`` or
``transfer``; ``selection.mode`` is ``baseline`` or ``transfer``; result.json carries ``matched``
(baselines) and ``cell.transfer_from`` (transfers).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from optimizers.budget import Budget
from optimizers.candidate import Candidate
from optimizers.journal import short_hash
from optimizers.matched import is_test_only
from optimizers.protocol.job import transfer
from optimizers.protocol.job.console import log
from optimizers.protocol.job.engine import Job, JobRuntime
from optimizers.protocol.job.matched_test import run_matched_test, tokens_of
from optimizers.protocol.job.optimize import outcome_id
from optimizers.protocol.job.store import JobStore
from optimizers.registry import get_optimizer_class
from topologies import aio

BASELINE_STOP = "test_only_baseline"


class _ResultExtrasStore(JobStore):
    """The job store, with extra top-level keys added to result.json as it is sealed."""

    extras: Mapping[str, Any] = {}

    def write(self, name: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        if name == "result" and self.extras:
            payload = {**payload, **self.extras}
        return super().write(name, payload)


def needs_test_only_job(cfg: Any) -> bool:
    return bool(getattr(cfg, "deploy_from", None)) or is_test_only(get_optimizer_class(cfg.method))


class TestOnlyJob(Job):
    """A job whose optimize and validate phases record what was decided instead of searching."""

    __test__ = False  # not a pytest class

    def __init__(self, cfg: Any, runtime: JobRuntime | None = None) -> None:
        super().__init__(cfg, runtime)
        self.store = _ResultExtrasStore(cfg.out, evaluation_cache=cfg.evaluation_cache)
        self.source = transfer.source_of(cfg)
        method_cls = get_optimizer_class(cfg.method)
        self.rule = getattr(method_cls, "selection_rule", "") if is_test_only(method_cls) else ""
        if self.rule and cfg.test.samples > 1:
            # One submission per problem (the vote's pick) against the seed team's pass@1.
            raise transfer.JobError(f"{cfg.method}: a matched-compute baseline submits one program per problem; "
                                    f"test.samples={cfg.test.samples} is not supported (use test.samples=1)")
        if self.source is not None:
            if self.rule:
                raise transfer.JobError("--deploy-from: a matched-compute baseline has no prompts to transfer")
            transfer.check_compatible(self.source, self.base_spec, cfg.method)
            transfer.check_same_problems(self.source, self.identity.spec)

    def _connect_models(self) -> None:
        if self.cfg.phase == "all" and self.store.read("result") is not None:
            return
        _ = self.client  # never a reflection model: nothing here proposes anything

    @property
    def _kind(self) -> str:
        return "transfer" if self.source is not None else "baseline"

    async def optimize(self) -> dict[str, Any]:
        existing = self.store.read("optimization")
        if existing is not None:
            return existing
        seed = self.seed_candidate
        snapshot = Budget(self.cfg.budget).snapshot()
        if self.source is not None:
            body = transfer.optimization_payload(self.source, seed, snapshot)
        else:
            body = {"status": "completed", "failure_kind": None, "error": None, "stop_reason": BASELINE_STOP,
                    "seed_candidate": seed.to_dict(), "incumbent_candidate": seed.to_dict(), "budget": snapshot,
                    "usage": {"task": {"attempts": 0}, "reflection": None}, "uncharged_calls": {},
                    "proposals": {"candidates_evaluated": 0, "rollouts": 0}, "history": [],
                    "metadata": {"searched": False, "selection_rule": self.rule}}
        payload = {"job_id": self.job_id, "cell_id": self.cell_id, "method": self.cfg.method, **body,
                   "elapsed_seconds": 0.0, "training_ids": list(self.split_ids.train),
                   "validation_ids": list(self.rows.search), "selection_mode": self._kind}
        payload["optimization_id"] = outcome_id(payload)
        payload["truncation"] = {"task": {}, "reflection": {}}
        log(self.cfg, f"{self._kind} job: no search ({payload['stop_reason']})")
        return self.store.write("optimization", payload)

    async def validate(self, optimization: Mapping[str, Any]) -> dict[str, Any]:
        existing = self.store.read("selection")
        if existing is not None:
            return existing
        seed = self.seed_candidate
        incumbent = Candidate.from_dict(optimization["incumbent_candidate"])
        if self.source is not None:
            decision = transfer.decision_fields(self.source, seed)
        else:
            decision = {"selected_candidate": "seed", "fallback_reason": "test_only_baseline"}
        deployed = incumbent if decision["selected_candidate"] == "incumbent" else seed
        payload: dict[str, Any] = {
            "job_id": self.job_id, "cell_id": self.cell_id, "condition_id": self.condition_id,
            "optimization_id": optimization["optimization_id"], "seed_candidate": seed.to_dict(),
            "incumbent_candidate": incumbent.to_dict(), "deployed_candidate": deployed.to_dict(), **decision,
            "baseline_validation_score": None, "incumbent_validation_score": None, "validation_delta": None,
            "baseline_validation_id": None, "incumbent_validation_id": None,
            "validation_ids": list(self.rows.selection),  # not evaluated: the rows test is unlocked against
            "baseline_validation_scores": None, "incumbent_validation_scores": None,
            "evaluation_seed": self.cfg.seed, "test_exposed": False,
        }
        payload["selection_id"] = short_hash(payload, 24)
        payload["optimization_sha256"] = optimization["sha256"]
        payload["selection_mode"] = self._kind
        payload["optimism"] = None
        payload["truncation"] = {}
        return self.store.write("selection", payload)

    async def _run_test(self, selection: Mapping[str, Any]) -> dict[str, Any]:
        if self.source is not None:
            record = await super()._run_test(selection)
            self.store.extras = {"test_tokens_per_problem": _per_problem(record)}
            return record
        cfg = self.cfg
        self.data.unlock_test(selection, self.rows.selection)
        self.data.test_problems()
        started = time.monotonic()
        outcome = await run_matched_test(self, rule=self.rule)
        team = outcome["team"]
        single = outcome["single_scores"]
        matched = outcome["matched"]
        ids = list(self.split_ids.test)
        valid = team.valid
        team_mean = team.mean
        single_mean = sum(single) / len(single) if single else None
        payload = {
            "job_id": self.job_id, "selection_id": selection["selection_id"], "condition_id": self.condition_id,
            "evaluation_seed": cfg.seed, "baseline_evaluation_id": team.evaluation_id,
            "deployed_evaluation_id": None, "example_ids": ids,
            "difficulties": [self.data.problem(pid).difficulty for pid in ids],
            "platforms": [self.data.problem(pid).platform for pid in ids],
            "contest_dates": [self.data.problem(pid).contest_date for pid in ids],
            "test_design": cfg.test.identity(), "model_cutoff": cfg.model.cutoff, "samples": 1,
            "baseline_scores": [r.score if r.usable else None for r in team.rollouts],
            "deployed_scores": single,
            "baseline_status": [r.status.value for r in team.rollouts],
            "deployed_status": [row["outcome"] for row in matched["problems"]],
            "valid_for_aggregation": valid,
            "baseline_mean": team_mean, "deployed_mean": single_mean,
            "delta_pp": round(100.0 * (single_mean - team_mean), 6) if valid and single_mean is not None else None,
            "fallback_reason": selection["fallback_reason"], "selected_candidate": selection["selected_candidate"],
            "usage": {"baseline": team.usage(), "deployed": {"tokens": sum(r["tokens"] for r in matched["problems"])}},
            "tokens_per_problem": {"baseline": matched["team_tokens_per_problem"],
                                   "deployed": matched["single_tokens_per_problem"]},
            "matched": matched, "search_budget_charged": 0, "truncation": {},
            "elapsed_seconds": round(time.monotonic() - started, 3),
        }
        record = self.store.write("test", payload)
        log(cfg, f"baseline test: team={team_mean} single(N={matched['n']})={single_mean} "
                  f"tokens/problem team={matched['team_tokens_per_problem']} "
                  f"single={matched['single_tokens_per_problem']}")
        return record

    def _write_result(self, optimization: Mapping[str, Any], selection: Mapping[str, Any],
                      test: Mapping[str, Any]) -> dict[str, Any]:
        extras: dict[str, Any] = {}
        if "matched" in test:
            summary = {k: v for k, v in test["matched"].items() if k != "problems"}
            extras["matched"] = summary
        tokens = test.get("tokens_per_problem") or _per_problem(test)
        if tokens:
            extras["test_tokens_per_problem"] = tokens
        if self.source is not None:
            extras["transfer"] = {**self.source.identity(), "source_delta_pp": self.source.delta_pp,
                                  "source_folder": str(self.source.folder)}
        self.store.extras = extras
        return super()._write_result(optimization, selection, test)


def _per_problem(test: Mapping[str, Any]) -> dict[str, float]:
    n = len(test.get("example_ids") or ())
    usage = test.get("usage") or {}
    return {arm: tokens_of(usage.get(arm) or {}) / n for arm in ("baseline", "deployed") if n and usage.get(arm)}


async def run_job_async(cfg: Any, runtime: JobRuntime | None = None) -> dict[str, Any]:
    job_class = TestOnlyJob if needs_test_only_job(cfg) else Job
    return await job_class(cfg, runtime).run()


def run_job(cfg: Any, runtime: JobRuntime | None = None) -> dict[str, Any]:
    """The engine's ``run_job`` for any job: a test-only job when the config asks for one."""
    return aio.run(run_job_async(cfg, runtime))


def default_transfer_out(runs_root: str | Path, source_model: str) -> Path:
    return Path(runs_root) / "transfer" / f"from-{source_model}"
