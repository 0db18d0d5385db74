"""Report speed on the whole grid: a synthetic runs tree of the grid's 396 jobs, then the report.

Each synthetic job folder has what a finished grid job writes, at the grid's sizes: sealed
``job.json``, ``optimization.json``, ``selection.json``, ``test.json`` and ``result.json``; the
optimization journals (``candidates.jsonl`` with every role prompt of the team per candidate,
``tracker.jsonl`` with one line per charged rollout of the 600-rollout budget and the incumbent
commits, ``learning_curve.jsonl``); and the two test evaluations (50 problems, a graded program
each). Then ``python -m optimizers.protocol.report`` is run on it in-process and timed: every
panel, report.html and one page per job. Target: under 60 s. The report runs on one core, so its
CPU seconds are its wall time on an idle core; on a shared, loaded machine the wall time mostly says
how busy the machine was, so the target is checked against the smaller of the two.

    .venv/bin/python benchmarks/perf/report_speed.py [--root DIR] [--keep] [--bootstrap N]

Prints one JSON line (build seconds, report wall and CPU seconds, pages written, page sizes); exit 1 when the
report misses the target.

``--with-baselines`` adds what issue 30's panels read: both matched-compute baselines
(``self_consistency``, ``best_of_n``; test only, tokens per problem, N) on every condition of the
grid with every grid seed, and a transfer job (``--deploy-from``: qwen's deployed prompts on
llama) for every qwen grid job whose condition the grid also runs on llama. The "team vs matched
single agent" and "transfer matrix" panels are then full, not idle.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from optimizers.candidate import Candidate  # noqa: E402
from optimizers.journal import write_sealed  # noqa: E402
from optimizers.protocol.grid import cells  # noqa: E402
from optimizers.protocol.grid.config import GRID_BUDGET  # noqa: E402

TARGET_S = 60.0
TEST_PROBLEMS = 50
CANDIDATES = 24
PROMPT = ("You are {role}, one member of a team solving a test-graded programming problem.\n"
          + "\n".join(f"{i}. Follow step {i} of the team's plan carefully and report what you found." for i in
                      range(1, 25)))
PROGRAM = "import sys\n\ndef solve():\n    data = sys.stdin.read().split()\n" + "".join(
    f"    x{i} = int(data[{i}]) if len(data) > {i} else 0\n" for i in range(20)) + "    print(x0)\n\nsolve()\n"


def _roles(condition: cells.Condition) -> list[str]:
    if condition.topology == "single":
        return ["solver"]
    return ["manager", *(f"worker_{i}" for i in range(1, condition.team_size))]


def _seed(condition: cells.Condition) -> Candidate:
    components = {f"role/{role}": PROMPT.format(role=role) for role in _roles(condition)}
    components["protocol/handoff"] = "Hand the next member your findings and the open questions."
    return Candidate(components)


def _lines(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def _evaluation(folder: Path, evaluation_id: str, candidate_id: str, ids: list[str], scores: list[float]) -> None:
    records = [{"candidate_id": candidate_id, "problem_id": pid, "phase": "test", "sample": 0, "seed": 1,
                "status": "success" if score else "semantic_failure", "score": score,
                "feedback": "passed 9/9 hidden tests" if score else
                "passed 3/9 hidden tests; first failure: wrong_answer on test 4 (stdin)",
                "verdict": {"outcome": "passed" if score else "wrong_answer", "passed": 9 if score else 3, "total": 9},
                "answer": PROGRAM, "trace": [], "usage": {}, "details": {}, "charged": False, "attempts": 1}
               for pid, score in zip(ids, scores)]
    write_sealed(folder / "evaluations" / f"{evaluation_id}.json",
                 {"schema": "lcb-grid-evaluation/v1", "evaluation_id": evaluation_id, "identity": {},
                  "records": records, "search_budget_charged": 0})


def write_job(root: Path, cell: cells.GridCell, seed: int, rng: random.Random) -> None:
    condition = cell.condition
    folder = cell.job_dir(root, seed)
    (folder / "optimization").mkdir(parents=True, exist_ok=True)
    job_id = f"{cell.method}-{condition.registry_key}-{condition.model}-{seed}"
    base = _seed(condition)
    roles = sorted(base.components)
    candidates, parent = [base], base
    for index in range(CANDIDATES - 1):
        key = rng.choice(roles)
        child = parent.with_component(key, parent.components[key] + f"\nLesson {index}: check the edge cases.")
        candidates.append(child)
        if rng.random() < 0.3:
            parent = child
    incumbent = parent
    fallback = rng.random() < 0.35
    deployed = base if fallback else incumbent
    (folder / "optimization" / "candidates.jsonl").write_text(_lines([c.to_dict() for c in candidates]))
    tracker, commits = [], []
    per_candidate = GRID_BUDGET // CANDIDATES
    for charged in range(1, GRID_BUDGET + 1):
        candidate = candidates[min(CANDIDATES - 1, (charged - 1) // per_candidate)]
        tracker.append({"kind": "log", "step": charged, "metrics": {
            "budget/charged": charged, "rollout/candidate_id": candidate.id, "rollout/problem_id": f"p{charged % 150}",
            "rollout/score": float(rng.random() < 0.4)}})
        if charged % per_candidate == 0 and candidate.id == incumbent.id:
            tracker.append({"kind": "log", "step": charged, "metrics": {"incumbent/candidate_id": candidate.id,
                                                                        "incumbent/score": 0.5}})
    (folder / "optimization" / "tracker.jsonl").write_text(_lines(tracker))
    curve = [{"schema": 2, "reason": "grid", "charged_rollouts": c, "incumbent_score": min(1.0, 0.3 + c / 2000),
              "incumbent_candidate_id": incumbent.id} for c in range(0, GRID_BUDGET + 1, 10)]
    (folder / "optimization" / "learning_curve.jsonl").write_text(_lines(curve))
    ids = [f"lcb_problem_{i:03d}" for i in range(TEST_PROBLEMS)]
    base_scores = [float(rng.random() < 0.35) for _ in ids]
    deployed_scores = list(base_scores) if fallback else [float(rng.random() < 0.4) for _ in ids]
    seed_eval, deployed_eval = f"seed-{seed}", ("seed" if fallback else "deployed") + f"-{seed}"
    _evaluation(folder, seed_eval, base.id, ids, base_scores)
    if not fallback:
        _evaluation(folder, deployed_eval, deployed.id, ids, deployed_scores)
    cell_record = {"method": cell.method, "dataset": cells.DATASET, "topology": condition.topology,
                   "team_size": condition.team_size, "communication": condition.communication,
                   "model": cells.MODEL_IDS[condition.model], "registry_key": condition.registry_key}
    mean = sum(base_scores) / TEST_PROBLEMS
    deployed_mean = sum(deployed_scores) / TEST_PROBLEMS
    reason = "validation_regression" if fallback else None
    selection = {"selected_candidate": "seed" if fallback else "incumbent", "fallback_reason": reason,
                 "baseline_validation_score": 0.4, "incumbent_validation_score": 0.38 if fallback else 0.46,
                 "validation_delta": -0.02 if fallback else 0.06, "selection_id": f"sel-{job_id}",
                 "deployed_candidate_id": deployed.id, "mode": "val",
                 "optimism": {"optimism_gap_pp": rng.uniform(0, 12), "excess_optimism_pp": rng.uniform(-3, 6)}}
    budget = {"maximum": GRID_BUDGET, "charged": GRID_BUDGET, "infrastructure_failures": 0, "retries": 0,
              "unusable_rollouts": 0}
    test = {"example_ids": ids, "difficulties": [("easy", "medium", "hard")[i % 3] for i in range(TEST_PROBLEMS)],
            "baseline_scores": base_scores, "deployed_scores": deployed_scores, "baseline_mean": mean,
            "deployed_mean": deployed_mean, "delta_pp": 100.0 * (deployed_mean - mean),
            "valid_for_aggregation": True, "baseline_evaluation_id": seed_eval,
            "deployed_evaluation_id": seed_eval if fallback else deployed_eval}
    usage = {"task": {"attempts": GRID_BUDGET, "prompt_tokens": 1_800_000, "completion_tokens": 400_000},
             "reflection": {"calls": 40, "prompt_tokens": 120_000, "completion_tokens": 30_000}}
    write_sealed(folder / "job.json", {"job_id": job_id, "cell": cell_record, "conformant": True,
                                       "spec": {"data": "lcb", "seed": seed}})
    write_sealed(folder / "optimization.json", {
        "job_id": job_id, "status": "completed", "failure_kind": None, "stop_reason": "budget", "budget": budget,
        "seed_candidate": base.to_dict(), "incumbent_candidate": incumbent.to_dict(), "usage": usage,
        "elapsed_seconds": rng.uniform(3000, 9000)})
    write_sealed(folder / "selection.json", {**selection, "seed_candidate": base.to_dict(),
                                             "incumbent_candidate": incumbent.to_dict(),
                                             "deployed_candidate": deployed.to_dict()})
    write_sealed(folder / "test.json", test)
    write_sealed(folder / "result.json", {
        "schema": "lcb-grid-result/v1", "protocol": "lcb-grid-protocol/v1", "status": "completed",
        "job_id": job_id, "cell": cell_record, "cell_id": f"cell-{job_id[:-2]}", "seed": seed,
        "conformant": True, "in_grid": True,
        "optimization": {"status": "completed", "failure_kind": None, "stop_reason": "budget", "budget": budget,
                         "usage": usage, "elapsed_seconds": 5000.0, "incumbent_candidate_id": incumbent.id},
        "selection": selection, "test": {k: test[k] for k in ("example_ids", "baseline_scores", "deployed_scores",
                                                              "baseline_mean", "deployed_mean", "delta_pp",
                                                              "valid_for_aggregation")}})


def _reseal(path: Path, **extra: Any) -> None:
    from optimizers.journal import read_sealed

    record = read_sealed(path)
    record.pop("sha256", None)
    write_sealed(path, {**record, **extra})


def write_baseline(root: Path, method: str, condition: cells.Condition, seed: int, rng: random.Random) -> None:
    """A matched-compute baseline job: nothing charged, the single agent's N samples at the team's tokens."""
    cell = cells.GridCell(method, condition, ())
    write_job(root, cell, seed, rng)
    folder = cell.job_dir(root, seed)
    team = rng.uniform(8000, 40000)
    sample = rng.uniform(1500, 4000)
    n = max(1, round(team / sample))
    matched = {"method": method, "selection_rule": "vote" if method == "self_consistency" else "examples",
               "match": "tokens", "n": n, "team_tokens_per_problem": team, "sample_tokens_per_problem": sample,
               "single_tokens_per_problem": n * sample}
    empty = {"task": {"attempts": 0}, "reflection": None}
    budget = {"maximum": GRID_BUDGET, "charged": 0}
    _reseal(folder / "optimization.json", stop_reason="test_only_baseline", usage=empty, budget=budget)
    from optimizers.journal import read_sealed

    result = read_sealed(folder / "result.json")
    optimization = {**result["optimization"], "stop_reason": "test_only_baseline", "usage": empty, "budget": budget}
    _reseal(folder / "result.json", matched=matched, optimization=optimization,
            test_tokens_per_problem={"baseline": team, "deployed": n * sample})


def write_transfer(root: Path, cell: cells.GridCell, target: cells.Condition, seed: int, rng: random.Random) -> None:
    """A transfer job: ``cell``'s deployed prompts (tuned on its model) tested on ``target``'s model."""
    moved = cells.GridCell(cell.method, target, cell.tables)
    transfer_root = root / "transfer" / f"from-{cell.condition.model}"
    write_job(transfer_root, moved, seed, rng)
    folder = moved.job_dir(transfer_root, seed)
    from optimizers.journal import read_sealed

    result = read_sealed(folder / "result.json")
    source = {"method": cell.method, "model": cells.MODEL_IDS[cell.condition.model],
              "registry_key": cell.condition.registry_key, "topology": cell.condition.topology,
              "team_size": cell.condition.team_size}
    _reseal(folder / "result.json", cell={**result["cell"], "transfer_from": source},
            job_id=f"from-{cell.condition.model}-" + result["job_id"])


def build(root: Path, *, with_baselines: bool = False) -> tuple[int, int]:
    """(grid jobs, extra jobs: baselines and transfers) written under ``root``."""
    rng = random.Random(0)
    count = extra = 0
    jobs = list(cells.grid_jobs())
    for cell, seed in jobs:
        write_job(root, cell, seed, rng)
        count += 1
    if not with_baselines:
        return count, extra
    conditions = sorted({cell.condition for cell, _ in jobs}, key=str)
    seeds = sorted({seed for _, seed in jobs})
    for condition in conditions:
        for method in ("self_consistency", "best_of_n"):
            for seed in seeds:
                write_baseline(root, method, condition, seed, rng)
                extra += 1
    on_llama = {(cell.method, cell.condition.topology, cell.condition.team_size, cell.condition.communication)
                for cell, _ in jobs if cell.condition.model == "llama"}
    for cell, seed in jobs:
        c = cell.condition
        if c.model == "qwen" and (cell.method, c.topology, c.team_size, c.communication) in on_llama:
            write_transfer(root, cell, cells.Condition(c.topology, c.team_size, c.communication, "llama"), seed, rng)
            extra += 1
    return count, extra


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=None, help="where to build the runs tree (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the runs tree and the report")
    parser.add_argument("--bootstrap", type=int, default=2000, help="bootstrap replicates (the report's default)")
    parser.add_argument("--with-baselines", action="store_true",
                        help="also write both matched-compute baselines per condition and the qwen->llama transfer jobs")
    args = parser.parse_args(argv)
    root = args.root or Path(tempfile.mkdtemp(prefix="report-speed-"))
    runs, out = root / "runs", root / "report"
    started = time.perf_counter()
    grid_jobs, extra_jobs = build(runs, with_baselines=args.with_baselines)
    jobs = grid_jobs + extra_jobs
    built_s = time.perf_counter() - started
    from optimizers.protocol.report import page as report

    started, cpu_started = time.perf_counter(), time.process_time()
    code = report.main([str(runs), "--out", str(out), "--bootstrap", str(args.bootstrap)])
    report_s, report_cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    pages = sorted((out / "jobs").glob("*.html")) if code == 0 else []
    sizes = [p.stat().st_size for p in pages]
    summary = json.loads((out / "report.json").read_text()) if code == 0 else {}
    transfer_entries = sum(len(m["entries"]) for m in (summary.get("transfer") or {}).get("matrices", []))
    line = {"jobs": jobs, "grid_jobs": grid_jobs, "baseline_and_transfer_jobs": extra_jobs,
            "matched_rows": len(summary.get("matched") or []), "transfer_entries": transfer_entries, "build_s": round(built_s, 1), "report_s": round(report_s, 1),
            "report_cpu_s": round(report_cpu_s, 1), "target_s": TARGET_S,
            "job_pages": len(pages), "mean_page_kb": round(sum(sizes) / max(1, len(sizes)) / 1024, 1),
            "report_kb": round((out / "report.html").stat().st_size / 1024, 1) if code == 0 else None,
            "ok": code == 0 and min(report_s, report_cpu_s) < TARGET_S and len(pages) == jobs}
    print(json.dumps(line))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    else:
        print(f"kept: {root}", file=sys.stderr)
    return 0 if line["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
