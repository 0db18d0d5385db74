"""Endpoint routing: a team run's calls stay on one endpoint (affinity) and spill when it is
overloaded; least-in-flight (the positive control) scatters them; sessions stay balanced."""

from __future__ import annotations

import asyncio
import gc
import re
from collections import defaultdict
from contextlib import ExitStack
from dataclasses import replace
from typing import Any

import pytest

from topologies.models import ModelConfig, ModelConfigError, make_client
from topologies.routing import (
    LeastInFlight,
    RoutingOptions,
    SessionAffinity,
    current_session,
    make_router,
    routing_session,
)


class FakeEndpoint:
    def __init__(self, url: str, in_flight: int = 0, cool_until: float = 0.0) -> None:
        self.url, self.in_flight, self.cool_until = url, in_flight, cool_until


def pool(*loads: int) -> list[FakeEndpoint]:
    return [FakeEndpoint(f"e{i}", load) for i, load in enumerate(loads)]


def test_a_session_sticks_to_its_endpoint_while_not_overloaded() -> None:
    router = SessionAffinity(RoutingOptions(affinity_load_factor=2.0, affinity_min_in_flight=4))
    endpoints = pool(0, 0, 0, 0)
    with routing_session("p1"):
        first = router.pick(endpoints, 0, None, now=0.0)
        first.in_flight += 3  # busier than the others, but under the bound (4)
        assert router.pick(endpoints, 1, None, now=0.0) is first
        assert router.pick(endpoints, 2, None, now=0.0) is first
        first.in_flight += 1  # 4 in flight >= max(4, 2 x mean 1.25): overloaded, spill and move
        spilled = router.pick(endpoints, 0, None, now=0.0)
        assert spilled is not first and spilled.in_flight == 0 and router.spills == 1
        assert router.pick(endpoints, 0, None, now=0.0) is spilled  # the session moved


def test_new_sessions_balance_over_endpoints_by_live_sessions() -> None:
    router = SessionAffinity(RoutingOptions())
    endpoints = pool(0, 0, 0)
    sessions, picks = [], []
    for n in range(6):
        with routing_session(f"p{n}") as session:
            sessions.append(session)
            picks.append(router.pick(endpoints, n, None, now=0.0))
    assert sorted(router.sessions_on(e) for e in endpoints) == [2, 2, 2]
    del sessions, session  # the team runs end: their sessions are released
    gc.collect()
    assert sum(router.sessions_on(e) for e in endpoints) == 0


def test_a_failed_or_cooling_endpoint_is_left_and_calls_outside_sessions_route_least_in_flight() -> None:
    router = SessionAffinity(RoutingOptions())
    endpoints = pool(0, 0)
    with routing_session("p"):
        bound = router.pick(endpoints, 0, None, now=0.0)
        other = router.pick(endpoints, 0, bound, now=0.0)  # retry after a failure on `bound`
        assert other is not bound
        other.cool_until = 10.0
        assert router.pick(endpoints, 0, None, now=5.0) is bound  # cooling: back to a healthy one
    assert current_session() is None
    busy = pool(3, 1, 2)
    assert router.pick(busy, 0, None, now=0.0) is busy[1]
    assert LeastInFlight(RoutingOptions()).pick(busy, 0, None, now=0.0) is busy[1]


def test_unknown_routing_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown routing 'nearest'"):
        make_router("nearest")
    with pytest.raises(ModelConfigError, match="routing: unknown 'nearest'"):
        ModelConfig(id="m", endpoints=("http://127.0.0.1:1/v1",), routing="nearest")
    with pytest.raises(ValueError, match="affinity_load_factor"):
        RoutingOptions(affinity_load_factor=0.5)


def _problems(count: int) -> list[Any]:
    from lcb.data import load_problems

    builtin = list(load_problems("builtin").problems)
    return [replace(builtin[i % len(builtin)], id=f"{builtin[i % len(builtin)].id}#{i}",
                    statement=f"(ROLLOUT-{i:03d})\n{builtin[i % len(builtin)].statement}") for i in range(count)]


def _servers_per_rollout(routing: str, topology: str) -> dict[str, set[int]]:
    from topologies import aio
    from topologies.prompts import default_team_spec
    from topologies.scripted import ScriptedServer
    from topologies.teams import run_team
    from topologies.teams.rehearsal import team_script
    from topologies.types import Decoding

    with ExitStack() as stack:
        servers = [stack.enter_context(ScriptedServer(team_script(use_tools=False, delegate=True, latency_s=0.01)))
                   for _ in range(4)]
        config = ModelConfig(id="scripted", endpoints=tuple(s.base_url for s in servers), routing=routing,
                             max_retries=0)
        client = make_client(config, route_salt="test")
        spec = default_team_spec(topology, team_size=4)

        async def batch() -> None:
            await asyncio.gather(*(run_team(spec, p, client, decoding=Decoding()) for p in _problems(8)))
            await client.aclose()

        aio.run(batch())
        seen: dict[str, set[int]] = defaultdict(set)
        for index, server in enumerate(servers):
            for request in server.requests:
                text = " ".join(str(m.get("content")) for m in request.messages)
                for marker in set(re.findall(r"ROLLOUT-\d{3}", text)):
                    seen[marker].add(index)
    return seen


@pytest.mark.parametrize("topology", ["centralized", "decentralized"])
def test_every_call_of_a_team_run_reaches_one_server(topology: str) -> None:
    affinity = _servers_per_rollout("affinity", topology)
    assert len(affinity) == 8 and all(len(s) == 1 for s in affinity.values()), affinity
    # balanced: 8 concurrent sessions over 4 servers, two each
    per_server = defaultdict(int)
    for servers in affinity.values():
        per_server[next(iter(servers))] += 1
    assert sorted(per_server.values()) == [2, 2, 2, 2]
    # positive control: call-by-call routing scatters the same team runs over several servers
    scattered = _servers_per_rollout("least_in_flight", topology)
    assert any(len(s) > 1 for s in scattered.values()), scattered


def test_the_jobs_of_a_sweep_start_on_successive_endpoints() -> None:
    config = ModelConfig(id="m", endpoints=tuple(f"http://127.0.0.1:{9000 + i}/v1" for i in range(4)))
    first = []
    for job_number in range(8):  # eight one-rollout jobs: each client's first session
        client = make_client(config, route_salt=job_number)
        with routing_session():
            first.append(client._acquire(None).url)
    assert [first.count(url) for url in config.endpoints] == [2, 2, 2, 2]
    # positive control: without the job number every client starts on the same endpoint
    same = []
    for _ in range(4):
        client = make_client(config, route_salt="same-job")
        with routing_session():
            same.append(client._acquire(None).url)
    assert len(set(same)) == 1
