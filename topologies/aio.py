"""Where lcb-grid starts its event loops: uvloop where it is installed, asyncio otherwise.

Why: a batch or a job is one event loop carrying hundreds of model calls a second against a fast
server; uvloop's loop and sockets take a third to a half of asyncio's CPU per call, which is what
decides whether one process keeps the server busy (benchmarks/perf/team_throughput.py).
``LCB_GRID_EVENT_LOOP=asyncio`` falls back to the standard loop, e.g. to compare or debug.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def _uvloop() -> Any:
    if os.environ.get("LCB_GRID_EVENT_LOOP", "").strip().lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:  # not built for this platform (Windows): the standard loop does the same work
        return None
    return uvloop


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the fastest loop available."""
    uvloop = _uvloop()
    if uvloop is None:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A fresh loop for a thread of our own (the scripted server)."""
    uvloop = _uvloop()
    return uvloop.new_event_loop() if uvloop is not None else asyncio.new_event_loop()
