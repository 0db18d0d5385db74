"""Grading speed: our sandboxed grader vs a naive fresh-interpreter-per-test grader.

Grades the public tests of the real release_v1 rows (../shared/lcb-real beside the checkout)
with both models' shipped solutions, checks that both graders agree on every test's pass/fail,
and prints tests/second for each and the ratio (target: ours >= 5x naive). It also prints the ratio
on the programs that do not run for seconds on their own, and the bound that the slow ones put on
any grader: a few shipped solutions compute for 3-20 s on a test here, in either grader.

    .venv/bin/python benchmarks/perf/grading_speed.py [--limit N] [--workers W] [--timeout S]

The naive grader uses the same comparator and prelude; it starts ``python`` once per test
(stdin: the program as a script; functional: a small driver that loads the program as a module
and calls the method). It has no sandbox, so it is only run on these trusted recorded programs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from lcb._prelude import PRELUDE_SOURCE  # noqa: E402
from lcb.compare import outputs_match  # noqa: E402
from lcb.grading import grade  # noqa: E402
from lcb.problem import Problem, TestKind  # noqa: E402
from lcb.rows import problem_from_row  # noqa: E402
from lcb.verdict import Outcome  # noqa: E402

SHARED = ROOT / ".." / "shared" / "lcb-real"
MODEL_FILES = ("submissions_O1-Mini-2024-09-12_eval_all.v1.jsonl",
               "submissions_O1-Preview-2024-09-12_eval_all.v1.jsonl")

_DRIVER = """
import json, sys, types
module = types.ModuleType("solution")
sys.modules["solution"] = module
exec(compile({prelude!r} + {code!r}, "main.py", "exec", dont_inherit=True), module.__dict__)
cls = module.__dict__.get("Solution")
target = cls() if isinstance(cls, type) else module
result = getattr(target, {fn!r})(*[json.loads(line) for line in {args!r}.split("\\n")])
if isinstance(result, tuple):
    result = list(result)
print("PASS" if result == json.loads({expected!r}) else "FAIL")
"""


def _naive_test(problem: Problem, code: str, index: int, timeout_s: float) -> bool:
    case = problem.public_tests[index]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8",
           "PYTHONHASHSEED": "0"}
    if case.kind is TestKind.STDIN:
        argv, stdin = [sys.executable, "-c", "import sys\nsys.set_int_max_str_digits(0)\n"
                       + PRELUDE_SOURCE + code], case.input
    else:
        driver = _DRIVER.format(prelude=PRELUDE_SOURCE, code=code, fn=problem.fn_name,
                                args=case.input, expected=case.output)
        argv, stdin = [sys.executable, "-c", driver], ""
    try:
        done = subprocess.run(argv, input=stdin.encode(), capture_output=True, timeout=timeout_s, env=env,
                              cwd="/tmp")
    except subprocess.TimeoutExpired:
        return False
    if done.returncode != 0:
        return False
    out = done.stdout.decode("utf-8", errors="replace")
    return outputs_match(out, case.output) if case.kind is TestKind.STDIN else out.strip() == "PASS"


def naive_grade(problem: Problem, code: str, timeout_s: float) -> list[bool]:
    """Same policy as ours: every test is graded, except that after a timeout the rest are not."""
    results = []
    for index in range(len(problem.public_tests)):
        began = time.perf_counter()
        results.append(_naive_test(problem, code, index, timeout_s))
        if not results[-1] and time.perf_counter() - began >= timeout_s:
            results += [False] * (len(problem.public_tests) - len(results))
            break
    return results


def ours(problem: Problem, code: str, timeout_s: float) -> list[bool]:
    verdict = grade(problem, code, tests="public", timeout_s=timeout_s)
    return [t.outcome is Outcome.PASSED for t in verdict.tests]


def _timed(fn, items, workers: int, timeout_s: float) -> tuple[list[list[bool]], list[float], float]:
    def one(item):
        began = time.perf_counter()
        result = fn(item[0], item[1], timeout_s)
        return result, time.perf_counter() - began
    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pairs = list(pool.map(one, items))
    return [p[0] for p in pairs], [p[1] for p in pairs], time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="use only the first N (problem, solution) pairs")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=20.0,
                        help="per-test seconds for both graders (generous, so load cannot flip verdicts)")
    args = parser.parse_args()
    if not (SHARED / "release_v1_rows.jsonl").exists():
        print(f"error: shared data not found at {SHARED.resolve()}; nothing to benchmark", file=sys.stderr)
        return 0
    with open(SHARED / "release_v1_rows.jsonl", encoding="utf-8") as fh:
        problems = {p.id: p for p in (problem_from_row(json.loads(line), decode_private=False) for line in fh)}
    items = []
    for name in MODEL_FILES:
        with open(SHARED / name, encoding="utf-8") as fh:
            for line in fh:
                record = json.loads(line)
                if record["question_id"] in problems and problems[record["question_id"]].public_tests:
                    items.append((problems[record["question_id"]], record["code_list"][0]))
    items = items[: args.limit] if args.limit else items
    n_tests = sum(len(p.public_tests) for p, _ in items)
    print(f"{len(items)} programs, {n_tests} public tests, {args.workers} workers", file=sys.stderr)

    ours(*items[0], args.timeout)  # start the fork server outside the timed region, as a long run would
    our_results, our_times, our_wall = _timed(ours, items, args.workers, args.timeout)
    naive_results, naive_times, naive_wall = _timed(naive_grade, items, args.workers, args.timeout)

    differing = []
    for index, ((problem, code), a, b) in enumerate(zip(items, our_results, naive_results)):
        if a != b:  # load can push a slow program over the limit in one grader: rerun alone, longer
            a, b = ours(problem, code, 3 * args.timeout), naive_grade(problem, code, 3 * args.timeout)
            print(f"rerun {problem.id}: ours {a} naive {b}", file=sys.stderr)
            if a != b:
                differing.append((problem.id, a, b))
    # slow: a program that averages a second or more per test in either grader
    slow = [i for i in range(len(items)) if max(our_times[i], naive_times[i]) >= 1.0 * len(items[i][0].public_tests)]
    fast = sorted(set(range(len(items))) - set(slow))
    slow_programs = {f"{items[i][0].id}#{i}": (round(our_times[i], 1), round(naive_times[i], 1)) for i in slow}
    fast_tests = sum(len(items[i][0].public_tests) for i in fast)
    slow_compute = sum(min(our_times[i], naive_times[i]) for i in slow)
    report = {
        "programs": len(items), "tests": n_tests,
        "ours_tests_per_s": round(n_tests / our_wall, 1), "naive_tests_per_s": round(n_tests / naive_wall, 1),
        "speedup": round(naive_wall / our_wall, 2),
        "speedup_excluding_slow_programs": round(sum(naive_times[i] for i in fast) / sum(our_times[i] for i in fast), 2)
        if fast else None,
        "programs_excluded_as_slow": len(slow), "tests_in_fast_programs": fast_tests,
        # A grader with zero cost of its own still waits for the slow programs' own compute. That
        # compute is taken as the faster grader's time on them (it is nearly all compute: a
        # program's own seconds dwarf a few ms of harness), so this is about the best any grader
        # could reach on these programs.
        "speedup_bound_for_a_free_harness": round(sum(naive_times) / slow_compute, 2) if slow_compute else None,
        "slow_programs_seconds_ours_naive": slow_programs,
        "verdicts_identical": not differing,
    }
    print(json.dumps(report, indent=2))
    if differing:
        print(f"error: graders disagree on {len(differing)} programs: {differing[:10]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
