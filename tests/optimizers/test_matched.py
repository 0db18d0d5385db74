"""Matched compute: N samples of the single agent spend the team's tokens to within one sample."""

from __future__ import annotations

import pytest

from optimizers.matched import BaselineParamsError, MatchPlan, matched_sample_count
from optimizers.registry import get_optimizer_class


@pytest.mark.parametrize("team", [100, 999, 1234.5, 5000, 7777, 20000])
@pytest.mark.parametrize("sample", [97, 300, 451.25, 1000])
def test_n_matches_the_team_tokens_within_one_sample(team: float, sample: float) -> None:
    n = matched_sample_count(team, sample, max_n=1000)
    assert abs(n * sample - team) <= sample  # within one sample
    if team >= sample / 2:
        assert abs(n * sample - team) <= sample / 2  # and the nearest such N
        assert all(abs(n * sample - team) <= abs(k * sample - team) for k in range(1, 100))


def test_n_is_capped_and_never_zero() -> None:
    assert matched_sample_count(10, 1000) == 1
    assert matched_sample_count(10**9, 10, max_n=8) == 8
    assert matched_sample_count(500, 0) == 1


def test_plan_from_params() -> None:
    assert MatchPlan.from_params({"match": "tokens", "n": None, "max_n": 16}) == MatchPlan("tokens", None, 16)
    assert MatchPlan.from_params({"match": "fixed", "n": 5}).n == 5
    with pytest.raises(BaselineParamsError, match="needs n"):
        MatchPlan.from_params({"match": "fixed"})
    with pytest.raises(BaselineParamsError, match="match must be"):
        MatchPlan.from_params({"match": "texts"})


def test_both_baselines_are_registered_test_only_methods() -> None:
    for name, rule in (("self_consistency", "vote"), ("best_of_n", "examples")):
        cls = get_optimizer_class(name)
        assert cls.test_only and cls.selection_rule == rule and not cls.needs_reflection
