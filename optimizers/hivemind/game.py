"""HiveMind's coalition game on a team: who the players are and what a coalition runs.

Players are the agents a mask may leave out (``TeamRoster.maskable``): the workers of a
centralized team (its manager is always there, so the empty coalition is the manager alone), the
stages of a sequential pipeline, the replicas of an independent or decentralized team (all
sharing one prompt). A player's Shapley value is credited to the prompt it runs with, so a
shared prompt gets the sum over its replicas.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from optimizers.hivemind.shapley import Coalition
from optimizers.team_graph import TeamRoster


class MaskMismatch(RuntimeError):
    """A rollout's team reports other active agents than the coalition asked for."""


@dataclass(frozen=True, slots=True)
class TeamGame:
    roster: TeamRoster

    @property
    def players(self) -> tuple[str, ...]:
        return tuple(agent.name for agent in self.roster.maskable)

    @property
    def grand(self) -> Coalition:
        return frozenset(self.players)

    def prompts(self) -> tuple[str, ...]:
        """The role prompts of the team, in acting order (each once)."""
        return tuple(dict.fromkeys(agent.role for agent in self.roster.agents))

    def scored_prompts(self) -> frozenset[str]:
        """The prompts that get a Shapley value (run by at least one player; not the manager's)."""
        return frozenset(agent.role for agent in self.roster.maskable)

    def active_for(self, coalition: Coalition) -> tuple[str, ...] | None:
        """The mask that runs ``coalition``; None for the grand coalition (the unmasked team)."""
        if coalition == self.grand:
            return None
        return tuple(sorted(coalition | self.roster.always_active))

    def acting(self, coalition: Coalition) -> list[str]:
        """Who the team must report as active when it runs ``coalition`` (roster order)."""
        members = coalition | self.roster.always_active
        return [name for name in self.roster.names if name in members]

    def check(self, coalition: Coalition, reported: Sequence[str] | None, problem_id: str) -> None:
        expected = self.acting(coalition)
        if reported is None or list(reported) != expected:
            raise MaskMismatch(f"hivemind: the run of coalition {sorted(coalition)} on {problem_id} reports "
                               f"active agents {reported}, expected {expected}")

    def prompt_values(self, shapley: Mapping[str, float]) -> dict[str, float]:
        """Shapley value per role prompt: the sum over the players that run with it."""
        totals: dict[str, float] = {}
        for player in self.players:
            role = self.roster.role_of(player)
            totals[role] = totals.get(role, 0.0) + shapley[player]
        return totals


def coalition_label(coalition: Coalition, players: Sequence[str]) -> str:
    """A stable, readable name for journals (``{}`` for the empty coalition)."""
    return "{" + ",".join(p for p in players if p in coalition) + "}"
