"""The batch GC settings: applied once per process by the runner and jobs, opt-out by env."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import gc, json
from topologies.heap import settle_for_batches
before = gc.get_threshold()
first = settle_for_batches()
frozen = gc.get_freeze_count()
second = settle_for_batches()
print(json.dumps({"before": before, "after": gc.get_threshold(), "first": first, "second": second,
                  "frozen": frozen, "frozen_after_second": gc.get_freeze_count()}))
"""


def _probe(gc_setting: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "LCB_GRID_GC"}
    if gc_setting is not None:
        env["LCB_GRID_GC"] = gc_setting
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    return json.loads(done.stdout)


def test_batch_settings_freeze_the_loaded_heap_once_and_raise_the_young_threshold():
    seen = _probe(None)
    assert seen["first"] is True and seen["second"] is True
    assert seen["after"] == [50_000, 20, 20] and seen["before"] != seen["after"]
    # the team stack was imported before the freeze, so its objects are out of the collector's walk
    assert seen["frozen"] > 50_000
    assert seen["frozen_after_second"] == seen["frozen"]  # once per process, not per batch


def test_default_setting_keeps_cpython_gc():
    seen = _probe("default")
    assert seen["first"] is False
    assert seen["after"] == seen["before"]
    assert seen["frozen"] == 0
