"""Exact MAP by variable elimination agrees with enumeration, ties included."""

from __future__ import annotations

import itertools
import random

import pytest

from optimizers.mapro.map_inference import FactorGraph, map_assignment, max_value, min_fill_order


def enumerate_map(graph: FactorGraph) -> tuple[dict[str, int], float]:
    """Every assignment in lexicographic order; the first one with the largest score."""
    names = graph.variables
    scored = [(dict(zip(names, values, strict=True)), graph.value(dict(zip(names, values, strict=True))))
              for values in itertools.product(*(range(graph.sizes[n]) for n in names))]
    top = max(score for _, score in scored)
    return next(a for a, s in scored if s >= top - 1e-9), top


def random_graph(rng: random.Random, *, ties: bool) -> FactorGraph:
    count = rng.randint(1, 6)
    names = [f"v{i}" for i in range(count)]
    rng.shuffle(names)
    sizes = {name: rng.randint(1, 4) for name in names}
    # Few distinct values make many exact ties; integers keep sums exact.
    draw = (lambda: float(rng.choice([0, 1, 2]))) if ties else (lambda: rng.uniform(-3, 3))
    unary = {n: [draw() for _ in range(sizes[n])] for n in names if rng.random() < 0.8}
    pairs = [p for p in itertools.combinations(names, 2) if rng.random() < 0.5]
    pairwise = {(a, b): [[draw() for _ in range(sizes[b])] for _ in range(sizes[a])] for a, b in pairs}
    return FactorGraph(sizes, unary, pairwise)


@pytest.mark.parametrize("ties", [False, True])
def test_map_matches_enumeration_on_random_graphs(ties: bool) -> None:
    rng = random.Random(7 if ties else 3)
    for _ in range(150):
        graph = random_graph(rng, ties=ties)
        expected, best = enumerate_map(graph)
        found, score = map_assignment(graph)
        assert score == pytest.approx(best)
        assert max_value(graph) == pytest.approx(best)
        assert found == expected  # the lexicographically smallest maximiser


def test_all_ties_keep_index_zero_everywhere() -> None:
    graph = FactorGraph({"manager": 3, "coder": 3, "tester": 3},
                        {"manager": [0.0] * 3}, {("manager", "coder"): [[0.0] * 3] * 3})
    assert map_assignment(graph)[0] == {"manager": 0, "coder": 0, "tester": 0}


def test_edge_factors_can_overrule_node_factors() -> None:
    # Nodes alone prefer (0, 0); the edge makes (2, 1) the joint optimum.
    graph = FactorGraph({"a": 3, "b": 2}, {"a": [0.0, -1.0, -0.5], "b": [0.0, -0.5]},
                        {("a", "b"): [[-3.0, -3.0], [-3.0, -3.0], [-3.0, 0.0]]})
    assert map_assignment(graph) == ({"a": 2, "b": 1}, pytest.approx(-1.0))


def test_min_fill_eliminates_chain_ends_first() -> None:
    from optimizers.mapro.map_inference import _factors

    graph = FactorGraph({"a": 2, "b": 2, "c": 2, "d": 2},
                        pairwise={("a", "b"): [[0, 0], [0, 0]], ("b", "c"): [[0, 0], [0, 0]],
                                  ("c", "d"): [[0, 0], [0, 0]]})
    assert min_fill_order(_factors(graph, {}), graph.variables)[0] in ("a", "d")


def test_bad_graphs_are_refused() -> None:
    with pytest.raises(ValueError):
        FactorGraph({"a": 0})
    with pytest.raises(ValueError):
        FactorGraph({"a": 2}, {"a": [0.0]})
    with pytest.raises(ValueError):
        FactorGraph({"a": 2, "b": 2}, pairwise={("a", "b"): [[0.0, 0.0]]})
