"""Exact MAP over a discrete pairwise factor graph (max-product variable elimination).

MAPRO picks one candidate prompt per variable (role) to maximise
``prod_i g(x_i) * prod_(i,j) g(x_i, x_j)``; in log space that is a sum of unary and pairwise
terms. ``map_assignment`` eliminates variables in min-fill order with max-marginalisation, so it
is exact on any graph (trees, the star and the chain, cost exponential only in the induced
width, which is 1 for MAPRO's graphs).

Ties are broken deterministically: among all maximisers the lexicographically smallest
assignment (in the graph's variable order) wins. Index 0 of every domain is the incumbent's
prompt in MAPRO, so a judge that prefers nothing keeps the incumbent. The decoding fixes one
variable at a time to its smallest value that still reaches the optimum (one more elimination
per value tried), which is exact where a traceback would return an arbitrary maximiser.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

TIE_TOLERANCE = 1e-9

Scope = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FactorGraph:
    """Variables with finite domains ``range(size)`` and log-space unary/pairwise factors."""

    sizes: Mapping[str, int]  # variable -> domain size; iteration order is the tie-break order
    unary: Mapping[str, Sequence[float]] = field(default_factory=dict)
    pairwise: Mapping[tuple[str, str], Sequence[Sequence[float]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, size in self.sizes.items():
            if size < 1:
                raise ValueError(f"variable {name!r} has an empty domain")
        for name, values in self.unary.items():
            if name not in self.sizes or len(values) != self.sizes[name]:
                raise ValueError(f"unary factor of {name!r} does not match its domain")
        for (left, right), table in self.pairwise.items():
            if left == right or left not in self.sizes or right not in self.sizes:
                raise ValueError(f"bad pairwise factor ({left!r}, {right!r})")
            if len(table) != self.sizes[left] or any(len(row) != self.sizes[right] for row in table):
                raise ValueError(f"pairwise factor ({left!r}, {right!r}) does not match the domains")

    @property
    def variables(self) -> list[str]:
        return list(self.sizes)

    def value(self, assignment: Mapping[str, int]) -> float:
        """The log-score of a full assignment."""
        total = sum(values[assignment[name]] for name, values in self.unary.items())
        for (left, right), table in self.pairwise.items():
            total += table[assignment[left]][assignment[right]]
        return total


@dataclass(slots=True)
class _Factor:
    scope: Scope
    table: dict[tuple[int, ...], float]


def _factors(graph: FactorGraph, clamp: Mapping[str, int]) -> list[_Factor]:
    def domain(name: str) -> range:
        return range(clamp[name], clamp[name] + 1) if name in clamp else range(graph.sizes[name])

    factors = [_Factor((name,), {(k,): float(values[k]) for k in domain(name)})
               for name, values in graph.unary.items()]
    for (left, right), table in graph.pairwise.items():
        factors.append(_Factor((left, right), {(k, m): float(table[k][m])
                                               for k in domain(left) for m in domain(right)}))
    for name in graph.sizes:  # every variable appears in some factor, clamps included
        factors.append(_Factor((name,), {(k,): 0.0 for k in domain(name)}))
    return factors


def _neighbours(factors: Sequence[_Factor]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for factor in factors:
        for name in factor.scope:
            graph.setdefault(name, set()).update(v for v in factor.scope if v != name)
    return graph


def min_fill_order(factors: Sequence[_Factor], variables: Sequence[str]) -> list[str]:
    """Greedy min-fill elimination order (ties: fewer neighbours, then variable order)."""
    adjacency = {k: set(v) for k, v in _neighbours(factors).items()}
    position = {name: i for i, name in enumerate(variables)}
    remaining = list(variables)
    order: list[str] = []
    while remaining:
        def fill(name: str) -> int:
            near = sorted(adjacency[name])
            return sum(1 for a, b in itertools.combinations(near, 2) if b not in adjacency[a])

        best = min(remaining, key=lambda n: (fill(n), len(adjacency[n]), position[n]))
        near = adjacency.pop(best)
        for a, b in itertools.combinations(sorted(near), 2):
            adjacency[a].add(b)
            adjacency[b].add(a)
        for name in near:
            adjacency[name].discard(best)
        remaining.remove(best)
        order.append(best)
    return order


def _max_out(factors: list[_Factor], name: str) -> list[_Factor]:
    """Combine the factors that mention ``name`` and maximise it out."""
    touching = [f for f in factors if name in f.scope]
    rest = [f for f in factors if name not in f.scope]
    scope = tuple(sorted({v for f in touching for v in f.scope if v != name}))
    domains: dict[str, list[int]] = {}
    for factor in touching:
        for index, variable in enumerate(factor.scope):
            values = sorted({key[index] for key in factor.table})
            domains[variable] = values if variable not in domains else sorted(set(domains[variable]) & set(values))
    table: dict[tuple[int, ...], float] = {}
    for key in itertools.product(*(domains[v] for v in scope)):
        fixed = dict(zip(scope, key, strict=True))
        best = -math.inf
        for value in domains[name]:
            fixed[name] = value
            total = 0.0
            for factor in touching:
                entry = factor.table.get(tuple(fixed[v] for v in factor.scope))
                if entry is None:
                    total = -math.inf
                    break
                total += entry
            best = max(best, total)
        table[key] = best
    return [*rest, _Factor(scope, table)]


def max_value(graph: FactorGraph, clamp: Mapping[str, int] | None = None) -> float:
    """The largest log-score over all assignments (agreeing with ``clamp``)."""
    factors = _factors(graph, clamp or {})
    for name in min_fill_order(factors, graph.variables):
        factors = _max_out(factors, name)
    return sum(f.table[()] for f in factors)


def map_assignment(graph: FactorGraph) -> tuple[dict[str, int], float]:
    """The exact MAP assignment (lexicographically smallest among ties) and its log-score."""
    best = max_value(graph)
    chosen: dict[str, int] = {}
    for name in graph.variables:
        for value in range(graph.sizes[name]):
            if max_value(graph, {**chosen, name: value}) >= best - TIE_TOLERANCE * max(1.0, abs(best)):
                chosen[name] = value
                break
        else:  # unreachable: some value of every variable attains the optimum
            raise ArithmeticError(f"no value of {name!r} reaches the optimum")
    return chosen, graph.value(chosen)

