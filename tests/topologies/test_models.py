from __future__ import annotations

import asyncio
import socket
import time
from collections import Counter

import pytest

import topologies.local_model as local_model
from topologies import models
from topologies.models import (
    MODEL_ALIASES,
    ModelConfig,
    ModelConfigError,
    make_client,
    resolve_model,
    resolve_reflection_model,
    strip_thinking,
)
from topologies.scripted import Fault, FaultKind, Match, Reply, Rule, Script, ScriptedServer, ToolCall
from topologies.types import Decoding, ErrorKind, ModelCallError, Usage

DECODING = Decoding(temperature=0.3, top_p=0.8, max_tokens=77, seed=5)


def run(coro):
    return asyncio.run(coro)


def client_for(*urls: str, **options) -> models.OpenAIChatClient:
    options.setdefault("backoff_s", 0.001)
    options.setdefault("timeout_s", 5)
    return make_client(ModelConfig(id="test-model", endpoints=tuple(urls), **options))


def ask(client, text="hello", role="solver", **kwargs):
    return run(client.complete(role, [("system", "You are a solver."), ("user", text)], decoding=kwargs.pop("decoding", DECODING), **kwargs))


def dead_url() -> str:
    with socket.socket() as sock:  # a port nobody listens on (bound, then released)
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


# -------------------------------------------------------------------------------------------
# Resolution


def test_aliases():
    assert MODEL_ALIASES["qwen"] == "Qwen/Qwen3.5-9B"
    assert MODEL_ALIASES["llama"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert MODEL_ALIASES["local"] == "qwen2.5-coder-0.5b-instruct"


def test_endpoint_precedence_argument_then_task_endpoints_then_vllm():
    env = {"TASK_ENDPOINTS": "http://a:1/v1,http://b:2/v1", "VLLM_BASE_URL": "http://c:3/v1", "OPENAI_API_KEY": "sk-x"}
    config = resolve_model("qwen", task_endpoints="http://x:9", env=env)
    assert config.endpoints == ("http://x:9/v1",)  # a bare host gets /v1
    assert config.id == "Qwen/Qwen3.5-9B" and config.alias == "qwen" and config.api_key == "sk-x"
    assert config.extra_body == {"chat_template_kwargs": {"enable_thinking": False}}
    assert resolve_model("llama", env=env).endpoints == ("http://a:1/v1", "http://b:2/v1")
    vllm_only = resolve_model("org/Some-Model", env={"VLLM_BASE_URL": "http://c:3/v1, http://d:4/v1/"})
    assert vllm_only.endpoints == ("http://c:3/v1", "http://d:4/v1")
    assert vllm_only.id == "org/Some-Model" and vllm_only.alias == "" and vllm_only.api_key == "EMPTY"
    assert vllm_only.extra_body == {}


def test_reflection_endpoints_fall_back_to_task_endpoints():
    env = {"TASK_ENDPOINTS": "http://task:1/v1", "REFLECTION_MODEL_BASE_URL": "http://refl:2/v1"}
    assert resolve_reflection_model("qwen", env=env).endpoints == ("http://refl:2/v1",)
    assert resolve_reflection_model("qwen", "http://arg:3/v1", env=env).endpoints == ("http://arg:3/v1",)
    assert resolve_reflection_model("qwen", env={"TASK_ENDPOINTS": "http://task:1/v1"}).endpoints == ("http://task:1/v1",)


def test_bad_endpoint_is_a_config_error():
    with pytest.raises(ModelConfigError, match="not an http"):
        resolve_model("qwen", task_endpoints="ftp://host/v1", env={})


@pytest.fixture
def started_servers(monkeypatch) -> list[str]:
    """Embedded servers 'started' (aliases, in order), each answering at port 5555, no process."""
    started: list[str] = []
    monkeypatch.setattr(local_model, "ensure_server",
                        lambda model: started.append(model.alias) or "http://127.0.0.1:5555/v1")
    monkeypatch.setattr(models, "_notices_shown", set())
    return started


def test_no_endpoint_uses_the_embedded_model_with_one_notice(started_servers, capsys):
    config = resolve_model("qwen", env={})
    again = resolve_model("qwen", env={})
    assert config == again
    assert config.id == "qwen2.5-coder-0.5b-instruct" and config.endpoints == ("http://127.0.0.1:5555/v1",)
    assert config.token_limit_field == "max_tokens"  # llama.cpp ignores max_completion_tokens
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "embedded local model" in err and "TASK_ENDPOINTS" in err
    local = resolve_model("local", env={"TASK_ENDPOINTS": "http://a:1/v1"})
    assert local.endpoints == ("http://127.0.0.1:5555/v1",) and local.alias == "local"


def test_the_stronger_embedded_model_is_served_by_alias_or_by_its_id(started_servers, capsys):
    config = resolve_model("local-1.5b", env={})
    assert (config.id, config.alias, config.token_limit_field) == ("qwen2.5-coder-1.5b-instruct", "local-1.5b",
                                                                   "max_tokens")
    # A job's reflection model is named by id: with no endpoint it is served, not swapped for 0.5B.
    reflection = models.resolve_reflection_model("qwen2.5-coder-1.5b-instruct", env={})
    assert reflection.id == "qwen2.5-coder-1.5b-instruct" and started_servers == ["local-1.5b", "local-1.5b"]
    assert capsys.readouterr().err.count("using the embedded local model") == 1  # one server, one notice


# -------------------------------------------------------------------------------------------
# Calls


def test_content_think_stripping_usage_and_decoding_reach_the_server():
    raw = "<think>a</think>x<think>b</think>\n\nfinal answer"
    script = Script([Rule("think", Match(user="hello"), Reply(raw))])
    with ScriptedServer(script) as srv:
        client = client_for(srv.base_url, extra_body={"repetition_penalty": 1.05})
        message = ask(client)
        body = srv.requests[-1].body
    assert message.content == "final answer"
    # The scripted server counts about 4 characters a token, over the raw (unstripped) reply.
    assert message.usage_metadata["input_tokens"] == -(-len("You are a solver.\nhello") // 4)
    assert message.usage_metadata["output_tokens"] == -(-len(raw) // 4)
    assert body["temperature"] == 0.3 and body["top_p"] == 0.8 and body["seed"] == 5
    assert body["max_completion_tokens"] == 77 and "max_tokens" not in body
    assert body["repetition_penalty"] == 1.05
    assert body["model"] == "test-model"
    assert message.response_metadata["endpoint"] == srv.base_url


def test_legacy_max_tokens_field_and_no_seed():
    with ScriptedServer(Script()) as srv:
        client = make_client(ModelConfig(id="m", endpoints=(srv.base_url,), token_limit_field="max_tokens"))
        ask(client, decoding=Decoding(temperature=0.0, top_p=1.0, max_tokens=12, seed=None))
        body = srv.requests[-1].body
    assert body["max_tokens"] == 12 and "max_completion_tokens" not in body
    assert "seed" not in body and body["temperature"] == 0.0


def test_strip_thinking():
    assert strip_thinking("no tags") == "no tags"
    assert strip_thinking("<think>x</think>  y") == "y"
    assert strip_thinking("a</think>b</think>c") == "c"


def test_tool_calls_round_trip_with_langchain_tools_and_dicts():
    from langchain_core.tools import tool

    @tool
    def python_exec(code: str, stdin: str = "") -> str:
        """Run Python code with the given stdin."""
        return ""

    as_dict = {"type": "function", "function": {"name": "submit", "description": "Submit code.",
                                                  "parameters": {"type": "object", "properties": {"code": {"type": "string"}}}}}
    script = Script([Rule("tool", Match(tool="python_exec"), Reply(content=None, tool_calls=(ToolCall("python_exec", {"code": "print(1)"}),)))])
    with ScriptedServer(script) as srv:
        client = client_for(srv.base_url)
        message = ask(client, tools=[python_exec, as_dict], tool_choice="python_exec")
        body = srv.requests[-1].body
    assert [call["name"] for call in message.tool_calls] == ["python_exec"]
    assert message.tool_calls[0]["args"] == {"code": "print(1)"}
    assert [t["function"]["name"] for t in body["tools"]] == ["python_exec", "submit"]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "python_exec"}}
    assert client.usage_by_role()["solver"].tool_calls == 1


@pytest.mark.parametrize(
    "fault",
    [
        Fault(status=429, first=2),
        Fault(status=500, first=2),
        Fault(status=503, first=2),
        Fault(status=408, first=2),
        Fault(FaultKind.MALFORMED, first=2),
        Fault(FaultKind.TRUNCATED, first=2),
        Fault(FaultKind.EMPTY_CHOICES, first=2),
        Fault(FaultKind.HANG, first=2),
    ],
    ids=lambda f: f"{f.kind}-{f.status}",
)
def test_transport_failures_are_retried_then_succeed(fault):
    script = Script([Rule("flaky", Match(user="hello"), Reply("ok"), faults=(fault,))])
    with ScriptedServer(script) as srv:
        client = client_for(srv.base_url, timeout_s=0.4, max_retries=3)
        message = ask(client)
        assert message.content == "ok"
        assert srv.counters["flaky"].answered == 3
    assert client.transport_failures == 2
    assert client.usage_by_role()["solver"].calls == 1  # one logical call, not three


def test_retries_exhausted_is_one_line_infrastructure_error():
    script = Script([Rule("down", Match(), faults=(Fault(status=503, message="overloaded\nplease wait"),))])
    with ScriptedServer(script) as srv:
        client = client_for(srv.base_url, max_retries=2)
        with pytest.raises(ModelCallError) as caught:
            ask(client)
        assert srv.request_count == 3
    error = caught.value
    assert error.kind is ErrorKind.INFRASTRUCTURE
    assert "\n" not in str(error)
    assert "HTTP 503" in str(error) and "overloaded please wait" in str(error) and "after 3 attempts" in str(error)
    assert client.usage_by_role() == {}


def test_bad_request_is_a_model_error_and_not_retried():
    script = Script([Rule("long", Match(), faults=(Fault(status=400, message="maximum context length exceeded"),))])
    with ScriptedServer(script) as srv:
        client = client_for(srv.base_url, max_retries=3)
        with pytest.raises(ModelCallError) as caught:
            ask(client)
        assert srv.request_count == 1
    assert caught.value.kind is ErrorKind.MODEL
    assert "HTTP 400" in str(caught.value) and "maximum context length" in str(caught.value)


@pytest.mark.parametrize("status", [401, 404])
def test_setup_errors_are_infrastructure_but_not_retried(status):
    with ScriptedServer(Script([Rule("x", Match(), faults=(Fault(status=status),))])) as srv:
        client = client_for(srv.base_url, max_retries=3)
        with pytest.raises(ModelCallError) as caught:
            ask(client)
        assert srv.request_count == 1
    assert caught.value.kind is ErrorKind.INFRASTRUCTURE


def test_unreachable_endpoint_fails_fast_with_one_line():
    url = dead_url()
    client = client_for(url, max_retries=2, backoff_s=0.01)
    started = time.perf_counter()
    with pytest.raises(ModelCallError) as caught:
        ask(client)
    assert time.perf_counter() - started < 3
    assert caught.value.kind is ErrorKind.INFRASTRUCTURE
    assert str(caught.value) == f"cannot reach {url}: connection refused (after 3 attempts)"


def test_requests_are_spread_over_endpoints():
    with ScriptedServer(Script()) as first, ScriptedServer(Script()) as second:
        client = client_for(first.base_url, second.base_url)
        for _ in range(10):
            ask(client)
        assert (first.request_count, second.request_count) == (5, 5)

        async def burst():
            messages = [("user", "q")]
            await asyncio.gather(*(client.complete("r", messages, decoding=DECODING) for _ in range(40)))

        run(burst())
        assert first.request_count + second.request_count == 50
        assert min(first.request_count, second.request_count) >= 15


def test_failover_to_a_live_endpoint():
    with ScriptedServer(Script()) as live:
        client = client_for(dead_url(), live.base_url, max_retries=1)
        results = [ask(client).content for _ in range(6)]
        assert results == [""] * 6
        assert live.request_count == 6  # every call that hit the dead endpoint was retried on the live one


def test_usage_ledger_per_role_is_concurrency_safe():
    with ScriptedServer(Script([], default=Reply("x" * 8))) as srv:
        client = client_for(srv.base_url)

        async def many():
            calls = []
            for index in range(30):
                role = "coder" if index % 3 else "reviewer"
                calls.append(client.complete(role, [("user", "abcd" * 3)], decoding=DECODING))
            await asyncio.gather(*calls)

        run(many())
        usage = client.usage_by_role()
    assert usage == {"coder": Usage(20, 60, 40, 0), "reviewer": Usage(10, 30, 20, 0)}
    client.reset_usage()
    assert client.usage_by_role() == {}


def test_client_survives_several_event_loops():
    with ScriptedServer(Script()) as srv:
        client = client_for(srv.base_url)
        for _ in range(3):
            ask(client)  # each ask() is a fresh asyncio.run
        assert srv.request_count == 3


def test_invalid_messages_are_our_bug_not_a_model_failure():
    with ScriptedServer(Script()) as srv:
        client = client_for(srv.base_url)
        with pytest.raises(Exception) as caught:
            run(client.complete("r", [object()], decoding=DECODING))
        assert not isinstance(caught.value, ModelCallError)
        assert srv.request_count == 0


def test_endpoint_selection_counts_in_flight():
    with ScriptedServer(Script([], default=Reply("ok"), latency_s=0.2)) as slow, ScriptedServer(Script()) as fast:
        client = client_for(slow.base_url, fast.base_url)

        async def overlap():
            first = asyncio.ensure_future(client.complete("r", [("user", "q")], decoding=DECODING))
            await asyncio.sleep(0.05)  # the first call is in flight on one endpoint
            await client.complete("r", [("user", "q")], decoding=DECODING)
            await first

        run(overlap())
        assert Counter([slow.request_count, fast.request_count]) == Counter([1, 1])


def test_streaming_inside_a_langgraph_messages_stream_still_strips_and_counts():
    # LangGraph's "messages" stream mode makes ChatOpenAI stream; the result must be the same.
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    class State(TypedDict):
        answer: str

    with ScriptedServer(Script([], default=Reply("<think>plan</think>final"))) as srv:
        client = client_for(srv.base_url)

        async def solve(state: State) -> State:
            message = await client.complete("solver", [("user", "q")], decoding=DECODING)
            return {"answer": message.content}

        graph = StateGraph(State)
        graph.add_node("solve", solve)
        graph.add_edge(START, "solve")
        graph.add_edge("solve", END)
        app = graph.compile()

        async def stream():
            return [event async for event in app.astream({"answer": ""}, stream_mode=["messages", "values"])]

        events = run(stream())
        assert srv.requests[-1].body["stream"] is True
    assert events[-1] == ("values", {"answer": "final"})
    usage = client.usage_by_role()["solver"]
    assert usage.calls == 1 and usage.completion_tokens > 0 and usage.prompt_tokens > 0
