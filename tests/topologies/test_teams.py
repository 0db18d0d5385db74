"""Every topology x communication format x team size, end to end: the real OpenAIChatClient
talks to the scripted server, whose team player answers every role (topologies.teams.rehearsal).
Checked: calls per role, who saw what (hand-offs), rounds, the vote, the submission."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from lcb.data import load_problems
from topologies.models import make_client, resolve_model
from topologies.prompts import default_team_spec
from topologies.scripted import ScriptedServer
from topologies.teams import TeamLimits, run_team, trajectory_from_dict, trajectory_to_dict
from topologies.teams.layouts import centralized_workers, sequential_stages
from topologies.teams.rehearsal import team_script
from topologies.types import Decoding, Trajectory

FORMATS = ("freeform", "semi_structured", "structured_soft")
SIZES = (2, 4, 8, 10)
SOLUTIONS = json.loads(
    (__import__("pathlib").Path(__file__).resolve().parents[2] / "lcb" / "builtin" / "solutions.json").read_text()
)


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(team_script()) as srv:
        yield srv


@pytest.fixture(scope="module")
def problem() -> Any:
    return load_problems("builtin", only=["demo_stdin"]).problems[0]


def run(server: ScriptedServer, spec: Any, problem: Any, *, seed: int = 0,
        decoding: Decoding = Decoding(), limits: TeamLimits | None = None) -> tuple[Trajectory, list[Any]]:
    """Run a team; return the trajectory and the server's log of this run's requests."""
    client = make_client(resolve_model("scripted-model", task_endpoints=server.base_url))
    start = len(server.requests)

    async def go() -> Trajectory:
        try:
            return await run_team(spec, problem, client, decoding=decoding, seed=seed, limits=limits)
        finally:
            await client.aclose()

    trajectory = asyncio.run(go())
    return trajectory, server.requests[start:]


def system_of(request: Any) -> str:
    return request.messages[0]["content"]


def user_texts(request: Any) -> list[str]:
    return [m["content"] for m in request.messages if m["role"] == "user"]


def check_common(trajectory: Trajectory, fmt: str, problem: Any) -> None:
    assert trajectory.error is None, trajectory.error
    assert trajectory.code == SOLUTIONS[problem.id]["correct"].strip()
    assert trajectory.extraction_rule == "labelled"
    assert trajectory.extras["code_source"] == "final"
    metrics = trajectory.extras["format"]
    assert metrics["communication_format"] == fmt
    assert metrics["parse_rate"] == (None if fmt == "freeform" else 1.0)
    assert sum(u.calls for u in trajectory.usage_by_role.values()) == trajectory.usage.calls
    assert trajectory.usage.prompt_tokens > 0 and trajectory.usage.completion_tokens > 0
    # JSON round trip keeps everything
    data = json.loads(json.dumps(trajectory_to_dict(trajectory)))
    assert trajectory_to_dict(trajectory_from_dict(data)) == data


@pytest.mark.parametrize("fmt", FORMATS)
def test_single(server: ScriptedServer, problem: Any, fmt: str) -> None:
    trajectory, requests = run(server, default_team_spec("single", communication=fmt), problem)
    check_common(trajectory, fmt, problem)
    assert trajectory.extras["calls_by_role"] == {"solver": 2}
    sources = [m.source for m in trajectory.messages]
    assert sources == ["system", "user", "solver", "tool:python_exec", "solver"]
    assert "exit code: 0" in trajectory.messages[3].content
    assert [r.body.get("tools") is not None for r in requests] == [True, True]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_independent(server: ScriptedServer, problem: Any, fmt: str, size: int) -> None:
    spec = default_team_spec("independent", team_size=size, communication=fmt)
    trajectory, requests = run(server, spec, problem, seed=3)
    check_common(trajectory, fmt, problem)
    assert trajectory.extras["calls_by_role"] == {"coder": 2 * size}
    assert trajectory.extras["winner"] == 0 and trajectory.extras["votes"] == size
    per_agent = trajectory.extras["per_agent"]
    assert [a["agent"] for a in per_agent] == [f"coder#{i}" for i in range(size)]
    assert [a["seed"] for a in per_agent] == [3000 + i for i in range(size)]
    assert {r.body["seed"] for r in requests} == {3000 + i for i in range(size)}
    # greedy decoding was asked for, replicas sample anyway (TeamLimits.replica_temperature)
    assert {r.body["temperature"] for r in requests} == {0.7}
    assert all("one of %d coders" % size in system_of(r) for r in requests)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_sequential(server: ScriptedServer, problem: Any, fmt: str, size: int) -> None:
    spec = default_team_spec("sequential", team_size=size, communication=fmt)
    trajectory, requests = run(server, spec, problem)
    check_common(trajectory, fmt, problem)
    stages = sequential_stages(size)
    assert trajectory.extras["calls_by_role"] == {s.role: 2 if s.has_tools else 1 for s in stages}
    assert [s["role"] for s in trajectory.extras["stages"]] == [s.role for s in stages]
    assert trajectory.extras["submitted_by"] == [s.role for s in stages if s.writes_program][-1]
    # the first request of each stage: tools only for tool stages, hand-offs of ALL earlier stages
    firsts = [r for r in requests if len(r.messages) == 2]
    assert len(firsts) == len(stages)
    for index, (stage, request) in enumerate(zip(stages, firsts, strict=True)):
        assert f"({stage.role})" in system_of(request)
        assert (request.body.get("tools") is not None) == stage.has_tools
        assert ("## Required final output" in system_of(request)) == stage.writes_program
        user = user_texts(request)[0]
        assert problem.statement in user
        for earlier in stages[:index]:
            assert f"=== From {earlier.role} ===" in user
        for later in stages[index:]:
            assert f"=== From {later.role} ===" not in user
        if index and stages[index - 1].writes_program:
            assert SOLUTIONS[problem.id]["correct"].strip() in user  # code handed on verbatim
    if fmt != "freeform" and len(stages) > 1:
        marker = "[FROM]" if fmt == "semi_structured" else "JSON_REPORT:"
        assert marker in user_texts(firsts[-1])[0]
    assert spec.protocol["handoff"].split("\n")[0] in user_texts(firsts[-1])[0]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_centralized(server: ScriptedServer, problem: Any, fmt: str, size: int) -> None:
    spec = default_team_spec("centralized", team_size=size, communication=fmt)
    assert spec.max_turns == (13 if size == 2 else 26)
    trajectory, requests = run(server, spec, problem)
    check_common(trajectory, fmt, problem)
    workers = centralized_workers(size)
    assert trajectory.extras["calls_by_role"] == {"manager": 2, **{w.role: 2 for w in workers}}
    assert trajectory.extras["stop"] == "final" and trajectory.extras["turns"] == 2
    assert trajectory.extras["delegations"] == {w.role: 1 for w in workers}
    manager_requests = [r for r in requests if any(
        t["function"]["name"].startswith("delegate_to_") for t in r.body.get("tools", []))]
    assert len(manager_requests) == 2
    offered = {t["function"]["name"] for t in manager_requests[0].body["tools"]}
    assert offered == {"python_exec", *(w.tool_name for w in workers)}
    for worker in workers:
        assert f"{worker.tool_name}(instructions" in system_of(manager_requests[0])
    # a worker sees only the problem and the delegation: no manager transcript
    worker_firsts = [r for r in requests if r not in manager_requests and len(r.messages) == 2]
    assert len(worker_firsts) == len(workers)
    for request in worker_firsts:
        user = user_texts(request)[0]
        assert problem.statement in user and "## Instructions from the manager" in user
        assert "Check this program on the samples." in user
        assert SOLUTIONS[problem.id]["correct"].strip() in user
        assert "Delegating." not in json.dumps(request.messages)
    # the manager gets each worker's report back as a tool result, rendered by the format
    results = [m for m in manager_requests[1].messages if m["role"] == "tool"]
    assert len(results) == len(workers)
    for worker, result in zip(workers, results, strict=True):
        assert f"=== From {worker.role} ===" in result["content"]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_decentralized(server: ScriptedServer, problem: Any, fmt: str, size: int) -> None:
    spec = default_team_spec("decentralized", team_size=size, communication=fmt, rounds=2)
    trajectory, requests = run(server, spec, problem)
    check_common(trajectory, fmt, problem)
    assert trajectory.extras["calls_by_role"] == {"debater": 2 * size * 2}
    assert len(trajectory.extras["rounds"]) == 2
    assert trajectory.extras["winner"] == 0 and trajectory.extras["votes"] == size
    # round 2: each peer sees every OTHER peer's round-1 answer, in full, and not its own
    injections = [m for m in trajectory.messages if m.source == "peers"]
    assert len(injections) == size
    for message in injections:
        me = message.agent
        for other in range(size):
            header = f"=== From peer{other} ==="
            assert (header in message.content) == (f"peer{other}" != me)
        assert message.content.count(SOLUTIONS[problem.id]["correct"].strip()) == size - 1


def test_decentralized_rounds_parameter(server: ScriptedServer, problem: Any) -> None:
    spec = default_team_spec("decentralized", team_size=2, rounds=3)
    trajectory, _ = run(server, spec, problem)
    assert len(trajectory.extras["rounds"]) == 3
    assert trajectory.extras["calls_by_role"] == {"debater": 2 * 2 * 3}


@pytest.mark.parametrize("topology", ["independent", "decentralized"])
def test_replicas_run_in_parallel(problem: Any, topology: str) -> None:
    """With latency, the first request of every agent arrives before any agent's second one."""
    with ScriptedServer(team_script(latency_s=0.2)) as slow:
        spec = default_team_spec(topology, team_size=4, rounds=1)
        _, requests = run(slow, spec, problem)
    first_four = [r.body["seed"] for r in requests[:4]]
    assert sorted(first_four) == [0, 1, 2, 3]


def test_protocol_handoff_text_is_editable(server: ScriptedServer, problem: Any) -> None:
    from dataclasses import replace

    spec = default_team_spec("sequential", team_size=2)
    spec = replace(spec, protocol={"handoff": "HANDOFF-MARKER-42"})
    _, requests = run(server, spec, problem)
    debugger_first = [r for r in requests if len(r.messages) == 2][-1]
    assert "HANDOFF-MARKER-42" in user_texts(debugger_first)[0]


def test_player_that_delegates_but_runs_no_programs(problem: Any) -> None:
    """The throughput benchmark's player: the centralized flow stays, no sandbox time is mixed in."""
    spec = default_team_spec("centralized", team_size=4)
    with ScriptedServer(team_script(use_tools=False, delegate=True)) as srv:
        trajectory, requests = run(srv, spec, problem)
    workers = centralized_workers(4)
    assert trajectory.extras["calls_by_role"] == {"manager": 2, **{w.role: 1 for w in workers}}
    assert trajectory.extras["delegations"] == {w.role: 1 for w in workers}
    assert not [m for m in trajectory.messages if m.source == "tool:python_exec"]
    assert trajectory.code is not None and len(requests) == 2 + len(workers)


class _CountingExecutor(__import__("concurrent.futures").futures.ThreadPoolExecutor):
    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.submitted: list[str] = []

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        self.submitted.append(repr(getattr(fn, "func", fn))[:120])
        return super().submit(fn, *args, **kwargs)


@pytest.mark.parametrize("topology", ["single", "independent", "sequential", "centralized", "decentralized"])
def test_team_runs_never_hop_to_a_worker_thread(server: ScriptedServer, problem: Any, topology: str) -> None:
    """LangGraph runs plain-function nodes and routers in the default executor: a thread hop per
    step that costs milliseconds of latency once the event loop is busy. Teams use coroutines."""
    spec = default_team_spec(topology, team_size=4)
    client = make_client(resolve_model("scripted-model", task_endpoints=server.base_url))
    executor = _CountingExecutor()

    async def go() -> Trajectory:
        asyncio.get_running_loop().set_default_executor(executor)
        try:
            return await run_team(spec, problem, client, decoding=Decoding())
        finally:
            await client.aclose()

    trajectory = asyncio.run(go())
    executor.shutdown()
    assert trajectory.code is not None and trajectory.error is None
    assert executor.submitted == []
