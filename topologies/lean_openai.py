"""``ChatOpenAI`` whose plain chat-completion calls go over one aiohttp session.

Why: at batch rates (hundreds of calls per second against a fast server) the openai SDK's
request transformation, httpx and the thread-pool hop ChatOpenAI makes to build every result
cost 3-4 ms of CPU per call, about ten times the HTTP exchange itself, and one event loop then
saturates near 250 calls/s. Everything that gives the call its meaning stays ChatOpenAI's own:
the request body comes from ``_get_request_payload`` (message conversion, bound tools,
``extra_body``) and the message from ``_create_chat_result`` (tool calls, usage metadata), and
only the wire changes. Streaming, structured output and the Responses API keep the SDK path.

``agenerate_direct`` goes one step further for callers that make many calls (the team client):
when no callback handler, tracer, cache or rate limiter would see the call, LangChain's run
machinery (callback-manager set-up, a task per call, run bookkeeping) has nothing to do but still
costs about as much CPU as the HTTP exchange, so the call skips it and applies the same
post-processing to the result (response metadata, message id). Whenever any of that machinery is
active (LangGraph's "messages" stream mode, LangSmith tracing, a handler in the config) it
returns ``None`` and the caller takes ``ainvoke``.

Failures surface as :class:`HTTPStatusFailure` (any status >= 400), ``TimeoutError``,
``aiohttp.ClientError`` or ``ValueError`` (a body that is not a JSON object); ``models.classify``
sorts them exactly as it sorts the SDK's errors.
"""

from __future__ import annotations

import itertools
import json
import uuid
from typing import Any, Mapping, Sequence

import aiohttp
import orjson
from langchain_core.caches import BaseCache
from langchain_core.globals import get_debug, get_llm_cache
from langchain_core.language_models._utils import _normalize_messages
from langchain_core.language_models.chat_models import _gen_info_and_msg_metadata
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.tracers.context import _configure_hooks, _tracing_v2_is_enabled
from langchain_core.utils.env import env_var_is_set
from langchain_core.utils.utils import LC_ID_PREFIX
from langchain_openai import ChatOpenAI
from pydantic import PrivateAttr


# uuid4 per reply costs more than the rest of the bookkeeping: a random stem and a counter
_ID_STEM = uuid.uuid4().hex[:20]
_reply_numbers = itertools.count()


class HTTPStatusFailure(Exception):
    """The endpoint answered with an error status."""

    def __init__(self, status: int, body: Any, retry_after: str | None) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.body = body
        self.retry_after = retry_after

    @property
    def message(self) -> str:
        return self.body if isinstance(self.body, str) else ""


def _dump(body: Mapping[str, Any]) -> bytes:
    """UTF-8 JSON; orjson is several times faster than json on the long prompts of debate rounds,
    json covers what it refuses (e.g. integers beyond 64 bits)."""
    try:
        return orjson.dumps(body)
    except TypeError:
        return json.dumps(body, ensure_ascii=False).encode()


def _load(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except ValueError:
        return json.loads(raw)  # the reference parser decides what is not JSON


def _decode(raw: bytes) -> Any:
    try:
        return _load(raw)
    except ValueError:
        return raw.decode("utf-8", errors="replace")


class LeanChatOpenAI(ChatOpenAI):
    """ChatOpenAI with a lean wire for non-streaming chat completions (see module docstring).

    ``trust_env`` decides whether proxy variables apply (never for loopback servers). The
    session belongs to the event loop that first used the model; ``aclose`` ends it.
    """

    trust_env: bool = True
    _session: aiohttp.ClientSession | None = PrivateAttr(default=None)

    def _http_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            timeout_s = float(self.request_timeout) if isinstance(self.request_timeout, int | float) else 600.0
            headers = {"Content-Type": "application/json", **(self.default_headers or {})}
            key = self.openai_api_key.get_secret_value() if self.openai_api_key else ""
            if key:
                headers["Authorization"] = f"Bearer {key}"
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=2000, limit_per_host=0),
                timeout=aiohttp.ClientTimeout(total=timeout_s, sock_connect=min(timeout_s, 10.0)),
                headers=headers,
                trust_env=self.trust_env,
            )
        return self._session

    def _takes_lean_wire(self, payload: Mapping[str, Any]) -> bool:
        return not (payload.get("stream") or _needs_sdk(payload) or self._use_responses_api(payload))

    async def _agenerate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        payload = self._get_request_payload(messages, stop=stop, **kwargs)
        if not self._takes_lean_wire(payload):
            return await super()._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)
        return await self._post(payload)

    async def agenerate_direct(self, messages: Sequence[BaseMessage], **kwargs: Any) -> AIMessage | None:
        """The reply to ``messages`` without LangChain's run machinery, or ``None`` when that
        machinery would do something for this call (then use ``ainvoke``). ``kwargs`` are what
        ``ainvoke`` takes after binding (``tools``, ``tool_choice``, decoding options)."""
        if not self._run_machinery_idle() or _STRUCTURED_OUTPUT_KEYS & kwargs.keys():
            return None
        messages = _normalize_messages(messages)
        payload = self._get_request_payload(messages, **kwargs)
        if not self._takes_lean_wire(payload):
            return None
        result = await self._post(payload)
        # what BaseChatModel._agenerate_with_cache / agenerate do with a single generation
        generation = result.generations[0]
        message = generation.message
        if message.id is None:  # a run would name it lc_run--<run uuid>-0; any unique id will do
            message.id = f"{LC_ID_PREFIX}-{_ID_STEM}{next(_reply_numbers):012x}-0"
        message.response_metadata = _gen_info_and_msg_metadata(generation)
        if result.llm_output is not None:
            message.response_metadata = {**result.llm_output, **message.response_metadata}
        return message

    def _run_machinery_idle(self) -> bool:
        """True when ``ainvoke`` would only do bookkeeping: no handler or tracer would be attached
        to this call (the sources LangChain's callback configuration reads, including tracing
        variables and registered hooks), no cache, no rate limiter, no streaming, the default
        output version."""
        if self.rate_limiter is not None or self.streaming or self.output_version == "v1":
            return False
        if self.cache is not False and (isinstance(self.cache, BaseCache) or
                                        (self.cache is None and get_llm_cache() is not None)):
            return False
        # The handlers LangChain's callback configuration would attach, in its order: the
        # caller's context (a LangGraph node's config, say), the model's own, verbose/debug
        # printers, the LangSmith tracer, and handlers registered through configure hooks.
        # (Checked here rather than by building a manager: that costs as much as the HTTP call.)
        inherited = (var_child_runnable_config.get() or {}).get("callbacks")
        if inherited and (inherited if isinstance(inherited, list) else inherited.handlers):
            return False
        if self.callbacks or self.verbose or get_debug() or _tracing_v2_is_enabled():
            return False
        return not any(var.get() is not None or (env_var is not None and handler_class is not None
                                                 and env_var_is_set(env_var))
                       for var, _inheritable, handler_class, env_var in _configure_hooks)

    async def _post(self, payload: Mapping[str, Any]) -> ChatResult:
        body = _wire_body(payload)
        url = f"{(self.openai_api_base or 'https://api.openai.com/v1').rstrip('/')}/chat/completions"
        async with self._http_session().post(url, data=_dump(body)) as reply:
            raw = await reply.read()
            if reply.status >= 400:
                raise HTTPStatusFailure(reply.status, _decode(raw), reply.headers.get("retry-after"))
        response = _load(raw)  # ValueError when the body is not JSON
        if not isinstance(response, dict):
            raise ValueError(f"response is a JSON {type(response).__name__}, not an object")
        return self._create_chat_result(response, {})

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
        await self.root_async_client.close()


# Structured output (with_structured_output) is traced by agenerate: leave it to ainvoke.
_STRUCTURED_OUTPUT_KEYS = frozenset({"ls_structured_output_format", "structured_output_format"})

# Options that change more than the JSON body: left to the SDK.
_SDK_ONLY = ("response_format", "extra_headers", "extra_query", "timeout")


def _needs_sdk(payload: Mapping[str, Any]) -> bool:
    return any(key in payload for key in _SDK_ONLY)


def _wire_body(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON body the SDK would send: ``extra_body`` merged into the top level."""
    body = {key: value for key, value in payload.items() if key != "extra_body"}
    body.update(payload.get("extra_body") or {})
    return body
