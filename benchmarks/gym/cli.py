"""``python -m benchmarks.gym``: run methods on random instances of the gym's world kinds.

Every (world kind, instance, method, budget) is one job; results go to
``OUT/jobs/<kind>@<i>/<method>/b<B>/s<i>/result.json`` (atomically), so a rerun skips finished
jobs and a killed run resumes. Jobs run instance by instance, so a partial run holds complete
instances (paired blocks). At the end (and with ``--report-only``) it writes ``OUT/summary.json``
(per kind x method x budget: instances, share of the budget spent, regret with CIs, paired
difference to random, average rank; per kind x budget: Friedman, Nemenyi CD, significant pairs),
``OUT/table.md`` and the figures ``OUT/regret_vs_budget.png``, ``OUT/cd.png``, ``OUT/ecdf.png``,
``OUT/anytime.png``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from optimizers.gym.runner import RESULT_NAME, SCALED, GymJob
from optimizers.gym.worlds import KINDS, UnknownWorld, make_world, parse_name, with_knobs
from optimizers.journal import read_json, write_json_atomic

# Test-only baselines (optimizers/matched.py) do no search: a gym row of theirs is the seed.
NOT_SEARCH = ("self_consistency", "best_of_n")


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


def all_rows() -> list[str]:
    from optimizers.registry import BUILTIN_METHODS

    return sorted([m for m in BUILTIN_METHODS if m not in NOT_SEARCH] + list(SCALED))


def _methods(text: str) -> list[str]:
    from optimizers.registry import available_methods

    if text == "all":
        return all_rows()
    methods = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in methods if m not in available_methods() and m not in SCALED]
    if unknown or not methods:
        raise UsageError(f"unknown method(s) {', '.join(unknown) or text!r}; available: all, {', '.join(all_rows())}")
    return methods


def _worlds(text: str) -> list[str]:
    names = [w.strip() for w in text.split(",") if w.strip()]
    for name in names:
        try:
            _, _, instance, _ = parse_name(name)
        except UnknownWorld as exc:
            raise UsageError(str(exc)) from None
        if instance is not None:
            raise UsageError(f"world {name!r}: give kinds (instances come from --instances)")
    if not names:
        raise UsageError("no world given")
    return names


def _pairs(items: Sequence[str], what: str) -> list[tuple[str, str]]:
    out = []
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name:
            raise UsageError(f"{what} {item!r}: expected KEY=VALUE")
        out.append((name, value))
    return out


def _params(items: Sequence[str], methods: Sequence[str]) -> dict[str, tuple[tuple[str, Any], ...]]:
    """``METHOD.KEY=VALUE`` items -> per method a sorted tuple of (key, value); values stay text
    (the methods convert and validate their own parameters)."""
    out: dict[str, dict[str, Any]] = {}
    for name, value in _pairs(items, "--param"):
        method, _, key = name.partition(".")
        if not key or method not in methods:
            raise UsageError(f"--param {name}={value}: expected METHOD.KEY=VALUE for one of the selected methods")
        out.setdefault(method, {})[key] = value
    return {method: tuple(sorted(values.items())) for method, values in out.items()}


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gym", description=__doc__.split("\n")[0])
    parser.add_argument("--methods", default="all", help="'all' or a comma list of registered methods and "
                        f"budget-scaled rows ({', '.join(SCALED)})")
    parser.add_argument("--budgets", default="50,150,600", help="comma list of rollout budgets")
    parser.add_argument("--instances", type=int, default=30, help="instances per world kind (0..N-1); for a "
                        "legacy_ world: seeds of its one world")
    parser.add_argument("--worlds", default=",".join(KINDS),
                        help="comma list of kinds (credit, joint, noisy, seed_optimal), kind-topology, or the "
                             "first gym's legacy_credit, ...")
    parser.add_argument("--knob", action="append", default=[], metavar="KEY=VALUE",
                        help="a world model knob for every world (repeatable): symptom_rate, decoy_rate, "
                             "wrong_rate, judge_noise, paraphrase, fix_rate, garble_rate")
    parser.add_argument("--out", required=True, type=Path, help="results folder (reused: finished jobs are skipped)")
    parser.add_argument("--param", action="append", default=[], metavar="METHOD.KEY=VALUE",
                        help="a method parameter (repeatable); results then go to their own folder")
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
        args.knobs = tuple(sorted(_pairs(args.knob, "--knob")))
        with_knobs(make_world(args.world_list[0] + "@0"), dict(args.knobs))  # refuse bad knobs now
    except (UsageError, UnknownWorld) as exc:
        parser.exit(2, f"error: {exc}\n")
    if args.instances < 1 or args.workers < 1 or args.bootstrap < 1:
        parser.exit(2, "error: --instances, --workers and --bootstrap must be >= 1\n")
    return args


def jobs_of(args: argparse.Namespace) -> list[GymJob]:
    """All jobs in the order they run: instance by instance (a partial run covers whole
    instances, so its comparisons stay paired), within an instance the largest budget first."""
    jobs = [GymJob(f"{w}@{i}", m, b, i, args.params.get(m, ()), args.knobs)
            for w in args.world_list for m in args.method_list for b in args.budget_list
            for i in range(args.instances)]
    return sorted(jobs, key=lambda j: (j.seed, -j.budget, j.world, j.method))


def _run_one(job: GymJob, out: Path, keep: bool) -> dict[str, Any]:
    from optimizers.gym.runner import run_job
    from optimizers.registry import MethodUnavailable

    try:
        return run_job(job, out, keep_journals=keep)
    except MethodUnavailable as exc:
        return {**job.to_dict(), "status": "unavailable", "error": str(exc)}


class Progress:
    """A progress line on stderr (done/total, failures, elapsed, ETA); one line per job when
    stderr is not a terminal (a journal of the run)."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.failed, self.skipped = total, 0, 0, 0
        self.started = time.monotonic()
        self.tty = sys.stderr.isatty()

    def update(self, result: dict[str, Any]) -> None:
        self.done += 1
        self.skipped += bool(result.get("skipped"))
        self.failed += result.get("status") in ("crashed", "unavailable", "infrastructure_invalid")
        elapsed = time.monotonic() - self.started
        ran = self.done - self.skipped
        eta = elapsed / ran * (self.total - self.done) if ran else 0.0
        line = (f"{self.done}/{self.total} jobs ({self.skipped} done before, {self.failed} failed) {elapsed:.0f}s, "
                f"ETA {eta:.0f}s {result['world']}/{result['method']}/b{result['budget']}"
                f" cpu {result.get('cpu_s', 0)}s")
        sys.stderr.write(f"\r{line}   " if self.tty else f"{line}\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.tty:
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

        # One thread per worker for numpy/torch (MASPOB's surrogate), or workers fight for cores.
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


FIGURES = ("regret_vs_budget.png", "cd.png", "ecdf.png", "anytime.png")


def report(args: argparse.Namespace, jobs: list[GymJob], wall_s: float | None) -> str:
    from benchmarks.gym.report import (cost_table, costs, plot_anytime, plot_cd, plot_ecdf, plot_regret,
                                       summarize, table)

    results = collect(args, jobs)
    if not results:
        raise UsageError(f"no finished job results under {args.out}")
    summary = summarize(results, resamples=args.bootstrap)
    price = costs(results, jobs)
    text = table(summary) + "\n\n" + cost_table(price) + (
        f"\n\nThe requested run at these rates: {price['run_cpu_s']:.0f} CPU s, "
        f"{price['run_wall_s_quiet'] / 60:.0f} min of wall time on {price['cores']} quiet cores"
        + (f" ({price['jobs_unpriced']} jobs of rows not yet measured are not counted)" if price["jobs_unpriced"]
           else "") + ".")
    largest = max(int(r["budget"]) for r in results)
    write_json_atomic(args.out / "summary.json", {
        "command": "python -m benchmarks.gym " + " ".join(sys.argv[1:]),
        "jobs_requested": len(jobs), "jobs_with_results": len(results),
        "wall_s_this_invocation": wall_s,
        "job_wall_s_total": round(sum(r.get("wall_s", 0.0) for r in results), 1),
        "job_cpu_s_total": round(sum(r.get("cpu_s", 0.0) for r in results), 1),
        "knobs": dict(args.knobs),
        "costs": price,
        "rows": summary["rows"], "cells": summary["cells"],
    })
    (args.out / "table.md").write_text(text + "\n", encoding="utf-8")
    plot_regret(summary, args.out / FIGURES[0])
    plot_cd(summary, args.out / FIGURES[1])
    plot_ecdf(results, largest, args.out / FIGURES[2])
    plot_anytime(results, largest, args.out / FIGURES[3])
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
    print(f"\nwrote {args.out / 'summary.json'}, {args.out / 'table.md'}, "
          + ", ".join(str(args.out / f) for f in FIGURES))
    return 0
