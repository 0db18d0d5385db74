"""The aggregate's transfer matrix and team-vs-matched-single rows, on hand-made job results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from optimizers.protocol.aggregate import matched, transfer
from optimizers.protocol.aggregate.summary import JobResult, cell_comparison, compare, group_cells

IDS = ("p1", "p2", "p3", "p4")


def job(method: str, model: str, seed: int, base: tuple[float, ...], deployed: tuple[float, ...], *,
        source_model: str | None = None, match: dict[str, Any] | None = None,
        tokens: dict[str, float] | None = None, cost: dict[str, Any] | None = None) -> JobResult:
    cell = {"method": method, "dataset": "lcb", "topology": "independent", "team_size": 4,
            "communication": "freeform", "rounds": 2, "model": model, "registry_key": "independent"}
    if source_model:
        cell["transfer_from"] = {"method": method, "model": source_model, "registry_key": "independent"}
    return JobResult(path=Path(f"/{method}/{model}/{source_model}/{seed}/result.json"), cell=cell,
                     registry_key="independent", seed=seed, conformant=True, status="completed", valid=True,
                     example_ids=IDS, baseline=base, deployed=deployed, selected_candidate="incumbent",
                     fallback_reason=None, charged=12, stop_reason="done", cost=cost or {},
                     tokens_per_problem=tokens or {}, matched=match or {})


def analyse(results: list[JobResult]) -> tuple[list[Any], dict[Any, Any]]:
    groups = group_cells(results, (0, 1))
    return groups, {g.key: cell_comparison(g, 200) for g in groups if not g.problems}


def test_the_matrix_diagonal_is_the_source_jobs_own_delta_and_off_diagonal_the_transfer() -> None:
    results = [
        job("gepa", "org/a", 0, (0, 0, 1, 1), (1, 0, 1, 1)), job("gepa", "org/a", 1, (0, 0, 1, 1), (1, 1, 1, 1)),
        job("gepa", "org/b", 0, (0, 1, 1, 1), (0, 1, 1, 1)), job("gepa", "org/b", 1, (0, 1, 1, 1), (1, 1, 1, 1)),
        # tuned on a, deployed on b: keeps a part of a's gain
        job("gepa", "org/b", 0, (0, 0, 0, 1), (0, 0, 0, 1), source_model="org/a"),
        job("gepa", "org/b", 1, (0, 0, 0, 1), (0, 1, 0, 1), source_model="org/a"),
    ]
    groups, stats = analyse(results)
    out = transfer.transfer_matrix(groups, stats)
    (block,) = out["matrices"]
    entries = {(e["source"], e["target"]): e for e in block["entries"]}
    own_a = next(c for g, c in ((g, stats[g.key]) for g in groups) if g.first.model_key == "org--a"
                 and not g.first.transfer_from)
    own_b = next(c for g, c in ((g, stats[g.key]) for g in groups) if g.first.model_key == "org--b"
                 and not g.first.transfer_from)
    assert entries[("org--a", "org--a")]["delta_pp"] == own_a.mean_delta_pp == 37.5
    assert entries[("org--b", "org--b")]["delta_pp"] == own_b.mean_delta_pp == 12.5
    assert entries[("org--a", "org--b")]["delta_pp"] == 12.5
    assert entries[("org--a", "org--b")]["share_kept"] == 12.5 / 37.5
    assert ("org--b", "org--a") not in entries  # nobody deployed b's prompts on a
    assert out["notes"] == []


def test_a_re_test_on_the_source_model_that_disagrees_is_reported() -> None:
    results = [job("gepa", "org/a", s, (0, 0, 1, 1), (1, 0, 1, 1)) for s in (0, 1)]
    results += [job("gepa", "org/a", s, (0, 0, 1, 1), (0, 0, 1, 1), source_model="org/a") for s in (0, 1)]
    groups, stats = analyse(results)
    out = transfer.transfer_matrix(groups, stats)
    assert out["matrices"] == [] or all(e["measured_by"] == "source" for e in out["matrices"][0]["entries"]
                                        if e["source"] == e["target"])
    assert len(out["notes"]) == 1 and "re-testing" in out["notes"][0]


def test_team_vs_matched_single_rows_and_break_even() -> None:
    tokens_team = {"baseline": 2000.0, "deployed": 2200.0}
    results = []
    for seed in (0, 1):
        results.append(job("gepa", "org/a", seed, (0, 0, 1, 1), (1, 1, 1, 1), tokens=tokens_team,
                           cost={"task_tokens": 30000, "reflection_tokens": 5000, "uncharged_tokens": 5000}))
        results.append(job("self_consistency", "org/a", seed, (0, 0, 1, 1), (0, 1, 1, 0),
                           tokens={"baseline": 2000.0, "deployed": 1950.0}, match={"n": 3}))
    groups, stats = analyse(results)
    rows = {r["method"]: r for r in matched.matched_rows(groups, stats, compare, replicates=200, deployments=100)}
    seed_row, gepa_row = rows["seed team"], rows["gepa"]
    assert seed_row["team_vs_single_pp"] == 0.0 and seed_row["n_samples"] == [3]
    assert gepa_row["team_vs_single_pp"] == 50.0 and gepa_row["optimized_vs_seed_pp"] == 50.0
    assert gepa_row["team_tokens_per_problem"] == 2200.0 and gepa_row["single_tokens_per_problem"] == 1950.0
    assert gepa_row["optimization_tokens"] == 40000
    assert gepa_row["amortised_tokens_per_problem"] == 2200.0 + 40000 / 100
    # Seed team: 2000 tokens per problem at 50 % -> 4000 per solved problem. Optimized: 2200 at
    # 100 % -> 2200, so 1800 tokens per problem are spare; 40000 / 1800 -> 23 deployments.
    assert gepa_row["break_even_vs_seed"] == 23
    assert matched.break_even(40000, 2200, 1.0, 2000, 0.5) == 23
    assert matched.break_even(40000, 2200, 0.5, 2000, 0.5) is None  # no gain: never pays off


def test_a_transfer_cell_is_compared_with_its_target_models_single_agent_at_its_sources_search_cost() -> None:
    source_cost = {"task_tokens": 30000, "reflection_tokens": 5000, "uncharged_tokens": 5000}
    results = []
    for seed in (0, 1):
        results.append(job("gepa", "org/a", seed, (0, 0, 1, 1), (1, 1, 1, 1), cost=source_cost,
                           tokens={"baseline": 2000.0, "deployed": 2200.0}))
        results.append(job("gepa", "org/b", seed, (0, 0, 0, 1), (0, 1, 0, 1), source_model="org/a",
                           tokens={"baseline": 3000.0, "deployed": 3100.0}))
        results.append(job("self_consistency", "org/b", seed, (0, 0, 0, 1), (0, 0, 1, 1),
                           tokens={"baseline": 3000.0, "deployed": 2900.0}, match={"n": 5}))
    groups, stats = analyse(results)
    rows = {r["method"]: r for r in matched.matched_rows(groups, stats, compare, replicates=200, deployments=100)}
    assert set(rows) == {"seed team", "gepa[from=org--a]"}  # a's own cell has no baseline on a
    moved = rows["gepa[from=org--a]"]
    assert moved["model"] == "org--b" and moved["n_samples"] == [5]
    assert moved["team_vs_single_pp"] == 0.0 and moved["optimized_vs_seed_pp"] == 25.0
    assert moved["team_tokens_per_problem"] == 3100.0 and moved["single_tokens_per_problem"] == 2900.0
    assert moved["optimization_tokens"] == 40000  # the search on a that made the prompts
    # Seed team on b: 3000 tokens at 25 % -> 12000 per solved problem; transferred: 3100 at 50 %
    # -> 6200, so 2900 tokens per problem are spare: 40000 / 2900 -> 14 deployments.
    assert moved["break_even_vs_seed"] == 14


def test_baselines_and_transfers_never_change_the_grids_adjusted_p_values() -> None:
    from optimizers.protocol.aggregate.summary import _family, apply_holm

    from dataclasses import replace

    ids = tuple(f"q{i}" for i in range(12))  # enough problems for p-values Holm does not clip at 1

    def wide(result: JobResult, gained: int) -> JobResult:
        return replace(result, example_ids=ids, baseline=(0.0,) * 12, deployed=(1.0,) * gained + (0.0,) * (12 - gained))

    grid = [wide(job(m, "org/a", s, (), ()), 10) for m in ("gepa", "mipro") for s in (0, 1)]
    extra = [wide(job("self_consistency", "org/a", s, (), (), match={"n": 3}), 11) for s in (0, 1)]
    extra += [wide(job("gepa", "org/a", s, (), (), source_model="org/b"), 9) for s in (0, 1)]

    def adjusted(results: list[JobResult]) -> dict[tuple[str, str], dict[int, float | None]]:
        _, stats = analyse(results)
        comparisons = list(stats.values())
        apply_holm(comparisons, lambda c: _family("cell", "task", c))
        return {(c.label["method"], c.label["model"]): dict(c.p_holm) for c in comparisons}

    alone, together = adjusted(grid), adjusted(grid + extra)
    assert 0 < alone[("gepa", "org--a")][0] < 0.01  # 4 p-values of 2/1024 in the family: 4 x 0.00195
    assert {k: together[k] for k in alone} == alone
    # The baselines and transfers have families of their own.
    assert together[("self_consistency", "org--a")][0] is not None
