"""End to end: a multirun of identity jobs (scripted server, tracker=wandb, offline) gives one
offline W&B run per job, and the report built from that multirun renders in headless Chromium."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from report_fixtures import CHROMIUM, assert_rendered, screenshot  # noqa: E402
from tracking_support import job_overrides, run_app, team_script  # noqa: E402

from optimizers.protocol.report import page as report  # noqa: E402
from optimizers.protocol.report.tracking import offline_run_dirs, read_offline_run  # noqa: E402


def _wandb_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("wandb") is not None


@pytest.fixture(scope="module")
def multirun(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    from topologies.scripted import ScriptedServer

    root = tmp_path_factory.mktemp("multirun")
    with ScriptedServer(team_script()) as server:
        done = run_app(["-m", *job_overrides(server.base_url, root), "seed=0,1", "tracker=wandb"])
    assert done.returncode == 0, done.stderr[-2000:]
    yield root


@pytest.mark.skipif(not _wandb_installed(), reason="wandb is not installed (tracker=wandb needs it)")
def test_one_offline_wandb_run_per_job(multirun: Path) -> None:
    results = sorted(multirun.rglob("result.json"))
    assert len(results) == 2
    for path in results:
        result = json.loads(path.read_text())
        (run_dir,) = offline_run_dirs(path.parent)
        run = read_offline_run(run_dir)
        assert run.run["run_id"] == result["job_id"]
        assert run.run["job_type"] == "identity"
        assert run.run["run_group"] == "identity|single|scripted--team-model"
        assert f"seed:{result['seed']}" in run.run["tags"]
        assert run.config["seed"] == result["seed"] and run.config["method"]["name"] == "identity"
        assert run.summary["test/delta_pp"] == result["test"]["delta_pp"]
        assert run.table("tables/candidates")["data"]
        assert run.table("tables/learning_curve")["data"]
        assert any(a["type"] == "prompts" for a in run.artifacts)
        assert run.exit_code == 0


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_report_of_the_multirun_renders(multirun: Path, tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "report"
    code = report.main([str(multirun), "--out", str(out), "--include-nonconformant", "--seeds", "0,1",
                        "--bootstrap", "200"])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["jobs"] == 2
    dom = screenshot(out / "report.html", tmp_path / "shot.png")
    assert_rendered(dom, tmp_path / "shot.png")
    summary = json.loads((out / "report.json").read_text())
    (cell,) = summary["cells"]
    assert cell["method"] == "identity" and cell["complete"] and cell["delta_pp"] == 0.0
