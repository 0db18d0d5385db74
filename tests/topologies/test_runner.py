"""The topology CLIs end to end: scripted server via --task-endpoints, files, resume, exit codes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from topologies.runner import main
from topologies.scripted import Fault, FaultKind, Match, Reply, Rule, Script, ScriptedServer
from topologies.teams.rehearsal import team_script

REPO = Path(__file__).resolve().parents[2]
MODULES = {
    "single": "topologies.single.lcb.langgraph_lcb",
    "independent": "topologies.independent.lcb.langgraph_lcb",
    "sequential": "topologies.sequential.langgraph.lcb.langgraph_lcb",
    "centralized": "topologies.centralized.langgraph.lcb.langgraph_lcb",
    "decentralized": "topologies.decentralized.langgraph.lcb.langgraph_lcb",
}


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(team_script()) as srv:
        yield srv


def cli(topology: str, args: list[str], capsys: Any) -> tuple[int, str, str]:
    try:
        code = main(topology, args)
    except SystemExit as exc:  # argparse's own exits (--help, bad flags)
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def summary_of(out: str) -> dict[str, Any]:
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1, f"stdout must be one JSON line, got {lines!r}"
    return json.loads(lines[0])


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("topology", list(MODULES))
def test_help_is_instant_and_imports_nothing_heavy(topology: str) -> None:
    probe = (
        f"import sys, runpy; sys.argv = ['x', '--help']\n"
        f"try:\n    runpy.run_module('{MODULES[topology]}', run_name='__main__')\n"
        f"except SystemExit as e:\n    code = e.code\n"
        f"heavy = [m for m in ('langgraph', 'langchain_core', 'openai', 'tqdm') if m in sys.modules]\n"
        f"print('HEAVY', heavy, 'CODE', code)"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert "HEAVY [] CODE 0" in done.stdout, done.stdout + done.stderr
    assert "--team-size" in done.stdout and "--resume" in done.stdout


@pytest.mark.parametrize("topology", list(MODULES))
def test_demo_runs_both_builtin_problems(server: ScriptedServer, topology: str, capsys: Any) -> None:
    code, out, err = cli(topology, ["--task-endpoints", server.base_url], capsys)
    assert code == 0, err
    summary = summary_of(out)
    assert summary["n"] == 2 and summary["solved"] == 2 and summary["pass@1"] == 1.0
    assert summary["topology"] == topology and summary["errors"] == 0
    for problem_id in ("demo_stdin", "demo_functional"):
        assert f"=== {problem_id}" in err
    assert err.count("extracted code:") == 2 and "tests: " in err


def test_module_form_runs_as_a_process(server: ScriptedServer) -> None:
    done = subprocess.run(
        [sys.executable, "-m", MODULES["sequential"], "--task-endpoints", server.base_url, "--team-size", "2"],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert summary_of(done.stdout)["team_size"] == 2


def test_out_dir_writes_predictions_and_traces(server: ScriptedServer, tmp_path: Path, capsys: Any) -> None:
    args = ["--batch", "--only", "demo_stdin", "demo_functional", "--out-dir", str(tmp_path),
            "--task-endpoints", server.base_url, "--team-size", "3", "--communication", "semi_structured"]
    code, out, err = cli("independent", args, capsys)
    assert code == 0, err
    records = read_jsonl(tmp_path / "predictions.jsonl")
    assert sorted(r["id"] for r in records) == ["demo_functional", "demo_stdin"]
    for record in records:
        assert record["em"] == 1 and record["error"] is None and record["error_kind"] is None
        assert record["winner"] == 0 and len(record["per_agent"]) == 3
        assert all(a["code"] for a in record["per_agent"])
        assert record["usage"]["calls"] == 6 and record["calls_by_role"] == {"coder": 6}
        assert record["communication"] == "semi_structured" and record["format_parse_rate"] == 1.0
        trace = json.loads((tmp_path / "traces" / f"{record['id']}.json").read_text())
        assert trace["problem_id"] == record["id"] and trace["verdict"]["passed"] == record["pass"]
        agents = {m["agent"] for m in trace["messages"]}
        assert agents == {"coder#0", "coder#1", "coder#2"}
        assert any(m["tool_calls"] for m in trace["messages"])
        assert {m["source"] for m in trace["messages"]} >= {"system", "user", "coder", "tool:python_exec"}
    assert summary_of(out)["predictions"] == str(tmp_path / "predictions.jsonl")
    assert not list(tmp_path.glob("**/*.tmp"))


def test_resume_skips_done_ids_and_plain_rerun_starts_over(server: ScriptedServer, tmp_path: Path,
                                                          capsys: Any) -> None:
    out_file = tmp_path / "preds.jsonl"
    base = ["--out", str(out_file), "--task-endpoints", server.base_url]
    assert cli("single", ["--only", "demo_stdin", *base], capsys)[0] == 0
    before = len(server.requests)
    code, out, _ = cli("single", ["--only", "demo_stdin", "demo_functional", "--resume", *base], capsys)
    assert code == 0
    assert len(server.requests) - before == 2  # only demo_functional ran (2 solver calls)
    assert [r["id"] for r in read_jsonl(out_file)] == ["demo_stdin", "demo_functional"]
    assert summary_of(out)["n"] == 2
    assert (tmp_path / "traces" / "demo_functional.json").exists()
    # resuming a narrower selection keeps the other records in the file
    code, out, _ = cli("single", ["--only", "demo_functional", "--resume", *base], capsys)
    assert code == 0 and summary_of(out)["n"] == 1
    assert [r["id"] for r in read_jsonl(out_file)] == ["demo_stdin", "demo_functional"]
    # without --resume the file is rewritten from scratch
    assert cli("single", ["--only", "demo_functional", *base], capsys)[0] == 0
    assert [r["id"] for r in read_jsonl(out_file)] == ["demo_functional"]


def test_resume_ignores_a_torn_last_line(server: ScriptedServer, tmp_path: Path, capsys: Any) -> None:
    out_file = tmp_path / "preds.jsonl"
    out_file.write_text(json.dumps({"id": "demo_stdin", "em": 1, "predicted_code": "x"}) + "\n{\"id\": \"demo_fu")
    code, out, _ = cli("single", ["--only", "demo_stdin", "demo_functional", "--resume", "--out", str(out_file),
                                  "--task-endpoints", server.base_url], capsys)
    assert code == 0
    assert [r["id"] for r in read_jsonl(out_file)] == ["demo_stdin", "demo_functional"]


@pytest.mark.parametrize(
    "topology, args, message",
    [
        ("single", ["--bogus"], "unrecognized arguments"),
        ("sequential", ["--team-size", "3"], "team sizes 2, 4, 8, 10"),
        ("single", ["--team-size", "4"], "exactly one agent"),
        ("single", ["--concurrency", "0"], "--concurrency"),
        ("single", ["--resume"], "--resume needs"),
        ("single", ["--communication", "xml"], "invalid choice"),
        ("single", ["--only", "no_such_problem", "--task-endpoints", "http://127.0.0.1:9"], "not in builtin"),
        ("single", ["--data", "/nonexistent/file.jsonl"], "error"),
        ("single", ["--task-endpoints", "ftp://x"], "not an http(s) URL"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(topology: str, args: list[str], message: str, capsys: Any) -> None:
    code, out, err = cli(topology, args, capsys)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], err


def test_unreachable_endpoint_is_one_line_and_exit_1(capsys: Any) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code, out, err = cli("single", ["--task-endpoints", f"http://127.0.0.1:{port}/v1"], capsys)
    assert code == 1 and out == ""
    assert err.strip().splitlines()[-1].startswith("error: cannot reach")


def test_no_problem_loaded_is_exit_1(server: ScriptedServer, capsys: Any) -> None:
    code, out, err = cli("single", ["--batch", "--limit", "0", "--task-endpoints", server.base_url], capsys)
    assert code == 1 and "no problem loaded" in err


def test_model_errors_stay_in_their_records(tmp_path: Path, capsys: Any) -> None:
    """A 400 on one problem: that row keeps the error, the other is graded, exit 0."""
    failing = Rule("twosum-400", Match(any="twoSum"), faults=(Fault(FaultKind.STATUS, status=400),))
    with ScriptedServer(team_script(rules=(failing,))) as srv:
        code, out, err = cli("single", ["--out-dir", str(tmp_path), "--task-endpoints", srv.base_url], capsys)
    assert code == 0, err
    records = {r["id"]: r for r in read_jsonl(tmp_path / "predictions.jsonl")}
    assert records["demo_functional"]["error_kind"] == "model" and records["demo_functional"]["em"] == 0
    assert "HTTP 400" in records["demo_functional"]["error"]
    assert records["demo_stdin"]["em"] == 1
    assert summary_of(out)["errors"] == 1


def test_every_row_failing_on_infrastructure_is_exit_1(capsys: Any) -> None:
    script = Script([], faults=(Fault(FaultKind.STATUS, status=503),))
    with ScriptedServer(script) as srv:
        code, out, err = cli("single", ["--only", "demo_stdin", "--task-endpoints", srv.base_url], capsys)
    assert code == 1
    assert summary_of(out)["infrastructure_errors"] == 1
    assert err.strip().splitlines()[-1].startswith("error: every row failed on an infrastructure error")


def test_grading_does_not_hold_a_model_slot() -> None:
    """With one slot, the next problem's team talks to the model while the last one is graded."""
    import asyncio

    from lcb.data import load_problems
    from topologies.models import make_client, resolve_model
    from topologies.prompts import default_team_spec
    from topologies.runner import Outputs, RecordSink, RunSettings, run_rows
    from topologies.types import Decoding

    slow_wrong = "```python\nimport time\ntime.sleep(0.3)\nprint(0)\n```"  # ~2 s over 7 tests
    problems = [p for p in load_problems("builtin").problems if p.id in ("demo_stdin", "demo_functional")]
    problems.sort(key=lambda p: p.id != "demo_stdin")  # the slow-to-grade one takes the slot first
    seen_at_finish: dict[str, int] = {}
    with ScriptedServer(Script([Rule("answer", Match(), Reply(slow_wrong))])) as srv:
        client = make_client(resolve_model("scripted", task_endpoints=srv.base_url))
        settings = RunSettings(default_team_spec("single"), client, Decoding(), 0, "hidden")
        sink = RecordSink(Outputs(None, None), [], resume=False)

        async def go() -> None:
            await run_rows(problems, settings, sink, 1,
                           on_row=lambda problem, record: seen_at_finish.setdefault(problem.id, srv.request_count))
            await client.aclose()

        asyncio.run(go())
    assert seen_at_finish["demo_stdin"] == 2  # the second team had already asked the model
    assert {r["id"]: r["outcome"] for r in sink.records}["demo_stdin"] == "wrong_answer"
