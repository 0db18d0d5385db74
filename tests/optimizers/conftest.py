"""Shared fixtures for optimizer/job tests: a scripted model server behind the real teams."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from job_support import register_test_methods, team_script


@pytest.fixture(autouse=True)
def _test_methods() -> None:
    register_test_methods()


@pytest.fixture
def scripted_server() -> Iterator[Callable[..., Any]]:
    """``start(faults=..., latency_s=...)`` -> a running ScriptedServer (stopped after the test)."""
    from topologies.scripted import ScriptedServer

    servers: list[Any] = []

    def start(**options: Any) -> Any:
        server = ScriptedServer(team_script(**options)).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
