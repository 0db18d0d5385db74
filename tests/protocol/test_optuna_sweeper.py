"""hydra/sweeper=optuna (our plugin on optuna 5): search-space mapping, the objective, and a real
4-trial sweep of the app that resumes from its SQLite study."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tracking_support import REPO, job_overrides, run_app, team_script  # noqa: E402

try:
    import hydra_plugins.lcb_grid_optuna_sweeper  # noqa: F401 - installed with the project (pyproject packages)
except ModuleNotFoundError:  # an install that predates hydra_plugins* in pyproject: use the checkout
    sys.path.insert(0, str(REPO))

# Hydra's plugin scan re-executes plugin modules in place (new class objects under the same
# names), so look names up on the module at use time rather than binding them at import.
import hydra_plugins.lcb_grid_optuna_sweeper.optuna_sweeper as sweeper  # noqa: E402


def _space(*texts: str) -> Any:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return sweeper.search_space(OverridesParser.create().parse_overrides(list(texts)))


def test_overrides_map_to_optuna_distributions() -> None:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    space = _space("method.batch=range(2,9,2)", "method.lr=tag(log, interval(0.001, 1.0))",
                   "method.k=int(interval(1, 8))", "method.style=a,b", "budget=6")
    assert space.distributions["method.batch"] == IntDistribution(2, 8, step=2)
    assert space.distributions["method.lr"] == FloatDistribution(0.001, 1.0, log=True)
    assert space.distributions["method.k"] == IntDistribution(1, 8)
    assert space.distributions["method.style"] == CategoricalDistribution(["a", "b"])
    assert space.fixed == ("budget=6",)
    with pytest.raises(sweeper.SweepError, match="nothing to tune"):
        _space("budget=6")
    with pytest.raises(sweeper.SweepError, match="empty"):
        _space("method.k=range(5,5)")


def test_trial_arguments_name_a_folder_per_parameter_set() -> None:
    space = _space("method.k=range(1,4)", "budget=6")
    args = sweeper.trial_arguments({"method.k": 2}, space, ["runs_root=r/{trial_key}"])
    assert args == ["budget=6", "method.k=2", f"runs_root=r/{sweeper.trial_key({'method.k': 2})}"]
    assert sweeper.trial_key({"a": 1, "b": 2}) == sweeper.trial_key({"b": 2, "a": 1}) != sweeper.trial_key({"a": 2, "b": 2})


def test_objective_from_job_returns(tmp_path: Path) -> None:
    assert sweeper.objective_from_return(0.5) == 0.5
    assert sweeper.objective_from_return({"status": "done", "objective": 0.75}) == 0.75
    (tmp_path / "selection.json").write_text(json.dumps({
        "selected_candidate": "incumbent", "incumbent_validation_score": 0.6, "baseline_validation_score": 0.4}))
    assert sweeper.objective_from_return({"status": "done", "out": str(tmp_path)}) == 0.6
    with pytest.raises(sweeper.SweepError, match="status 'error'"):
        sweeper.objective_from_return({"status": "error", "error": "no server"})
    with pytest.raises(sweeper.SweepError, match="no readable selection.json"):
        sweeper.objective_from_return({"status": "done", "out": str(tmp_path / "missing")})
    with pytest.raises(sweeper.SweepError, match="NaN"):
        sweeper.objective_from_return(float("nan"))


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    from topologies.scripted import ScriptedServer

    with ScriptedServer(team_script()) as srv:
        yield srv


def _study(storage: str, name: str) -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name=name, storage=storage)


def test_a_four_trial_sweep_completes_and_resumes(server: Any, tmp_path: Path) -> None:
    from optuna.trial import TrialState

    storage = f"sqlite:///{tmp_path / 'optuna' / 'optuna.db'}"
    sweep = ["-m", "hydra/sweeper=optuna", *job_overrides(server.base_url, tmp_path), "seed=0",
             "concurrency=range(1,9)", "hydra.sweeper.sampler.name=random", "hydra.sweeper.sampler.seed=3",
             "hydra.sweeper.study_name=tune-test", f"hydra.sweeper.storage={storage}"]
    first = run_app([*sweep, "hydra.sweeper.n_trials=4"])
    assert first.returncode == 0, first.stderr[-2000:]
    study = _study(storage, "tune-test")
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(complete) == 4
    # the objective is the validation score of the deployed prompts, as the job sealed it
    folders = {p.parent for p in (tmp_path / "optuna" / "tune-test").rglob("selection.json")}
    assert 1 <= len(folders) <= 4  # one job folder per distinct parameter set
    scores = set()
    for folder in folders:
        selection = json.loads((folder / "selection.json").read_text())
        scores.add(selection["baseline_validation_score"])
    assert {t.value for t in complete} == scores
    results = yaml.safe_load(next(tmp_path.glob(".hydra/multirun/*/optimization_results.yaml")).read_text())
    assert results["best_value"] == max(scores) and results["study_name"] == "tune-test"

    # a killed sweep leaves a RUNNING trial behind: the next run fails it and re-runs its parameters
    tried = {t.params["concurrency"] for t in complete}
    untried = next(value for value in range(1, 9) if value not in tried)
    study.enqueue_trial({"concurrency": untried})
    stale = study.ask({"concurrency": complete[0].distributions["concurrency"]})
    assert stale.params == {"concurrency": untried}
    second = run_app([*sweep, "hydra.sweeper.n_trials=6"])
    assert second.returncode == 0, second.stderr[-2000:]
    trials = _study(storage, "tune-test").trials
    assert [t.state for t in trials[:4]] == [TrialState.COMPLETE] * 4  # the first run's trials are kept
    assert trials[stale.number].state == TrialState.FAIL
    assert len([t for t in trials if t.state == TrialState.COMPLETE]) == 6
    assert any(t.params == stale.params and t.state == TrialState.COMPLETE for t in trials[stale.number + 1:])

    third = run_app([*sweep, "hydra.sweeper.n_trials=6"])  # the target is met: nothing to run
    assert third.returncode == 0 and "Launching" not in third.stderr
    assert len(_study(storage, "tune-test").trials) == len(trials)


def test_pip_check_is_clean() -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=120,
                          cwd=REPO, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    import optuna

    assert tuple(int(p) for p in optuna.__version__.split(".")[:2]) >= (3, 4)


def test_a_sweep_without_a_search_space_is_one_error_line(tmp_path: Path) -> None:
    done = run_app(["-m", "hydra/sweeper=optuna", *job_overrides("http://127.0.0.1:9/v1", tmp_path), "seed=0"])
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("error: nothing to tune")
    assert "Traceback" not in done.stderr
