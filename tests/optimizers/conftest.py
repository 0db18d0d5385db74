"""Shared fixtures for optimizer/job tests: a scripted model server behind the real teams."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# job_support is shared with job_entry.py, which runs in a subprocess: import it by its folder.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from job_support import register_test_methods, team_script  # noqa: E402


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
