"""``ChatOpenAI`` whose plain chat-completion calls go over one aiohttp session.

Why: at batch rates (hundreds of calls per second against a fast server) the openai SDK's
request transformation, httpx and the thread-pool hop ChatOpenAI makes to build every result
cost 3-4 ms of CPU per call, about ten times the HTTP exchange itself, and one event loop then
saturates near 250 calls/s. Everything that gives the call its meaning stays ChatOpenAI's own:
the request body comes from ``_get_request_payload`` (message conversion, bound tools,
``extra_body``) and the message from ``_create_chat_result`` (tool calls, usage metadata), and
the call still runs through LangChain's ``ainvoke`` with its callbacks. Only the wire changes.
Streaming, structured output and the Responses API keep the SDK path.

Failures surface as :class:`HTTPStatusFailure` (any status >= 400), ``TimeoutError``,
``aiohttp.ClientError`` or ``ValueError`` (a body that is not a JSON object); ``models.classify``
sorts them exactly as it sorts the SDK's errors.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import aiohttp
from langchain_openai import ChatOpenAI
from pydantic import PrivateAttr


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


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw)
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

    async def _agenerate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        payload = self._get_request_payload(messages, stop=stop, **kwargs)
        if payload.get("stream") or _needs_sdk(payload) or self._use_responses_api(payload):
            return await super()._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)
        body = _wire_body(payload)
        url = f"{(self.openai_api_base or 'https://api.openai.com/v1').rstrip('/')}/chat/completions"
        async with self._http_session().post(url, data=json.dumps(body, ensure_ascii=False).encode()) as reply:
            raw = await reply.read()
            if reply.status >= 400:
                raise HTTPStatusFailure(reply.status, _decode(raw), reply.headers.get("retry-after"))
        response = json.loads(raw)  # ValueError when the body is not JSON
        if not isinstance(response, dict):
            raise ValueError(f"response is a JSON {type(response).__name__}, not an object")
        return self._create_chat_result(response, {})

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
        await self.root_async_client.close()


# Options that change more than the JSON body: left to the SDK.
_SDK_ONLY = ("response_format", "extra_headers", "extra_query", "timeout")


def _needs_sdk(payload: Mapping[str, Any]) -> bool:
    return any(key in payload for key in _SDK_ONLY)


def _wire_body(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON body the SDK would send: ``extra_body`` merged into the top level."""
    body = {key: value for key, value in payload.items() if key != "extra_body"}
    body.update(payload.get("extra_body") or {})
    return body
