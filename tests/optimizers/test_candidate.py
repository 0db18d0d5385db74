from __future__ import annotations

import pytest

from optimizers.candidate import Candidate


def make() -> Candidate:
    return Candidate({"role/coder": "write code", "role/tester": "test it", "protocol/handoff": "pass on"},
                     {"rounds": 2})


def test_id_is_a_content_hash_independent_of_order_and_lineage() -> None:
    a = make()
    b = Candidate({"protocol/handoff": "pass on", "role/tester": "test it", "role/coder": "write code"},
                  {"rounds": 2}, parent="someone")
    assert a.id == b.id and a == b and hash(a) == hash(b)
    assert len({a, b}) == 1
    assert a.with_component("role/coder", "better").id != a.id


def test_views_and_edits() -> None:
    seed = make()
    assert seed.roles() == {"coder": "write code", "tester": "test it"}
    assert seed.protocol() == {"handoff": "pass on"}
    child = seed.with_component("role/coder", "better")
    assert child.parent == seed.id
    assert child.roles()["coder"] == "better" and seed.roles()["coder"] == "write code"
    assert seed.with_setting("rounds", 3).settings["rounds"] == 3
    with pytest.raises(KeyError):
        seed.with_component("role/new", "x")
    with pytest.raises(KeyError):
        seed.with_setting("max_turns", 3)


def test_immutable() -> None:
    seed = make()
    with pytest.raises(TypeError):
        seed.components["role/coder"] = "x"  # type: ignore[index]
    with pytest.raises(AttributeError):
        seed.parent = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    "components",
    [{"coder": "x"}, {"role/": "x"}, {"protocol/handoff": "x"}, {"role/a": 3}],
)
def test_rejects_bad_components(components: dict) -> None:
    with pytest.raises((ValueError, TypeError)):
        Candidate(components)


def test_round_trip() -> None:
    seed = make().with_demos([{"input": "1", "output": "2"}])
    again = Candidate.from_dict(seed.to_dict())
    assert again == seed and again.parent == seed.parent and again.demos[0]["output"] == "2"
    tampered = {**seed.to_dict(), "id": "0" * 16}
    with pytest.raises(ValueError):
        Candidate.from_dict(tampered)
