"""The README's quick start, as written: an optimization job on the embedded model and the built-in
problems in which the method proposes a candidate and tests it, ending with the job folder and the
command that renders its report, which then renders (slow: minutes on the embedded model)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

import topologies.local_model as local_model

REPO = Path(__file__).resolve().parents[2]
READY = all(find_spec(name) is not None for name in local_model.PART_MODULES) and local_model.llama_cpp_available()


def readme_quickstart() -> list[str]:
    """The job command of the README's first code block (``bash scripts/setup.sh && <job>``)."""
    block = re.search(r"```bash\n(.*?)```", (REPO / "README.md").read_text(encoding="utf-8"), flags=re.S)
    assert block is not None, "the README has no bash block"
    command = block.group(1).replace("\\\n", " ")
    setup, _, job = command.partition("&&")
    assert setup.split() == ["bash", "scripts/setup.sh"], "the first command is the set-up"
    return shlex.split(job)


def test_the_quickstart_is_an_optimization_job_on_the_embedded_model() -> None:
    argv = readme_quickstart()
    assert argv[:3] == [".venv/bin/python", "-m", "optimizers.protocol.run"]
    flags = dict(zip(argv[3::2], argv[4::2]))
    assert flags["--model"] == "local" and flags["--data"] == "builtin"
    assert flags["--method"] != "identity"  # a method that proposes candidates


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(not READY, reason="the embedded model is not set up (bash scripts/setup.sh)")
def test_the_quickstart_proposes_and_tests_a_candidate_and_its_report_renders(tmp_path: Path) -> None:
    argv = readme_quickstart()
    argv[0] = sys.executable  # the same interpreter, wherever this checkout's venv lives
    env = {k: v for k, v in os.environ.items()
           if k not in ("TASK_ENDPOINTS", "VLLM_BASE_URL", "OPENAI_API_KEY", "REFLECTION_MODEL_BASE_URL")}
    done = subprocess.run([*argv, "--runs-root", str(tmp_path / "runs")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=1700)
    assert done.returncode == 0, done.stderr[-3000:]
    closing = done.stderr.strip().splitlines()[-2:]
    assert closing[0].startswith("job folder: ") and closing[1].startswith("its report: ")
    folder = Path(shlex.split(closing[0][len("job folder: "):])[0])
    result = json.loads((folder / "result.json").read_text())
    proposals = result["optimization"]["proposals"]
    assert proposals["candidates_evaluated"] >= 1 and proposals["rollouts"] >= 1
    assert result["optimization"]["budget"]["infrastructure_failures"] == 0
    report = shlex.split(closing[1][len("its report: "):])
    report[0] = sys.executable
    rendered = subprocess.run(report, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert rendered.returncode == 0, rendered.stderr[-2000:]
    html = (folder / "report" / "report.html").read_text()
    assert "NON-CONFORMANT" in html and 'id="panel-delta_heatmap"' in html
