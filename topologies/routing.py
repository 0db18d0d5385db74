"""Which endpoint a model call goes to, when a model has several.

Two policies, registered by name (``ModelConfig.routing``):

- ``least_in_flight``: every call to the endpoint with the fewest calls in flight (round robin
  among equals). Balanced, but one team's turns scatter over the pool, and a server with
  automatic prefix caching (vLLM, SGLang) then prefills the same growing conversation again on
  every server it lands on.
- ``affinity`` (default): every call of one *routing session* — one team run on one problem, all
  roles and turns (``run_team`` opens it) — goes to the endpoint the session started on, so its
  prefix stays in one server's cache. A new session starts on the endpoint with the fewest live
  sessions (then the fewest calls in flight), so sessions stay balanced. When the session's
  endpoint is overloaded — its calls in flight exceed ``max(affinity_min_in_flight,
  affinity_load_factor x the pool's mean)`` — the call spills to the least-loaded endpoint and the
  session moves there (its prefix is cached where it last ran). Calls outside any session (an
  optimizer's reflection calls) route least-in-flight. Load-blind affinity is what collapses hit
  rates and throughput elsewhere; the bound keeps it load-aware.

Across the jobs of a sweep each job balances its own sessions over the whole pool; ties are
broken from a per-client rotation so that small jobs do not all start on the first endpoint.
"""

from __future__ import annotations

import contextvars
import math
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol


class RoutingSession:
    """The identity of one team run; compared by identity. Ends when nothing refers to it."""

    __slots__ = ("label", "__weakref__")

    def __init__(self, label: str = "") -> None:
        self.label = label

    def __repr__(self) -> str:
        return f"RoutingSession({self.label!r})"


_CURRENT: contextvars.ContextVar[RoutingSession | None] = contextvars.ContextVar(
    "lcb_grid_routing_session", default=None
)


@contextmanager
def routing_session(label: str = "") -> Iterator[RoutingSession]:
    """Every model call made inside (including tasks started inside: asyncio copies the context,
    so LangGraph's parallel nodes inherit it) belongs to one new session."""
    session = RoutingSession(label)
    token = _CURRENT.set(session)
    try:
        yield session
    finally:
        _CURRENT.reset(token)


def current_session() -> RoutingSession | None:
    return _CURRENT.get()


class Endpoint(Protocol):
    url: str
    in_flight: int
    cool_until: float


@dataclass(frozen=True, slots=True)
class RoutingOptions:
    """When a session's endpoint counts as overloaded. A model server batches dozens of requests
    without slowing much, so the floor is high (SGLang's cache-aware router balances only past
    an absolute gap of 32 as well): a team's parallel agents landing on one server together are
    normal, not overload."""

    affinity_load_factor: float = 2.0
    affinity_min_in_flight: int = 32

    def __post_init__(self) -> None:
        if self.affinity_load_factor < 1.0:
            raise ValueError("affinity_load_factor must be >= 1")
        if self.affinity_min_in_flight < 1:
            raise ValueError("affinity_min_in_flight must be >= 1")


class Router(Protocol):
    def pick(self, endpoints: Sequence[Any], start: int, avoid: Any, now: float) -> Any: ...


def _least_loaded(endpoints: Sequence[Any], start: int, avoid: Any, now: float,
                  extra: Callable[[Any], Any] = lambda e: 0, sessions_first: bool = False) -> Any:
    count = len(endpoints)
    best, best_key = None, None
    for offset in range(count):
        endpoint = endpoints[(start + offset) % count]
        load = (extra(endpoint), endpoint.in_flight) if sessions_first else (endpoint.in_flight, extra(endpoint))
        key = (endpoint is avoid, endpoint.cool_until > now, *load)
        if best_key is None or key < best_key:
            best, best_key = endpoint, key
    return best


class LeastInFlight:
    """Per call: the endpoint with the fewest calls in flight (avoiding the one that just failed
    and endpoints cooling down after failures)."""

    def __init__(self, options: RoutingOptions) -> None:
        self.options = options

    def pick(self, endpoints: Sequence[Any], start: int, avoid: Any, now: float) -> Any:
        return _least_loaded(endpoints, start, avoid, now)


class SessionAffinity:
    """Per session: stay on one endpoint while it is not overloaded (see the module docstring).
    Called under the client's lock."""

    def __init__(self, options: RoutingOptions) -> None:
        self.options = options
        # Sessions end when their team run ends (nothing refers to them any more).
        self._bound: weakref.WeakKeyDictionary[RoutingSession, Any] = weakref.WeakKeyDictionary()
        self._sent: dict[int, int] = {}  # calls routed to each endpoint (by id), for tie-breaks
        self.spills = 0

    def sessions_on(self, endpoint: Any) -> int:
        return sum(1 for bound in self._bound.values() if bound is endpoint)

    def _limit(self, endpoints: Sequence[Any]) -> int:
        mean = (sum(e.in_flight for e in endpoints) + 1) / len(endpoints)
        return max(self.options.affinity_min_in_flight, math.ceil(self.options.affinity_load_factor * mean))

    def pick(self, endpoints: Sequence[Any], start: int, avoid: Any, now: float) -> Any:
        chosen = self._pick(endpoints, start, avoid, now)
        self._sent[id(chosen)] = self._sent.get(id(chosen), 0) + 1
        return chosen

    def _pick(self, endpoints: Sequence[Any], start: int, avoid: Any, now: float) -> Any:
        session = current_session()
        if session is None:
            return _least_loaded(endpoints, start, avoid, now)
        bound = self._bound.get(session)
        if bound is not None and bound is not avoid and bound.cool_until <= now:
            if bound.in_flight < self._limit(endpoints):
                return bound
            self.spills += 1
            chosen = _least_loaded(endpoints, start, avoid, now)
        else:
            # A new session: the endpoint with the fewest live sessions; among equals the one that
            # was sent the fewest calls so far (sessions differ in length: a debate of four peers
            # makes more calls than a manager and its workers).
            counts: dict[int, int] = {}
            for endpoint in self._bound.values():
                counts[id(endpoint)] = counts.get(id(endpoint), 0) + 1
            chosen = _least_loaded(endpoints, start, avoid, now,
                                   lambda e: (counts.get(id(e), 0), self._sent.get(id(e), 0)), sessions_first=True)
        self._bound[session] = chosen
        return chosen


ROUTERS: Mapping[str, Callable[[RoutingOptions], Router]] = MappingProxyType(
    {"least_in_flight": LeastInFlight, "affinity": SessionAffinity}
)


def make_router(name: str, options: RoutingOptions | None = None) -> Router:
    try:
        factory = ROUTERS[name]
    except KeyError:
        raise ValueError(f"unknown routing {name!r}; expected one of {', '.join(ROUTERS)}") from None
    return factory(options or RoutingOptions())
