"""Seed role prompts: present for every role of every size, honest about tools, specs built right."""

from __future__ import annotations

import re

import pytest

from topologies.prompts import (
    SeedPromptError,
    all_seed_files,
    default_team_spec,
    load_seed_protocol,
    load_seed_roles,
)
from topologies.teams.layouts import (
    CENTRALIZED_WORKERS,
    ROLE_TEAM_SIZES,
    SEQUENTIAL_STAGES,
    TOPOLOGIES,
    LayoutError,
    answering_roles,
    role_names,
)
from topologies.types import CommunicationFormat

SIZED = ("independent", "sequential", "centralized", "decentralized")


def test_every_seed_file_exists_and_is_substantial() -> None:
    for path in all_seed_files():
        text = path.read_text(encoding="utf-8")
        words = len(text.split())
        limit = (10, 80) if path.parent.name == "protocol" else (60, 350)
        assert limit[0] <= words <= limit[1], f"{path}: {words} words"


@pytest.mark.parametrize("topology", SIZED)
@pytest.mark.parametrize("size", ROLE_TEAM_SIZES)
def test_seed_roles_match_the_layout(topology: str, size: int) -> None:
    roles = load_seed_roles(topology, size)
    assert tuple(roles) == role_names(topology, size)
    assert all(text.strip() for text in roles.values())


def test_sizes_follow_the_reference_table() -> None:
    assert [s.role for s in SEQUENTIAL_STAGES[2]] == ["coder", "debugger"]
    assert [s.role for s in SEQUENTIAL_STAGES[4]] == ["analyzer", "coder", "tester", "debugger"]
    assert len(SEQUENTIAL_STAGES[8]) == 8 and len(SEQUENTIAL_STAGES[10]) == 10
    ten = [s.role for s in SEQUENTIAL_STAGES[10]]
    assert ten.index("complexity_analyzer") == ten.index("coder") + 1
    assert ten.index("optimizer") == ten.index("debugger") + 1
    assert {size: len(workers) + 1 for size, workers in CENTRALIZED_WORKERS.items()} == {2: 2, 4: 4, 8: 8, 10: 10}
    assert answering_roles("sequential", 10) == ("coder", "debugger", "optimizer", "code_reviewer")
    assert answering_roles("centralized", 8) == ("manager",)


@pytest.mark.parametrize("size", ROLE_TEAM_SIZES)
def test_sequential_prompts_are_honest_about_tools(size: int) -> None:
    roles = load_seed_roles("sequential", size)
    for stage in SEQUENTIAL_STAGES[size]:
        text = roles[stage.role]
        if stage.has_tools:
            assert "python_exec" in text, stage.role
        else:
            assert "python_exec" not in text, f"{stage.role} has no tools but its prompt names one"
            assert "cannot run code" in text, stage.role


def test_centralized_prompts_name_their_tool_and_no_fake_addressing() -> None:
    roles = load_seed_roles("centralized", 10)
    for role, text in roles.items():
        assert "python_exec" in text, role
    for topology in TOPOLOGIES:
        for role, text in load_seed_roles(topology, 10 if topology != "single" else 1).items():
            lowered = text.lower()
            assert not re.search(r"worker [123]\b", lowered), role
            assert "best-of-n" not in lowered and "best of n" not in lowered, role
            assert "first of four" not in lowered and "4-stage" not in lowered, role


def test_protocol_texts_only_where_agents_hand_off() -> None:
    assert load_seed_protocol("single") == {} and load_seed_protocol("independent") == {}
    for topology in ("sequential", "centralized", "decentralized"):
        assert set(load_seed_protocol(topology)) == {"handoff"}


def test_default_team_spec() -> None:
    spec = default_team_spec("centralized", team_size=2, communication="semi_structured", rounds=3)
    assert spec.team_size == 2 and spec.max_turns == 13 and spec.rounds == 3
    assert spec.communication is CommunicationFormat.SEMI_STRUCTURED
    assert default_team_spec("centralized").max_turns == 26
    assert default_team_spec("single", team_size=7).team_size == 1
    assert default_team_spec("independent").team_size == 4


def test_unknown_sizes_and_topologies_are_rejected() -> None:
    with pytest.raises(LayoutError, match="team sizes 2, 4, 8, 10"):
        load_seed_roles("sequential", 3)
    with pytest.raises(LayoutError, match="unknown topology"):
        load_seed_roles("swarm", 4)
    assert tuple(load_seed_roles("independent", 3)) == ("coder",)  # replica teams take any size


def test_missing_seed_file_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(SeedPromptError, match="missing"):
        load_seed_roles("single", 1, prompts_dir=tmp_path)
