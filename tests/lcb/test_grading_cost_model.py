"""benchmarks/perf/grading_speed.py --cost-model: each grader's cost per program and per test."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "perf" / "grading_speed.py"


@pytest.fixture(scope="module")
def speed():
    spec = importlib.util.spec_from_file_location("grading_speed_under_test", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_fit_recovers_per_program_and_per_test_costs(speed):
    per_program, per_test = 0.0047, 0.0019  # seconds
    runs = [(p, t, p * (per_program + t * per_test)) for p, t in speed.COST_MODEL_SHAPES]
    assert speed.fit_costs(runs) == pytest.approx((per_program, per_test), rel=1e-9)
    assert speed.fit_costs([(10, 3, 10 * (1.0 + 3 * 0.5)), (2, 7, 2 * (1.0 + 7 * 0.5))]) == pytest.approx((1.0, 0.5))
    with pytest.raises(ValueError):  # the same tests per program: the two costs cannot be told apart
        speed.fit_costs([(10, 4, 1.0), (3, 4, 0.3)])


def test_the_synthetic_program_passes_every_test_in_our_grader(speed):
    items = speed._synthetic_items(2, 5)
    assert len(items) == 2 and len(items[0][0].public_tests) == 5
    assert [speed.ours(problem, code, 6.0) for problem, code in items] == [[True] * 5] * 2


def test_fault_cost_counts_one_fault_per_page_of_each_kind():
    """benchmarks/perf/fault_cost.py: the unit of the per-test costs. Each kind of write faults
    once per page (otherwise its figure would not be a cost per fault) and costs something."""
    spec = importlib.util.spec_from_file_location("fault_cost_under_test", _SCRIPT.parent / "fault_cost.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    costs = module.fault_costs(pages=256, rounds=1)
    for kind in ("copy", "reuse", "fresh"):
        assert 0.9 <= costs[f"{kind}_faults_per_page"] <= 1.5, (kind, costs)
        assert costs[f"{kind}_us"] > 0, (kind, costs)
    assert costs["populate_copy_us"] is None or costs["populate_copy_faults_per_page"] <= 1.5
    with pytest.raises(ValueError):
        module.fault_costs(pages=0)
