"""A Hydra sweeper that asks Optuna for trials and hands them to the configured launcher.

Search space: the sweep overrides of the command line and ``hydra.sweeper.params``, in Hydra's
override grammar, each mapped to an Optuna distribution:

- ``a,b,c`` / ``choice(a,b,c)``         -> categorical (the values as typed)
- ``range(2,9)`` / ``range(2,9,2)``     -> integer (stop excluded, like Python); a float range is
                                           categorical over its values
- ``interval(0.1,1)``                   -> float; ``int(interval(1,8))`` -> integer;
  ``tag(log, interval(1e-3,1))``        -> log scale

Plain overrides (``budget=6``) go to every trial unchanged.

Storage and resume: ``storage`` (e.g. ``sqlite:///runs/optuna/optuna.db``; the folder is made)
with ``study_name`` loads an existing study, so the same command continues a study: ``n_trials``
is the study's target number of finished trials, and trials a killed sweep left RUNNING are marked
failed and enqueued again with the same parameters. One sweeper process per study at a time.

Trial folders: each entry of ``trial_overrides`` is added to every trial after ``{trial_key}`` is
replaced by a short hash of the trial's parameters (``runs_root=runs/optuna/NAME/{trial_key}``),
so a re-run of the same parameters lands in the same job folder and resumes it there. Hydra's
``hydra.job.num`` of a trial is its Optuna trial number.

Objective: the job's return value: a number, or a mapping with ``objective_key`` (default
``objective``), or a mapping with ``out`` (the job folder), whose ``selection.json`` gives the
validation score of the deployed prompts. A job that failed, was skipped or returned nothing
usable is a failed trial; the sweep goes on. Results go to ``optimization_results.yaml`` in the
sweep folder (best parameters and value, every trial's state).
"""

# No ``from __future__ import annotations`` here: Hydra's plugin scan executes this module without
# registering it in sys.modules, and dataclasses cannot resolve string annotations then (and
# OmegaConf reads the config dataclass's annotations as real types).
import hashlib
import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.errors import HydraException
from hydra.plugins.sweeper import Sweeper

log = logging.getLogger(__name__)
TARGET = "hydra_plugins.lcb_grid_optuna_sweeper.optuna_sweeper.OptunaSweeper"
DIRECTIONS = ("maximize", "minimize")


@dataclass
class SamplerConf:
    name: str = "tpe"  # tpe | random
    seed: Optional[int] = 0


@dataclass
class OptunaSweeperConf:
    _target_: str = TARGET
    study_name: Optional[str] = None
    storage: Optional[str] = None  # e.g. sqlite:///runs/optuna/optuna.db; None: in memory
    direction: str = "maximize"
    n_trials: int = 4
    n_jobs: int = 1  # trials handed to the launcher at once
    sampler: SamplerConf = field(default_factory=SamplerConf)
    params: Optional[Dict[str, str]] = None
    trial_overrides: List[str] = field(default_factory=list)
    objective_key: str = "objective"


ConfigStore.instance().store(group="hydra/sweeper", name="lcb_optuna", node=OptunaSweeperConf, provider="lcb-grid")


class SweepError(HydraException, ValueError):
    """A sweep that cannot run; the message is one line (a HydraException, so the app reports it
    as one ``error:`` line like any other configuration error)."""


# --------------------------------------------------------------------------- search space


@dataclass(frozen=True, slots=True)
class SearchSpace:
    distributions: Mapping[str, Any]  # key -> optuna distribution
    fixed: tuple[str, ...]  # overrides passed to every trial


def _number(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SweepError(f"expected a number, not {value!r}")
    return value


def distribution_for(override: Any) -> Any:
    """One sweep override -> an Optuna distribution (``SweepError`` for what cannot be tuned)."""
    from hydra.core.override_parser.types import IntervalSweep, RangeSweep
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    key = override.get_key_element()
    value = override.value()
    if override.is_choice_sweep():
        choices = list(override.sweep_string_iterator())
        if not choices:
            raise SweepError(f"{key}: no choices")
        return CategoricalDistribution(choices)
    if override.is_range_sweep():
        assert isinstance(value, RangeSweep)
        start, stop, step = value.start, value.stop, value.step
        if all(isinstance(v, int) and not isinstance(v, bool) for v in (start, stop, step)):
            if step <= 0 or stop - start < step:  # type: ignore[operator]
                raise SweepError(f"{key}: range({start},{stop},{step}) is empty or descending")
            high = start + ((stop - 1 - start) // step) * step  # type: ignore[operator]
            return IntDistribution(int(start), int(high), step=int(step))
        return CategoricalDistribution(list(override.sweep_string_iterator()))
    if override.is_interval_sweep():
        assert isinstance(value, IntervalSweep)
        low, high = _number(value.start), _number(value.end)
        log_scale = "log" in (value.tags or set())
        if low >= high:
            raise SweepError(f"{key}: interval({low},{high}) is empty")
        if isinstance(low, int) and isinstance(high, int):
            return IntDistribution(low, high, log=log_scale)
        return FloatDistribution(float(low), float(high), log=log_scale)
    raise SweepError(f"{key}: this sweep cannot be tuned by Optuna")


def search_space(overrides: Sequence[Any]) -> SearchSpace:
    distributions: dict[str, Any] = {}
    fixed: list[str] = []
    for override in overrides:
        if override.is_sweep_override():
            distributions[override.get_key_element()] = distribution_for(override)
        else:
            fixed.append(f"{override.get_key_element()}={override.get_value_element_as_str()}")
    if not distributions:
        raise SweepError("nothing to tune: give at least one sweep (e.g. 'method.train_batch_size=range(2,9)') "
                         "on the command line or in hydra.sweeper.params")
    return SearchSpace(distributions, tuple(fixed))


def trial_key(params: Mapping[str, Any]) -> str:
    """A short, stable name for a parameter set (its job folder under ``{trial_key}``)."""
    text = json.dumps({k: params[k] for k in sorted(params)}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _format(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    return str(value)


def trial_arguments(params: Mapping[str, Any], space: SearchSpace, templates: Sequence[str]) -> list[str]:
    key = trial_key(params)
    return [*space.fixed, *(f"{name}={_format(v)}" for name, v in params.items()),
            *(template.replace("{trial_key}", key) for template in templates)]


# --------------------------------------------------------------------------- objective


def objective_from_return(value: Any, objective_key: str = "objective") -> float:
    """A job's return value -> the number to optimize (``SweepError`` says why there is none)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, Mapping):
        if value.get(objective_key) is not None:
            number = float(value[objective_key])
        elif value.get("status") not in (None, "done", "completed"):
            raise SweepError(f"the job ended with status {value.get('status')!r}: "
                             f"{value.get('error') or value.get('reason') or ''}".rstrip(": "))
        elif value.get("out"):
            number = _deployed_validation_score(Path(str(value["out"])))
        else:
            raise SweepError(f"the job returned no {objective_key!r} and no job folder")
    else:
        raise SweepError(f"the job returned {type(value).__name__}, not a number or a mapping")
    if math.isnan(number):
        raise SweepError("the objective is NaN")
    return number


def _deployed_validation_score(folder: Path) -> float:
    from optimizers.protocol.report.tracking import deployed_prompts_score

    try:
        selection = json.loads((folder / "selection.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SweepError(f"no readable selection.json in {folder} ({type(exc).__name__})") from None
    score = deployed_prompts_score(selection)
    if score is None:
        raise SweepError(f"{folder}/selection.json has no validation score for the deployed prompts")
    return score


# --------------------------------------------------------------------------- the sweeper


SAMPLERS = {
    "tpe": lambda optuna, seed: optuna.samplers.TPESampler(seed=seed),
    "random": lambda optuna, seed: optuna.samplers.RandomSampler(seed=seed),
}


class OptunaSweeper(Sweeper):
    def __init__(
        self,
        study_name: str | None = None,
        storage: str | None = None,
        direction: str = "maximize",
        n_trials: int = 4,
        n_jobs: int = 1,
        sampler: Mapping[str, Any] | None = None,
        params: Mapping[str, str] | None = None,
        trial_overrides: Sequence[str] = (),
        objective_key: str = "objective",
    ) -> None:
        super().__init__()
        if direction not in DIRECTIONS:
            raise SweepError(f"hydra.sweeper.direction must be maximize or minimize, not {direction!r}")
        if n_trials < 1 or n_jobs < 1:
            raise SweepError("hydra.sweeper.n_trials and hydra.sweeper.n_jobs must be >= 1")
        sampler = dict(sampler or {})
        if sampler.get("name", "tpe") not in SAMPLERS:
            raise SweepError(f"hydra.sweeper.sampler.name must be one of {', '.join(SAMPLERS)}")
        self.study_name = study_name
        self.storage = storage
        self.direction = direction
        self.n_trials = n_trials
        self.n_jobs = n_jobs
        self.sampler = sampler
        self.params = dict(params or {})
        self.trial_overrides = list(trial_overrides)
        self.objective_key = objective_key
        self.hydra_context: Any = None
        self.config: Any = None
        self.launcher: Any = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context = hydra_context
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    # ---------------------------------------------------------------- study

    def _storage(self) -> Any:
        if not self.storage:
            return None
        prefix = "sqlite:///"
        if self.storage.startswith(prefix):
            Path(self.storage[len(prefix):]).expanduser().parent.mkdir(parents=True, exist_ok=True)
        return self.storage

    def _study(self) -> Any:
        import optuna

        sampler = SAMPLERS[self.sampler.get("name", "tpe")](optuna, self.sampler.get("seed"))
        return optuna.create_study(study_name=self.study_name, storage=self._storage(), sampler=sampler,
                                   direction=self.direction, load_if_exists=True)

    @staticmethod
    def _recover_stale(study: Any) -> int:
        """Trials a killed sweep left RUNNING: mark failed, enqueue their parameters again."""
        from optuna.trial import TrialState

        stale = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        done = [t.params for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
        for trial in stale:
            study.tell(trial.number, state=TrialState.FAIL)
            # (optuna's skip_if_exists would also match the failed trial itself, so check here)
            if trial.params and trial.params not in done:
                study.enqueue_trial(dict(trial.params))
        return len(stale)

    # ---------------------------------------------------------------- sweep

    def sweep(self, arguments: list[str]) -> Any:
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from optuna.trial import TrialState

        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        texts = [f"{key}={value}" for key, value in self.params.items()] + list(arguments)
        space = search_space(parser.parse_overrides(texts))
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)

        study = self._study()
        recovered = self._recover_stale(study)
        done_states = (TrialState.COMPLETE, TrialState.PRUNED)
        finished = len(study.get_trials(deepcopy=False, states=done_states))
        log.info("Optuna study %s (%s): %d finished trial(s)%s, target %d", study.study_name,
                 self.storage or "in memory", finished,
                 f", {recovered} interrupted trial(s) enqueued again" if recovered else "", self.n_trials)
        returns: list[Any] = []
        failures_in_a_row = 0
        while finished < self.n_trials:
            batch_size = min(self.n_jobs, self.n_trials - finished)
            trials = [study.ask(dict(space.distributions)) for _ in range(batch_size)]
            batch = [trial_arguments(t.params, space, self.trial_overrides) for t in trials]
            self.validate_batch_is_legal(batch)
            results = self.launcher.launch(batch, initial_job_idx=trials[0].number)
            returns.append(results)
            batch_failed = 0
            for trial, result in zip(trials, results):
                try:
                    value = objective_from_return(result.return_value, self.objective_key)
                except Exception as exc:  # noqa: BLE001 - a failed job is a failed trial, not a failed sweep
                    log.warning("trial %d failed: %s", trial.number, " ".join(str(exc).split())[:300])
                    study.tell(trial, state=TrialState.FAIL)
                    batch_failed += 1
                    continue
                study.tell(trial, value)
                finished += 1
                log.info("trial %d: %s -> %s", trial.number, trial.params, value)
            failures_in_a_row = failures_in_a_row + batch_failed if batch_failed == len(trials) else 0
            if failures_in_a_row >= max(3, self.n_jobs * 2):
                self._write_results(study, sweep_dir)
                raise SweepError(f"{failures_in_a_row} trials in a row failed; the sweep stops (see the errors above)")
        self._write_results(study, sweep_dir)
        return returns

    def _write_results(self, study: Any, sweep_dir: Path) -> None:
        import os
        import tempfile

        import yaml
        from optuna.trial import TrialState

        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        payload: dict[str, Any] = {
            "study_name": study.study_name,
            "storage": self.storage,
            "direction": self.direction,
            "n_trials": len(study.trials),
            "trials": [{"number": t.number, "state": t.state.name, "params": dict(t.params), "value": t.value}
                       for t in study.trials],
        }
        if complete:
            payload["best_params"] = dict(study.best_trial.params)
            payload["best_value"] = study.best_value
            payload["best_trial"] = study.best_trial.number
            log.info("best trial %d: %s -> %s", study.best_trial.number, study.best_trial.params, study.best_value)
        target = sweep_dir / "optimization_results.yaml"
        handle, temp = tempfile.mkstemp(dir=sweep_dir, prefix=".optimization_results.", suffix=".tmp")
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            yaml.safe_dump(payload, stream, sort_keys=False)
        os.replace(temp, target)
