"""Step, time and sampling bounds of a team run (explicit knobs, never environment variables)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TeamLimits:
    """Bounds for one ``run_team`` call.

    Model-call budgets count calls of one agent turn; the last call of a ReAct turn is made
    without tools (after a short note) so the agent always gets a chance to answer.

    ``replica_temperature`` is a floor on the sampling temperature of the replica teams
    (independent coders, decentralized peers): with greedy decoding all replicas write the same
    program and a vote over N copies costs N times as much for nothing. ``None`` keeps the
    caller's temperature unchanged.

    ``agent_timeout_s`` bounds one replica (independent) or one peer turn (decentralized): an
    agent that runs out of time abstains and the finished agents are kept. If every agent runs
    out of time the run is classified as an infrastructure failure (the endpoint most likely
    stalled), so the optimizer protocol retries it uncharged.
    """

    solver_calls: int = 12  # single: model calls of the ReAct solver
    coder_calls: int = 10  # independent: per replica
    stage_calls: int = 12  # sequential: per ReAct stage (stages without tools make one call)
    worker_calls: int = 8  # centralized: per delegation
    peer_calls: int = 8  # decentralized: per peer per round
    manager_nudges: int = 1  # centralized: reminders after a reply with neither tool call nor program
    agent_timeout_s: float | None = 900.0
    tool_timeout_s: float = 10.0
    replica_temperature: float | None = 0.7

    def __post_init__(self) -> None:
        for name in ("solver_calls", "coder_calls", "stage_calls", "worker_calls", "peer_calls"):
            if getattr(self, name) < 1:
                raise ValueError(f"TeamLimits.{name} must be >= 1")
        if self.manager_nudges < 0:
            raise ValueError("TeamLimits.manager_nudges must be >= 0")
        if self.tool_timeout_s <= 0:
            raise ValueError("TeamLimits.tool_timeout_s must be > 0")
