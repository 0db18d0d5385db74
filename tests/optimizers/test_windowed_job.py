"""A windowed job end to end on local rows: test ids after a contest date only, samples per problem,
pass@k in result.json, the aggregate's cluster-aware statistics and the report's before/after table.

Rows: the built-in problems (train and validation, dated before the window) plus the real
release_v1 rows of ../shared/lcb-real released after 2024-01-31 whose official O1-Mini submission
passed (their public tests stand in for the hidden ones, which the shared rows lack). The scripted
model answers a real problem with that submission when the prompts carry SOLVE_ALL (the deployed
candidate) and, for the seed prompts, only when the request seed is even: samples of one problem
differ, so pass@k > pass@1. Skips cleanly without ../shared.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from job_support import MODEL_ID, SOLVE_ALL, SEED_SOLVES, fast_runtime
from lcb.builtin import load_solutions  # noqa: F401 - the built-in answers need it importable
from lcb.data import BUILTIN_FILE, BUILTIN_SPLITS
from optimizers.journal import read_sealed
from optimizers.protocol.grid.config import JobConfig, ModelSpec, TestDesign
from optimizers.protocol.job.engine import run_job
from topologies.types import Decoding

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "lcb-real"
AFTER, CUTOFF = "2024-01-31", "2024-02-12"


def shared(name: str) -> Path:
    path = SHARED / name
    if not path.is_file():
        pytest.skip(f"shared file {name} not available")
    return path


def local_rows(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """(rows file, splits file, real problem id -> passing submission)."""
    submissions = {}
    with shared("submissions_O1-Mini-2024-09-12_eval_all.v1.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            if record["graded_list"][0]:
                submissions[record["question_id"]] = record["code_list"][0]
    lines = []
    for line in BUILTIN_FILE.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        row["contest_date"] = "2023-06-01T00:00:00"  # before the window: train and validation only
        lines.append(json.dumps(row))
    real: dict[str, str] = {}
    with shared("release_v1_rows.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            if row["question_id"] not in submissions:
                continue
            row["private_test_cases"] = row["public_test_cases"]  # the shared rows have no hidden tests
            lines.append(json.dumps(row))
            if row["contest_date"][:10] > AFTER:
                real[row["question_id"]] = submissions[row["question_id"]]
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(lines) + "\n", encoding="utf-8")
    splits = tmp_path / "splits.json"
    splits.write_text(json.dumps({name: list(ids) for name, ids in BUILTIN_SPLITS.items()}), encoding="utf-8")
    return rows, splits, real


def start_model(rows: Path, real: dict[str, str]) -> Any:
    from lcb.data import load_problems
    from topologies.scripted import FunctionRule, Script, ScriptedServer, builtin_answers, fenced_python

    builtin = builtin_answers(lambda request, pid: SOLVE_ALL in request.system or pid in SEED_SOLVES)
    keys = {p.id: p.statement[:80] for p in load_problems(str(rows), only=list(real), decode_private=False).problems}

    def answer(request: Any) -> str | None:
        for pid, key in keys.items():
            if key in request.all_text:
                # Agents get seed * 1000 + their index (topologies.teams.session): the run seed's parity.
                solved = SOLVE_ALL in request.system or (int(request.body.get("seed") or 0) // 1000) % 2 == 0
                return fenced_python(real[pid] if solved else "print('no idea')")
        return builtin(request)

    return ScriptedServer(Script([FunctionRule("solve", answer)], default=None)).start()


def test_windowed_job_with_samples_end_to_end(tmp_path: Path) -> None:
    rows, splits, real = local_rows(tmp_path)
    server = start_model(rows, real)
    runs = tmp_path / "runs"
    out = runs / "scripted_search" / "lcb" / "single" / "scripted" / "0"
    design = TestDesign("window", after=AFTER, size=6, samples=4, temperature=0.2)
    cfg = JobConfig(method="scripted_search", topology="single", seed=0, out=out, team_size=1, budget=12,
                    model=ModelSpec("scripted", MODEL_ID, (server.base_url,), cutoff=CUTOFF),
                    data=str(rows), splits=splits, test=design, concurrency=4, quiet=True,
                    eval_decoding=Decoding(temperature=0.2, top_p=0.9, max_tokens=4096))
    try:
        result = run_job(cfg, fast_runtime())
    finally:
        server.stop()

    # Test ids: inside the window only, drawn from the real rows, never train or validation ids.
    test = read_sealed(out / "test.json")
    ids = test["example_ids"]
    assert len(ids) == 6 and set(ids) <= set(real)
    assert all(date[:10] > AFTER for date in test["contest_dates"])
    assert not set(ids) & {i for name in ("train", "val") for i in BUILTIN_SPLITS[name]}
    job = json.loads((out / "job.json").read_text())
    assert job["spec"]["test"]["design"] == "window" and job["condition"]["splits"]["test"] == ids
    # Samples: four rolls per problem and arm, with distinct request seeds.
    assert test["samples"] == 4 and all(len(s) == 4 for s in test["baseline_samples"])
    evaluation = read_sealed(out / "evaluations" / f"{test['baseline_evaluation_id']}.json")
    seeds = {(r["problem_id"], r["seed"]) for r in evaluation["records"]}
    assert len(seeds) == 24 and len({r["problem_id"] for r in evaluation["records"]}) == 6
    # pass@k in result.json: pass@1 is the mean over samples; pass@4 by the unbiased estimator.
    pass_at_k = result["test"]["pass_at_k"]
    assert set(pass_at_k["baseline"]) == set(pass_at_k["deployed"]) == {"1", "4"}
    assert pass_at_k["baseline"]["1"] == pytest.approx(result["test"]["baseline_mean"])
    solved_by_any = [any(s == 1.0 for s in samples) for samples in test["baseline_samples"]]
    assert pass_at_k["baseline"]["4"] == pytest.approx(sum(solved_by_any) / 6)
    assert pass_at_k["baseline"]["4"] > pass_at_k["baseline"]["1"]
    assert pass_at_k["deployed"]["1"] == pytest.approx(1.0)
    assert 0.0 < pass_at_k["baseline"]["1"] < 1.0  # the seed prompts' samples differ
    assert result["selection"]["selected_candidate"] == "incumbent"

    # The aggregate: problems are the clusters (6 problems x 4 rolls), a paired test over rates.
    from optimizers.protocol.aggregate import summary

    aggregated = summary.aggregate([runs], replicates=500, seeds=(0,), include_nonconformant=True)
    row = aggregated.designs[0]
    clustered = row["clustered"]
    assert clustered["problems"] == 6 and clustered["rolls_per_problem"] == 4
    assert clustered["test"] == "paired_t_over_problems" and clustered["delta_pp"] > 0
    assert clustered["ci95_pp"][0] <= clustered["delta_pp"] <= clustered["ci95_pp"][1]
    cut = row["cutoff"]
    assert cut is not None and cut["cutoff"] == CUTOFF
    assert cut["before"]["problems"] + cut["after"]["problems"] == 6
    assert cut["after"]["deployed"] == 1.0

    # The report's before/after table.
    from optimizers.protocol.report import data as report_data
    from optimizers.protocol.report.page import render_html

    page = render_html(report_data.load([runs], include_nonconformant=True, replicates=200, seeds=(0,)), {}, [runs])
    assert "panel-cutoff" in page and "Before and after the model" in page
    assert CUTOFF in page and "panel-clustered" in page
