"""MASPOB (reference §2.8): LinUCB with a GATv2 surrogate over a fixed pool of role-prompt variants.

1. Pool: per role the seed plus ``num_prompts - 1`` interface-preserving variants from the
   reflection model (``optimizers.maspob.pool``), cached in the job folder.
2. Embed every prompt with all-MiniLM-L6-v2 (offline, hash-checked); build the team graph.
3. Warm-up: ``pretrain_pulls`` random combinations (at most ``remaining // minibatch - 1``, at
   least one), each run on the next ``minibatch_size`` problems of a rotating, seeded pass over
   the *train* split; every pull adds ``coefficient * x x^T`` to the Fisher matrix.
4. LinUCB: fit the surrogate from scratch on all pulls, start at the observed combination with the
   highest posterior mean, sweep the roles choosing ``mean + alpha * sqrt(x^T A^-1 x)`` per role,
   pull the result; repeat while a whole minibatch is affordable.
5. Incumbent: the observed combination with the highest posterior mean.

Validation is never used. State (pool, pulls, Fisher matrix) is JSON in the job folder; a resumed
job replays its pulls from the evaluator's journal (charged as the first run was charged, never
paid twice), retrains the surrogate once and carries on. The network is never pickled.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optimizers.base import OptimizationResult, OptimizeContext, Optimizer
from optimizers.candidate import ROLE_PREFIX, Candidate
from optimizers.evaluator import Rollout
from optimizers.journal import content_hash, read_json, write_json_atomic, write_text_atomic
from optimizers.maspob.bandit import BanditSearch, Combination, Decision, FeatureTable, LinearPosterior
from optimizers.maspob.graph import TeamGraph, team_graph
from optimizers.maspob.pool import PROTOCOLS, Pool, PoolBuilder, PoolSettings, pool_identity
from optimizers.reflection import ReflectionModel, RolloutGuard, params_from, team_description
from optimizers.registry import register_optimizer

STOP_BUDGET = "rollout_budget_spent"
STATE_NAME = "maspob"
EMBEDDINGS_FILE = "maspob_embeddings.json"
TIMING_FILE = "maspob_timing.json"
SURROGATES = ("gatv2", "linear")


@dataclass(frozen=True, slots=True)
class MASPOBParams:
    """Knobs (conf/method/maspob.yaml); defaults are the reference's ``MASPOBSettings``."""

    num_prompts: int = 20  # per role, the seed included
    overgeneration: float = 1.5  # styles tried per needed variant, at most
    generation_temperature: float = 0.5
    reflection_max_retries: int = 3  # failed reflection calls in a row tolerated (then the job fails)
    variant_attempts: int = 3  # tries per style before it is dropped (the reference's generate_one)
    retry_feedback: bool = False  # a retry says what the last try broke (reference: the same ask again)
    probe_styles: int = 3  # give up when some role gets no variant from its first styles (0: never)
    reflection_inflight: int = 4
    min_prompt_chars: int = 40
    max_length_ratio: float = 4.0
    max_length_floor: int = 2000
    embed_max_seq: int = 512
    seed: int = 42  # method seed = seed + seed_stride * job seed
    seed_stride: int = 1000
    minibatch_size: int = 5
    pretrain_pulls: int = 5
    surrogate: str = "gatv2"  # gatv2 | linear (the LinUCB posterior mean; an ablation)
    gnn_hidden: int = 32
    gnn_layers: int = 1
    gnn_heads: int = 4
    gnn_dropout: float = 0.05
    gnn_lr: float = 0.005
    gnn_weight_decay: float = 0.00001
    gnn_max_epochs: int = 800
    gnn_patience: int = 200
    ucb_alpha: float = 0.2
    ucb_lambda: float = 1.0
    fisher_coefficient: float = 10.0
    max_unusable_rollouts: int = 0

    def check(self) -> None:
        if min(self.num_prompts, self.minibatch_size, self.pretrain_pulls) < 1:
            raise ValueError("maspob: num_prompts, minibatch_size and pretrain_pulls must be >= 1")
        if self.variant_attempts < 1 or self.probe_styles < 0:
            raise ValueError("maspob: variant_attempts must be >= 1 and probe_styles >= 0")
        if self.surrogate not in SURROGATES:
            raise ValueError(f"maspob: surrogate must be one of {', '.join(SURROGATES)}, not {self.surrogate!r}")
        if self.overgeneration < 1 or self.max_length_ratio < 1:
            raise ValueError("maspob: overgeneration and max_length_ratio must be >= 1")
        if min(self.gnn_hidden, self.gnn_layers, self.gnn_heads, self.gnn_max_epochs, self.gnn_patience) < 1:
            raise ValueError("maspob: gnn sizes, epochs and patience must be >= 1")
        if self.ucb_lambda <= 0 or self.fisher_coefficient < 0 or self.ucb_alpha < 0:
            raise ValueError("maspob: ucb_lambda > 0, fisher_coefficient >= 0, ucb_alpha >= 0")

    @property
    def pool(self) -> PoolSettings:
        return PoolSettings(num_prompts=self.num_prompts, overgeneration=self.overgeneration,
                            temperature=self.generation_temperature, attempts=self.variant_attempts,
                            retry_feedback=self.retry_feedback, probe_styles=self.probe_styles,
                            concurrency=self.reflection_inflight, min_chars=self.min_prompt_chars,
                            max_length_ratio=self.max_length_ratio, max_length_floor=self.max_length_floor)


@dataclass(frozen=True, slots=True)
class Pull:
    """One charged pull: a combination run on one minibatch of train problems."""

    number: int
    kind: str  # warmup | linucb
    combination: Combination
    batch: tuple[tuple[str, int], ...]  # (problem id, pass number = rollout sample)
    score: float
    candidate_id: str
    sweep: tuple[Mapping[str, Any], ...] = ()
    # The incumbent after this pull (None during the warm-up, before the surrogate exists).
    incumbent: Combination | None = None
    incumbent_mean: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"number": self.number, "kind": self.kind, "combination": list(self.combination),
                "batch": [list(b) for b in self.batch], "score": self.score, "candidate_id": self.candidate_id,
                "sweep": [dict(s) for s in self.sweep],
                "incumbent": None if self.incumbent is None else list(self.incumbent),
                "incumbent_mean": self.incumbent_mean}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Pull:
        incumbent = data.get("incumbent")
        return cls(int(data["number"]), str(data["kind"]), tuple(int(i) for i in data["combination"]),
                   tuple((str(p), int(s)) for p, s in data["batch"]), float(data["score"]),
                   str(data["candidate_id"]), tuple(data.get("sweep") or ()),
                   None if incumbent is None else tuple(int(i) for i in incumbent), data.get("incumbent_mean"))


class MinibatchStream:
    """An endless, seeded stream over the train ids: pass p is its own shuffle; sample = p."""

    def __init__(self, train: Sequence[str], seed: int) -> None:
        if not train:
            raise ValueError("maspob needs training problems")
        self.train = list(train)
        self.seed = seed

    def batch(self, number: int, size: int) -> tuple[tuple[str, int], ...]:
        start = number * size
        return tuple(self._item(start + i) for i in range(size))

    def _item(self, position: int) -> tuple[str, int]:
        passes, offset = divmod(position, len(self.train))
        order = list(self.train)
        random.Random(self.seed * 1_000_003 + passes).shuffle(order)
        return order[offset], passes


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@register_optimizer("maspob")
class MASPOBOptimizer(Optimizer):
    # 2: the upstream WorkflowGAT surrogate (encoder MLP, attention dropout, ReLU, MLP head,
    # plateau schedule), sweeps continuing from the last pull, upstream styles and meta-prompt,
    # the probe that stops a model that cannot write variants, truncated last pull, incumbent commits.
    # 3: the same surrogate trained by the fast trainer (dropout masks from a numpy stream instead
    # of torch's, so fits differ draw by draw); the presets in the order the reference runs (listed).
    # 4: the same network, rule and mask stream trained by the compiled trainer (gat_kernel): its
    # sums run in another order, so losses and posterior means differ from 3 by float32 rounding
    # (and, as the training is chaotic over hundreds of epochs, sometimes by more on large fits).
    version = "4"

    @classmethod
    def check_params(cls, params: Mapping[str, Any]) -> None:
        """Refuse unknown or malformed knobs before a job starts (ValueError, one line)."""
        params_from(MASPOBParams, params, "maspob")

    async def optimize(
        self, seed: Candidate, *, train: Sequence[str], val: Sequence[str], ctx: OptimizeContext
    ) -> OptimizationResult:
        params: MASPOBParams = params_from(MASPOBParams, ctx.method_params, "maspob")
        return await _Run(seed, list(train), ctx, params).go()


@dataclass
class _Timing:
    pool_seconds: float = 0.0
    pool_reused: bool = False
    embedding_seconds: float = 0.0


class _Run:
    def __init__(self, seed: Candidate, train: list[str], ctx: OptimizeContext, params: MASPOBParams) -> None:
        self.seed = seed
        self.ctx = ctx
        self.params = params
        self.method_seed = params.seed + params.seed_stride * ctx.seed
        self.graph: TeamGraph = team_graph(seed.roles())
        self.team = team_description(list(self.graph.roles))
        self.stream = MinibatchStream(train, self.method_seed)
        self.guard = RolloutGuard("maspob", params.max_unusable_rollouts)
        self.pulls: list[Pull] = []
        self.history: list[dict[str, Any]] = []
        self.timing = _Timing()
        self.pool: Pool | None = None
        self.search: BanditSearch | None = None
        self._committed: tuple[Combination, float] | None = None
        self._identity: dict[str, Any] | None = None
        self._pull_texts: list[tuple[Pull, str]] = []  # each pull's JSON in the state, as last written

    @property
    def minibatch(self) -> int:
        return min(self.params.minibatch_size, len(self.stream.train))

    def affordable(self) -> bool:
        # Upstream pulls while any rollout is left; the last pull may be cut to what remains.
        return self.ctx.budget.remaining > 0

    # ---------------------------------------------------------------- lifecycle

    async def go(self) -> OptimizationResult:
        if not self.affordable():
            return self._result(self.seed, None)
        p = self.params
        # The reference's pretrain_pulls_for: at most pretrain_pulls, leaving room for a LinUCB pull.
        warmups = min(p.pretrain_pulls, max(1, self.ctx.budget.remaining // self.minibatch - 1))
        table = await self._prepare()
        rng = random.Random(self.method_seed)
        self.search = BanditSearch(
            table, make_surrogate=self._new_surrogate,
            warmup=[tuple(rng.randrange(n) for n in table.sizes) for _ in range(warmups)],
            alpha=p.ucb_alpha, ridge=p.ucb_lambda, coefficient=p.fisher_coefficient, seed=self.method_seed)
        for pull in self._load_state():
            await self._replay(pull)
        if self.pulls:
            self._commit()  # the replayed pulls' last commit, so the curve carries on from it
            self._save_state()
        while self.affordable():
            decision = self.search.decide()
            if not await self._pull(decision):
                break
            self._commit()
            self._save_state()  # once per pull, with its incumbent: a kill before it replays the pull
        return self._finish()

    async def _prepare(self) -> FeatureTable:
        """The pool (generated or reused) and its embeddings."""
        p = self.params
        reflection = ReflectionModel.from_context(self.ctx, "maspob",
                                                  max_consecutive_failures=p.reflection_max_retries + 1)
        seeds = {role: self.seed.roles()[role] for role in self.graph.roles}
        model_id = getattr(getattr(self.ctx.reflection, "config", None), "id", None)
        protocol = PROTOCOLS[self.graph.shape]
        identity = pool_identity(model=model_id, seeds=seeds, settings=p.pool, job_seed=self.ctx.seed, team=self.team,
                                 protocol=protocol)
        builder = PoolBuilder(reflection, settings=p.pool, team=self.team, rng=random.Random(self.method_seed + 1),
                              workdir=self.ctx.workdir, identity=identity, protocol=protocol)
        started = time.monotonic()
        self.pool, self.timing.pool_reused = await builder.build(seeds)
        self.timing.pool_seconds = time.monotonic() - started
        started = time.monotonic()
        vectors = await asyncio.to_thread(self._embeddings)
        self.timing.embedding_seconds = time.monotonic() - started
        return FeatureTable(self.graph.roles, vectors)

    def _embeddings(self) -> dict[str, list[list[float]]]:
        from optimizers.maspob.embeddings import MODEL_SHA256, embed

        assert self.pool is not None
        key = {"pool": content_hash(self.pool.to_json()["prompts"]), "model_sha256": MODEL_SHA256,
               "max_seq": self.params.embed_max_seq}
        path = self.ctx.workdir / EMBEDDINGS_FILE
        if path.exists():
            data = read_json(path)
            if isinstance(data, dict) and data.get("key") == key:
                return data["vectors"]
        vectors = {role: embed(self.pool.prompts[role], max_seq_length=self.params.embed_max_seq)
                   for role in self.graph.roles}
        write_json_atomic(path, {"key": key, "vectors": vectors})
        return vectors

    def _new_surrogate(self) -> Any:
        p = self.params
        if p.surrogate == "linear":
            return LinearPosterior(ridge=p.ucb_lambda, coefficient=p.fisher_coefficient)
        from optimizers.maspob.surrogate import GATv2Surrogate, GNNSettings

        return GATv2Surrogate(self.graph, GNNSettings(
            hidden=p.gnn_hidden, layers=p.gnn_layers, heads=p.gnn_heads, dropout=p.gnn_dropout, lr=p.gnn_lr,
            weight_decay=p.gnn_weight_decay, max_epochs=p.gnn_max_epochs, patience=p.gnn_patience))

    # ---------------------------------------------------------------- pulls

    def candidate(self, combination: Combination) -> Candidate:
        assert self.pool is not None
        updates = {f"{ROLE_PREFIX}{role}": self.pool.prompts[role][index]
                   for role, index in zip(self.graph.roles, combination, strict=True) if index}
        return self.seed.with_components(updates) if updates else self.seed

    async def _evaluate(self, candidate: Candidate, batch: Sequence[tuple[str, int]]) -> list[Rollout]:
        by_sample: dict[int, list[str]] = {}
        for problem_id, sample in batch:
            by_sample.setdefault(sample, []).append(problem_id)
        groups = await asyncio.gather(*(self.ctx.evaluator.evaluate(candidate, ids, phase="train", sample=sample)
                                        for sample, ids in by_sample.items()))
        rollouts = [r for group in groups for r in group]
        self.guard.check(rollouts)
        return rollouts

    async def _pull(self, decision: Decision) -> bool:
        """Run one pull; False when the budget cut it short (nothing is recorded then)."""
        candidate = self.candidate(decision.combination)
        # The next minibatch, cut to the rollouts left (the reference's last, truncated pull).
        batch = self.stream.batch(len(self.pulls), self.minibatch)[: self.ctx.budget.remaining]
        rollouts = await self._evaluate(candidate, batch)
        usable = [r for r in rollouts if r.usable]
        if any(r.budget_exhausted for r in rollouts) or not usable:
            return False
        score = round(sum(r.score for r in usable) / len(usable), 6)
        self._record(Pull(len(self.pulls), decision.kind, decision.combination, batch, score, candidate.id,
                          tuple(step.to_json() for step in decision.sweep)))
        return True

    async def _replay(self, pull: Pull) -> None:
        """A pull of the interrupted run: served from the journal, charged again as before."""
        rollouts = await self._evaluate(self.candidate(pull.combination), pull.batch)
        usable = [r for r in rollouts if r.usable]
        score = round(sum(r.score for r in usable) / len(usable), 6) if usable else None
        if score != pull.score:
            raise RuntimeError(f"maspob: pull {pull.number} replayed with score {score}, saved {pull.score}")
        self._record(pull)

    def _record(self, pull: Pull) -> None:
        assert self.search is not None
        self.pulls.append(pull)
        self.search.observe(pull.combination, pull.score)
        row = {"event": pull.kind, "pull": pull.number, "combination": self._named(pull.combination),
               "problems": [f"{p}#{s}" for p, s in pull.batch], "score": pull.score,
               "candidate_id": pull.candidate_id, "charged": self.ctx.budget.charged}
        if pull.sweep:
            row["sweep"] = [dict(s) for s in pull.sweep]
        self.history.append(row)
        if pull.incumbent is not None:
            self._annotate(row, pull)
        self.ctx.tracker.log(row["charged"], {"maspob/pull": pull.number, "maspob/score": pull.score,
                                              "maspob/fit_seconds": round(self.search.fit_log.seconds, 3)})

    def _save_state(self) -> None:
        """The whole state, atomically (what ``ctx.save_state`` writes), but compact: the state
        grows with every pull and is rewritten after each, and an indented dump runs Python's
        pure-Python encoder (compact ones run the C encoder), which made this quadratic cost
        seconds of a budget-600 job."""
        assert self.search is not None
        # The text json.dumps(state, sort_keys=True) gives for {"fisher", "identity", "pulls"}, put
        # together from pieces so that a pull already written is not encoded again (pulls only
        # grow; _commit may replace the last one, whose text is then redone).
        texts = self._pull_texts
        del texts[len(self.pulls):]
        for i, pull in enumerate(self.pulls):
            if i == len(texts):
                texts.append((pull, _compact(pull.to_json())))
            elif texts[i][0] is not pull:
                texts[i] = (pull, _compact(pull.to_json()))
        text = (f'{{"fisher":{_compact(self.search.fisher.to_json())},"identity":{_compact(self._state_identity())},'
                f'"pulls":[{",".join(t for _, t in texts)}]}}\n')
        write_text_atomic(self.ctx.state_path(STATE_NAME), text)
        self._save_timing()

    def _annotate(self, row: dict[str, Any], pull: Pull) -> None:
        """The pull's history row says what the incumbent became, and whether it is this pull's
        combination (the pull was *accepted*)."""
        assert pull.incumbent is not None
        row["incumbent"] = self._named(pull.incumbent)
        row["incumbent_posterior_mean"] = pull.incumbent_mean
        row["accepted"] = pull.incumbent == pull.combination

    def _commit(self) -> None:
        """Commit the incumbent to the learning curve when it changed (spec 1.13). It exists once
        the warm-up is over and the surrogate is fitted: the observed combination with the highest
        posterior mean, scored by that mean. The fit is the one the next decision needs anyway."""
        assert self.search is not None
        if len(self.pulls) < len(self.search.warmup):
            return
        combination, mean = self.search.incumbent()
        key = (combination, round(mean, 6))
        last = self.pulls[-1]
        if (last.incumbent, last.incumbent_mean) != key:  # a resumed job has it from the state already
            self.pulls[-1] = last = dataclasses.replace(last, incumbent=combination, incumbent_mean=key[1])
            self._annotate(self.history[-1], last)
        if key != self._committed:
            self._committed = key
            self.ctx.commit_incumbent(self.candidate(combination), key[1])

    def _state_identity(self) -> dict[str, Any]:
        if self._identity is None:  # the pool, params and stream are fixed once the pool exists
            assert self.pool is not None
            params = {k: getattr(self.params, k) for k in self.params.__dataclass_fields__}
            self._identity = {"pool": content_hash(self.pool.to_json()["prompts"]), "params": params,
                              "train": content_hash(self.stream.train), "seed": self.method_seed}
        return self._identity

    def _load_state(self) -> list[Pull]:
        state = self.ctx.load_state(STATE_NAME)
        if not isinstance(state, dict) or state.get("identity") != self._state_identity():
            return []
        return [Pull.from_json(q) for q in state.get("pulls", [])]

    def _named(self, combination: Combination) -> dict[str, int]:
        return dict(zip(self.graph.roles, combination, strict=True))

    # ---------------------------------------------------------------- result

    def _finish(self) -> OptimizationResult:
        if self.search is None or not self.pulls:
            return self._result(self.seed, None)
        incumbent = self.search.incumbent()
        self._save_timing()
        return self._result(self.candidate(incumbent[0]), incumbent)

    def _save_timing(self) -> None:
        t = self.timing
        fits = self.search.fit_log if self.search else None
        write_json_atomic(self.ctx.workdir / TIMING_FILE, {
            "pool_seconds": round(t.pool_seconds, 3), "pool_reused": t.pool_reused,
            "embedding_seconds": round(t.embedding_seconds, 3),
            "surrogate_fits": fits.fits if fits else 0,
            "surrogate_fit_seconds": round(fits.seconds, 3) if fits else 0.0,
            "surrogate_fit_cpu_seconds": round(fits.cpu_seconds, 3) if fits else 0.0,
            "surrogate_epochs": list(fits.epochs) if fits else []})

    def _result(self, best: Candidate, incumbent: tuple[Combination, float] | None) -> OptimizationResult:
        pool = self.pool
        metadata: dict[str, Any] = {
            "graph": {"shape": self.graph.shape, "roles": list(self.graph.roles),
                      "edges": [list(e) for e in self.graph.edges]},
            "pool_sizes": {r: pool.size(r) for r in pool.roles} if pool else {},
            "pool_styles": {r: list(pool.styles[r]) for r in pool.roles} if pool else {},
            "pool_size": sum(pool.size(r) for r in pool.roles) if pool else 0,
            "pulls": len(self.pulls),
            "warmup_pulls": sum(q.kind == "warmup" for q in self.pulls),
            "surrogate_fits": self.search.fit_log.fits if self.search else 0,
            "incumbent_combination": self._named(incumbent[0]) if incumbent else None,
            "incumbent_posterior_mean": round(incumbent[1], 6) if incumbent else None,
            "fisher_matrix": self.search.fisher.to_json() if self.search else None,
            "charged_rollouts": self.ctx.budget.charged,
            "params": {k: getattr(self.params, k) for k in self.params.__dataclass_fields__},
        }
        if pool is not None:
            metadata["reflection"] = dict(pool.usage)  # the pool is MASPOB's only reflection use
        return OptimizationResult(best=best, stop_reason=STOP_BUDGET, history=self.history, metadata=metadata)
