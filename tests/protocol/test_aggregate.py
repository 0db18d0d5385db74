"""``python -m optimizers.protocol.aggregate`` on handwritten result.json files.

Two methods on the same runtime condition (centralized, size 4, freeform, qwen), three seeds, six
test problems each. Worked out by hand:

gepa   seed 0: base 000001 -> deployed 111111: wins 5, losses 0, p = 2/32 = 0.0625, Δ = +83.33 pp
       seed 1: base 000111 -> deployed 111111: wins 3,           p = 2/8  = 0.25,   Δ = +50 pp
       seed 2: base 111111 -> deployed 111111: no discordant,    p = 1,             Δ = 0
       mean Δ = 400/9 = 44.44 pp; sample std = sqrt(((350/9)² + (50/9)² + (400/9)²) / 2) = 41.94 pp
mapro  seed 0: base 000001 -> deployed 111001: wins 3, p = 0.25, Δ = +50
       seed 1: base 000111 -> deployed 000111: p = 1, Δ = 0
       seed 2: base 111111 -> deployed 111110: losses 1, p = 1, Δ = -16.67
Holm, family "task" (one family, six p-values 0.0625 0.25 1 | 0.25 1 1):
       sorted 0.0625·6 = 0.375, then 0.25·5 and 0.25·4 -> 1, the rest 1 -> gepa (0.375, 1, 1), mapro (1, 1, 1)
Holm, family "method": gepa alone (0.1875, 0.5, 1); mapro alone (0.75, 1, 1)
mapro vs gepa (deployed vs deployed): seed 0: 111001 vs 111111: losses 2, p = 0.5, Δ = -33.33
       seed 1: 000111 vs 111111: losses 3, p = 0.25, Δ = -50; seed 2: 111110 vs 111111: p = 1, Δ = -16.67
       mean -33.33, std 16.67; Holm (0.5, 0.25, 1) -> (1, 0.75, 1)
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from optimizers.journal import write_sealed
from optimizers.protocol.aggregate import summary as aggregate

REPO = Path(__file__).resolve().parents[2]
IDS = ["p1", "p2", "p3", "p4", "p5", "p6"]
BASE = {0: "000001", 1: "000111", 2: "111111"}
DEPLOYED = {
    "gepa": {0: "111111", 1: "111111", 2: "111111"},
    "mapro": {0: "111001", 1: "000111", 2: "111110"},
}


def bits(text: str) -> list[float]:
    return [float(c) for c in text]


def result_payload(method: str, seed: int, *, base: str, deployed: str, conformant: bool = True,
                   topology: str = "centralized", valid: bool = True) -> dict[str, Any]:
    b, d = bits(base), bits(deployed)
    return {
        "schema": aggregate.RESULT_SCHEMA,
        "status": "completed",
        "cell": {"method": method, "dataset": "lcb", "topology": topology, "team_size": 4,
                 "communication": "freeform", "rounds": 2, "model": "Qwen/Qwen3.5-9B",
                 "registry_key": topology},
        "cell_id": f"{method}-{topology}",
        "seed": seed,
        "conformant": conformant,
        "in_grid": True,
        "optimization": {"status": "completed", "stop_reason": "budget", "budget": {"charged": 600}},
        "selection": {"selected_candidate": "incumbent" if base != deployed else "seed",
                      "fallback_reason": None if base != deployed else "validation_tie"},
        "test": {"example_ids": IDS, "baseline_scores": b, "deployed_scores": d,
                 "baseline_mean": sum(b) / 6, "deployed_mean": sum(d) / 6,
                 "delta_pp": 100 * (sum(d) - sum(b)) / 6, "valid_for_aggregation": valid},
    }


def write_job(root: Path, method: str, seed: int, **kwargs: Any) -> Path:
    topology = kwargs.get("topology", "centralized")
    folder = root / method / "lcb" / topology / "qwen" / str(seed)
    folder.mkdir(parents=True)
    payload = result_payload(method, seed, base=BASE[seed], deployed=DEPLOYED[method][seed], **kwargs)
    write_sealed(folder / "result.json", payload)
    return folder / "result.json"


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    for method in DEPLOYED:
        for seed in range(3):
            write_job(root, method, seed)
    return root


def test_cell_statistics_match_the_hand_computation(runs: Path) -> None:
    result = aggregate.aggregate([runs], replicates=2000)
    assert not result.skipped
    by_method = {c.label["method"]: c for c in result.cells.values()}
    gepa, mapro = by_method["gepa"], by_method["mapro"]

    assert [s.delta_pp for s in gepa.seeds] == pytest.approx([500 / 6, 50.0, 0.0])
    assert [s.p_value for s in gepa.seeds] == pytest.approx([0.0625, 0.25, 1.0])
    assert [(s.wins, s.losses) for s in gepa.seeds] == [(5, 0), (3, 0), (0, 0)]
    assert gepa.mean_delta_pp == pytest.approx(400 / 9)
    assert gepa.std_delta_pp == pytest.approx(math.sqrt(((350 / 9) ** 2 + (50 / 9) ** 2 + (400 / 9) ** 2) / 2))
    assert gepa.macro_a == pytest.approx((1 + 3 + 6) / 18)
    assert gepa.macro_b == pytest.approx(1.0)
    assert [gepa.p_holm[s] for s in range(3)] == pytest.approx([0.375, 1.0, 1.0])
    assert [mapro.p_holm[s] for s in range(3)] == pytest.approx([1.0, 1.0, 1.0])
    assert [s.delta_pp for s in mapro.seeds] == pytest.approx([50.0, 0.0, -100 / 6])
    low, high = gepa.ci95_pp
    assert low <= gepa.mean_delta_pp <= high


def test_method_family_changes_holm(runs: Path) -> None:
    result = aggregate.aggregate([runs], replicates=500, family="method")
    by_method = {c.label["method"]: c for c in result.cells.values()}
    assert [by_method["gepa"].p_holm[s] for s in range(3)] == pytest.approx([0.1875, 0.5, 1.0])
    assert [by_method["mapro"].p_holm[s] for s in range(3)] == pytest.approx([0.75, 1.0, 1.0])


def test_methods_are_compared_on_the_same_condition(runs: Path) -> None:
    result = aggregate.aggregate([runs], replicates=500)
    assert len(result.pairs) == 1
    pair = result.pairs[0]
    assert (pair.label["method_a"], pair.label["method_b"]) == ("gepa", "mapro")
    assert [s.delta_pp for s in pair.seeds] == pytest.approx([-100 / 3, -50.0, -100 / 6])
    assert [(s.wins, s.losses) for s in pair.seeds] == [(0, 2), (0, 3), (0, 1)]
    assert [s.p_value for s in pair.seeds] == pytest.approx([0.5, 0.25, 1.0])
    assert [pair.p_holm[s] for s in range(3)] == pytest.approx([1.0, 0.75, 1.0])
    assert pair.mean_delta_pp == pytest.approx(-100 / 3)
    assert pair.std_delta_pp == pytest.approx(50 / 3)


def test_incomplete_cells_are_reported_not_compared(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    write_job(root, "gepa", 0)
    write_job(root, "gepa", 1, valid=False)
    result = aggregate.aggregate([root], replicates=200)
    assert not result.cells and not result.pairs
    (group,) = result.groups
    assert any("missing seed(s) 2" in p for p in group.problems)
    assert any("seed 1: test data not valid" in p for p in group.problems)


def test_nonconformant_and_tampered_results_are_skipped(runs: Path, tmp_path: Path) -> None:
    write_job(tmp_path / "other", "gepa", 0, conformant=False, topology="sequential")
    tampered = runs / "mapro" / "lcb" / "centralized" / "qwen" / "2" / "result.json"
    data = json.loads(tampered.read_text())
    data["test"]["deployed_scores"] = [1.0] * 6
    tampered.write_text(json.dumps(data))
    result = aggregate.aggregate([runs, tmp_path / "other"], replicates=200)
    assert any("non-conformant" in s for s in result.skipped)
    assert any("modified after it was sealed" in s for s in result.skipped)
    methods = {c.label["method"] for c in result.cells.values()}
    assert methods == {"gepa"}  # mapro lost seed 2
    with_all = aggregate.aggregate([tmp_path / "other"], replicates=200, include_nonconformant=True)
    assert len(with_all.groups) == 1


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "optimizers.protocol.aggregate", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_cli_prints_the_table_and_writes_the_summary(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "summary.json"
    proc = run_cli(str(runs), "--bootstrap", "500", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header = lines[0].split("\t")
    assert header[:4] == ["method", "task", "runtime", "model"]
    gepa = dict(zip(header, lines[1].split("\t")))
    assert (gepa["method"], gepa["runtime"], gepa["model"], gepa["seeds"]) == ("gepa", "centralized", "qwen", "0,1,2")
    assert gepa["delta_pp"] == "+44.44" and gepa["std_pp"] == "41.94" and gepa["min_p_holm"] == "0.375"
    assert gepa["fallbacks"] == "1/3"  # seed 2 kept the seed prompts
    assert lines[2].split("\t")[1:5] == ["seed=0", "base=0.167", "deployed=1.000", "delta=+83.33"]
    pair_header = lines.index("") + 1
    assert lines[pair_header].startswith("method_a\tmethod_b")
    assert lines[pair_header + 1].split("\t")[:2] == ["gepa", "mapro"]
    summary = json.loads(out.read_text())
    assert summary["schema"] == aggregate.SCHEMA and len(summary["cells"]) == 2
    assert len(summary["method_comparisons"]) == 1
    # Deterministic: the same input gives the same summary.
    again = tmp_path / "again.json"
    assert run_cli(str(runs), "--bootstrap", "500", "--out", str(again)).returncode == 0
    assert again.read_text() == out.read_text()


def test_cli_exits_1_without_results(tmp_path: Path) -> None:
    proc = run_cli(str(tmp_path))
    assert proc.returncode == 1 and proc.stdout == ""
    assert "no usable result.json" in proc.stderr


def test_cli_bad_arguments_are_one_line(tmp_path: Path) -> None:
    proc = run_cli(str(tmp_path), "--family", "cells")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ")
