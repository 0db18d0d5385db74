"""Masked team runs (``run_team(..., active=...)``): the masked agents are removed from the team.

Checked against the scripted server's request log, for every topology: a masked run makes
exactly the model calls of its active agents (each active agent as many as in the full team),
masked sequential stages pass their input through, a centralized manager is offered only the
active workers, an empty coalition of replicas abstains with zero calls, and every trajectory
records the mask it ran with.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from lcb.data import load_problems
from topologies.models import make_client, resolve_model
from topologies.prompts import default_team_spec
from topologies.scripted import ScriptedServer
from topologies.teams import LayoutError, run_team
from topologies.teams.layouts import team_roster
from topologies.teams.rehearsal import team_script
from topologies.types import Decoding, Trajectory

SEED = 3
_STAGE = re.compile(r"You are stage (\d+) of (\d+) \((\w+)\)")
_WORKER = re.compile(r"You are (\w+), a worker")


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(team_script()) as srv:
        yield srv


@pytest.fixture(scope="module")
def problem() -> Any:
    return load_problems("builtin", only=["demo_stdin"]).problems[0]


def run(server: ScriptedServer, topology: str, problem: Any, active: Any, size: int = 4) -> tuple[Trajectory, list[Any]]:
    spec = default_team_spec(topology, team_size=size)
    client = make_client(resolve_model("scripted-model", task_endpoints=server.base_url))
    start = len(server.requests)

    async def go() -> Trajectory:
        try:
            return await run_team(spec, problem, client, decoding=Decoding(), seed=SEED, active=active)
        finally:
            await client.aclose()

    trajectory = asyncio.run(go())
    return trajectory, server.requests[start:]


def caller(topology: str, request: Any) -> str:
    """Which agent made a request, read from what the server received."""
    system = request.messages[0]["content"]
    if topology == "single":
        return "solver"
    if topology in ("independent", "decentralized"):
        index = request.body["seed"] - SEED * 1000  # replicas sample with seed*1000 + their index
        return f"coder#{index}" if topology == "independent" else f"peer{index}"
    if topology == "sequential":
        return _STAGE.search(system).group(3)
    found = _WORKER.search(system)
    return found.group(1) if found else "manager"


def calls(topology: str, requests: list[Any]) -> Counter[str]:
    return Counter(caller(topology, r) for r in requests)


MASKS = {
    "single": [(), ("solver",)],
    "independent": [(), ("coder#1",), ("coder#0", "coder#3"), ("coder#0", "coder#1", "coder#2")],
    "decentralized": [(), ("peer2",), ("peer0", "peer3"), ("peer1", "peer2", "peer3")],
    "sequential": [(), ("coder",), ("analyzer", "tester"), ("analyzer", "coder", "debugger"),
                   ("coder", "tester", "debugger")],
    "centralized": [("manager",), ("manager", "coder_worker"), ("manager", "analyzer_worker", "tester_worker")],
}


@pytest.mark.parametrize("topology", list(MASKS))
def test_masked_runs_call_exactly_the_active_agents(server: ScriptedServer, problem: Any, topology: str) -> None:
    size = 1 if topology == "single" else 4
    roster = team_roster(topology, size)
    full, full_requests = run(server, topology, problem, None, size)
    per_agent_full = calls(topology, full_requests)
    assert set(per_agent_full) == set(roster.names)  # the attribution sees every agent
    assert full.extras["active_agents"] == list(roster.names) and full.extras["masked"] is False
    for mask in MASKS[topology]:
        trajectory, requests = run(server, topology, problem, mask, size)
        per_agent = calls(topology, requests)
        assert trajectory.extras["active_agents"] == [n for n in roster.names if n in mask]
        assert trajectory.extras["masked"] is True
        assert trajectory.usage.calls == len(requests)
        expected = {name: per_agent_full[name] for name in mask}
        if topology == "centralized":
            # the manager is always there; its turns depend on how many workers it can call
            assert per_agent.pop("manager") >= 1
            expected.pop("manager")
            offered = {t for r in requests for t in (r.body.get("tools") and [x["function"]["name"]
                                                                              for x in r.body["tools"]] or [])}
            assert {t for t in offered if t.startswith("delegate_to_")} == {
                f"delegate_to_{w}" for w in mask if w != "manager"}
        assert dict(per_agent) == expected, (mask, per_agent)


def test_empty_replica_coalition_abstains_without_calls(server: ScriptedServer, problem: Any) -> None:
    for topology in ("single", "independent", "decentralized", "sequential"):
        trajectory, requests = run(server, topology, problem, (), 1 if topology == "single" else 4)
        assert requests == [] and trajectory.code is None and trajectory.usage.calls == 0
        assert trajectory.error is None and trajectory.extras["active_agents"] == []


def test_masked_sequential_stage_passes_its_input_through(server: ScriptedServer, problem: Any) -> None:
    trajectory, requests = run(server, "sequential", problem, ("analyzer", "tester", "debugger"))
    firsts = [r for r in requests if len(r.messages) == 2]
    order = [_STAGE.search(r.messages[0]["content"]).groups() for r in firsts]
    # the pipeline is the active stages only, numbered as such
    assert order == [("1", "3", "analyzer"), ("2", "3", "tester"), ("3", "3", "debugger")]
    tester_input = firsts[1].messages[1]["content"]
    assert "analyzer" in tester_input and "coder done" not in tester_input
    assert trajectory.extras["submitted_by"] == "debugger"
    assert [s["role"] for s in trajectory.extras["stages"]] == ["analyzer", "tester", "debugger"]


def test_masks_the_team_cannot_run_are_refused(server: ScriptedServer, problem: Any) -> None:
    with pytest.raises(LayoutError, match="cannot run without manager"):
        run(server, "centralized", problem, ("coder_worker",))
    with pytest.raises(LayoutError, match="does not have: coder#7"):
        run(server, "independent", problem, ("coder#7",))
    with pytest.raises(LayoutError, match="not one string"):
        run(server, "independent", problem, "coder#0")
