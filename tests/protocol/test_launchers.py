"""Launchers: a 2-job sweep through submitit_local and through joblib completes; endpoint pools
spread N jobs over M servers."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tracking_support import job_overrides, run_app, team_script  # noqa: E402

from optimizers.protocol.run.endpoint_pool import (  # noqa: E402
    EndpointPoolError,
    apply_endpoint_pool,
    endpoint_for_job,
)


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    from topologies.scripted import ScriptedServer

    with ScriptedServer(team_script()) as srv:
        yield srv


def _results(root: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(root.rglob("result.json"))]


@pytest.mark.parametrize("launcher", ["submitit_local", "joblib"])
def test_a_two_job_sweep_completes(launcher: str, server: Any, tmp_path: Path) -> None:
    extra = ["hydra.launcher.n_jobs=2"] if launcher == "joblib" else ["hydra.launcher.timeout_min=5"]
    done = run_app(["-m", f"hydra/launcher={launcher}", *extra, *job_overrides(server.base_url, tmp_path),
                    "seed=0,1"])
    assert done.returncode == 0, done.stderr[-2000:]
    results = _results(tmp_path)
    assert sorted(r["seed"] for r in results) == [0, 1]
    assert all(r["status"] == "completed" for r in results)
    if launcher == "submitit_local":
        assert list(tmp_path.glob(".hydra/multirun/*/.submitit/*"))  # submitit ran the jobs
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if launcher == "joblib":  # joblib workers print into the parent's stdout
        assert len(lines) == 2


def test_endpoint_for_job_round_robins() -> None:
    pool = ["http://a:8000/v1", "http://b:8000/v1"]
    assert [endpoint_for_job(pool, n) for n in range(5)] == [pool[0], pool[1], pool[0], pool[1], pool[0]]
    assert endpoint_for_job(pool, None) == pool[0]
    with pytest.raises(EndpointPoolError, match="empty"):
        endpoint_for_job([], 0)
    with pytest.raises(EndpointPoolError, match="not an http"):
        endpoint_for_job(["ftp://x"], 0)


def test_apply_endpoint_pool_fills_only_missing_endpoints() -> None:
    raw = {"endpoint_pool": ["http://a/v1", "http://b/v1", "http://c/v1"], "task_endpoints": []}
    assert apply_endpoint_pool(raw, 4)["task_endpoints"] == ["http://b/v1"]
    assert apply_endpoint_pool({**raw, "task_endpoints": ["http://x/v1"]}, 4)["task_endpoints"] == ["http://x/v1"]
    assert apply_endpoint_pool({"endpoint_pool": "http://a/v1,http://b/v1"}, 1)["task_endpoints"] == ["http://b/v1"]
    assert apply_endpoint_pool({"task_endpoints": []}, 3) == {"task_endpoints": []}


def _joblib_launcher_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("hydra_plugins.hydra_joblib_launcher") is not None


@pytest.mark.skipif(not _joblib_launcher_installed(), reason="hydra-joblib-launcher is not installed")
def test_four_jobs_share_two_servers(tmp_path: Path) -> None:
    from topologies.scripted import ScriptedServer

    with ScriptedServer(team_script()) as first, ScriptedServer(team_script()) as second:
        overrides = [o for o in job_overrides(first.base_url, tmp_path) if not o.startswith("task_endpoints")]
        done = run_app(["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *overrides, "seed=0,1,2,3",
                        f"endpoint_pool=[{first.base_url},{second.base_url}]"])
        assert done.returncode == 0, done.stderr[-2000:]
        assert first.request_count > 0 and second.request_count > 0
    assert len(_results(tmp_path)) == 4
