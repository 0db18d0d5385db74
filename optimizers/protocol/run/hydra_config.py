"""Hydra's composed config -> ``JobConfig``, and the checks that must pass before a job folder exists.

``job_config(cfg)`` converts at once (no DictConfig below the entry point); ``check_job(job)``
raises ``ConfigError`` (one line, phrased for the person at the terminal) for anything that would
make the job fail before it could start: an unknown dataset, a team size no team has, an off-grid
cell without ``allow_any_cell``, a missing splits or data file, and so on.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from optimizers.protocol.grid import cells
from optimizers.protocol.grid.config import (
    PHASES,
    SELECTION_MODES,
    TEST_DESIGNS,
    JobConfig,
    ModelSpec,
    TestDesign,
    TrackerSpec,
)
from topologies.types import Decoding

DATA_SOURCES = ("hf", "builtin")


class ConfigError(ValueError):
    """A configuration that cannot run; the message is one line."""


def to_container(cfg: Any) -> dict[str, Any]:
    """The resolved config as plain Python data (a one-line error for a missing mandatory value)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue

    try:
        # A transfer job's seed comes from its source, so it may be left unset (???).
        data = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=not cfg.get("deploy_from"))
    except MissingMandatoryValue as exc:
        key = getattr(exc, "full_key", "") or "a value"
        raise ConfigError(f"{key} is required (e.g. {key}=... or --{key.replace('_', '-')} ...)") from None
    except InterpolationResolutionError as exc:
        raise ConfigError(f"cannot resolve {getattr(exc, 'full_key', 'the config')}: {exc.msg}") from None
    if not isinstance(data, dict):
        raise ConfigError("the composed config is not a mapping")
    data.pop("hydra", None)
    return data


TRACKER_KINDS = ("jsonl", "wandb")
TRACKER_MODES = ("offline", "online", "disabled")


# What a job cannot run without, and the flag that gives it.
REQUIRED = (("method", "--method NAME"), ("topology", "--topology NAME"), ("seed", "--seed N"))
FIRST_JOB = ("--method tavo --topology single --model local --seed 0 --data builtin --splits "
             "benchmarks/lcb/quickstart_splits.json --budget 6 --allow-any-cell")


def missing_required(cfg: Any) -> list[str]:
    """The flags of every required setting the composed config lacks (a group left null or ???)."""
    from omegaconf import OmegaConf

    if cfg.get("deploy_from"):  # a transfer job takes method, team and seed from its source
        return []
    return [flag for key, flag in REQUIRED
            if key not in cfg or OmegaConf.is_missing(cfg, key) or cfg.get(key) is None]


def job_config(cfg: Any) -> JobConfig:
    """Composed DictConfig -> JobConfig (a sweep job takes its endpoint from ``endpoint_pool``)."""
    from optimizers.protocol.run.endpoint_pool import EndpointPoolError, apply_endpoint_pool, hydra_job_num

    missing = missing_required(cfg)
    if len(missing) > 1:  # name them all at once (one missing setting gets its own message below)
        raise ConfigError(f"missing {', '.join(missing)}; a first job on the embedded model: {FIRST_JOB}")
    try:
        raw = apply_endpoint_pool(to_container(cfg), hydra_job_num())
    except EndpointPoolError as exc:
        raise ConfigError(str(exc)) from None
    return job_config_from_dict(raw)


def model_alias(model_id: str) -> str:
    """``qwen`` for ``Qwen/Qwen3.5-9B`` etc.; a path-safe slug for any other id."""
    return cells.model_key(model_id)


def resolve_model_name(name: str) -> str:
    """An alias (qwen, llama, local) -> its full id; anything else is taken as a full id."""
    return cells.MODEL_IDS.get(name, name)


def _group(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = raw.get(key)
    if not isinstance(value, Mapping):
        options = sorted(p.stem for p in (cells.CONF_DIR / key).glob("*.yaml"))
        raise ConfigError(
            f"{key} is required (--{key} NAME or {key}=NAME); available: {', '.join(options) or 'none'}"
        )
    return value


def _int(value: Any, key: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = int(str(value).strip())
        except ValueError:
            raise ConfigError(f"{key} must be an integer, not {value!r}") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{key} must be >= {minimum}, not {value}")
    return value


def _bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ConfigError(f"{key} must be true or false, not {value!r}")


def _str(value: Any, key: str) -> str:
    if value is None or isinstance(value, (Mapping, list, tuple)):
        raise ConfigError(f"{key} must be a string, not {value!r}")
    return str(value)


def _endpoints(value: Any, key: str) -> tuple[str, ...]:
    """A list, or a comma-separated string, of base URLs."""
    if value is None:
        return ()
    items: Sequence[Any] = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise ConfigError(f"{key} must be a list of URLs, not {value!r}")
    urls = tuple(str(item).strip() for item in items if str(item).strip())
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"{key}: {url!r} is not an http(s) URL")
    return urls


def _path(value: Any) -> Path | None:
    return None if value in (None, "") else Path(str(value))


def _capped(decoding: Decoding, cap: int | None) -> Decoding:
    return decoding if cap is None or decoding.max_tokens <= cap else dataclasses.replace(decoding, max_tokens=cap)


def _decoding(base: Decoding, value: Any, key: str) -> Decoding:
    if value is None:
        return base
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key} must be a mapping of decoding settings")
    known = {f.name for f in dataclasses.fields(Decoding)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ConfigError(f"{key}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return dataclasses.replace(base, **dict(value))


def _dataset(value: Any) -> str:
    name = _str(value, "dataset").lower()
    dataset = cells.DATASET_ALIASES.get(name)
    if dataset is None:
        raise ConfigError(f"unknown dataset {name!r}; this project runs lcb (alias livecodebench)")
    return dataset


def _topology(raw: Mapping[str, Any]) -> tuple[str, int, int, int]:
    topo = _group(raw, "topology")
    name = _str(topo.get("name"), "topology.name")
    if name not in cells.TOPOLOGIES:
        raise ConfigError(f"unknown topology {name!r}; expected one of {', '.join(cells.TOPOLOGIES)}")
    size = _int(topo.get("team_size", cells.default_team_size(name)), "topology.team_size")
    if name == "single" and size != 1:
        raise ConfigError(f"single is one agent (team size 1), not {size}")
    if name != "single" and size not in cells.TEAM_SIZES:
        sizes = ", ".join(map(str, cells.TEAM_SIZES))
        raise ConfigError(f"team size {size} is not one of {sizes} for the {name} team")
    rounds = _int(topo.get("rounds", JobConfig.__dataclass_fields__["rounds"].default), "topology.rounds", minimum=1)
    max_turns = topo.get("max_turns")
    turns = cells.default_max_turns(size) if max_turns is None else _int(max_turns, "topology.max_turns", minimum=1)
    return name, size, rounds, turns


def _selection(value: Any, defaults: Mapping[str, Any]) -> tuple[str, int]:
    """``selection: {mode: val|heldout, size: N}`` -> (mode, size)."""
    if value is None:
        return defaults["selection"], defaults["selection_size"]
    if not isinstance(value, Mapping):
        raise ConfigError("selection must be a mapping: {mode: val|heldout, size: N}")
    unknown = sorted(set(value) - {"mode", "size"})
    if unknown:
        raise ConfigError(f"selection: unknown setting(s) {', '.join(unknown)}; known: mode, size")
    mode = _str(value.get("mode", defaults["selection"]), "selection.mode")
    if mode not in SELECTION_MODES:
        raise ConfigError(f"selection.mode must be one of {', '.join(SELECTION_MODES)}, not {mode!r}")
    return mode, _int(value.get("size", defaults["selection_size"]), "selection.size", minimum=1)


_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_TEST_KEYS = ("design", "after", "before", "size", "samples", "val_samples", "temperature", "draw_seed")


def _date(value: Any, key: str, cutoff: str | None) -> str | None:
    """An ISO date (YYYY-MM-DD), or ``cutoff``: the model's training cutoff (conf/model)."""
    if value in (None, ""):
        return None
    text = str(value).strip()
    if text == "cutoff":
        if not cutoff:
            raise ConfigError(f"{key}=cutoff but the model has no training cutoff; set model.cutoff=YYYY-MM-DD "
                              "or give a date")
        text = str(cutoff).strip()
    if not _ISO_DATE.match(text):
        raise ConfigError(f"{key} must be an ISO date YYYY-MM-DD or 'cutoff', not {value!r}")
    return text


def parse_test_design(value: Any, cutoff: str | None) -> TestDesign:
    """``test: {design: lcb50|window, after, before, size, samples, val_samples, temperature}``."""
    if value is None:
        return TestDesign()
    if not isinstance(value, Mapping):
        raise ConfigError("test must be a mapping (test=lcb50 | test=window)")
    unknown = sorted(set(value) - set(_TEST_KEYS))
    if unknown:
        raise ConfigError(f"test: unknown setting(s) {', '.join(unknown)}; known: {', '.join(_TEST_KEYS)}")
    design = _str(value.get("design", "lcb50"), "test.design")
    if design not in TEST_DESIGNS:
        raise ConfigError(f"test.design must be one of {', '.join(TEST_DESIGNS)}, not {design!r}")
    after = _date(value.get("after"), "test.after", cutoff)
    before = _date(value.get("before"), "test.before", cutoff)
    size = value.get("size")
    temperature = value.get("temperature")
    if temperature is not None:
        try:
            temperature = float(temperature)
        except (TypeError, ValueError):
            raise ConfigError(f"test.temperature must be a number, not {temperature!r}") from None
        if temperature < 0:
            raise ConfigError(f"test.temperature must be >= 0, not {temperature}")
    result = TestDesign(
        design=design, after=after, before=before,
        size=None if size is None else _int(size, "test.size", minimum=1),
        samples=_int(value.get("samples", 1), "test.samples", minimum=1),
        val_samples=_int(value.get("val_samples", 1), "test.val_samples", minimum=1),
        temperature=temperature, draw_seed=_int(value.get("draw_seed", 0), "test.draw_seed", minimum=0))
    if design == "lcb50" and (after or before or result.size is not None):
        raise ConfigError("test.after/before/size select a window: use test=window")
    if design == "window" and after and before and after >= before:
        raise ConfigError(f"test.after {after} is not before test.before {before}: the window is empty")
    return result


def sampled_decoding(decoding: Decoding, design: TestDesign) -> Decoding:
    """The evaluation decoding under a test design: its temperature, and samples need one > 0."""
    if design.temperature is not None:
        decoding = dataclasses.replace(decoding, temperature=design.temperature)
    if max(design.samples, design.val_samples) > 1 and decoding.temperature <= 0:
        raise ConfigError(f"test.samples={design.samples} / test.val_samples={design.val_samples} needs an "
                          "evaluation temperature above 0: greedy samples are copies (set test.temperature, "
                          "e.g. 0.2 as LiveCodeBench does with 10 samples)")
    return decoding


def job_config_from_dict(raw: Mapping[str, Any]) -> JobConfig:
    """Plain config data (as composed from conf/) -> JobConfig; ``ConfigError`` on bad values."""
    defaults = {f.name: f.default for f in dataclasses.fields(JobConfig)}
    deploy_from = _path(raw.get("deploy_from"))
    # A transfer job is its source job on another model: method, knobs, team, seed and budget
    # come from the source's job.json; this config contributes the model (and how to run).
    source = _source_spec(deploy_from) if deploy_from is not None else None
    if source is not None:
        _refuse_other_method_or_seed(raw, source, deploy_from)
        method = {"name": source["method"], **(source.get("method_params") or {})}
        if isinstance(raw.get("topology"), Mapping):
            # This job's topology when one is given (the source's prompts must fit its roles;
            # the job refuses them in one line when they do not), else the source's.
            topology, team_size, rounds, max_turns = _topology(raw)
        else:
            topology, team_size = str(source["topology"]), int(source["team_size"])
            rounds, max_turns = int(source["rounds"]), int(source["max_turns"])
        communication = str(source["communication"])
    else:
        method = _group(raw, "method")
        topology, team_size, rounds, max_turns = _topology(raw)
        communication = _str(_group(raw, "communication").get("name"), "communication.name")
    method_name = _str(method.get("name"), "method.name")
    if communication not in cells.COMMUNICATIONS:
        raise ConfigError(f"unknown communication {communication!r}; expected {', '.join(cells.COMMUNICATIONS)}")

    model_cfg = _group(raw, "model")
    model_id = _str(model_cfg.get("id"), "model.id").strip()
    if not model_id:
        raise ConfigError("model.id is empty")
    cutoff = _date(model_cfg.get("cutoff"), "model.cutoff", None)
    model = ModelSpec(model_alias(model_id), model_id, _endpoints(raw.get("task_endpoints"), "task_endpoints"),
                      cutoff)
    design = parse_test_design(raw.get("test"), cutoff)
    reflection_cfg = _group(raw, "reflection")
    reflection = ModelSpec(
        "reflection",
        resolve_model_name(_str(reflection_cfg.get("id"), "reflection.id")),
        _endpoints(reflection_cfg.get("endpoints"), "reflection.endpoints"),
    )
    tracker_cfg = dict(_group(raw, "tracker"))
    try:
        tracker = TrackerSpec(**tracker_cfg)
    except TypeError as exc:
        raise ConfigError(f"tracker: {exc}") from None
    if tracker.kind not in TRACKER_KINDS:
        raise ConfigError(f"tracker.kind must be one of {', '.join(TRACKER_KINDS)}, not {tracker.kind!r}")
    if tracker.mode not in TRACKER_MODES:
        raise ConfigError(f"tracker.mode must be one of {', '.join(TRACKER_MODES)}, not {tracker.mode!r}")

    seed = int(source["seed"]) if source is not None else _int(raw.get("seed"), "seed", minimum=0)
    budget = int(source["budget"]) if source is not None else _int(raw.get("budget", defaults["budget"]), "budget")
    if budget <= 0:
        raise ConfigError(f"budget must be a positive number of rollouts, not {budget}")
    phase = _str(raw.get("phase", "all"), "phase")
    if phase not in PHASES:
        raise ConfigError(f"unknown phase {phase!r}; expected one of {', '.join(PHASES)}")
    log_level = _str(raw.get("log_level", "INFO"), "log_level").upper()
    if not isinstance(logging.getLevelName(log_level), int):
        raise ConfigError(f"unknown log level {log_level!r}; expected DEBUG, INFO, WARNING or ERROR")
    max_tests = raw.get("optimize_max_tests", defaults["optimize_max_tests"])
    decoding = raw.get("decoding") or {}
    if not isinstance(decoding, Mapping):
        raise ConfigError("decoding must be a mapping with optimize / eval / reflection")

    # A model's yaml may bound its replies (``max_tokens``), e.g. the embedded model, whose whole
    # context is 8192 tokens: asking it for 8192 more makes every rambling reply run to the end.
    cap = model_cfg.get("max_tokens")
    output_cap = None if cap is None else _int(cap, "model.max_tokens", minimum=1)

    selection_mode, selection_size = _selection(raw.get("selection"), defaults)
    condition = cells.Condition(topology, team_size, communication, model.alias)
    out = _path(raw.get("out"))
    if out is None:
        runs_root: str | Path = _str(raw.get("runs_root", "runs"), "runs_root")
        if deploy_from is not None:  # a transfer job never lands in an ordinary job's folder
            runs_root = Path(runs_root) / "transfer" / f"from-{cells.model_key(str(source['model']))}"
        out = cells.job_dir(runs_root, method_name, condition, seed)
    return JobConfig(
        method=method_name,
        topology=topology,
        model=model,
        seed=seed,
        out=out,
        dataset=_dataset(raw.get("dataset", "lcb")),
        team_size=team_size,
        communication=communication,
        rounds=rounds,
        max_turns=max_turns,
        registry_key=condition.registry_key,
        reflection=reflection,
        method_params={k: v for k, v in method.items() if k != "name"},
        budget=budget,
        phase=phase,
        allow_any_cell=_bool(raw.get("allow_any_cell", False), "allow_any_cell"),
        data=_str(raw.get("data", "hf"), "data"),
        release=_str(raw.get("release", defaults["release"]), "release"),
        splits=_path(raw.get("splits")),
        evaluation_cache=_path(raw.get("evaluation_cache")),
        concurrency=_int(raw.get("concurrency", defaults["concurrency"]), "concurrency", minimum=1),
        optimize_max_tests=None if max_tests is None else _int(max_tests, "optimize_max_tests", minimum=1),
        optimize_decoding=_capped(
            _decoding(defaults["optimize_decoding"], decoding.get("optimize"), "decoding.optimize"), output_cap),
        eval_decoding=sampled_decoding(
            _capped(_decoding(defaults["eval_decoding"], decoding.get("eval"), "decoding.eval"), output_cap), design),
        reflection_decoding=_capped(
            _decoding(defaults["reflection_decoding"], decoding.get("reflection"), "decoding.reflection"),
            output_cap if reflection.id == model.id else None,
        ),
        max_infrastructure_retries=_int(
            raw.get("max_infrastructure_retries", defaults["max_infrastructure_retries"]),
            "max_infrastructure_retries",
            minimum=0,
        ),
        selection=selection_mode,
        selection_size=selection_size,
        test=design,
        force_resume=_bool(raw.get("force_resume", False), "force_resume"),
        deploy_from=deploy_from,
        tracker=tracker,
        quiet=_bool(raw.get("quiet", False), "quiet"),
        verbose=_bool(raw.get("verbose", False), "verbose"),
        log_level=log_level,
    )


def _refuse_other_method_or_seed(raw: Mapping[str, Any], source: Mapping[str, Any], folder: Path) -> None:
    """A transfer job tests the source's prompts with the source's method record and seed (the
    pairing is on the same problems and seeds): a different --method or --seed is a mistake."""
    method = raw.get("method")
    name = method.get("name") if isinstance(method, Mapping) else None
    if name is not None and name != source["method"]:
        raise ConfigError(f"deploy_from {folder}: the source job ran {source['method']}, not {name} "
                          "(leave --method out: a transfer job takes the source's)")
    seed = raw.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool) and seed != int(source["seed"]):
        raise ConfigError(f"deploy_from {folder}: the source job ran seed {source['seed']}, not {seed} "
                          "(leave --seed out: a transfer job is paired on the source's seed)")


def _source_spec(folder: Path) -> Mapping[str, Any]:
    """The spec in a transfer job's source folder (its job.json)."""
    import json

    try:
        spec = json.loads((folder / "job.json").read_text(encoding="utf-8"))["spec"]
        picked = {key: spec[key] for key in ("method", "method_params", "topology", "team_size", "rounds",
                                             "max_turns", "communication", "seed", "budget", "model")}
    except (OSError, ValueError, KeyError, TypeError):
        raise ConfigError(f"deploy_from {folder}: not a job folder (no readable job.json)") from None
    if spec.get("deploy_from"):
        raise ConfigError(f"deploy_from {folder}: the source is itself a transfer job")
    return picked


def check_job(job: JobConfig, standing: cells.Conformance | None = None) -> None:
    """Everything that can be refused before the job folder is created (``ConfigError``).
    ``standing``: the job's conformance when the caller computed it already."""
    _check_method(job.method)
    _check_method_params(job.method, job.method_params)
    standing = standing or cells.conformance(job)
    if not standing.in_grid and not job.allow_any_cell:
        raise ConfigError(f"{standing.why_not_in_grid}; pass --allow-any-cell (allow_any_cell=true) to run it, "
                          "non-conformant")
    _check_data(job)
    if job.out.exists() and not job.out.is_dir():
        raise ConfigError(f"out {job.out} exists and is not a folder")


def _check_method(name: str) -> None:
    from optimizers.registry import available_methods

    known = available_methods()
    if name not in known:
        raise ConfigError(f"unknown method {name!r}; available: {', '.join(known)}")


def _check_method_params(name: str, params: Mapping[str, Any]) -> None:
    """A typo in a method knob is refused here, not after the job folder exists."""
    from optimizers.registry import MethodUnavailable, get_optimizer_class

    try:
        check = getattr(get_optimizer_class(name), "check_params", None)
    except MethodUnavailable as exc:
        raise ConfigError(str(exc)) from None
    if check is None:
        return
    try:
        check(params)
    except (ValueError, TypeError) as exc:
        raise ConfigError(str(exc)) from None


def _check_data(job: JobConfig) -> None:
    if job.data not in DATA_SOURCES and not Path(job.data).is_file():
        raise ConfigError(f"data {job.data!r} is neither hf, builtin nor an existing file")
    if job.data == "builtin":
        return  # the built-in sample set carries its own fixed split
    from lcb.data import SPLITS_FILE, load_split_ids
    from lcb.errors import LcbError

    path = job.splits or SPLITS_FILE
    if not path.is_file():
        raise ConfigError(f"splits file not found: {path}")
    try:
        load_split_ids(path)
    except LcbError as exc:
        raise ConfigError(str(exc)) from None
