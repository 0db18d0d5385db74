"""Suite-wide settings: no test may reach the network or a real W&B/HF service."""

from __future__ import annotations

import os

for _name, _value in {
    "WANDB_MODE": "offline",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_OFFLINE_MODE": "true",
    # The batch GC settings (topologies/heap.py) are process-wide; the suite runs many batches in
    # one process and keeps CPython's defaults. test_heap.py checks them in subprocesses.
    "LCB_GRID_GC": "default",
}.items():
    os.environ.setdefault(_name, _value)
# Endpoints from a developer's shell must not leak into tests: each test names its own server.
for _name in ("TASK_ENDPOINTS", "VLLM_BASE_URL", "REFLECTION_MODEL_BASE_URL", "LANGSMITH_TRACING"):
    os.environ.pop(_name, None)
