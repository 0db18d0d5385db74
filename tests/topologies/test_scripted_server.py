from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from topologies.scripted import (
    Fault,
    FaultKind,
    FunctionRule,
    Match,
    Reply,
    Rule,
    Script,
    ScriptedServer,
    ScriptError,
    ToolCall,
    load_script,
    script_from_dict,
    solve_builtin,
)

REPO = Path(__file__).resolve().parents[2]


def chat(srv: ScriptedServer, *messages: tuple[str, str], timeout: float = 10, **extra) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": r, "content": c} for r, c in messages], **extra}
    return httpx.post(srv.base_url + "/chat/completions", json=body, timeout=timeout)


def content(response: httpx.Response) -> str | None:
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]["content"]


def test_rules_match_on_system_user_any_and_tools_in_order():
    script = Script(
        [
            Rule("tools", Match(has_tools=True), Reply("saw tools")),
            Rule("coder", Match(system="You are the coder"), Reply("coder answer")),
            Rule("user", Match(user_regex=r"problem (\d+)"), Reply("echo {{match.1}} call {{call}}")),
            Rule("anywhere", Match(any="MARKER"), Reply("found marker")),
        ],
        default=Reply("default answer"),
    )
    with ScriptedServer(script) as srv:
        assert content(chat(srv, ("system", "You are the coder. ROLE: x"), ("user", "problem 7"))) == "coder answer"
        assert content(chat(srv, ("user", "solve problem 42"))) == "echo 42 call 1"
        assert content(chat(srv, ("user", "and problem 5"))) == "echo 5 call 2"
        # "user" looks at the LAST user message only; "any" at every message.
        assert content(chat(srv, ("user", "problem 9"), ("assistant", "MARKER"), ("user", "next"))) == "found marker"
        tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
        assert content(chat(srv, ("user", "problem 1"), tools=tools)) == "saw tools"
        assert content(chat(srv, ("user", "nothing known"))) == "default answer"
        assert srv.rule_names() == ["coder", "user", "user", "anywhere", "tools", "<default>"]
        assert srv.requests[0].body["messages"][1]["content"] == "problem 7"
        assert srv.counters["user"].answered == 2
        assert srv.request_count == 6


def test_no_default_answers_400_so_unscripted_calls_fail_loudly():
    with ScriptedServer(Script([Rule("a", Match(user="a"), Reply("A"))], default=None)) as srv:
        response = chat(srv, ("user", "b"))
        assert response.status_code == 400
        assert "no scripted rule matched" in response.json()["error"]["message"]
        assert srv.requests[-1].rule is None


def test_call_counter_selects_the_nth_matching_request():
    script = Script(
        [
            Rule("first", Match(user="draft", calls=1), Reply("first draft")),
            Rule("later", Match(user="draft", calls="2+"), Reply("revision {{call}}")),
        ]
    )
    with ScriptedServer(script) as srv:
        answers = [content(chat(srv, ("user", "draft please"))) for _ in range(3)]
    assert answers == ["first draft", "revision 1", "revision 2"]


def test_callable_rules_and_templated_tool_calls():
    def shout(request):
        return request.last_user.upper() if "shout" in request.last_user else None

    script = Script(
        [
            shout,
            FunctionRule("count_messages", lambda r: f"{len(r.messages)} messages" if "count" in r.last_user else None),
            Rule("tool", Match(user_regex=r"run (\w+)"), Reply(content=None, tool_calls=(ToolCall("python_exec", {"code": "print('{{match.1}}')"}),))),
        ]
    )
    with ScriptedServer(script) as srv:
        assert content(chat(srv, ("user", "shout hi"))) == "SHOUT HI"
        assert content(chat(srv, ("system", "s"), ("user", "count"))) == "2 messages"
        response = chat(srv, ("user", "run hello"))
        choice = response.json()["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        call = choice["message"]["tool_calls"][0]
        assert call["function"]["name"] == "python_exec"
        assert json.loads(call["function"]["arguments"]) == {"code": "print('hello')"}
        assert srv.rule_names() == ["shout", "count_messages", "tool"]


def test_solve_builtin_answers_the_problem_the_request_is_about():
    rule = solve_builtin({"sum of two integers": "print(sum(map(int, input().split())))", "two": "print(2)"})
    with ScriptedServer(Script([rule], default=Reply("unknown"))) as srv:
        answer = content(chat(srv, ("user", "Compute the sum of two integers a and b.")))
        assert answer == "```python\nprint(sum(map(int, input().split())))\n```"  # longest key wins
        assert content(chat(srv, ("user", "print two"))) == "```python\nprint(2)\n```"
        assert content(chat(srv, ("user", "something else"))) == "unknown"


def test_status_faults_first_k_then_success_and_patterns():
    script = Script(
        [
            Rule("flaky", Match(user="flaky"), Reply("ok"), faults=(Fault(status=429, first=2),)),
            Rule("patterned", Match(user="pat"), Reply("ok"), faults=(Fault(status=500, pattern="x."),)),
        ]
    )
    with ScriptedServer(script) as srv:
        codes = [chat(srv, ("user", "flaky")).status_code for _ in range(3)]
        assert codes == [429, 429, 200]
        assert chat(srv, ("user", "flaky")).status_code == 200
        assert [chat(srv, ("user", "pat")).status_code for _ in range(4)] == [500, 200, 500, 200]
        error = chat(srv, ("user", "pat")).json()["error"]
        assert error["code"] == 500
        assert srv.counters["flaky"].faults == 2
        assert [r.fault for r in srv.requests[:3]] == ["status", "status", None]


def test_malformed_truncated_and_empty_bodies():
    script = Script(
        [
            Rule("bad", Match(user="malformed"), faults=(Fault(FaultKind.MALFORMED),)),
            Rule("cut", Match(user="truncated"), faults=(Fault(FaultKind.TRUNCATED),)),
            Rule("empty", Match(user="empty"), faults=(Fault(FaultKind.EMPTY_CHOICES),)),
        ]
    )
    with ScriptedServer(script) as srv:
        response = chat(srv, ("user", "malformed"))
        assert response.status_code == 200
        with pytest.raises(ValueError):
            json.loads(response.content)
        with pytest.raises(httpx.TransportError):
            chat(srv, ("user", "truncated"))
        assert chat(srv, ("user", "empty")).json()["choices"] is None
        # The server keeps serving after the aborted connection.
        assert chat(srv, ("user", "fine")).status_code == 200


def test_hang_until_client_gives_up_and_latency_applies():
    script = Script(
        [
            Rule("hang", Match(user="hang"), faults=(Fault(FaultKind.HANG, first=1),), reply=Reply("late")),
            Rule("slow", Match(user="slow"), Reply("slow"), latency_s=0.3),
        ]
    )
    with ScriptedServer(script) as srv:
        with pytest.raises(httpx.ReadTimeout):
            chat(srv, ("user", "hang"), timeout=0.3)
        assert content(chat(srv, ("user", "hang"))) == "late"
        started = time.perf_counter()
        assert content(chat(srv, ("user", "slow"))) == "slow"
        assert time.perf_counter() - started >= 0.3


def test_global_fault_counts_all_requests():
    script = Script([Rule("a", Match(), Reply("a"))], faults=(Fault(status=503, pattern="..x"),))
    with ScriptedServer(script) as srv:
        assert [chat(srv, ("user", "q")).status_code for _ in range(6)] == [200, 200, 503, 200, 200, 503]


def test_usage_is_deterministic_about_four_chars_a_token():
    with ScriptedServer(Script([], default=Reply("x" * 40))) as srv:
        first = chat(srv, ("system", "s" * 39), ("user", "u" * 40)).json()
        second = chat(srv, ("system", "s" * 39), ("user", "u" * 40)).json()
    assert first["usage"] == {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30}
    assert first["usage"] == second["usage"]
    assert first["created"] == second["created"]


def test_streaming_sends_content_then_usage():
    with ScriptedServer(Script([], default=Reply("streamed"))) as srv:
        body = {"model": "m", "messages": [{"role": "user", "content": "q"}], "stream": True,
                "stream_options": {"include_usage": True}}
        with httpx.stream("POST", srv.base_url + "/chat/completions", json=body, timeout=10) as response:
            events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "streamed"
    assert chunks[-1]["usage"]["completion_tokens"] == 2


def test_many_concurrent_requests_with_latency_are_served_in_parallel():
    count, latency = 300, 0.3

    async def burst(url: str) -> list[int]:
        import aiohttp

        body = {"model": "m", "messages": [{"role": "user", "content": "q"}]}

        async def one(session: aiohttp.ClientSession) -> int:
            async with session.post(url, json=body) as response:
                await response.read()
                return response.status

        connector = aiohttp.TCPConnector(limit=count)
        async with aiohttp.ClientSession(connector=connector) as session:
            return list(await asyncio.gather(*(one(session) for _ in range(count))))

    with ScriptedServer(Script([], default=Reply("ok"), latency_s=latency)) as srv:
        started = time.perf_counter()
        codes = asyncio.run(burst(srv.base_url + "/chat/completions"))
        elapsed = time.perf_counter() - started
    assert codes == [200] * count
    # Serialized handling would need count * latency = 90 s.
    assert elapsed < count * latency / 5


def test_models_endpoint_and_loopback_only():
    with ScriptedServer(Script()) as srv:
        models = httpx.get(srv.base_url + "/models", timeout=5).json()
        assert models["data"][0]["id"] == "scripted"
    with pytest.raises(ScriptError, match="loopback"):
        ScriptedServer(Script(), host="0.0.0.0")


def test_script_file_yaml_round_trip(tmp_path):
    path = tmp_path / "script.yaml"
    path.write_text(
        """
default: {content: fallback}
rules:
  - name: coder
    when: {system: coder, calls: "1-2"}
    reply: {content: "code #{{call}}"}
  - name: tool
    when: {has_tools: true}
    reply:
      tool_calls: [{name: python_exec, arguments: {code: "print(1)"}}]
    faults: [{status: 429, first: 1}]
  - name: solve
    solutions: {"sum of two": "print(3)"}
"""
    )
    script = load_script(path)
    with ScriptedServer(script) as srv:
        assert [content(chat(srv, ("system", "coder"), ("user", "x"))) for _ in range(3)] == ["code #1", "code #2", "fallback"]
        assert content(chat(srv, ("user", "the sum of two numbers"))) == "```python\nprint(3)\n```"
        tools = [{"type": "function", "function": {"name": "python_exec"}}]
        assert chat(srv, ("user", "x"), tools=tools).status_code == 429
        assert chat(srv, ("user", "x"), tools=tools).json()["choices"][0]["message"]["tool_calls"]


@pytest.mark.parametrize(
    "data, message",
    [
        ({"rules": [{"when": {"sytem": "typo"}}]}, "unknown key"),
        ({"rules": [{"when": {"user_regex": "("}}]}, "bad regular expression"),
        ({"rules": [{"when": {"calls": "often"}}]}, "calls"),
        ({"rules": [{"faults": [{"pattern": "xyz"}]}]}, "pattern"),
        ({"rules": [{"name": "a"}, {"name": "a"}]}, "unique"),
        ({"rulez": []}, "unknown key"),
    ],
)
def test_bad_scripts_are_one_line_errors(data, message):
    with pytest.raises(ScriptError, match=message) as caught:
        script_from_dict(data)
    assert "\n" not in str(caught.value)


def test_process_form_serves_a_script_file(tmp_path):
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"rules": [{"name": "hi", "when": {"user": "hello"}, "reply": {"content": "hi {{user}}"}}]}))
    process = subprocess.Popen(
        [sys.executable, "-m", "topologies.scripted.server", "--script", str(path), "--port", "0"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = process.stdout.readline().strip()
        assert line.startswith("ready http://127.0.0.1:"), line
        base_url = line.split(" ", 1)[1]
        response = httpx.post(base_url + "/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hello"}]}, timeout=10)
        assert response.json()["choices"][0]["message"]["content"] == "hi hello"
        stats = httpx.get(base_url.removesuffix("/v1") + "/_scripted/stats", timeout=5).json()
        assert stats["requests"] == 1 and stats["rules"]["hi"]["answered"] == 1
    finally:
        process.terminate()
        process.wait(timeout=10)
        process.stdout.close()
        process.stderr.close()


def test_process_form_bad_script_is_one_line_error(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("rules: [{when: {nope: 1}}]\n")
    done = subprocess.run(
        [sys.executable, "-m", "topologies.scripted.server", "--script", str(path)],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
