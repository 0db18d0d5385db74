"""Garbage-collector settings for a process that runs batches of team runs.

Why: a batch creates short-lived messages, graph states and HTTP objects by the million on top of
a heap of some hundred thousand long-lived objects (LangChain, LangGraph, pydantic models, the
problems). With CPython's default thresholds the collector walks that long-lived heap again and
again: in a 128-row decentralized batch at 100 ms latency it took a quarter to a third of the
process's CPU, the resource that decides whether one process keeps a model server busy
(benchmarks/perf/team_throughput.py). So, once per process, at the start of the first batch:

- the team stack is imported and everything alive is collected, then frozen (``gc.freeze``): the
  collector no longer walks it;
- young collections run every 50,000 net container allocations instead of 700.

Reference counting still frees everything that is not in a reference cycle the moment it is
dropped; only cyclic garbage waits longer (bounded by the thresholds, a few MB in a batch). Frozen
objects that later become cyclic garbage are not reclaimed, which is why this happens once, not
per batch. ``LCB_GRID_GC=default`` keeps CPython's settings.
"""

from __future__ import annotations

import gc
import os

YOUNG_THRESHOLD = 50_000
OLDER_THRESHOLDS = (20, 20)

_settled = False


def settle_for_batches() -> bool:
    """Apply the batch settings (first call per process); True when they are in force."""
    global _settled
    if os.environ.get("LCB_GRID_GC", "").strip().lower() == "default":
        return False
    if not _settled:
        import topologies.teams.registry  # noqa: F401 - the modules every run needs, frozen with the rest
        import topologies.lean_openai  # noqa: F401

        gc.collect()
        gc.freeze()
        gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
        _settled = True
    return True
