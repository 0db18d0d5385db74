"""The model layer: which model and endpoints to use, and the chat client every team calls.

``resolve_model("qwen", task_endpoints=None)`` turns a model name or alias plus the configured
endpoints into a ``ModelConfig``; ``make_client(config)`` gives a ``ChatClient`` that talks to
OpenAI-compatible servers (vLLM, SGLang, OpenAI, llama.cpp, the scripted test server) through
LangChain's ``ChatOpenAI``.

What the client guarantees (the reference project did not):
- decoding (temperature, top_p, max_tokens, seed) is sent explicitly with every request;
- only transport failures are retried (connection errors, timeouts, HTTP 408/429/5xx, bodies that
  cannot be parsed), with exponential backoff and jitter, preferring another endpoint; a 4xx such
  as "context too long" is the model's (the team's) failure and is never retried;
- every failure ends as ``ModelCallError`` with a ``kind`` and a one-line message;
- requests are spread over all endpoints (topologies/routing.py: by default every call of one
  team run stays on one endpoint, for the servers' prefix caches, while that endpoint is not
  overloaded; ``routing="least_in_flight"`` spreads call by call; failed endpoints cooled down);
- token usage is recorded per role.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import os
import random
import sys
import threading
import time
import weakref
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from lcb.errors import LcbError
from topologies.routing import ROUTERS, RoutingOptions, make_router
from topologies.types import Decoding, ErrorKind, ModelCallError, Usage

from topologies.local_model import EMBEDDED_MODELS  # noqa: E402 - stdlib-only module

MODEL_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "qwen": "Qwen/Qwen3.5-9B",
        "llama": "meta-llama/Llama-3.1-8B-Instruct",
        **{alias: model.id for alias, model in EMBEDDED_MODELS.items()},  # local, local-1.5b
    }
)

# Request extras an alias needs on vLLM-style servers. Qwen3.5 thinks by default; like the
# reference runs, ask its chat template not to (the client strips <think> blocks anyway).
ALIAS_EXTRA_BODY: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {"qwen": {"chat_template_kwargs": {"enable_thinking": False}}}
)

TASK_ENDPOINT_ENV = ("TASK_ENDPOINTS", "VLLM_BASE_URL")
REFLECTION_ENDPOINT_ENV = ("REFLECTION_MODEL_BASE_URL", *TASK_ENDPOINT_ENV)

THINK_END = "</think>"


class ModelConfigError(LcbError):
    """A model or endpoint setting that cannot be used."""


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """Everything needed to talk to one model. ``extra_body`` is merged into every request."""

    id: str
    endpoints: tuple[str, ...]
    api_key: str = "EMPTY"
    timeout_s: float = 600.0
    max_retries: int = 3  # transport retries after the first attempt
    backoff_s: float = 1.0  # first retry waits about this long, doubling after each failure
    extra_body: Mapping[str, Any] = field(default_factory=dict, hash=False)
    alias: str = ""
    # "max_completion_tokens" (OpenAI, vLLM, SGLang) or "max_tokens" (llama.cpp's server, which
    # silently ignores the newer name and would generate until the context is full).
    token_limit_field: str = "max_completion_tokens"
    # How calls are spread over several endpoints (topologies/routing.py); never changes results.
    routing: str = "affinity"
    routing_options: RoutingOptions = field(default_factory=RoutingOptions)

    def __post_init__(self) -> None:
        if not self.endpoints:
            raise ModelConfigError(f"model {self.id!r}: no endpoint given")
        if self.max_retries < 0 or self.timeout_s <= 0 or self.backoff_s < 0:
            raise ModelConfigError("max_retries and backoff_s must be >= 0 and timeout_s > 0")
        if self.token_limit_field not in ("max_completion_tokens", "max_tokens"):
            raise ModelConfigError(f"token_limit_field: unknown {self.token_limit_field!r}")
        if self.routing not in ROUTERS:
            raise ModelConfigError(f"routing: unknown {self.routing!r}; expected one of {', '.join(ROUTERS)}")

    @property
    def name(self) -> str:
        """Short name for paths and tables: the alias when there is one, else the id."""
        return self.alias or self.id


# ------------------------------------------------------------------------------------------------
# Resolving names and endpoints


def normalize_endpoint(url: str) -> str:
    """``http://host:8000`` -> ``http://host:8000/v1``; a URL with a path is kept as given."""
    text = url.strip().rstrip("/")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ModelConfigError(f"endpoint {url!r} is not an http(s) URL")
    return text if parts.path else text + "/v1"


def _is_loopback_url(url: str) -> bool:
    import ipaddress

    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_endpoints(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """A comma-separated string or a list of URLs -> normalized, de-duplicated, in order."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    seen: dict[str, None] = {}
    for item in items:
        if item and item.strip():
            seen.setdefault(normalize_endpoint(item), None)
    return tuple(seen)


_notice_lock = threading.Lock()
_notices_shown: set[str] = set()


def _notice_once(text: str) -> None:
    with _notice_lock:
        if text in _notices_shown:
            return
        _notices_shown.add(text)
    print(f"note: {text}", file=sys.stderr, flush=True)


def _local_config(reason: str, model_name: str = "local", **options: Any) -> ModelConfig:
    from topologies.local_model import embedded_model, ensure_server

    model = embedded_model(model_name)
    url = ensure_server(model=model)
    _notice_once(f"{reason}; using the embedded local model {model.id} at {url}")
    return ModelConfig(
        id=model.id,
        endpoints=(url,),
        api_key="EMPTY",
        alias=model.alias,
        token_limit_field="max_tokens",
        **options,
    )


def _resolve(
    model: str,
    endpoints: str | Sequence[str] | None,
    env: Mapping[str, str],
    env_keys: Sequence[str],
    *,
    timeout_s: float,
    max_retries: int,
    backoff_s: float,
    extra_body: Mapping[str, Any] | None,
) -> ModelConfig:
    name = model.strip()
    if not name:
        raise ModelConfigError("model name is empty")
    options = {"timeout_s": timeout_s, "max_retries": max_retries, "backoff_s": backoff_s}
    if name in EMBEDDED_MODELS:
        return _local_config(f"model '{name}' requested", name, **options)
    urls = parse_endpoints(endpoints)
    for key in env_keys:
        if urls:
            break
        urls = parse_endpoints(env.get(key))
    model_id = MODEL_ALIASES.get(name, name)
    if not urls:
        keys = " / ".join(env_keys)
        # An embedded model's own id (a local job's reflection model) gets that model, with the
        # same notice as its alias (shown once); any other model the default embedded one.
        embedded = next((a for a, m in EMBEDDED_MODELS.items() if m.id == model_id), None)
        if embedded is not None:
            return _local_config(f"model '{embedded}' requested", embedded, **options)
        return _local_config(f"no endpoint configured for {model_id} ({keys} unset)", **options)
    body = copy.deepcopy(dict(ALIAS_EXTRA_BODY.get(name, {})))
    body.update(extra_body or {})
    return ModelConfig(
        id=model_id,
        endpoints=urls,
        api_key=env.get("OPENAI_API_KEY") or "EMPTY",
        extra_body=body,
        alias=name if name in MODEL_ALIASES else "",
        **options,
    )


def resolve_model(
    model: str,
    *,
    task_endpoints: str | Sequence[str] | None = None,
    env: Mapping[str, str] = os.environ,
    timeout_s: float = 600.0,
    max_retries: int = 3,
    backoff_s: float = 1.0,
    extra_body: Mapping[str, Any] | None = None,
) -> ModelConfig:
    """Model name or alias + endpoints -> ModelConfig.

    Endpoints: ``task_endpoints`` (comma list), else env ``TASK_ENDPOINTS``, else
    ``VLLM_BASE_URL``. With none of them (or ``model == "local"``) the embedded local model is
    started and used, with one notice line on stderr. Key: env ``OPENAI_API_KEY`` else ``EMPTY``.
    """
    return _resolve(
        model, task_endpoints, env, TASK_ENDPOINT_ENV,
        timeout_s=timeout_s, max_retries=max_retries, backoff_s=backoff_s, extra_body=extra_body,
    )


def resolve_reflection_model(
    model: str,
    endpoints: str | Sequence[str] | None = None,
    env: Mapping[str, str] = os.environ,
    *,
    timeout_s: float = 600.0,
    max_retries: int = 3,
    backoff_s: float = 1.0,
    extra_body: Mapping[str, Any] | None = None,
) -> ModelConfig:
    """Like ``resolve_model`` for the optimizers' reflection model: endpoints from the argument,
    else ``REFLECTION_MODEL_BASE_URL``, else the task endpoints' variables, else local."""
    return _resolve(
        model, endpoints, env, REFLECTION_ENDPOINT_ENV,
        timeout_s=timeout_s, max_retries=max_retries, backoff_s=backoff_s, extra_body=extra_body,
    )


# ------------------------------------------------------------------------------------------------
# Failure classification


@dataclass(frozen=True, slots=True)
class Failure:
    kind: ErrorKind
    retryable: bool
    message: str
    retry_after_s: float | None = None


# Status codes that are not "transport, retry" (5xx) nor "the request was bad" (other 4xx).
_STATUS_RULES: Mapping[int, tuple[ErrorKind, bool]] = MappingProxyType(
    {
        408: (ErrorKind.INFRASTRUCTURE, True),  # request timeout
        409: (ErrorKind.INFRASTRUCTURE, True),  # conflict/lock: transient on OpenAI-style APIs
        429: (ErrorKind.INFRASTRUCTURE, True),  # rate limited / server saturated
        # Wrong key, forbidden, wrong URL or model id: the set-up's fault, but retrying won't help.
        401: (ErrorKind.INFRASTRUCTURE, False),
        403: (ErrorKind.INFRASTRUCTURE, False),
        404: (ErrorKind.INFRASTRUCTURE, False),
    }
)


def _one_line(text: object, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost exception (httpx wraps the OSError that says what really happened)."""
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        inner = exc.__cause__ or exc.__context__
        if inner is None:
            break
        exc = inner
    return exc


def _status_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    detail = ""
    if isinstance(body, Mapping):
        error = body.get("error", body)
        detail = error.get("message", "") if isinstance(error, Mapping) else str(error)
    return _one_line(detail or getattr(exc, "message", "") or exc)


def _retry_after(value: str | None) -> float | None:
    try:
        return min(max(float(value), 0.0), 60.0) if value is not None else None
    except ValueError:
        return None


def _status_failure(status: int, endpoint: str, exc: Any, retry_after: str | None) -> Failure:
    kind, retryable = _STATUS_RULES.get(
        status,
        (ErrorKind.INFRASTRUCTURE, True) if status >= 500 else (ErrorKind.MODEL, False),
    )
    message = f"HTTP {status} from {endpoint}: {_status_message(exc)}"
    return Failure(kind, retryable, message, _retry_after(retry_after) if retryable else None)


def _connection_failure(exc: BaseException, endpoint: str) -> Failure:
    import aiohttp

    cause = _root_cause(exc)
    reason = _one_line(cause) if cause is not exc else _one_line(exc) or "connection error"
    if isinstance(cause, ConnectionRefusedError) or isinstance(getattr(exc, "os_error", None), ConnectionRefusedError):
        reason = "connection refused"
    if isinstance(exc, aiohttp.ClientError) and not isinstance(exc, aiohttp.ClientConnectorError):
        # Connected, then the exchange broke (server hung up, truncated body).
        return Failure(ErrorKind.INFRASTRUCTURE, True, f"connection to {endpoint} broke: {reason}")
    return Failure(ErrorKind.INFRASTRUCTURE, True, f"cannot reach {endpoint}: {reason}")


def classify(exc: BaseException, endpoint: str, timeout_s: float) -> Failure | None:
    """Whose fault and whether to retry; None for exceptions that are bugs, not call failures.

    Covers both wires: LeanChatOpenAI's (``HTTPStatusFailure``, aiohttp errors, ``TimeoutError``)
    and the openai SDK's (streaming calls).
    """
    import aiohttp
    import openai

    from topologies.lean_openai import HTTPStatusFailure

    if isinstance(exc, HTTPStatusFailure):
        return _status_failure(exc.status, endpoint, exc, exc.retry_after)
    if isinstance(exc, openai.APIStatusError):
        return _status_failure(exc.status_code, endpoint, exc, exc.response.headers.get("retry-after"))
    if isinstance(exc, (openai.APITimeoutError, TimeoutError)):
        return Failure(ErrorKind.INFRASTRUCTURE, True, f"no answer from {endpoint} within {timeout_s:g} s")
    if isinstance(exc, (openai.APIConnectionError, aiohttp.ClientError)):
        return _connection_failure(exc, endpoint)
    if isinstance(exc, (openai.APIResponseValidationError, ValueError, KeyError, TypeError, IndexError)):
        # Raised while reading the response (not JSON, no choices, wrong shape): a broken or
        # overloaded server, so it counts as transport. Inputs are validated before the call.
        return Failure(
            ErrorKind.INFRASTRUCTURE, True,
            f"malformed response from {endpoint}: {type(exc).__name__}: {_one_line(exc, 200)}",
        )
    return None


# ------------------------------------------------------------------------------------------------
# The client


def strip_thinking(text: str) -> str:
    """Drop everything up to and including the last ``</think>``."""
    head, found, tail = text.rpartition(THINK_END)
    return tail.lstrip() if found else text


class _Endpoint:
    __slots__ = ("url", "in_flight", "cool_until", "failures")

    def __init__(self, url: str) -> None:
        self.url = url
        self.in_flight = 0
        self.cool_until = 0.0  # monotonic time before which the endpoint is avoided
        self.failures = 0  # consecutive transport failures


class OpenAIChatClient:
    """``ChatClient`` over one or more OpenAI-compatible endpoints (see module docstring).

    Safe to share between concurrent tasks and threads. One ``ChatOpenAI`` per endpoint is
    created per event loop (httpx connection pools cannot cross event loops, and programs that
    call ``asyncio.run`` repeatedly would otherwise reuse dead connections).
    """

    def __init__(self, config: ModelConfig, *, seed: int | None = None, route_salt: int | str | None = None) -> None:
        self.config = config
        self.model_id = config.id
        self._endpoints = [_Endpoint(url) for url in config.endpoints]
        self.router = make_router(config.routing, config.routing_options)
        # Ties start at a per-client endpoint, so that the jobs of a sweep (one client each) do
        # not all put their first sessions on the first endpoint: a number (the job's number in
        # its sweep) starts at that endpoint, modulo the pool; a string (a job id) at its hash;
        # by default the process id's.
        salt = route_salt if route_salt is not None else f"pid-{os.getpid()}"
        first = salt if isinstance(salt, int) else zlib.crc32(str(salt).encode())
        self._round_robin = itertools.count(first % max(1, len(self._endpoints)))
        self._lock = threading.Lock()
        self._usage: dict[str, Usage] = {}
        self._transport_failures = 0
        self._models: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Any]] = (
            weakref.WeakKeyDictionary()
        )
        self._jitter = random.Random(seed)

    # -- usage ledger -------------------------------------------------------------------------

    def usage_by_role(self) -> dict[str, Usage]:
        with self._lock:
            return dict(self._usage)

    def reset_usage(self) -> None:
        with self._lock:
            self._usage.clear()
            self._transport_failures = 0

    @property
    def transport_failures(self) -> int:
        """Failed attempts that were retried or ended as infrastructure errors (since reset)."""
        return self._transport_failures

    def _record(self, role: str, message: Any) -> None:
        meta = getattr(message, "usage_metadata", None) or {}
        usage = Usage(
            calls=1,
            prompt_tokens=int(meta.get("input_tokens", 0) or 0),
            completion_tokens=int(meta.get("output_tokens", 0) or 0),
            tool_calls=len(getattr(message, "tool_calls", None) or ()),
        )
        with self._lock:
            self._usage[role] = self._usage.get(role, Usage()) + usage

    # -- endpoints ------------------------------------------------------------------------------

    def _acquire(self, avoid: _Endpoint | None) -> _Endpoint:
        now = time.monotonic()
        with self._lock:
            start = next(self._round_robin) % len(self._endpoints)
            best: _Endpoint = self.router.pick(self._endpoints, start, avoid, now)
            best.in_flight += 1
            return best

    def _release(self, endpoint: _Endpoint, failed: bool) -> None:
        with self._lock:
            endpoint.in_flight -= 1
            if failed:
                endpoint.failures += 1
                self._transport_failures += 1
                cooldown = min(30.0, max(self.config.backoff_s, 0.05) * 2 ** min(endpoint.failures, 10))
                endpoint.cool_until = time.monotonic() + cooldown
            else:
                endpoint.failures = 0
                endpoint.cool_until = 0.0

    def _model_for(self, endpoint: _Endpoint) -> Any:
        loop = asyncio.get_running_loop()
        models = self._models.get(loop)
        if models is None:
            models = {}
            self._models[loop] = models
        model = models.get(endpoint.url)
        if model is None:
            model = self._build_model(endpoint.url)
            models[endpoint.url] = model
        return model

    def _build_model(self, url: str) -> Any:
        from langchain_openai._compat import httpx as sdk_httpx  # the httpx flavour openai uses

        from topologies.lean_openai import LeanChatOpenAI

        timeout = self.config.timeout_s
        # A proxy configured in the environment must not capture loopback servers.
        trust_env = not _is_loopback_url(url)
        # Our own pool per event loop; keep-alive sized for hundreds of concurrent calls. Plain
        # calls take LeanChatOpenAI's aiohttp wire; this pool serves streaming (LangGraph's
        # "messages" mode) through the SDK.
        http = sdk_httpx.AsyncClient(
            timeout=sdk_httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            limits=sdk_httpx.Limits(max_connections=2000, max_keepalive_connections=500),
            trust_env=trust_env,
        )
        return LeanChatOpenAI(
            trust_env=trust_env,
            model=self.config.id,
            base_url=url,
            api_key=self.config.api_key,
            timeout=timeout,
            max_retries=0,  # retries happen here, with classification and endpoint failover
            http_async_client=http,
            use_responses_api=False,
            cache=False,
            # LangGraph's "messages" stream mode makes ChatOpenAI stream; still ask for usage.
            stream_usage=True,
        )

    async def aclose(self) -> None:
        """Close the connection pools created in the running event loop."""
        models = self._models.pop(asyncio.get_running_loop(), {})
        for model in models.values():
            await model.aclose()

    # -- calls ----------------------------------------------------------------------------------

    def _request_options(self, decoding: Decoding) -> dict[str, Any]:
        options: dict[str, Any] = {"temperature": decoding.temperature, "top_p": decoding.top_p}
        if decoding.seed is not None:
            options["seed"] = decoding.seed
        body = dict(self.config.extra_body)
        if self.config.token_limit_field == "max_tokens":
            body["max_tokens"] = decoding.max_tokens
        else:
            options["max_tokens"] = decoding.max_tokens  # ChatOpenAI sends max_completion_tokens
        if body:
            options["extra_body"] = body
        return options

    def _backoff(self, attempt: int, failure: Failure) -> float:
        if failure.retry_after_s is not None:
            return failure.retry_after_s
        base = self.config.backoff_s * (2**attempt)
        return min(60.0, base * (0.5 + self._jitter.random()))

    async def complete(
        self,
        role: str,
        messages: Sequence[Any],
        *,
        decoding: Decoding,
        tools: Sequence[Any] = (),
        tool_choice: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> Any:
        from langchain_core.messages import convert_to_messages

        # Converted before any attempt: a bad message is our bug and must not look like a
        # transport failure.
        prompt = convert_to_messages(list(messages))
        options = self._request_options(decoding)
        if extra_body:  # this call's request fields win over the model's (e.g. thinking off)
            options["extra_body"] = {**options.get("extra_body", {}), **extra_body}
        attempts = self.config.max_retries + 1
        failure: Failure | None = None
        avoid: _Endpoint | None = None
        for attempt in range(attempts):
            endpoint = self._acquire(avoid)
            model = self._model_for(endpoint)
            runnable = model.bind_tools(list(tools), tool_choice=tool_choice) if tools else model
            failed = False
            try:
                # LeanChatOpenAI answers directly unless callbacks/tracing want to see the call
                message = await model.agenerate_direct(prompt, **getattr(runnable, "kwargs", {}), **options)
                if message is None:
                    message = await runnable.ainvoke(prompt, **options)
            except Exception as exc:  # noqa: BLE001 - classified below; bugs re-raised
                failure = classify(exc, endpoint.url, self.config.timeout_s)
                if failure is None:
                    raise
                failed = failure.kind is ErrorKind.INFRASTRUCTURE and failure.retryable
                if not failure.retryable:
                    raise ModelCallError(failure.message, failure.kind) from exc
            else:
                return self._finish(role, message, endpoint)
            finally:
                self._release(endpoint, failed)
            avoid = endpoint
            if attempt + 1 < attempts:
                await asyncio.sleep(self._backoff(attempt, failure))
        assert failure is not None
        suffix = f" (after {attempts} attempts)" if attempts > 1 else ""
        raise ModelCallError(failure.message + suffix, ErrorKind.INFRASTRUCTURE)

    def _finish(self, role: str, message: Any, endpoint: _Endpoint) -> Any:
        content = message.content
        if isinstance(content, str) and THINK_END in content:
            message = message.model_copy(update={"content": strip_thinking(content)})
        message.response_metadata["endpoint"] = endpoint.url
        self._record(role, message)
        return message


def make_client(config: ModelConfig, *, route_salt: int | str | None = None) -> OpenAIChatClient:
    """The ChatClient for a resolved model (``route_salt``: see ``OpenAIChatClient``)."""
    return OpenAIChatClient(config, route_salt=route_salt)
