"""The aggregate and the report show optimism gap, truncation rate, cost per Δpp and the minimum
detectable effect; every figure is checked against a value worked out by hand.

The jobs are handwritten result.json files (sealed with the project's own sealing) so each
number is known: gepa gains one of six problems on every seed; tavo keeps the seed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from optimizers.journal import write_sealed
from optimizers.protocol.aggregate import summary as aggregate
from optimizers.protocol.aggregate import trust

PROBLEMS = ("demo_stdin", "demo_functional", "builtin_palindrome_anagram", "builtin_trapped_water",
            "builtin_merge_intervals", "builtin_job_scheduling")
BASELINE = [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]


def _truncation(optimize: tuple[int, int], validation: tuple[int, int], test: tuple[int, int],
                reflection: tuple[int, int]) -> dict[str, Any]:
    def row(n: int, cut: int) -> dict[str, Any]:
        return {"replies": n, "truncated": cut, "rate": cut / n}

    return {"task": {"optimize": {"all": row(*optimize)}, "validation": {"all": row(*validation)},
                     "test": {"all": row(*test)}},
            "reflection": {"all": {"calls": reflection[0], "truncated": reflection[1],
                                   "rate": reflection[1] / reflection[0]}}}


def write_job(root: Path, method: str, seed: int, *, gain: bool, reflection_tokens: int, wall_s: float,
              optimism: dict[str, Any] | None, truncation: dict[str, Any] | None,
              uncharged: dict[str, Any] | None) -> None:
    folder = root / method / "lcb" / "sequential" / "qwen" / str(seed)
    folder.mkdir(parents=True)
    deployed = list(BASELINE)
    if gain:
        deployed[1] = 1.0
    cell = {"method": method, "dataset": "lcb", "topology": "sequential", "team_size": 4,
            "communication": "freeform", "rounds": 2, "model": "Qwen/Qwen3.5-9B", "registry_key": "sequential"}
    result: dict[str, Any] = {
        "schema": "lcb-grid-result/v1", "status": "completed", "job_id": f"{method}-{seed}", "cell": cell,
        "seed": seed, "conformant": True,
        "optimization": {"status": "completed", "stop_reason": "budget", "elapsed_seconds": wall_s,
                         "budget": {"charged": 40},
                         "usage": {"task": {"prompt_tokens": 800, "completion_tokens": 200},
                                   "reflection": {"prompt_tokens": reflection_tokens * 3 // 4,
                                                  "completion_tokens": reflection_tokens // 4}}},
        "selection": {"selected_candidate": "incumbent" if gain else "seed",
                      "fallback_reason": None if gain else "validation_tie", "optimism": optimism},
        "test": {"example_ids": list(PROBLEMS), "baseline_scores": BASELINE, "deployed_scores": deployed,
                 "valid_for_aggregation": True},
    }
    if truncation is not None:
        result["truncation"] = truncation
    if uncharged is not None:
        result["uncharged_calls"] = uncharged
    write_sealed(folder / "result.json", result)
    write_sealed(folder / "test.json", {"example_ids": list(PROBLEMS)})
    write_sealed(folder / "job.json", {"job_id": result["job_id"], "spec": {"data": "builtin"}})


@pytest.fixture
def grid(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    gaps = [{"optimism_gap_pp": 10.0, "excess_optimism_pp": 5.0}, {"optimism_gap_pp": 20.0},
            {"optimism_gap_pp": None}]
    for seed in (0, 1, 2):
        write_job(root, "gepa", seed, gain=True, reflection_tokens=200_000 * (seed + 1), wall_s=10.0 * (seed + 1),
                  optimism=gaps[seed], truncation=_truncation((10, 1), (8, 0), (8, 2), (4, 1)),
                  uncharged={"judge": {"calls": 3, "failed": 0, "prompt_tokens": 90, "completion_tokens": 10}}
                  if seed == 0 else None)
        # An older result without truncation or uncharged calls: absent means zero / unknown.
        write_job(root, "tavo", seed, gain=False, reflection_tokens=0, wall_s=5.0, optimism=None,
                  truncation=None, uncharged=None)
    return root


def _cell(summary: dict[str, Any], method: str) -> dict[str, Any]:
    return next(c for c in summary["cells"] if c["method"] == method)


def test_aggregate_figures_match_hand_worked_values(grid: Path, capsys) -> None:
    result = aggregate.aggregate([grid], replicates=200)
    summary = result.summary(family="task", replicates=200, include_nonconformant=False)
    gepa, tavo = _cell(summary, "gepa"), _cell(summary, "tavo")
    # Δpp: one of six problems gained on every seed = 100/6.
    assert gepa["mean_delta_pp"] == pytest.approx(100 / 6)
    # Cost: reflection tokens 200k, 400k, 600k -> mean 400k; Δpp per million = (100/6) / 0.4.
    assert gepa["cost"]["mean_reflection_tokens"] == pytest.approx(400_000)
    assert gepa["cost"]["delta_pp_per_million_reflection_tokens"] == pytest.approx((100 / 6) / 0.4)
    assert gepa["cost"]["mean_task_tokens"] == 1000 and gepa["cost"]["mean_charged_rollouts"] == 40
    assert gepa["cost"]["mean_uncharged_calls"] == pytest.approx(1.0)  # 3, 0 (absent), 0 (absent)
    assert gepa["cost"]["mean_wall_s"] == pytest.approx(20.0)
    assert tavo["cost"]["delta_pp_per_million_reflection_tokens"] is None  # no reflection tokens
    # Optimism: gaps 10, 20 and one unknown -> 15; excess only on seed 0 -> 5.
    assert gepa["optimism"]["mean_optimism_gap_pp"] == pytest.approx(15.0)
    assert gepa["optimism"]["mean_excess_optimism_pp"] == pytest.approx(5.0)
    assert tavo["optimism"]["mean_optimism_gap_pp"] is None
    # Truncation pooled over 3 jobs: task (1 + 0 + 2) x 3 = 9 of (10 + 8 + 8) x 3 = 78; reflection 3 / 12.
    assert gepa["truncation"]["task"] == {"replies": 78, "truncated": 9, "rate": pytest.approx(9 / 78)}
    assert gepa["truncation"]["optimize"]["rate"] == pytest.approx(0.1)
    assert gepa["truncation"]["reflection"]["rate"] == pytest.approx(0.25)
    assert tavo["truncation"]["task"]["rate"] is None
    # Power: qwen family of the grid's design = 114 cells x 3 seeds = 342 Holm tests; 6 problems per
    # seed; discordance pooled = 3 discordant of 36 paired items. With 6 items the smallest exact
    # two-sided p is 2 / 2^6 = 0.03125 > 0.05 / 342 (and > 0.05 / 3): no effect is detectable.
    (power,) = summary["power"]
    assert (power["family"], power["cells"], power["tests"], power["problems"]) == ("lcb|qwen", 114, 342, 6)
    assert power["discordance"] == pytest.approx(3 / 36, abs=1e-6) and power["discordance_source"] == "observed"
    assert power["mde_pp"] is None and power["mde_pp_one_cell"] is None

    assert aggregate.main([str(grid), "--bootstrap", "200"]) == 0
    out = capsys.readouterr().out
    trust_line = next(line for line in out.splitlines() if line.startswith("gepa\tsequential"))
    fields = trust_line.split("\t")
    assert fields[3:] == ["val", "40", "1000", "400000", "1", "20.0", "+41.67", "+15.00", "+5.00", "11.5%", "25.0%"]
    assert "power\tfamily=lcb|qwen\tcells=114\tseeds=3\tproblems=6\tholm_tests=342" in out
    assert "mde_pp=none up to 8.3" in out


def test_power_matches_hand_worked_binomial_sums() -> None:
    # n = 4 items, half of them discordant on average, every discordant item a win (effect = 0.5):
    # reject at level 0.25 iff 2 / 2^D <= 0.25, i.e. D >= 3: P = (4 + 1) / 16.
    assert trust.seed_power(4, 0.5, 0.5, 0.25) == pytest.approx(5 / 16)
    # No effect: D = 3 with 0 or 3 wins (4/16 x 2/8) plus D = 4 with 0 or 4 wins (1/16 x 2/16).
    assert trust.seed_power(4, 0.5, 0.0, 0.25) == pytest.approx(18 / 256)
    # Two seeds, Holm over 2 tests at alpha 0.5 (level 0.25): 1 - (11/16)^2.
    assert trust.cell_power(4, 2, 2, 0.5, 0.5, alpha=0.5) == pytest.approx(1 - (11 / 16) ** 2)
    # The MDE is the smallest effect reaching the target: 50 pp reaches 135/256 > 0.5, 10 pp does not.
    mde = trust.minimum_detectable_effect(4, 2, 2, 0.5, alpha=0.5, power=0.5, step_pp=10.0)
    assert mde is not None and 10.0 < mde <= 50.0
    assert trust.cell_power(4, 2, 2, 0.5, (mde - 10.0) / 100, alpha=0.5) < 0.5 <= trust.cell_power(
        4, 2, 2, 0.5, mde / 100, alpha=0.5)
    # More problems, fewer tests: a realistic design has a finite MDE that grows with Holm's family.
    small_family = trust.minimum_detectable_effect(50, 3, 3, 0.3)
    large_family = trust.minimum_detectable_effect(50, 3, 30, 0.3)
    assert small_family is not None and large_family is not None and small_family < large_family


def test_pareto_front_keeps_cells_nothing_beats() -> None:
    points = [("cheap", 1.0, 2.0), ("dear_better", 5.0, 9.0), ("dominated", 6.0, 1.0), ("tie_cost", 1.0, 1.0)]
    assert trust.pareto_front(points) == ["cheap", "dear_better"]


def test_report_shows_the_same_figures(grid: Path, tmp_path: Path) -> None:
    from optimizers.protocol.report import page as report

    out = tmp_path / "report"
    assert report.main([str(grid), "--out", str(out)]) == 0
    data = json.loads((out / "report.json").read_text(encoding="utf-8"))
    methods = {row["method"]: row for row in data["trust"]["methods"]}
    assert methods["gepa"]["optimism_gap_pp"] == pytest.approx(15.0)
    assert methods["gepa"]["truncated_task"] == pytest.approx(9 / 78)
    assert methods["gepa"]["delta_pp_per_million_reflection_tokens"] == pytest.approx((100 / 6) / 0.4)
    assert data["trust"]["power"][0]["tests"] == 342
    page = (out / "report.html").read_text(encoding="utf-8")
    for panel in ("panel-trust", "panel-power", "panel-cost_pareto", "panel-optimism_gap", "panel-truncation"):
        assert f'id="{panel}"' in page
    assert "+41.67" in page and "+15.00" in page and "11.5 %" in page and "342 Holm tests" in page
    for png in ("cost_pareto.png", "optimism_gap.png", "truncation.png"):
        assert (out / png).stat().st_size > 1000
