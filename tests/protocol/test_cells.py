"""The LCB grid: registry keys, counts (computed by hand below), membership and conformance."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from optimizers.protocol.grid import cells
from optimizers.protocol.grid.config import JobConfig, ModelSpec


def _job(**overrides: object) -> JobConfig:
    values: dict[str, object] = {
        "method": "gepa",
        "topology": "centralized",
        "model": ModelSpec("qwen", "Qwen/Qwen3.5-9B"),
        "seed": 0,
        "out": Path("runs/x"),
    }
    values.update(overrides)
    # The method's knobs as conf/method/<method>.yaml sets them (none when it has no file yet).
    values.setdefault("method_params", dict(cells.method_defaults(str(values["method"])) or {}))
    return JobConfig(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("topology", "size", "communication", "key"),
    [
        ("centralized", 4, "freeform", "centralized"),
        ("single", 1, "freeform", "single"),
        ("centralized", 8, "freeform", "centralized_r8"),
        ("decentralized", 4, "structured_soft", "decentralized_communications_structured_soft"),
        ("sequential", 2, "semi_structured", "sequential_r2_communications_semi_structured"),
    ],
)
def test_registry_key_round_trip(topology: str, size: int, communication: str, key: str) -> None:
    assert cells.registry_key(topology, size, communication) == key
    parts = cells.parse_registry_key(key)
    assert parts.topology == topology
    assert (parts.team_size or cells.default_team_size(topology)) == size
    assert (parts.communication or "freeform") == communication


@pytest.mark.parametrize("bad", ["ring", "centralized_r", "centralized_communications_json", "r8", ""])
def test_unknown_registry_keys_are_refused(bad: str) -> None:
    with pytest.raises(cells.CellError, match="unknown topology"):
        cells.parse_registry_key(bad)


def test_grid_counts_match_the_tables_worked_out_by_hand() -> None:
    counts = cells.grid_counts()
    # methods: 8 methods x 4 multi-agent topologies = 32
    # single: gepa, mipro = 2
    # communication: 4 baselines x 4 topologies x 2 new formats = 32 new (48 asked, 16 shared with methods)
    # team_size: 4 baselines x 4 topologies x 3 new sizes = 48 new (64 asked)
    # llama: gepa, mipro on 5 topologies + mapro, maspo on 4 = 18
    assert counts["per_table"] == {"methods": 32, "single": 2, "communication": 48, "team_size": 64, "llama": 18}
    assert counts["configurations"] == 32 + 2 + 32 + 48 + 18 == 132
    assert counts["jobs"] == 396
    assert counts["per_model"] == {"qwen": 114, "llama": 18}
    assert counts["per_method"] == {"gepa": 30, "mipro": 30, "mapro": 28, "maspo": 28,
                                    "hivemind": 4, "mamut_gepa": 4, "maspob": 4, "tavo": 4}
    # conditions: qwen: single + 4 base + 4x2 formats + 4x3 sizes = 25; llama: single + 4 = 5
    assert counts["conditions"] == 30
    assert len(set(cells.grid())) == len(cells.grid())


def test_shared_cells_carry_every_table_that_asks_for_them() -> None:
    base = cells.find_cell("gepa", cells.Condition("centralized", 4, "freeform", "qwen"))
    assert base is not None and base.tables == ("methods", "communication", "team_size")
    assert cells.find_cell("tavo", cells.Condition("single", 1, "freeform", "qwen")) is None
    assert cells.find_cell("mapro", cells.Condition("single", 1, "freeform", "llama")) is None
    assert cells.find_cell("tavo", cells.Condition("centralized", 8, "freeform", "qwen")) is None


def test_grid_membership_and_identity() -> None:
    assert cells.grid_membership(_job())[0]
    in_grid, _, why = cells.grid_membership(_job(method="tavo", team_size=8))
    assert not in_grid and "not a grid cell" in why
    assert not cells.grid_membership(_job(seed=3))[0]
    # identity may run on any condition a grid cell uses, never on one no cell uses.
    assert cells.grid_membership(_job(method="identity", team_size=10))[0]
    assert cells.grid_membership(_job(method="identity", topology="single", team_size=1,
                                      model=ModelSpec("llama", "meta-llama/Llama-3.1-8B-Instruct")))[0]
    assert not cells.grid_membership(_job(method="identity", team_size=8,
                                          model=ModelSpec("llama", "meta-llama/Llama-3.1-8B-Instruct")))[0]


def test_conformance_needs_the_protocols_settings() -> None:
    assert cells.conformance(_job()).conformant
    assert not cells.conformance(_job(budget=4)).conformant
    off = cells.conformance(_job(method="tavo", team_size=8, budget=4))
    assert not off.in_grid and len(off.reasons) == 2
    assert not cells.conformance(_job(data="builtin")).conformant
    assert not cells.conformance(_job(reflection=ModelSpec("reflection", "other/model"))).conformant
    eval_decoding = replace(JobConfig.__dataclass_fields__["eval_decoding"].default, temperature=0.5)
    assert not cells.conformance(_job(eval_decoding=eval_decoding)).conformant
    assert not cells.conformance(_job(max_turns=5)).conformant
    assert cells.conformance(_job(team_size=2, max_turns=13)).conformant


def test_method_knobs_off_their_yaml_are_not_conformant() -> None:
    assert cells.conformance(_job(method="identity")).conformant
    changed = cells.conformance(_job(method="identity", method_params={"extra": 1}))
    assert not changed.conformant and "extra" in changed.reasons[-1]


def test_model_keys() -> None:
    assert cells.model_key("Qwen/Qwen3.5-9B") == "qwen"
    assert cells.model_key("qwen2.5-coder-0.5b-instruct") == "local"
    assert cells.model_key("org/Some Model") == "org--Some-Model"


def test_job_dirs_follow_the_layout() -> None:
    cell = cells.find_cell("mapro", cells.Condition("decentralized", 10, "freeform", "qwen"))
    assert cell is not None
    assert cell.job_dir("runs", 2) == Path("runs/mapro/lcb/decentralized_r10/qwen/2")


def test_grid_axes_agree_with_the_team_layouts() -> None:
    layouts = pytest.importorskip("topologies.teams.layouts")
    assert cells.TOPOLOGIES == layouts.TOPOLOGIES
    assert cells.TEAM_SIZES == layouts.ROLE_TEAM_SIZES
    for size in cells.TEAM_SIZES:
        assert cells.default_max_turns(size) == layouts.default_max_turns(size)


def test_model_aliases_agree_with_the_model_layer() -> None:
    models = pytest.importorskip("topologies.models")
    assert dict(cells.MODEL_IDS) == dict(models.MODEL_ALIASES)
