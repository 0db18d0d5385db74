"""conf/ composes for every group option; flags and overrides give the same JobConfig."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml

from optimizers.protocol.grid import cells
from optimizers.protocol.grid_command import cli as grid
from optimizers.protocol.grid.config import JobConfig
from optimizers.protocol.run.hydra_config import ConfigError, check_job, job_config
from optimizers.protocol.run.app import UsageError, to_overrides

CONF = Path(__file__).resolve().parents[2] / "conf"
BASE = ["method=identity", "topology=centralized", "seed=0"]


def compose_job(overrides: Sequence[str]) -> JobConfig:
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=list(overrides))
    return job_config(cfg)


def from_argv(argv: Sequence[str]) -> JobConfig:
    return compose_job(to_overrides(argv))


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def test_every_missing_required_setting_is_named_at_once() -> None:
    with pytest.raises(ConfigError) as caught:
        compose_job(["method=tavo"])
    message = str(caught.value)
    assert message.startswith("missing --topology NAME, --seed N; a first job on the embedded model: --method")
    with pytest.raises(ConfigError, match="^seed is required"):
        compose_job(["method=tavo", "topology=single"])


@pytest.mark.parametrize("method", options("method"))
def test_every_method_composes(method: str) -> None:
    job = compose_job([f"method={method}", "topology=centralized", "seed=0"])
    assert job.method == method
    # The knobs as composed are the file's own values (no interpolation), so a job run with the
    # defaults is conformant as far as its method is concerned.
    assert not [r for r in cells.conformance(job).reasons if "method knobs" in r]


@pytest.mark.parametrize("topology", options("topology"))
def test_every_topology_composes(topology: str) -> None:
    job = compose_job(["method=identity", f"topology={topology}", "seed=1"])
    assert job.topology == topology
    assert job.team_size == cells.default_team_size(topology)
    assert job.registry_key == topology
    assert job.max_turns == cells.default_max_turns(job.team_size)


@pytest.mark.parametrize("communication", options("communication"))
def test_every_communication_composes(communication: str) -> None:
    assert compose_job([*BASE, f"communication={communication}"]).communication == communication


@pytest.mark.parametrize("model", options("model"))
def test_every_model_composes(model: str) -> None:
    extra = ["model.id=org/some-model"] if model == "custom" else []
    job = compose_job([*BASE, f"model={model}", *extra])
    assert job.model.id == ("org/some-model" if model == "custom" else cells.MODEL_IDS[model])
    # The embedded models reflect for themselves, so a local job needs no other server.
    expected_reflection = job.model.id if model.startswith("local") else cells.CONFORMANT_REFLECTION_MODEL
    assert job.reflection.id == expected_reflection


@pytest.mark.parametrize("tracker", options("tracker"))
def test_every_tracker_composes(tracker: str) -> None:
    assert compose_job([*BASE, f"tracker={tracker}"]).tracker.kind == tracker


@pytest.mark.parametrize("experiment", options("experiment"))
def test_every_experiment_composes(experiment: str) -> None:
    assert compose_job([*BASE, f"experiment={experiment}"]).method == "identity"


def test_model_files_agree_with_the_alias_table() -> None:
    for alias, model_id in cells.MODEL_IDS.items():
        data = yaml.safe_load((CONF / "model" / f"{alias}.yaml").read_text())
        assert (data["alias"], data["id"]) == (alias, model_id)


def test_defaults_are_the_protocol_constants() -> None:
    job = compose_job(["method=identity", "topology=centralized", "seed=0"])
    defaults = {f.name: f.default for f in dataclasses.fields(JobConfig) if f.default is not dataclasses.MISSING}
    for name in ("budget", "phase", "data", "release", "concurrency", "optimize_max_tests", "optimize_decoding",
                 "eval_decoding", "reflection_decoding", "max_infrastructure_retries", "reflection", "splits",
                 "evaluation_cache", "allow_any_cell", "quiet", "verbose", "log_level", "dataset", "tracker"):
        assert getattr(job, name) == defaults[name], name
    assert job.out == Path("runs/identity/lcb/centralized/qwen/0")
    assert cells.conformance(job).conformant


MISSION_FLAGS = [
    "--method", "identity", "--dataset", "lcb", "--topology", "decentralized", "--model", "qwen",
    "--seed", "2", "--out", "runs/x/y", "--team-size", "8", "--communication", "structured_soft",
    "--budget", "6", "--phase", "validate", "--allow-any-cell", "--task-endpoints",
    "http://127.0.0.1:8000/v1,http://127.0.0.1:8001/v1", "--evaluation-cache", "cache dir",
    "--data", "builtin", "--release", "release_v6", "--quiet", "--log-level", "debug", "--rounds", "3",
    "--concurrency", "16", "--reflection-model", "local", "--reflection-endpoints=http://127.0.0.1:8200/v1",
]
MISSION_OVERRIDES = [
    "method=identity", "dataset=lcb", "topology=decentralized", "model=qwen", "seed=2", "out=runs/x/y",
    "topology.team_size=8", "communication=structured_soft", "budget=6", "phase=validate",
    "allow_any_cell=true", "task_endpoints=[http://127.0.0.1:8000/v1,http://127.0.0.1:8001/v1]",
    "evaluation_cache='cache dir'", "data=builtin", "release=release_v6", "quiet=true", "log_level=DEBUG",
    "topology.rounds=3", "concurrency=16", "reflection.id=qwen2.5-coder-0.5b-instruct",
    "reflection.endpoints=[http://127.0.0.1:8200/v1]",
]


def test_flag_form_equals_override_form() -> None:
    by_flags = from_argv(MISSION_FLAGS)
    assert by_flags == compose_job(MISSION_OVERRIDES)
    assert by_flags.team_size == 8 and by_flags.rounds == 3 and by_flags.budget == 6
    assert by_flags.model.endpoints == ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8001/v1")
    assert by_flags.reflection.endpoints == ("http://127.0.0.1:8200/v1",)
    assert by_flags.evaluation_cache == Path("cache dir")
    assert by_flags.registry_key == "decentralized_r8_communications_structured_soft"
    assert by_flags.allow_any_cell and by_flags.quiet and by_flags.log_level == "DEBUG"


def test_registry_keys_resolve_to_topology_size_and_format() -> None:
    job = from_argv(["--method", "identity", "--topology", "centralized_r8", "--seed", "0"])
    assert (job.topology, job.team_size, job.communication) == ("centralized", 8, "freeform")
    job = from_argv(["method=identity", "topology=decentralized_communications_structured_soft", "seed=0"])
    assert (job.topology, job.team_size, job.communication) == ("decentralized", 4, "structured_soft")
    assert job.registry_key == "decentralized_communications_structured_soft"
    # Saying the same thing twice is fine.
    assert from_argv(["--method", "identity", "--topology", "sequential_r2", "--team-size", "2",
                      "--seed", "0"]).team_size == 2


@pytest.mark.parametrize(
    "argv",
    [
        ["--method", "identity", "--topology", "centralized_r8", "--team-size", "4", "--seed", "0"],
        ["method=identity", "topology=centralized_r8", "topology.team_size=2", "seed=0"],
        ["--method", "identity", "--topology", "decentralized_communications_structured_soft",
         "--communication", "freeform", "--seed", "0"],
        ["-m", "method=identity", "topology=centralized_r8,decentralized", "seed=0"],
    ],
)
def test_flags_contradicting_a_registry_key_fail(argv: list[str]) -> None:
    with pytest.raises(UsageError):
        to_overrides(argv)


def test_full_model_ids() -> None:
    job = from_argv(["--method", "identity", "--topology", "single", "--seed", "0", "--model", "org/Some-Model"])
    assert (job.model.id, job.model.alias) == ("org/Some-Model", "org--Some-Model")
    assert job.out == Path("runs/identity/lcb/single/org--Some-Model/0")
    job = from_argv([*BASE, "model=meta-llama/Llama-3.1-8B-Instruct"])
    assert job.model.alias == "llama"
    job = compose_job([*BASE, "model=qwen", "model.id=other/model"])
    assert job.model.alias == "other--model"
    with pytest.raises(UsageError, match="unknown model"):
        to_overrides([*BASE, "--model", "qwenn"])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["method=identity", "seed=0"], "topology is required"),
        (["method=identity", "topology=single"], "seed is required"),
        ([*BASE, "budget=0"], "budget must be a positive"),
        ([*BASE, "budget=-3"], "budget must be a positive"),
        ([*BASE, "topology.team_size=3"], "team size 3 is not one of"),
        (["method=identity", "topology=single", "seed=0", "topology.team_size=4"], "single is one agent"),
        ([*BASE, "dataset=gpqa"], "unknown dataset"),
        ([*BASE, "phase=deploy"], "unknown phase"),
        ([*BASE, "seed=-1"], "seed must be >= 0"),
        ([*BASE, "task_endpoints=[localhost:8000]"], "not an http"),
        ([*BASE, "model=custom"], "model.id is required"),
    ],
)
def test_bad_values_are_one_line_config_errors(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        compose_job(overrides)
    assert "\n" not in str(info.value)


def test_dataset_alias() -> None:
    assert compose_job([*BASE, "dataset=livecodebench"]).dataset == "lcb"


def test_unknown_flags_and_group_options_fail_before_hydra() -> None:
    with pytest.raises(UsageError, match="unknown option --bogus"):
        to_overrides([*BASE, "--bogus", "1"])
    with pytest.raises(UsageError, match="unknown method 'nope'; available: .*identity"):
        to_overrides(["--method", "nope"])
    with pytest.raises(UsageError, match="unknown topology"):
        to_overrides(["-m", "method=identity", "topology=single,ring"])
    with pytest.raises(UsageError, match="needs a value"):
        to_overrides(["--seed"])
    with pytest.raises(UsageError, match="rounds does not apply to the centralized team"):
        to_overrides(["--method", "identity", "--topology", "centralized", "--rounds", "3"])


def test_hydra_options_pass_through() -> None:
    assert to_overrides(["-m", "--cfg", "job", "--seed", "0,1,2", "--quiet"]) == [
        "-m", "--cfg", "job", "seed=0,1,2", "quiet=true"
    ]


def test_the_grid_sweeps_are_exactly_the_grid() -> None:
    """conf/experiment/lcb_grid*.yaml launch every grid job once and nothing else."""
    launched: list[tuple[str, cells.Condition, int]] = []
    for path in grid.experiment_files():
        launched.extend(grid.sweep_jobs(path))
    expected = [(cell.method, cell.condition, seed) for cell, seed in cells.grid_jobs()]
    assert len(launched) == len(set(launched)) == 396
    assert set(launched) == set(expected)


def test_a_model_reply_cap_bounds_every_phase_of_that_model() -> None:
    local = compose_job(["method=identity", "topology=single", "seed=0", "model=local"])
    assert (local.optimize_decoding.max_tokens, local.eval_decoding.max_tokens,
            local.reflection_decoding.max_tokens) == (1024, 1024, 1024)
    smaller = compose_job(["method=identity", "topology=single", "seed=0", "model=local",
                           "decoding.eval.max_tokens=300"])
    assert smaller.eval_decoding.max_tokens == 300  # a cap never raises an explicit choice
    other_reflector = compose_job(["method=identity", "topology=single", "seed=0", "model=local",
                                   "reflection.id=org/big-model"])
    assert other_reflector.reflection_decoding.max_tokens == 48000  # the cap is the task model's
    qwen = compose_job(["method=identity", "topology=single", "seed=0"])
    # The reference's per-phase limits (spec 1.7) for a served model.
    assert (qwen.optimize_decoding.max_tokens, qwen.eval_decoding.max_tokens,
            qwen.reflection_decoding.max_tokens) == (32768, 32768, 48000)


def test_selection_rule_and_force_resume_come_from_flags_or_overrides() -> None:
    default = compose_job(["method=gepa", "topology=centralized", "seed=0"])
    assert (default.selection, default.force_resume) == ("val", False)
    held = from_argv(["--method", "gepa", "--topology", "centralized", "--seed", "0", "--selection", "heldout",
                      "--selection-size", "10", "--force-resume"])
    assert (held.selection, held.selection_size, held.force_resume) == ("heldout", 10, True)
    with pytest.raises(ConfigError, match="selection.mode must be one of val, heldout"):
        compose_job(["method=gepa", "topology=centralized", "seed=0", "selection.mode=sideways"])
    with pytest.raises(ConfigError, match="selection.size must be >= 1"):
        compose_job(["method=gepa", "topology=centralized", "seed=0", "selection.mode=heldout", "selection.size=0"])


def test_selection_is_a_config_group() -> None:
    assert options("selection") == ["heldout", "val"]
    held = compose_job(["method=gepa", "topology=centralized", "seed=0", "selection=heldout"])
    assert (held.selection, held.selection_size) == ("heldout", 25)
    sized = compose_job(["method=gepa", "topology=centralized", "seed=0", "selection=heldout", "selection.size=7"])
    assert (sized.selection, sized.selection_size) == ("heldout", 7)
    assert compose_job(["method=gepa", "topology=centralized", "seed=0", "selection=val"]).selection == "val"
    with pytest.raises(UsageError, match="unknown selection 'sideways'; available: heldout, val"):
        to_overrides(["method=gepa", "topology=centralized", "seed=0", "selection=sideways"])


def test_the_old_selection_spelling_still_works_with_one_notice(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--method", "gepa", "--topology", "centralized", "--seed", "0"]
    new = from_argv([*argv, "selection=heldout", "selection.size=9"])
    assert capsys.readouterr().err == ""
    old = from_argv([*argv, "selection.mode=heldout", "selection.size=9"])
    assert old == new
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("note: selection.mode=heldout is deprecated")
    assert "write selection=heldout" in err
    # A sweep over the old key becomes a sweep over the group.
    assert to_overrides(["selection.mode=val,heldout"]) == ["selection=val,heldout"]


def test_check_job_judges_the_standing_the_app_computed_once() -> None:
    job = compose_job([*BASE, "data=builtin"])
    standing = cells.conformance(job)
    assert standing.in_grid and standing.why_not_in_grid == ""
    check_job(job, standing)
    off = dataclasses.replace(standing, in_grid=False, reasons=("the caller's reason",))
    with pytest.raises(ConfigError, match="^the caller's reason; pass --allow-any-cell"):
        check_job(job, off)  # the given record is used, not recomputed
