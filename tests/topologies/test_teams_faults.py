"""Teams under failure and adversarial replies, end to end through the scripted server:
transport faults are retried or classified (never raised), code is never truncated in hand-offs,
no submission ever comes from a user/injected message, the output contract survives an emptied
role prompt."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lcb.data import load_problems
from lcb.prompts import PLACEHOLDER
from topologies.models import make_client, resolve_model
from topologies.prompts import default_team_spec
from topologies.scripted import (
    Fault,
    FaultKind,
    FunctionRule,
    Match,
    Reply,
    Rule,
    Script,
    ScriptedServer,
    ToolCall,
)
from topologies.scripted.script import ChatRequest
from topologies.teams import TeamLimits, run_team
from topologies.teams.rehearsal import team_script
from topologies.types import Decoding, ErrorKind, TeamSpec, Trajectory

SOLUTIONS = json.loads((Path(__file__).resolve().parents[2] / "lcb" / "builtin" / "solutions.json").read_text())
CORRECT = SOLUTIONS["demo_stdin"]["correct"].strip()
ALL_TEAMS = [("single", 1), ("independent", 3), ("sequential", 4), ("centralized", 4), ("decentralized", 3)]

LONG_PROGRAM = "\n".join(
    ["import sys", "def main():", "    n = int(sys.stdin.readline())"]
    + [f"    x{i} = n + {i}  # filler line {i} with indentation kept" for i in range(600)]
    + ["    print(n * (n + 1) // 2)", "main()"]
)


@pytest.fixture(scope="module")
def problem() -> Any:
    return load_problems("builtin", only=["demo_stdin"]).problems[0]


def run_with(script: Any, spec: TeamSpec, problem: Any, *, limits: TeamLimits | None = None,
             timeout_s: float = 30.0, max_retries: int = 2, url: str | None = None,
             ) -> tuple[Trajectory, list[Any]]:
    with ScriptedServer(script) as server:
        config = resolve_model("scripted-model", task_endpoints=url or server.base_url,
                               timeout_s=timeout_s, max_retries=max_retries, backoff_s=0.01)
        client = make_client(config)

        async def go() -> Trajectory:
            try:
                return await run_team(spec, problem, client, decoding=Decoding(), limits=limits)
            finally:
                await client.aclose()

        return asyncio.run(go()), list(server.requests)


def spec_of(topology: str, size: int, **kwargs: Any) -> TeamSpec:
    return default_team_spec(topology, team_size=size, **kwargs)


# --------------------------------------------------------------------------- code never truncated


@pytest.mark.parametrize("fmt", ["freeform", "semi_structured", "structured_soft"])
@pytest.mark.parametrize("topology, size", [("sequential", 4), ("centralized", 4), ("decentralized", 2)])
def test_long_program_passes_every_handoff_intact(problem: Any, topology: str, size: int, fmt: str) -> None:
    script = team_script(lambda request: LONG_PROGRAM)
    trajectory, requests = run_with(script, spec_of(topology, size, communication=fmt), problem)
    assert trajectory.error is None and trajectory.code == LONG_PROGRAM
    received = [m["content"] for r in requests for m in r.messages if m["role"] in ("user", "tool")]
    with_code = [text for text in received if "=== From " in text and "x0 = n + 0" in text]
    assert with_code, "no hand-off carried the program"
    for text in with_code:
        assert LONG_PROGRAM in text


# --------------------------------------------------------------------------- no placeholder submissions


@pytest.mark.parametrize("topology, size", ALL_TEAMS)
def test_no_submission_when_no_agent_writes_code(problem: Any, topology: str, size: int) -> None:
    """The prompt's stdin format block holds a ```python fence with the placeholder; it must never
    be submitted, whatever path the team takes (final reply, salvage, vote)."""
    trajectory, requests = run_with(team_script(lambda request: None), spec_of(topology, size), problem)
    assert any(PLACEHOLDER in m["content"] for m in requests[0].messages if m["role"] == "user")
    assert trajectory.code is None and trajectory.extraction_rule == "none"
    assert trajectory.error is None


def test_decentralized_peer_without_code_does_not_take_a_peers_code(problem: Any) -> None:
    """Peer 0 writes a program; peers 1 and 2 never do. Their round-2 user message holds peer 0's
    program, but a peer's code comes only from its own replies: they abstain, peer 0 wins 1 vote."""

    def only_peer0(request: ChatRequest) -> str | None:
        return CORRECT if request.body.get("seed") == 0 else None

    trajectory, _ = run_with(team_script(only_peer0), spec_of("decentralized", 3), problem)
    per_agent = trajectory.extras["per_agent"]
    assert [a["code"] is not None for a in per_agent] == [True, False, False]
    assert trajectory.extras["winner"] == 0 and trajectory.extras["votes"] == 1
    assert trajectory.code == CORRECT


def test_single_salvages_its_own_earlier_program_not_the_prompt(problem: Any) -> None:
    """The solver writes a program while running it, then ends with prose only: its own earlier
    program is the submission (the prompt's placeholder fence is never considered)."""
    script = team_script(rules=(
        Rule("final-without-code", Match(any="exit code:"), Reply("All samples pass, done.")),
        Rule("draft-and-run", Match(has_tools=True), Reply(
            f"Draft:\n```python\n{CORRECT}\n```",
            tool_calls=(ToolCall("python_exec", {"code": CORRECT, "stdin": "3\n"}),))),
    ))
    trajectory, _ = run_with(script, spec_of("single", 1), problem)
    assert trajectory.code == CORRECT
    assert trajectory.extras["code_source"] == "salvaged"


# --------------------------------------------------------------------------- output contract


@pytest.mark.parametrize("topology, size", ALL_TEAMS)
def test_output_contract_survives_an_emptied_role_prompt(problem: Any, topology: str, size: int) -> None:
    spec = spec_of(topology, size)
    spec = replace(spec, roles={role: "" for role in spec.roles})
    trajectory, requests = run_with(team_script(), spec, problem)
    assert trajectory.code == CORRECT
    systems = [r.messages[0]["content"] for r in requests]
    assert any("## Required final output" in s and "fenced code block labelled `python`" in s
               for s in systems)


# --------------------------------------------------------------------------- transport faults


def with_faults(script: Script, *faults: Fault) -> Script:
    return Script(script.rules, faults=faults)


def test_rate_limit_and_server_errors_are_retried(problem: Any) -> None:
    player = team_script().rules[0]
    flaky = FunctionRule("flaky", player.function, faults=(Fault(FaultKind.STATUS, status=429, pattern="x."),))
    script = Script([flaky], faults=(Fault(FaultKind.STATUS, status=503, first=1),))
    trajectory, requests = run_with(script, spec_of("sequential", 2), problem)
    assert trajectory.error is None and trajectory.code == CORRECT
    statuses = [r.status for r in requests]
    assert 503 in statuses and 429 in statuses and statuses[-1] == 200


@pytest.mark.parametrize("topology, size", ALL_TEAMS)
@pytest.mark.parametrize("kind", [FaultKind.STATUS, FaultKind.MALFORMED, FaultKind.EMPTY_CHOICES])
def test_persistent_transport_failure_is_an_infrastructure_error(problem: Any, topology: str, size: int,
                                                                 kind: FaultKind) -> None:
    script = with_faults(team_script(), Fault(kind, status=502))
    trajectory, _ = run_with(script, spec_of(topology, size), problem, max_retries=1)
    assert trajectory.error_kind is ErrorKind.INFRASTRUCTURE
    assert trajectory.error and "\n" not in trajectory.error
    assert trajectory.code is None


def test_hang_is_an_infrastructure_error(problem: Any) -> None:
    script = with_faults(team_script(), Fault(FaultKind.HANG))
    trajectory, _ = run_with(script, spec_of("single", 1), problem, timeout_s=0.5, max_retries=0)
    assert trajectory.error_kind is ErrorKind.INFRASTRUCTURE
    assert "within" in (trajectory.error or "")


def test_unreachable_endpoint_is_a_one_line_infrastructure_error(problem: Any) -> None:
    import socket

    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    trajectory, _ = run_with(team_script(), spec_of("single", 1), problem,
                             url=f"http://127.0.0.1:{port}/v1", max_retries=1)
    assert trajectory.error_kind is ErrorKind.INFRASTRUCTURE
    assert "cannot reach" in (trajectory.error or "") and "\n" not in trajectory.error


def test_model_error_mid_pipeline_keeps_the_earlier_program(problem: Any) -> None:
    """A 400 (e.g. context too long) at the debugger is the team's failure, not retried; the
    coder's program is salvaged and the error is recorded as MODEL."""
    failing = Rule("debugger-400", Match(system="(debugger)"), faults=(Fault(FaultKind.STATUS, status=400),))
    trajectory, _ = run_with(team_script(rules=(failing,)), spec_of("sequential", 4), problem)
    assert trajectory.error_kind is ErrorKind.MODEL
    assert trajectory.code == CORRECT and trajectory.extras["code_source"] == "salvaged"


def test_independent_coder_with_model_error_abstains(problem: Any) -> None:
    failing = FunctionRule("seed1-400", lambda r: Reply("x") if r.body.get("seed") == 1 else None,
                           faults=(Fault(FaultKind.STATUS, status=400),))
    trajectory, _ = run_with(team_script(rules=(failing,)), spec_of("independent", 3), problem)
    statuses = [a["status"] for a in trajectory.extras["per_agent"]]
    assert statuses == ["ok", "model_error", "ok"]
    assert trajectory.error is None and trajectory.code == CORRECT and trajectory.extras["votes"] == 2


@pytest.mark.parametrize("topology", ["independent", "decentralized"])
def test_slow_agent_times_out_and_finished_agents_are_kept(problem: Any, topology: str) -> None:
    slow = FunctionRule("slow-seed-2", lambda r: Reply("thinking...") if r.body.get("seed") == 2 else None,
                        latency_s=3.0)
    limits = TeamLimits(agent_timeout_s=1.0)
    trajectory, _ = run_with(team_script(rules=(slow,)), spec_of(topology, 3, rounds=1), problem,
                             limits=limits)
    statuses = [a["status"] for a in trajectory.extras["per_agent"]]
    assert statuses == ["ok", "ok", "timeout"]
    assert trajectory.error is None and trajectory.code == CORRECT


@pytest.mark.parametrize("topology", ["independent", "decentralized"])
def test_infrastructure_failure_of_one_agent_cancels_the_others(problem: Any, topology: str) -> None:
    """The run will be retried anyway: the other agents must not keep calling the model."""
    import time

    failing = FunctionRule("seed1-503", lambda r: Reply("x") if r.body.get("seed") == 1 else None,
                           faults=(Fault(FaultKind.STATUS, status=503),))
    slow = FunctionRule("others-slow", lambda r: Reply("...") if r.body.get("seed") != 1 else None,
                        latency_s=5.0)
    started = time.perf_counter()
    trajectory, _ = run_with(team_script(rules=(failing, slow)), spec_of(topology, 3), problem, max_retries=0)
    assert trajectory.error_kind is ErrorKind.INFRASTRUCTURE
    assert time.perf_counter() - started < 4.0


def test_every_agent_timing_out_is_an_infrastructure_error(problem: Any) -> None:
    slow = FunctionRule("all-slow", lambda r: Reply("..."), latency_s=3.0)
    trajectory, _ = run_with(team_script(rules=(slow,)), spec_of("independent", 2), problem,
                             limits=TeamLimits(agent_timeout_s=0.5))
    assert trajectory.error_kind is ErrorKind.INFRASTRUCTURE and trajectory.code is None


def test_malformed_tool_call_arguments_get_an_error_result(problem: Any) -> None:
    bad = Rule("bad-args", Match(has_tools=True, calls=1),
               Reply("", tool_calls=(ToolCall("python_exec", "{not json"),)))
    trajectory, requests = run_with(team_script(rules=(bad,)), spec_of("single", 1), problem)
    tool_results = [m for m in trajectory.messages if m.kind == "tool"]
    assert "could not read the call" in tool_results[0].content
    assert trajectory.code == CORRECT and trajectory.error is None


def test_unknown_tool_gets_an_error_result(problem: Any) -> None:
    bad = Rule("unknown-tool", Match(has_tools=True, calls=1),
               Reply("", tool_calls=(ToolCall("web_search", {"q": "x"}),)))
    trajectory, _ = run_with(team_script(rules=(bad,)), spec_of("single", 1), problem)
    assert "unknown tool 'web_search'" in [m for m in trajectory.messages if m.kind == "tool"][0].content
    assert trajectory.code == CORRECT


def test_step_budget_ends_with_a_tool_free_call(problem: Any) -> None:
    """A solver that never stops calling tools: the last allowed call offers no tools."""
    loop = Rule("always-tools", Match(has_tools=True),
                Reply(f"```python\n{CORRECT}\n```", tool_calls=(ToolCall("python_exec", {"code": "print(1)"}),)))
    final = Rule("final", Match(has_tools=False), Reply("Out of budget."))
    trajectory, requests = run_with(team_script(rules=(loop, final)), spec_of("single", 1), problem,
                                    limits=TeamLimits(solver_calls=4))
    assert len(requests) == 4
    assert [r.body.get("tools") is not None for r in requests] == [True, True, True, False]
    assert trajectory.extras["capped"] is True
    assert trajectory.code == CORRECT and trajectory.extras["code_source"] == "salvaged"


def test_centralized_cap_salvages_the_managers_latest_program(problem: Any) -> None:
    busy = Rule("manager-never-finishes", Match(tool="delegate_to_coder_worker"),
                Reply(f"```python\n{CORRECT}\n```",
                      tool_calls=(ToolCall("python_exec", {"code": "print(1)"}),)))
    last = Rule("manager-last-turn", Match(system="You lead these workers", has_tools=False),
                Reply("I ran out of turns."))
    spec = replace(spec_of("centralized", 2), max_turns=3)
    trajectory, requests = run_with(team_script(rules=(busy, last)), spec, problem)
    assert trajectory.extras["turns"] == 3 and trajectory.extras["stop"] == "max_turns"
    assert trajectory.code == CORRECT and trajectory.extras["code_source"] == "salvaged"


def test_centralized_nudges_once_then_stops(problem: Any) -> None:
    chatty = Rule("manager-chats", Match(system="You lead these workers"), Reply("Let me think more."))
    trajectory, requests = run_with(team_script(rules=(chatty,)), spec_of("centralized", 4), problem)
    assert len(requests) == 2 and trajectory.extras["nudges"] == 1
    assert trajectory.extras["stop"] == "no_final_program" and trajectory.code is None


def test_centralized_terminate_ends_the_run(problem: Any) -> None:
    done = Rule("manager-terminates", Match(system="You lead these workers"),
                Reply(f"```python\n{CORRECT}\n```\nTERMINATE"))
    trajectory, requests = run_with(team_script(rules=(done,)), spec_of("centralized", 4), problem)
    assert len(requests) == 1 and trajectory.extras["stop"] == "terminate"
    assert trajectory.code == CORRECT
