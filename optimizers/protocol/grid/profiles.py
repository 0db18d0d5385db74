"""Token profiles: what one rollout of a team costs in model calls and tokens, per topology.

``grid --plan`` multiplies these by the rollouts a sweep will run. A profile measured on the
endpoint that will run the grid (``python -m optimizers.protocol.run.calibrate``, which rolls the
seed team on validation problems and writes a profiles file) replaces the default for its
topologies; ``--profiles FILE`` gives it to the plan.

The default profile is an assumption, not a measurement: a reasoning model of the grid's size
writing about 2,000 completion tokens per call, prompts that grow with the team's transcript, and
the calls each team's layout makes at team size 4 (single 1; independent 4 solvers and no judge
call; sequential one call per role; centralized the manager's turns with the workers it calls;
decentralized 4 debaters × 2 rounds plus a final answer). Calls of a multi-agent team scale with its
size. Reflection (the optimizers' proposer model) is assumed at one call per 10 charged rollouts,
8,000 prompt and 2,000 completion tokens each. Calibrate before trusting hours.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

PROFILE_SCHEMA = "lcb-grid-token-profiles/v1"
REFERENCE_TEAM_SIZE = 4


@dataclass(frozen=True, slots=True)
class TokenProfile:
    """Mean cost of one rollout (one team run on one problem)."""

    calls_per_rollout: float
    prompt_tokens_per_call: float
    completion_tokens_per_call: float
    team_size: int = REFERENCE_TEAM_SIZE  # the size it was measured (or assumed) at
    source: str = "default (assumed)"
    rollouts_measured: int = 0

    @property
    def tokens_per_rollout(self) -> float:
        return self.calls_per_rollout * (self.prompt_tokens_per_call + self.completion_tokens_per_call)

    def at_size(self, team_size: int) -> TokenProfile:
        """Calls scale with the number of agents (a single agent is always one)."""
        if team_size == self.team_size or self.team_size <= 1:
            return self
        return replace(self, calls_per_rollout=self.calls_per_rollout * team_size / self.team_size,
                       team_size=team_size)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


DEFAULT_PROFILES: Mapping[str, TokenProfile] = {
    "single": TokenProfile(1.0, 900.0, 2000.0, team_size=1),
    "independent": TokenProfile(4.0, 900.0, 2000.0),
    "sequential": TokenProfile(4.0, 2500.0, 1500.0),
    "centralized": TokenProfile(9.0, 3000.0, 1200.0),
    "decentralized": TokenProfile(9.0, 3500.0, 1500.0),
}
# Reflection model cost per charged optimization rollout (methods without reflection: none).
DEFAULT_REFLECTION = TokenProfile(0.1, 8000.0, 2000.0, team_size=1, source="default (assumed)")


class ProfileError(ValueError):
    """An unreadable or malformed profiles file (one line)."""


def load_profiles(path: Path | None) -> dict[str, TokenProfile]:
    """The default profiles, with those of ``path`` (a calibration's output) replacing theirs."""
    profiles = dict(DEFAULT_PROFILES)
    if path is None:
        return profiles
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ProfileError(f"cannot read token profiles {path}: {exc}") from None
    if not isinstance(data, Mapping) or data.get("schema") != PROFILE_SCHEMA:
        raise ProfileError(f"{path}: not a token profiles file (schema {PROFILE_SCHEMA})")
    for topology, row in (data.get("profiles") or {}).items():
        try:
            profiles[str(topology)] = TokenProfile(
                float(row["calls_per_rollout"]), float(row["prompt_tokens_per_call"]),
                float(row["completion_tokens_per_call"]), int(row.get("team_size", REFERENCE_TEAM_SIZE)),
                str(row.get("source", f"measured ({path})")), int(row.get("rollouts_measured", 0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ProfileError(f"{path}: profile {topology!r} is malformed ({exc})") from None
    return profiles


def profiles_payload(profiles: Mapping[str, TokenProfile], **about: Any) -> dict[str, Any]:
    """A profiles file's content (what calibration writes)."""
    return {"schema": PROFILE_SCHEMA, **about, "profiles": {k: v.as_dict() for k, v in profiles.items()}}


def measured_profile(usages: list[Mapping[str, int]], team_size: int, source: str) -> TokenProfile:
    """A profile from the usage records of calibration rollouts."""
    if not usages:
        raise ProfileError("no calibration rollout finished")
    calls = sum(int(u.get("calls", 0)) for u in usages)
    prompt = sum(int(u.get("prompt_tokens", 0)) for u in usages)
    completion = sum(int(u.get("completion_tokens", 0)) for u in usages)
    if calls == 0:
        raise ProfileError("the calibration rollouts made no model call")
    return TokenProfile(calls / len(usages), prompt / calls, completion / calls, team_size, source, len(usages))
