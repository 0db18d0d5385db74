"""The scripted OpenAI-compatible server: a deterministic stand-in for the model, loopback only.

In-process (tests)::

    with ScriptedServer(Script([Rule("hi", Match(user="hello"), Reply("hi there"))])) as srv:
        ChatOpenAI(base_url=srv.base_url, ...)
        srv.requests[-1].body["temperature"]

As a process (benchmarks, other languages)::

    python -m topologies.scripted.server --script script.yaml --port 0

prints ``ready http://127.0.0.1:PORT/v1`` on stdout once it accepts connections.
``GET /_scripted/stats`` returns the request count and per-rule counters as JSON, and with a
prefix-cache model (``prefix_cache=PrefixCacheModel()``, ``--prefix-cache``) the cache's hit rate
(topologies/scripted/prefix_cache.py: replies wait for the prefill of the prompt tokens this
server has not cached).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import sys
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from aiohttp import web

from topologies import aio

from topologies.scripted.prefix_cache import PrefixCache, PrefixCacheModel, PrefillQueue, continued_text, prompt_text
from topologies.scripted.script import (
    Decision,
    FaultKind,
    RuleCounters,
    Script,
    ScriptError,
    ScriptState,
    completion_body,
    load_script,
    stream_chunks,
)

_JSON = "application/json"


@dataclass(frozen=True, slots=True)
class LoggedRequest:
    """One request as the server saw it and what it did with it."""

    number: int
    body: Mapping[str, Any]
    rule: str | None  # the rule that answered; None when nothing matched
    status: int  # HTTP status sent (200 also for malformed/truncated bodies)
    fault: str | None  # FaultKind value when a fault was injected

    @property
    def messages(self) -> list[Mapping[str, Any]]:
        return list(self.body.get("messages") or [])


def _error_body(status: int, message: str) -> bytes:
    kind = "rate_limit_error" if status == 429 else "invalid_request_error" if status < 500 else "server_error"
    return json.dumps({"error": {"message": message, "type": kind, "code": status}}).encode()


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ScriptedServer:
    """Serves a Script on 127.0.0.1 from a background thread (or the main thread via ``serve``)."""

    def __init__(
        self,
        script: Script,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        keep_bodies: bool = True,
        prefix_cache: PrefixCacheModel | None = None,
    ) -> None:
        if not _is_loopback(host):
            raise ScriptError(f"the scripted server listens on loopback only, not {host!r}")
        self.script = script
        self.cache = PrefixCache(prefix_cache) if prefix_cache is not None else None
        self._prefill = PrefillQueue(prefix_cache.prefill_tokens_per_s) if prefix_cache is not None else None
        self.host = host
        self.port = port
        self.keep_bodies = keep_bodies
        self.requests: list[LoggedRequest] = []
        self._state = ScriptState(script)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._start_error: BaseException | None = None

    # -- public API ---------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    @property
    def counters(self) -> dict[str, RuleCounters]:
        """Per-rule counters (``seen``, ``answered``, ``faults``); ``<default>`` for the fallback."""
        return self._state.counters

    @property
    def request_count(self) -> int:
        return self._state.requests

    @property
    def cache_stats(self) -> dict[str, Any] | None:
        """The prefix cache's counters and hit rate; None without a prefix-cache model."""
        return self.cache.stats() if self.cache is not None else None

    def rule_names(self) -> list[str | None]:
        """Which rule answered each request, in order."""
        return [r.rule for r in self.requests]

    def start(self) -> ScriptedServer:
        if self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._run_thread, name="scripted-llm", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=30)
        if self._start_error is not None:
            raise self._start_error
        if not self._ready.is_set():
            raise RuntimeError("scripted server did not start within 30 s")
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        self._thread = None
        self._loop = None

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def serve(self, on_ready: Any = None) -> None:
        """Run in the current event loop until cancelled (the process form)."""
        await self._startup()
        if on_ready is not None:
            on_ready(self)
        try:
            await asyncio.Event().wait()
        finally:
            await self._shutdown()

    # -- lifecycle ----------------------------------------------------------------------------

    def _run_thread(self) -> None:
        loop = aio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._startup())
        except BaseException as exc:  # noqa: BLE001 - surfaced to the starting thread
            self._start_error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _startup(self) -> None:
        self._stopping = asyncio.Event()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/_scripted/stats", self._stats)
        # handler_cancellation: a hung handler ends when its client disconnects.
        runner = web.AppRunner(
            app, access_log=None, handle_signals=False, handler_cancellation=True, shutdown_timeout=0.5
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, backlog=2048)
        await site.start()
        self._runner = runner
        server = site._server  # aiohttp exposes the bound port only through the server sockets
        if server is not None and server.sockets:
            self.port = server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        if self._stopping is not None:
            self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- handlers -----------------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        body = {"object": "list", "data": [{"id": "scripted", "object": "model", "owned_by": "lcb-grid"}]}
        return web.json_response(body)

    async def _stats(self, request: web.Request) -> web.Response:
        counters = {name: asdict(c) for name, c in self._state.counters.items()}
        body: dict[str, Any] = {"requests": self._state.requests, "rules": counters}
        if self.cache is not None:
            body["prefix_cache"] = self.cache.stats()
        return web.json_response(body)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = json.loads(await request.read())
        except ValueError:
            return web.Response(status=400, body=_error_body(400, "request body is not JSON"), content_type=_JSON)
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return web.Response(status=400, body=_error_body(400, "'messages' (a list) is required"), content_type=_JSON)
        try:
            chat, decision = self._state.decide(body)
        except Exception as exc:  # noqa: BLE001 - a broken callable rule: make it visible, as a 400
            message = f"scripted rule failed: {type(exc).__name__}: {exc}"
            self._log(self._state.requests, body, None, 400, None)
            return web.Response(status=400, body=_error_body(400, message), content_type=_JSON)
        if self.cache is not None and self._prefill is not None:
            lookup = self.cache.lookup(prompt_text(body))
            await self._prefill.prefill(lookup.uncached_tokens)
        if decision.latency_s > 0:
            await asyncio.sleep(decision.latency_s)
        return await self._answer(request, chat, decision)

    def _log(self, number: int, body: Mapping[str, Any], rule: str | None, status: int, fault: str | None) -> None:
        self.requests.append(LoggedRequest(number, body if self.keep_bodies else {}, rule, status, fault))

    async def _answer(self, request: web.Request, chat: Any, decision: Decision) -> web.StreamResponse:
        fault = decision.fault
        number = chat.number
        if fault is not None:
            status = fault.status if fault.kind is FaultKind.STATUS else 200
            self._log(number, chat.body, decision.rule, status, fault.kind.value)
            return await _FAULT_HANDLERS[fault.kind](self, request, chat, decision)
        if decision.reply is None:
            self._log(number, chat.body, None, 400, None)
            return web.Response(status=400, body=_error_body(400, "no scripted rule matched"), content_type=_JSON)
        self._log(number, chat.body, decision.rule, 200, None)
        if self.cache is not None:  # the reply's blocks stay cached, as a real server's KV does
            message = completion_body(chat, decision.reply)["choices"][0]["message"]
            self.cache.insert(continued_text(chat.body, message))
        if chat.body.get("stream"):
            return await self._stream(request, chat, decision)
        payload = json.dumps(completion_body(chat, decision.reply)).encode()
        return web.Response(body=payload, content_type=_JSON)

    async def _stream(self, request: web.Request, chat: Any, decision: Decision) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        for chunk in stream_chunks(chat, decision.reply):
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    # -- faults -------------------------------------------------------------------------------

    async def _fault_status(self, request: web.Request, chat: Any, decision: Decision) -> web.Response:
        fault = decision.fault
        return web.Response(status=fault.status, body=_error_body(fault.status, fault.message), content_type=_JSON)

    async def _fault_hang(self, request: web.Request, chat: Any, decision: Decision) -> web.Response:
        # Ends when the client disconnects (handler cancellation) or the server stops.
        assert self._stopping is not None
        await self._stopping.wait()
        return web.Response(status=503, body=_error_body(503, "server stopping"), content_type=_JSON)

    async def _fault_malformed(self, request: web.Request, chat: Any, decision: Decision) -> web.Response:
        return web.Response(body=b'{"id": "chatcmpl-broken", "object": "chat.completion", "choices": [{', content_type=_JSON)

    async def _fault_empty_choices(self, request: web.Request, chat: Any, decision: Decision) -> web.Response:
        body = {"id": "chatcmpl-empty", "object": "chat.completion", "created": 0, "model": "scripted", "choices": None}
        return web.json_response(body)

    async def _fault_truncated(self, request: web.Request, chat: Any, decision: Decision) -> web.StreamResponse:
        from topologies.scripted.script import Reply

        full = json.dumps(completion_body(chat, Reply(content="truncated " * 20))).encode()
        response = web.StreamResponse(headers={"Content-Type": _JSON})
        response.content_length = len(full)
        await response.prepare(request)
        await response.write(full[: len(full) // 2])
        # Close mid-body: the client sees fewer bytes than Content-Length promised.
        if request.transport is not None:
            request.transport.abort()
        raise asyncio.CancelledError  # stop aiohttp from finishing the response


_FAULT_HANDLERS = {
    FaultKind.STATUS: ScriptedServer._fault_status,
    FaultKind.HANG: ScriptedServer._fault_hang,
    FaultKind.MALFORMED: ScriptedServer._fault_malformed,
    FaultKind.TRUNCATED: ScriptedServer._fault_truncated,
    FaultKind.EMPTY_CHOICES: ScriptedServer._fault_empty_choices,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m topologies.scripted.server",
        description="Scripted OpenAI-compatible chat server (a deterministic stand-in for the model).",
    )
    parser.add_argument("--script", required=True, help="script file (.yaml, .yml or .json)")
    parser.add_argument("--port", type=int, default=0, help="port (0: a free one; default 0)")
    parser.add_argument("--host", default="127.0.0.1", help="loopback address (default 127.0.0.1)")
    parser.add_argument("--prefix-cache", action="store_true",
                        help="model automatic prefix caching: replies wait for the prefill of uncached prompt tokens")
    parser.add_argument("--prefill-tokens-per-s", type=float, default=PrefixCacheModel().prefill_tokens_per_s,
                        help="prefill rate of the prefix-cache model (default %(default)g)")
    parser.add_argument("--cache-tokens", type=int, default=None,
                        help="prefix-cache capacity in tokens (default 2000000)")
    args = parser.parse_args(argv)
    cache = None
    try:
        if args.prefix_cache:
            options: dict[str, Any] = {"prefill_tokens_per_s": args.prefill_tokens_per_s}
            if args.cache_tokens is not None:
                options["capacity_blocks"] = max(1, args.cache_tokens * 4 // PrefixCacheModel().block_chars)
            cache = PrefixCacheModel(**options)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        server = ScriptedServer(load_script(args.script), host=args.host, port=args.port, prefix_cache=cache)
    except ScriptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def announce(srv: ScriptedServer) -> None:
        print(f"ready {srv.base_url}", flush=True)

    try:
        aio.run(server.serve(on_ready=announce))
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
