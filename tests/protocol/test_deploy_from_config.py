"""``--deploy-from`` on the run command and the lcb_transfer sweep's job list, composed from conf/
(no model call): a transfer job takes method, team and seed from its source job folder, lands in
its own folder, honours a topology given for it, and refuses a different method or seed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from optimizers.journal import write_sealed
from optimizers.protocol.run.app import _finished_jobs, to_overrides
from optimizers.protocol.run.hydra_config import ConfigError, job_config

CONF = Path(__file__).resolve().parents[2] / "conf"


def source_job(folder: Path, **spec: Any) -> Path:
    values = {"method": "gepa", "method_params": {"minibatch_size": 3}, "topology": "sequential", "team_size": 4,
              "rounds": 2, "max_turns": 9, "communication": "freeform", "seed": 2, "budget": 600,
              "model": "Qwen/Qwen3.5-9B"}
    values.update(spec)
    folder.mkdir(parents=True)
    (folder / "job.json").write_text(json.dumps({"job_id": "src", "spec": values}))
    return folder


def compose(argv: list[str]) -> Any:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return job_config(hydra_compose(config_name="config", overrides=to_overrides(argv)))


def test_a_transfer_job_takes_method_team_and_seed_from_its_source(tmp_path: Path) -> None:
    source = source_job(tmp_path / "src")
    job = compose(["--deploy-from", str(source), "--model", "llama", "--runs-root", str(tmp_path / "runs")])
    assert job.deploy_from == source
    assert (job.method, job.topology, job.team_size, job.seed, job.budget) == ("gepa", "sequential", 4, 2, 600)
    assert job.method_params["minibatch_size"] == 3
    assert job.model.id == "meta-llama/Llama-3.1-8B-Instruct"
    # Its own folder, never the ordinary job's of the target condition.
    assert job.out.relative_to(tmp_path / "runs").parts[:2] == ("transfer", "from-qwen")


def test_a_topology_given_for_the_transfer_job_is_its_own(tmp_path: Path) -> None:
    source = source_job(tmp_path / "src")
    job = compose(["--deploy-from", str(source), "--topology", "sequential", "--team-size", "8"])
    assert (job.topology, job.team_size) == ("sequential", 8)


@pytest.mark.parametrize("argv, message", [
    (["--method", "mipro"], "the source job ran gepa, not mipro"),
    (["--seed", "0"], "the source job ran seed 2, not 0"),
])
def test_a_different_method_or_seed_is_one_clear_error(tmp_path: Path, argv: list[str], message: str) -> None:
    source = source_job(tmp_path / "src")
    with pytest.raises(ConfigError, match=message):
        compose(["--deploy-from", str(source), *argv])
    assert compose(["--deploy-from", str(source), "--method", "gepa", "--seed", "2"]).method == "gepa"


def test_a_folder_without_a_job_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="not a job folder"):
        compose(["--deploy-from", str(tmp_path / "empty")])


def _result(folder: Path, **extra: Any) -> None:
    folder.mkdir(parents=True)
    write_sealed(folder / "result.json", {"status": "completed", "cell": {"method": "gepa"}, **extra})


def test_the_transfer_sweep_lists_every_finished_job_with_prompts(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _result(runs / "gepa" / "a")
    _result(runs / "mipro" / "b")
    _result(runs / "self_consistency" / "c", matched={"n": 4})  # a baseline has no prompts of its own
    _result(runs / "transfer" / "from-qwen" / "d", cell={"method": "gepa", "transfer_from": {"model": "x"}})
    _result(runs / "failed" / "e", status="failed")
    (runs / "broken").mkdir()
    (runs / "broken" / "result.json").write_text("{")
    assert _finished_jobs(str(runs)).split(",") == [str((runs / "gepa" / "a").resolve()),
                                                    str((runs / "mipro" / "b").resolve())]
    with pytest.raises(ConfigError, match="no finished job"):
        _finished_jobs(str(tmp_path / "nothing"))
