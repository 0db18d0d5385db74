"""The team graph the surrogate reads: one node per editable role prompt.

- centralized: a star, the manager linked with every worker;
- sequential: a chain in acting order;
- a team whose agents share one prompt (single, independent, decentralized): one node;
- any other role set: the roles in sorted order with no edges (each node still sees itself).

Edges are stored in both directions; the surrogate adds self loops. The layouts come from
``optimizers.team_graph`` (the core's window on the teams' layouts).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

HUB_ROLE = "manager"


@dataclass(frozen=True, slots=True)
class TeamGraph:
    roles: tuple[str, ...]  # node order (the order of a combination's indices)
    edges: tuple[tuple[int, int], ...]  # directed; both directions present
    shape: str  # star | chain | single | isolated

    @property
    def nodes(self) -> int:
        return len(self.roles)


def _both_ways(pairs: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    edges: list[tuple[int, int]] = []
    for a, b in pairs:
        edges += [(a, b), (b, a)]
    return tuple(edges)


def _sequential_order(roles: frozenset[str]) -> tuple[str, ...] | None:
    from optimizers.team_graph import sequential_role_order

    return sequential_role_order(roles)


def team_graph(roles: Iterable[str]) -> TeamGraph:
    names = frozenset(roles)
    if not names:
        raise ValueError("a team graph needs at least one role")
    if len(names) == 1:
        return TeamGraph(tuple(names), (), "single")
    if HUB_ROLE in names:
        order = (HUB_ROLE, *sorted(names - {HUB_ROLE}))
        return TeamGraph(order, _both_ways((0, i) for i in range(1, len(order))), "star")
    chain = _sequential_order(names)
    if chain is not None:
        return TeamGraph(chain, _both_ways((i, i + 1) for i in range(len(chain) - 1)), "chain")
    return TeamGraph(tuple(sorted(names)), (), "isolated")
