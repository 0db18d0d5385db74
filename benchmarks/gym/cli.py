"""``python -m benchmarks.gym``: run methods on the gym's worlds and report regret.

Every (world, method, budget, seed) is one job; results go to ``OUT/jobs/.../result.json``
(atomically), so a rerun skips finished jobs and a killed run resumes. At the end (and with
``--report-only``) it prints the table and writes ``OUT/summary.json``, ``OUT/table.md`` and
``OUT/regret_vs_budget.png`` from every requested job that has a result.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from optimizers.gym.runner import RESULT_NAME, GymJob
from optimizers.gym.worlds import DEFAULT_SUITE, UnknownWorld, make_world
from optimizers.journal import read_json, write_json_atomic


class UsageError(ValueError):
    """Bad command-line input (one line, exit 2)."""


def _ints(text: str, what: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{what} must be comma-separated integers, not {text!r}") from None
    if not values or any(v < 0 for v in values):
        raise UsageError(f"{what} must be non-negative integers, not {text!r}")
    return sorted(set(values))


def _methods(text: str) -> list[str]:
    from optimizers.registry import BUILTIN_METHODS, available_methods

    if text == "all":
        return sorted(BUILTIN_METHODS)
    methods = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in methods if m not in available_methods()]
    if unknown or not methods:
        raise UsageError(f"unknown method(s) {', '.join(unknown) or text!r}; available: all, "
                         f"{', '.join(sorted(BUILTIN_METHODS))}")
    return methods


def _worlds(text: str) -> list[str]:
    names = [w.strip() for w in text.split(",") if w.strip()]
    for name in names:
        try:
            make_world(name)
        except UnknownWorld as exc:
            raise UsageError(str(exc)) from None
    if not names:
        raise UsageError("no world given")
    return names


def _params(items: Sequence[str], methods: Sequence[str]) -> dict[str, tuple[tuple[str, Any], ...]]:
    """``METHOD.KEY=VALUE`` items -> per method a sorted tuple of (key, value); values stay text
    (the methods convert and validate their own parameters)."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        name, _, value = item.partition("=")
        method, _, key = name.partition(".")
        if not key or not _ or method not in methods:
            raise UsageError(f"--param {item!r}: expected METHOD.KEY=VALUE for one of the selected methods")
        out.setdefault(method, {})[key] = value
    return {method: tuple(sorted(values.items())) for method, values in out.items()}


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gym", description=__doc__.split("\n")[0])
    parser.add_argument("--methods", default="all", help="'all' or a comma list of registered methods")
    parser.add_argument("--budgets", default="50,150,600", help="comma list of rollout budgets")
    parser.add_argument("--seeds", type=int, default=10, help="number of seeds (0..N-1)")
    parser.add_argument("--worlds", default=",".join(kind for kind, _ in DEFAULT_SUITE),
                        help="comma list: a kind (credit, joint, noisy, seed_optimal) or kind-topology")
    parser.add_argument("--out", required=True, type=Path, help="results folder (reused: finished jobs are skipped)")
    parser.add_argument("--param", action="append", default=[], metavar="METHOD.KEY=VALUE",
                        help="a method parameter (repeatable), e.g. maspob.gnn_max_epochs=100; "
                             "results then go to their own folder")
    parser.add_argument("--workers", type=int, default=1, help="jobs run in parallel processes")
    parser.add_argument("--keep-journals", action="store_true", help="keep each job's rollout/reflection journals")
    parser.add_argument("--report-only", action="store_true", help="only aggregate the results already there")
    parser.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples for the CIs")
    args = parser.parse_args(argv)
    try:
        args.method_list = _methods(args.methods)
        args.budget_list = _ints(args.budgets, "--budgets")
        args.world_list = _worlds(args.worlds)
        args.params = _params(args.param, args.method_list)
    except UsageError as exc:
        parser.exit(2, f"error: {exc}\n")
    if args.seeds < 1 or args.workers < 1 or args.bootstrap < 1:
        parser.exit(2, "error: --seeds, --workers and --bootstrap must be >= 1\n")
    return args


# Methods whose own compute dominates a gym job (MASPOB trains its GNN surrogate at every step):
# they run last, so a run cut short still has every other method on complete seeds.
SLOW_METHODS = ("maspob",)


def jobs_of(args: argparse.Namespace) -> list[GymJob]:
    """All jobs in the order they run: seed by seed (a partial run covers whole seeds), within a
    seed the costliest first (to balance workers); slow methods last, budget by budget."""
    jobs = [GymJob(w, m, b, s, args.params.get(m, ())) for w in args.world_list for m in args.method_list
            for b in args.budget_list for s in range(args.seeds)]

    def order(job: GymJob) -> tuple[bool, int, int, int, str, str]:
        slow = job.method in SLOW_METHODS
        return (slow, job.budget if slow else 0, job.seed, -job.budget, job.world, job.method)

    return sorted(jobs, key=order)


def _run_one(job: GymJob, out: Path, keep: bool) -> dict[str, Any]:
    from optimizers.gym.runner import run_job
    from optimizers.registry import MethodUnavailable

    try:
        return run_job(job, out, keep_journals=keep)
    except MethodUnavailable as exc:
        return {**job.to_dict(), "status": "unavailable", "error": str(exc)}


class Progress:
    """A one-line progress bar on stderr (done/total, failures, elapsed, ETA)."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.failed, self.skipped = total, 0, 0, 0
        self.started = time.monotonic()

    def update(self, result: dict[str, Any]) -> None:
        self.done += 1
        self.skipped += bool(result.get("skipped"))
        self.failed += result.get("status") in ("crashed", "unavailable")
        elapsed = time.monotonic() - self.started
        ran = self.done - self.skipped
        eta = elapsed / ran * (self.total - self.done) if ran else 0.0
        width = 30
        filled = int(width * self.done / max(self.total, 1))
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} jobs"
                         f" ({self.skipped} done before, {self.failed} failed) {elapsed:.0f}s, ETA {eta:.0f}s "
                         f"{result['world']}/{result['method']}/b{result['budget']}   ")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")


def run_all(args: argparse.Namespace, jobs: list[GymJob]) -> None:
    progress = Progress(len(jobs))
    try:
        if args.workers == 1:
            for job in jobs:
                progress.update(_run_one(job, args.out, args.keep_journals))
            return
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        # One thread per worker for torch/BLAS (MASPOB's surrogate), or workers fight for cores.
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        os.environ.setdefault("MKL_NUM_THREADS", "1")
        with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(_run_one, job, args.out, args.keep_journals) for job in jobs]
            for future in as_completed(futures):
                progress.update(future.result())
    finally:
        progress.close()


def collect(args: argparse.Namespace, jobs: list[GymJob]) -> list[dict[str, Any]]:
    results = []
    for job in jobs:
        path = job.directory(args.out) / RESULT_NAME
        if path.exists():
            results.append(read_json(path))
    return results


def report(args: argparse.Namespace, jobs: list[GymJob], wall_s: float | None) -> str:
    from benchmarks.gym.report import plot, summarize, table

    results = collect(args, jobs)
    if not results:
        raise UsageError(f"no finished job results under {args.out}")
    rows = summarize(results, resamples=args.bootstrap)
    text = table(rows)
    worlds = {name: make_world(name) for name in args.world_list}
    write_json_atomic(args.out / "summary.json", {
        "command": "python -m benchmarks.gym " + " ".join(sys.argv[1:]),
        "jobs_requested": len(jobs), "jobs_with_results": len(results),
        "wall_s_this_invocation": wall_s,
        "job_wall_s_total": round(sum(r.get("wall_s", 0.0) for r in results), 1),
        "worlds": {n: {"topology": w.topology, "description": w.description,
                       "seed_success": w.expected_success(w.seed_configuration()),
                       "optimal_success": w.optimal_success()} for n, w in worlds.items()},
        "rows": rows,
    })
    (args.out / "table.md").write_text(text + "\n", encoding="utf-8")
    plot(rows, args.out / "regret_vs_budget.png")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    jobs = jobs_of(args)
    started = time.monotonic()
    try:
        if not args.report_only:
            args.out.mkdir(parents=True, exist_ok=True)
            run_all(args, jobs)
        text = report(args, jobs, None if args.report_only else round(time.monotonic() - started, 1))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished jobs are kept; rerun the same command to resume", file=sys.stderr)
        return 130
    print(text)
    print(f"\nwrote {args.out / 'summary.json'}, {args.out / 'table.md'}, {args.out / 'regret_vs_budget.png'}")
    return 0
