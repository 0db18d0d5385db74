"""Shapley values of a cooperative game over named players: exact, or from permutation prefixes.

A coalition is a ``frozenset`` of player names; ``value`` maps each coalition the plan asked for
to its worth (for HiveMind: the team's mean score on a batch with only those agents active).

- exact: every subset (2^n coalitions); phi_i = sum over S not containing i of
  |S|! (n-|S|-1)! / n! * (v(S+i) - v(S)).
- Monte-Carlo: ``k`` random orderings of the players; phi_i = mean over orderings of the worth
  added when i joins the players before it. Only the prefixes of the drawn orderings are needed
  (at most 2 + k(n-1) distinct coalitions), so a plan fits a coalition cap.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import factorial

Coalition = frozenset[str]


@dataclass(frozen=True, slots=True)
class CoalitionPlan:
    """Which coalitions to evaluate and how to turn their worth into Shapley values."""

    players: tuple[str, ...]
    coalitions: tuple[Coalition, ...]  # distinct, in a fixed order (smallest first)
    permutations: tuple[tuple[str, ...], ...] = ()  # empty: the exact power set

    @property
    def kind(self) -> str:
        return "monte_carlo" if self.permutations else "exact"

    def shapley(self, value: Mapping[Coalition, float]) -> dict[str, float]:
        missing = [c for c in self.coalitions if c not in value]
        if missing:
            raise KeyError(f"no worth for coalition(s) {[sorted(c) for c in missing[:3]]}")
        if self.permutations:
            return permutation_shapley(self.players, self.permutations, value)
        return exact_shapley(self.players, value)


def _ordered(coalitions: set[Coalition]) -> tuple[Coalition, ...]:
    """Smallest first, then by the sorted member names (the reference's coalition order)."""
    return tuple(sorted(coalitions, key=lambda c: (len(c), "+".join(sorted(c)))))


def power_set(players: Sequence[str]) -> tuple[Coalition, ...]:
    subsets = {frozenset(c) for size in range(len(players) + 1) for c in itertools.combinations(players, size)}
    return _ordered(subsets)


def plan_coalitions(players: Sequence[str], max_coalitions: int, rng: random.Random) -> CoalitionPlan:
    """The exact power set while it fits ``max_coalitions``, else permutation prefixes that do.

    With n players, ``(max_coalitions - 2) // (n - 1)`` orderings (at least one) are drawn, each
    as ``rng.sample(players, n)`` (the reference's draw, so a seed gives the reference's plan);
    their prefixes share the empty and the grand coalition. The plan is drawn once per run.
    """
    players = tuple(players)
    if len(set(players)) != len(players):
        raise ValueError("player names must be distinct")
    n = len(players)
    if 2**n <= max_coalitions:
        return CoalitionPlan(players, power_set(players))
    if max_coalitions < n + 1:
        raise ValueError(f"max_coalitions must hold every prefix of one ordering ({n + 1} for {n} players)")
    count = max(1, (max_coalitions - 2) // max(1, n - 1))
    permutations = [tuple(rng.sample(players, n)) for _ in range(count)]
    prefixes = {frozenset(order[:k]) for order in permutations for k in range(n + 1)}
    return CoalitionPlan(players, _ordered(prefixes), tuple(permutations))


def exact_shapley(players: Sequence[str], value: Mapping[Coalition, float]) -> dict[str, float]:
    n = len(players)
    weights = [factorial(s) * factorial(n - s - 1) / factorial(n) for s in range(n)]
    phi: dict[str, float] = {}
    for player in players:
        others = [p for p in players if p != player]
        total = 0.0
        for size in range(n):
            for combo in itertools.combinations(others, size):
                before = frozenset(combo)
                total += weights[size] * (value[before | {player}] - value[before])
        phi[player] = total
    return phi


def permutation_shapley(
    players: Sequence[str], permutations: Sequence[Sequence[str]], value: Mapping[Coalition, float]
) -> dict[str, float]:
    phi = dict.fromkeys(players, 0.0)
    for order in permutations:
        before: Coalition = frozenset()
        for player in order:
            joined = before | {player}
            phi[player] += value[joined] - value[before]
            before = joined
    return {player: total / len(permutations) for player, total in phi.items()}
