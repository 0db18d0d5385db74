"""LeanChatOpenAI sends what ChatOpenAI sends and returns what ChatOpenAI returns."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import web
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.tracers.context import collect_runs
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from topologies.lean_openai import HTTPStatusFailure, LeanChatOpenAI
from topologies.models import classify
from topologies.scripted import Match, Reply, Rule, Script, ScriptedServer, ToolCall
from topologies.types import ErrorKind


@tool
def python_exec(code: str, stdin: str = "") -> str:
    """Run a Python program and return its output."""
    return ""


MESSAGES = [("system", "You are a solver."), ("user", "hello"), ("assistant", "hm"), ("user", "use the tool")]
OPTIONS = {"temperature": 0.3, "top_p": 0.8, "seed": 5, "max_tokens": 77, "extra_body": {"repetition_penalty": 1.1}}


def _models(url: str) -> tuple[ChatOpenAI, LeanChatOpenAI]:
    common = {"model": "m", "base_url": url, "api_key": "secret", "max_retries": 0, "use_responses_api": False,
              "cache": False}
    return ChatOpenAI(**common), LeanChatOpenAI(trust_env=False, **common)


async def _both(url: str, *, tools: bool) -> list:
    replies = []
    for model in _models(url):
        runnable = model.bind_tools([python_exec], tool_choice="auto") if tools else model
        replies.append(await runnable.ainvoke(MESSAGES, **OPTIONS))
        await (model.aclose() if isinstance(model, LeanChatOpenAI) else model.root_async_client.close())
    return replies


def _exchange(calls: Any, *, tools: bool) -> tuple[list, list[dict]]:
    """Run ``calls(url, tools=...)`` against a server answering with a tool call or a text; return
    its replies and the request bodies the server received."""
    reply = Reply(tool_calls=(ToolCall("python_exec", {"code": "print(1)"}),)) if tools else Reply("the answer")
    with ScriptedServer(Script([Rule("r", Match(user="use the tool"), reply)])) as srv:
        replies = asyncio.run(calls(srv.base_url, tools=tools))
        return replies, [dict(r.body) for r in srv.requests]


@pytest.mark.parametrize("tools", [False, True], ids=["plain", "tools"])
def test_same_request_body_and_same_message_as_chatopenai(tools):
    (stock, lean), bodies = _exchange(_both, tools=tools)
    assert bodies[0] == bodies[1]
    assert bodies[1]["repetition_penalty"] == 1.1 and "extra_body" not in bodies[1]
    assert ("tools" in bodies[1]) is tools
    assert lean.content == stock.content
    assert lean.usage_metadata == stock.usage_metadata
    assert [(c["name"], c["args"]) for c in lean.tool_calls] == [(c["name"], c["args"]) for c in stock.tool_calls]
    assert lean.response_metadata["model_name"] == stock.response_metadata["model_name"]


async def _headers_seen(reply_status: int, reply_body: bytes, headers: dict | None = None) -> tuple[dict, object]:
    seen: dict = {}

    async def chat(request: web.Request) -> web.Response:
        seen.update(request.headers)
        return web.Response(status=reply_status, body=reply_body, content_type="application/json",
                            headers=headers or {})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    model = _models(f"http://127.0.0.1:{port}/v1")[1]
    try:
        outcome: object = await model.ainvoke(MESSAGES)
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        outcome = exc
    finally:
        await model.aclose()
        await runner.cleanup()
    return seen, outcome


def test_bearer_key_and_json_content_type_are_sent():
    body = json.dumps({"id": "x", "object": "chat.completion", "model": "m",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                                    "finish_reason": "stop"}]}).encode()
    headers, message = asyncio.run(_headers_seen(200, body))
    assert headers["Authorization"] == "Bearer secret"
    assert headers["Content-Type"] == "application/json"
    assert message.content == "hi"


def test_error_status_keeps_status_message_and_retry_after():
    body = json.dumps({"error": {"message": "slow down"}}).encode()
    _, error = asyncio.run(_headers_seen(429, body, {"Retry-After": "3"}))
    assert isinstance(error, HTTPStatusFailure) and error.status == 429
    failure = classify(error, "http://e/v1", 5)
    assert failure.kind is ErrorKind.INFRASTRUCTURE and failure.retryable and failure.retry_after_s == 3.0
    assert failure.message == "HTTP 429 from http://e/v1: slow down"


@pytest.mark.parametrize("body", [b"[1, 2]", b"<html>gateway</html>"], ids=["json-list", "not-json"])
def test_a_body_that_is_not_a_json_object_is_a_malformed_response(body):
    _, error = asyncio.run(_headers_seen(200, body))
    failure = classify(error, "http://e/v1", 5)
    assert failure is not None and failure.retryable and failure.message.startswith("malformed response")


async def _direct_and_invoked(url: str, *, tools: bool) -> list:
    from langchain_core.messages import convert_to_messages

    model = _models(url)[1]
    runnable = model.bind_tools([python_exec], tool_choice="auto") if tools else model
    bound = getattr(runnable, "kwargs", {})
    try:
        invoked = await runnable.ainvoke(MESSAGES, **OPTIONS)
        direct = await model.agenerate_direct(convert_to_messages(MESSAGES), **bound, **OPTIONS)
    finally:
        await model.aclose()
    return [invoked, direct]


@pytest.mark.parametrize("tools", [False, True], ids=["plain", "tools"])
def test_direct_call_sends_and_returns_what_ainvoke_does(tools):
    (invoked, direct), bodies = _exchange(_direct_and_invoked, tools=tools)
    assert len(bodies) == 2 and bodies[0] == bodies[1]
    assert direct is not None and type(direct) is type(invoked)
    assert direct.content == invoked.content
    # the scripted server numbers its replies and tool-call ids: the second reply differs only there
    assert direct.tool_calls == [{**c, "id": c["id"].replace("call_1_", "call_2_")} for c in invoked.tool_calls]
    assert direct.usage_metadata == invoked.usage_metadata
    assert direct.response_metadata == {**invoked.response_metadata, "id": "chatcmpl-scripted-2"}
    assert direct.id.startswith("lc_run--") and invoked.id.startswith("lc_run--") and direct.id != invoked.id


class _Seen(BaseCallbackHandler):
    def __init__(self) -> None:
        self.starts = 0

    def on_chat_model_start(self, *args, **kwargs) -> None:
        self.starts += 1


async def _direct_inside(url: str, config: dict) -> object:
    from langchain_core.messages import convert_to_messages
    from langchain_core.runnables import RunnableLambda

    model = _models(url)[1]

    async def node(_: object) -> object:  # a LangGraph node's position: the caller's config is in context
        return await model.agenerate_direct(convert_to_messages(MESSAGES))

    try:
        return await RunnableLambda(node).ainvoke(None, config=config)
    finally:
        await model.aclose()


def test_direct_call_steps_aside_when_a_handler_or_tracer_would_see_the_call():
    seen = _Seen()
    with ScriptedServer(Script([Rule("r", Match(), Reply("x"))])) as srv:
        assert asyncio.run(_direct_inside(srv.base_url, {"callbacks": [seen]})) is None
        # a handler registered through LangChain's configure hooks (as LangSmith's tracer is)
        with collect_runs() as collector:
            assert asyncio.run(_direct_inside(srv.base_url, {})) is None
        answered = asyncio.run(_direct_inside(srv.base_url, {}))
        sent = len(srv.requests)
    assert seen.starts == 0  # nothing was called: the caller takes ainvoke, which the handler sees
    assert [run.name for run in collector.traced_runs] == ["node"]  # the node only, no model call
    assert answered is not None and answered.content == "x"
    assert sent == 1


async def _direct(url: str, call: dict | None = None, **settings: object) -> object:
    from langchain_core.messages import convert_to_messages

    model = _models(url)[1]
    for name, value in settings.items():
        setattr(model, name, value)
    try:
        return await model.agenerate_direct(convert_to_messages(MESSAGES), **(call or {}))
    finally:
        await model.aclose()


def test_direct_call_steps_aside_for_tracing_debug_verbose_model_callbacks_and_structured_output():
    from langchain_core.globals import set_debug
    from langsmith import tracing_context

    with ScriptedServer(Script([Rule("r", Match(), Reply("x"))])) as srv:
        # LangSmith tracing switched on (as LANGSMITH_TRACING=true does)
        with tracing_context(enabled=True):
            assert asyncio.run(_direct(srv.base_url)) is None
        set_debug(True)
        try:
            assert asyncio.run(_direct(srv.base_url)) is None
        finally:
            set_debug(False)
        assert asyncio.run(_direct(srv.base_url, verbose=True)) is None
        assert asyncio.run(_direct(srv.base_url, callbacks=[_Seen()])) is None
        structured = {"ls_structured_output_format": {"schema": {"type": "object"}}}
        assert asyncio.run(_direct(srv.base_url, structured)) is None
        assert asyncio.run(_direct(srv.base_url, cache=None)) is not None  # no global cache set
        sent = len(srv.requests)
    assert sent == 1


def test_wire_json_falls_back_to_the_standard_parser_where_orjson_refuses():
    from topologies.lean_openai import _dump, _load

    huge = 2**70  # beyond orjson's 64-bit integers
    assert json.loads(_dump({"seed": huge, "text": "é"})) == {"seed": huge, "text": "é"}
    assert _dump({"text": "é"}) == '{"text":"é"}'.encode()  # UTF-8, not \\u escapes
    assert _load(json.dumps({"n": huge}).encode()) == {"n": huge}
    with pytest.raises(ValueError):
        _load(b"<html>bad gateway</html>")
