"""The README's main job: the demo runs on the embedded model with no server configured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

import topologies.local_model as local_model

REPO = Path(__file__).resolve().parents[2]
READY = all(find_spec(name) is not None for name in local_model.PART_MODULES) and local_model.llama_cpp_available()


@pytest.mark.slow
@pytest.mark.skipif(not READY, reason="the embedded model is not set up (bash scripts/setup.sh)")
def test_single_demo_runs_on_the_embedded_model_without_a_server() -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("TASK_ENDPOINTS", "VLLM_BASE_URL", "OPENAI_API_KEY", "REFLECTION_MODEL_BASE_URL")}
    proc = subprocess.run([sys.executable, "-m", "topologies.single.lcb.langgraph_lcb", "--max-tokens", "512"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "using the embedded local model" in proc.stderr
    # Both demo problems were asked and graded; the model's answers may be right or wrong.
    assert "=== demo_stdin" in proc.stderr and "=== demo_functional" in proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["n"] == 2 and summary["model"] == "local"
    assert summary["infrastructure_errors"] == 0 and summary["model_calls"] >= 2
