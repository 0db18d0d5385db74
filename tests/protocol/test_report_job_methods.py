"""Every method, every topology: one scripted-world job per method (the ten, topologies taken in
turn, so each of the five appears), then the report of all ten with a page per job that tells its
story: candidates in order, the diff or the 'unchanged' line, one verdict row per test problem.

Slow (about 80 s on 2 cores, most of it MASPOB loading its encoder): ``pytest -m slow``.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "optimizers"))

from scripted_world import start_world, world_job_config  # noqa: E402

from optimizers.protocol.grid import cells  # noqa: E402
from optimizers.protocol.report import page as report  # noqa: E402
from optimizers.protocol.report.job_data import job_story  # noqa: E402
from optimizers.registry import BUILTIN_METHODS  # noqa: E402

pytestmark = pytest.mark.slow
# identity, the eight grid methods and random search (the test-only baselines search nothing:
# test_baselines_job.py)
METHODS = tuple(m for m in BUILTIN_METHODS if m not in cells.MATCHED_BASELINES)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    from optimizers.protocol.job.engine import JobRuntime, run_job

    root = tmp_path_factory.mktemp("methods")
    server = start_world(world="useful")
    try:
        for index, method in enumerate(METHODS):
            topology = cells.TOPOLOGIES[index % len(cells.TOPOLOGIES)]
            config = world_job_config(root / method, server.base_url, method=method, topology=topology,
                                      team_size=1 if topology == "single" else 2, budget=12)
            result = run_job(config, JobRuntime(retry_delay_s=0.0, client_max_retries=0, client_backoff_s=0.0))
            assert result["status"] == "completed", method
    finally:
        server.stop()
    yield root


def test_every_method_and_topology_gets_its_job_page(runs: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert len(METHODS) == 10 and set(cells.GRID_METHODS) < set(METHODS) and "random" in METHODS
    out = tmp_path / "report"
    assert report.main([str(runs), "--out", str(out), "--bootstrap", "100"]) == 0
    capsys.readouterr()
    summary = json.loads((out / "report.json").read_text())
    assert len(summary["job_pages"]) == len(METHODS)
    topologies = set()
    for method in METHODS:
        folder = runs / method
        story = job_story(folder)
        topologies.add(story.runtime.split("_", 1)[0])
        page = (out / summary["job_pages"][str(folder.resolve())]).read_text()
        for section in ("job-outcome", "job-curve", "job-candidates", "job-diff", "job-verdicts"):
            assert f'id="{section}"' in page, (method, section)
        assert story.candidates, method  # every method's evaluator journals its candidates
        rows = re.findall(r"<tr class=\"(?:deployed-row)?\"><td>\d+</td>", page)
        assert len(rows) == len(story.candidates), method
        if story.kept_seed:
            assert "<strong>unchanged</strong>" in page and story.fallback_reason in page, method
        else:
            assert '<table class="diff">' in page, method
        test = json.loads((folder / "test.json").read_text())
        assert len(story.verdicts) == len(test["example_ids"]), method
    assert topologies == set(cells.TOPOLOGIES)
