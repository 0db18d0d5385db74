"""Grading speed: our sandboxed grader vs a naive fresh-interpreter-per-test grader.

Grades the public tests of the real release_v1 rows (../shared/lcb-real beside the checkout)
with both models' shipped solutions, checks that both graders agree on every test's pass/fail,
and prints tests/second for each and the ratio (target: ours >= 5x naive). It also prints the ratio
on the programs that do not run for seconds on their own, and the bound that the slow ones put on
any grader: a few shipped solutions compute for 3-20 s on a test here, in either grader.

    .venv/bin/python benchmarks/perf/grading_speed.py [--limit N] [--workers W] [--timeout S]
    .venv/bin/python benchmarks/perf/grading_speed.py --against f1db267 [--limit N]   # vs an older grader
    .venv/bin/python benchmarks/perf/grading_speed.py --load [--limit N]              # quiet vs CPU hogs
    .venv/bin/python benchmarks/perf/grading_speed.py --against-lcb-runner LCB_CHECKOUT [--limit N] [--subsets K]
    .venv/bin/python benchmarks/perf/grading_speed.py --breakdown [--limit N] [--workers W]
    .venv/bin/python benchmarks/perf/grading_speed.py --cost-model --against-lcb-runner LCB_CHECKOUT

``--breakdown`` grades the programs' public tests with the sandbox's timings on and prints where
the harness spends its time, per program (harness preparation, server fork, namespaces and the
warden's fork, identity, Landlock, seccomp, compile, module with the prelude, clean-up) and per
test (sending the input, fork, the test process's entry, guard, module, the program itself,
reaping, the report's way back, compare): total seconds over all programs, and the mean.

``--against-lcb-runner DIR`` grades the same programs' public tests with our grader and with
LiveCodeBench's own harness (``lcb_runner.evaluation.codegen_metrics`` from the checkout DIR,
imported by ``--lcb-python``, default this interpreter), side by side in one run, each with 2
processes and the official 6 s limit, and prints both wall times, the ratio (target: ours >= 2x
as fast) and how often the two agree on whether a program passes; ``--subsets K`` repeats the
comparison on K seeded random halves of the programs that do not compute for seconds, to show how
much the ratio depends on the set. LiveCodeBench's code is only run, never copied here.

``--breakdown`` also converts the faults per test into CPU time at the cost per fault measured on
this machine (``fault_cost.py``).

``--cost-model`` (with ``--against-lcb-runner``) times both graders on two synthetic sets of one
2-line stdin program, 200 programs of 1 test and 4 programs of 400 tests, solves each grader's CPU
and wall time for ``programs x (per program + tests x per test)`` and prints the two costs and the
ratio they predict for a set with 1 to 100 tests per program: where a grader's speed comes from,
and why a set with more tests per program (hidden tests) gives another ratio than public tests.

``--against REF`` grades the same programs with this checkout's grader and with the grader of
git revision REF (exported to a temporary folder), each in its own fresh process, and prints
both throughputs (tests per wall second, and per CPU second of harness + sandbox, which the
machine's other work disturbs much less) and their ratios (target: >= 0.9). ``--load`` grades them at the official 6 s
limit on a quiet machine and again beside one CPU hog per core, and prints how many verdicts
differ (target: 0).

The naive grader uses the same comparator and prelude; it starts ``python`` once per test
(stdin: the program as a script; functional: a small driver that loads the program as a module
and calls the method). It has no sandbox, so it is only run on these trusted recorded programs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# --worker runs another revision's grader: its folder comes first on the path
sys.path.insert(0, os.environ.get("LCB_BENCH_CODE_ROOT", str(ROOT)))

from lcb._prelude import PRELUDE_SOURCE  # noqa: E402
from lcb.compare import outputs_match  # noqa: E402
import lcb.grading as grading  # noqa: E402
from lcb.grading import grade  # noqa: E402
from lcb.problem import Problem, TestCase, TestKind  # noqa: E402
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


def _load_items(limit: int | None) -> list[tuple[Problem, str]]:
    with open(SHARED / "release_v1_rows.jsonl", encoding="utf-8") as fh:
        problems = {p.id: p for p in (problem_from_row(json.loads(line), decode_private=False) for line in fh)}
    items = []
    for name in MODEL_FILES:
        with open(SHARED / name, encoding="utf-8") as fh:
            for line in fh:
                record = json.loads(line)
                if record["question_id"] in problems and problems[record["question_id"]].public_tests:
                    items.append((problems[record["question_id"]], record["code_list"][0]))
    return items[:limit] if limit else items


def _worker(args) -> int:
    """Grade the items with whatever grader is first on the path; print verdicts and timing."""
    import resource

    from lcb import sandbox

    items = _synthetic_items(*args.synthetic) if args.synthetic else _load_items(args.limit)
    if args.only:
        items = [items[int(i)] for i in args.only.split(",")]
    ours(*items[0], args.timeout)  # fork server up outside the timed region
    # In the order our batch entry point (grade_many) starts them, most work first, as
    # codegen_metrics runs its own; timed one by one here (the slow programs are told apart by
    # their times), reported in the listed order.
    plan = getattr(grading, "largest_first", None)  # (a grader older than it: the listed order)
    order = plan(items, tests="public") if plan else list(range(len(items)))
    before = resource.getrusage(resource.RUSAGE_SELF)
    started, started_times, wall = _timed(ours, [items[i] for i in order], args.workers, args.timeout)
    results, times = [None] * len(items), [0.0] * len(items)
    for position, index in enumerate(order):
        results[index], times[index] = started[position], started_times[position]
    sandbox._SERVER.close()  # reaped: the server's and its children's CPU time count as ours now
    after = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    cpu = sum(u.ru_utime + u.ru_stime for u in after) - (before.ru_utime + before.ru_stime)
    tests = [len(p.public_tests) for p, _ in items]
    print(json.dumps({"tests": sum(tests), "wall_s": wall, "tests_per_s": sum(tests) / wall, "verdicts": results,
                      "times": times, "tests_per_program": tests, "cpu_s": cpu}))
    return 0


def _run_worker(code_root: Path, args, timeout_s: float) -> dict:
    env = {**os.environ, "LCB_BENCH_CODE_ROOT": str(code_root)}
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", "--workers", str(args.workers),
            "--timeout", str(timeout_s), "--shared", str(SHARED)] + (["--limit", str(args.limit)] if args.limit else []) + (
        ["--only", args.only] if getattr(args, "only", None) else []) + (
        ["--synthetic", "x".join(map(str, args.synthetic))] if getattr(args, "synthetic", None) else [])
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"worker for {code_root} failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


_LCB_DRIVER = """
import json, resource, sys, time
sys.setrecursionlimit(10000)
from lcb_runner.evaluation import codegen_metrics
samples, generations, workers, timeout = json.load(sys.stdin)
def cpu():
    return sum(u.ru_utime + u.ru_stime for u in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))
cpu_before = cpu()  # grading only, not this interpreter's start and imports
began = time.perf_counter()
_metrics, results, _meta = codegen_metrics(samples, generations, k_list=[1], num_process_evaluate=workers,
                                           timeout=timeout)
wall = time.perf_counter() - began
print(json.dumps({"wall_s": wall, "cpu_s": cpu() - cpu_before, "solved": [all(r is True for r in results[i][0]) and bool(results[i][0])
                                              for i in range(len(samples))]}))
"""


def _lcb_runner(args, items: list[tuple[Problem, str]]) -> dict:
    """LiveCodeBench's own harness on the items' public tests, in its own process."""
    samples = [{"input_output": json.dumps({"inputs": [c.input for c in p.public_tests],
                                            "outputs": [c.output for c in p.public_tests],
                                            "fn_name": p.fn_name})} for p, _ in items]
    generations = [[code] for _, code in items]
    env = {**os.environ, "PYTHONPATH": str(Path(args.against_lcb_runner).resolve()), "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([args.lcb_python, "-c", _LCB_DRIVER], input=json.dumps([samples, generations, 2, 6]),
                          env=env, capture_output=True, text=True, check=False, cwd=tempfile.gettempdir())
    if done.returncode != 0:
        raise RuntimeError(f"lcb_runner failed: {done.stderr.strip()[-800:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _side_by_side(args, items: list[tuple[Problem, str]], picked: list[int] | None = None) -> dict:
    """Both graders on the same programs (``picked``: their indices in the shared list)."""
    if picked is not None:
        args.only = ",".join(map(str, picked))
        items = [items[i] for i in picked]
    ours_run = _run_worker(ROOT, args, 6.0)
    lcb_run = _lcb_runner(args, items)
    ours_solved = [all(v) and bool(v) for v in ours_run["verdicts"]]
    agree = sum(a == b for a, b in zip(ours_solved, lcb_run["solved"]))
    differing = [f"{items[i][0].id}: ours {a} lcb {b}"
                 for i, (a, b) in enumerate(zip(ours_solved, lcb_run["solved"])) if a != b]
    return {"programs": len(items), "tests": ours_run["tests"],
            "ours_wall_s": round(ours_run["wall_s"], 1), "lcb_runner_wall_s": round(lcb_run["wall_s"], 1),
            "ratio_lcb_over_ours": round(lcb_run["wall_s"] / ours_run["wall_s"], 2),
            # CPU seconds of everything each grader started: what grading costs the machine,
            # much less disturbed than wall time by whatever else the machine is doing
            "ours_cpu_s": round(ours_run["cpu_s"], 1), "lcb_runner_cpu_s": round(lcb_run["cpu_s"], 1),
            "cpu_ratio_lcb_over_ours": round(lcb_run["cpu_s"] / ours_run["cpu_s"], 2),
            "verdicts_agree": f"{agree}/{len(items)}", "differing": differing[:20],
            "_times": ours_run["times"]}


COST_MODEL_PROGRAM = "n = int(input())\nprint(sum(range(n)))\n"
COST_MODEL_SHAPES = ((200, 1), (4, 400))  # (programs, tests each): per-program cost, then per-test cost


def _synthetic_items(programs: int, tests: int) -> list[tuple[Problem, str]]:
    """``programs`` copies of one 2-line stdin program, each with ``tests`` tests it passes."""
    cases = tuple(TestCase(f"{i}\n", str(sum(range(i))), TestKind.STDIN) for i in range(tests))
    problem = Problem(id=f"synthetic-{tests}", title="", statement="", platform="atcoder", difficulty="easy",
                      contest_date="", starter_code="", fn_name=None, public_tests=cases, private_tests=())
    return [(problem, COST_MODEL_PROGRAM)] * programs


def fit_costs(runs: list[tuple[int, int, float]]) -> tuple[float, float]:
    """(per program, per test) from two runs (programs, tests each, seconds), each taken to cost
    ``programs x (per program + tests x per test)``."""
    (p1, t1, s1), (p2, t2, s2) = runs
    det = p1 * p2 * (t2 - t1)
    if det == 0:
        raise ValueError("two runs with different tests per program are needed")
    per_test = (p1 * s2 - p2 * s1) / det
    return (s1 - p1 * t1 * per_test) / p1, per_test


def _cost_model(args) -> int:
    """Both graders on the synthetic shapes; each one's costs and the ratio they predict."""
    args.workers, args.timeout = 2, 6.0
    measured: dict[str, dict[str, list]] = {"ours": {"cpu_s": [], "wall_s": []}, "lcb_runner": {"cpu_s": [], "wall_s": []}}
    for programs, tests in COST_MODEL_SHAPES:
        args.synthetic = (programs, tests)
        items = _synthetic_items(programs, tests)
        for name, run in (("ours", _run_worker(ROOT, args, args.timeout)), ("lcb_runner", _lcb_runner(args, items))):
            solved = [all(v) and bool(v) for v in run["verdicts"]] if name == "ours" else run["solved"]
            if not all(solved):
                print(f"error: {name} failed the synthetic program ({programs} x {tests} tests)", file=sys.stderr)
                return 1
            for key in ("cpu_s", "wall_s"):
                measured[name][key].append((programs, tests, run[key]))
        print(f"{programs} programs x {tests} tests: ours {measured['ours']['wall_s'][-1][2]:.2f} s, "
              f"codegen_metrics {measured['lcb_runner']['wall_s'][-1][2]:.2f} s of wall time", file=sys.stderr)
    costs = {name: {key: fit_costs(runs) for key, runs in by_key.items()} for name, by_key in measured.items()}
    report: dict = {"workers_each": 2, "shapes": COST_MODEL_SHAPES, "ms": {
        name: {f"{key[:-2]}_per_program": round(1000 * c[key][0], 2) for key in ("cpu_s", "wall_s")}
        | {f"{key[:-2]}_per_test": round(1000 * c[key][1], 3) for key in ("cpu_s", "wall_s")}
        for name, c in costs.items()}, "predicted_ratio_lcb_over_ours": {}}
    for tests in (1, 2.5, 5, 10, 25, 100):
        report["predicted_ratio_lcb_over_ours"][str(tests)] = {
            key: round((costs["lcb_runner"][key][0] + tests * costs["lcb_runner"][key][1])
                       / (costs["ours"][key][0] + tests * costs["ours"][key][1]), 2) for key in ("wall_s", "cpu_s")}
    print(json.dumps(report))
    return 0


def _no_lcb_checkout(args) -> int:
    """2 (with a one-line error) where --against-lcb-runner is not a LiveCodeBench checkout, else 0."""
    checkout = Path(args.against_lcb_runner)
    if not (checkout / "lcb_runner" / "evaluation" / "compute_code_generation_metrics.py").is_file():
        print(f"error: {checkout} is not a LiveCodeBench checkout (no lcb_runner/evaluation)", file=sys.stderr)
        return 2
    return 0


def _against_lcb_runner(args) -> int:
    if _no_lcb_checkout(args):
        return 2
    items = _load_items(args.limit)
    args.workers, args.timeout = 2, 6.0  # LiveCodeBench's setting, for both graders
    everything = _side_by_side(args, items)
    # A few shipped programs compute for seconds per test. On them both graders wait for the
    # program, and under load a CPU-time limit (ours) waits longer than a wall-clock one
    # (LiveCodeBench's gives up after 6 s of wall time, however little CPU the program got).
    # The harnesses themselves are compared on the rest, side by side again.
    times = everything.pop("_times")
    fast = [i for i, (problem, _) in enumerate(items) if times[i] < 1.0 * len(problem.public_tests)]
    report = {"workers_each": 2, "timeout_s": 6, "all_programs": everything}
    if len(fast) < len(items):
        report["without_slow_programs"] = _side_by_side(args, items, fast)
        report["without_slow_programs"].pop("_times")
        report["slow_programs"] = [f"{items[i][0].id}#{i}" for i in range(len(items)) if i not in set(fast)]  # one problem, two models: by position
    if args.subsets:
        report["random_halves_without_slow_programs"] = _random_halves(args, items, fast)
    print(json.dumps(report, indent=2))
    return 0


def _random_halves(args, items: list[tuple[Problem, str]], fast: list[int]) -> dict:
    """The side-by-side ratio on ``--subsets`` random halves of the programs that do not compute
    for seconds (seeded, drawn without replacement): how much the figure depends on which
    programs make up the set, e.g. one that another user grades."""
    ratios, cpu_ratios = [], []
    for k in range(args.subsets):
        picked = sorted(random.Random(f"grading-speed-half-{k}").sample(fast, len(fast) // 2))
        run = _side_by_side(args, items, picked)
        ratios.append(run["ratio_lcb_over_ours"])
        cpu_ratios.append(run["cpu_ratio_lcb_over_ours"])
        print(f"half {k + 1}/{args.subsets}: {run['programs']} programs, {run['ratio_lcb_over_ours']}x wall, "
              f"{run['cpu_ratio_lcb_over_ours']}x CPU, verdicts agree {run['verdicts_agree']}", file=sys.stderr)
    return {"subsets": args.subsets, "programs_each": len(fast) // 2, "wall_ratios": ratios,
            "wall_ratio_median": statistics.median(ratios), "wall_ratio_min": min(ratios),
            "cpu_ratios": cpu_ratios, "cpu_ratio_median": statistics.median(cpu_ratios)}


def _timed_job(problem: Problem, code: str, timeout_s: float):
    """The sandbox job ``grade`` would run on the public tests, with timings on."""
    from lcb.sandbox import SandboxJob, memory_limit_bytes

    cases = problem.public_tests
    kind = cases[0].kind
    return SandboxJob(mode=kind.value, code=code, tests=tuple((c.input, c.output) for c in cases),
                      fn_name=problem.fn_name if kind is TestKind.FUNCTIONAL else None, timeout_s=timeout_s,
                      memory_bytes=memory_limit_bytes(),
                      output_limit_bytes=max(32 * 1024**2, 4 * max(len(c.output) for c in cases) + 1024**2),
                      timings=True)


# Per program: (name, what it covers) from the harness's and the zygote's stamps.
_PROGRAM_PARTS = ("harness: folder, job file, hand-over", "server fork to zygote start", "namespaces (+ warden fork)",
                  "identity (uid, caps, rlimits)", "numpy import (programs naming it)", "landlock (2 domains)",
                  "seccomp", "compile", "module + prelude", "harness: rest until done, folder removed")
_LAPS = {"namespaces": 2, "identity": 3, "numpy": 4, "landlock": 5, "seccomp": 6, "compile": 7, "module": 8}
_TEST_PARTS = ("fork (zygote side)", "child scheduled after fork", "child entry (group, stdio, rlimits, scope)",
               "reliability guard", "module goes live", "program runs and exits", "reap + kill descendants",
               "report to harness", "compare (judge)", "zygote: report, wait for the next input")


def _breakdown_of(run) -> tuple[list[float], list[list[float]], dict[str, float], dict[str, int]]:
    """(per-program seconds by _PROGRAM_PARTS, per-test seconds by _TEST_PARTS, CPU seconds:
    the zygote's set-up by lap, its per-test work, the test processes before and in the program;
    minor page faults: the zygote's set-up by lap, each test process, the zygote per test)."""
    program = [0.0] * len(_PROGRAM_PARTS)
    cpu: dict[str, float] = {}
    faults: dict[str, int] = {}
    harness = next((e["stamps"] for e in run.events if e.get("event") == "harness"), None)
    ready = next((e for e in run.events if e.get("event") == "ready"), None)
    if harness is None or ready is None:
        return program, [], cpu, faults
    program[0] = harness[1] - harness[0]
    program[1] = ready["setup_began"] - harness[1]
    for name, seconds in ready["setup_s"].items():
        program[_LAPS[name]] += seconds
    for name, seconds in ready.get("setup_cpu_s", {}).items():
        cpu[f"zygote set-up: {name}"] = cpu.get(f"zygote set-up: {name}", 0.0) + seconds
    for name, count in ready.get("setup_faults", {}).items():
        faults[f"zygote set-up: {name}"] = faults.get(f"zygote set-up: {name}", 0) + count
    for event in run.events:
        if event.get("event") == "ran" and "zygote_cpu_s" in event:
            cpu["zygote per test (fork, wait, reap, report)"] = cpu.get(
                "zygote per test (fork, wait, reap, report)", 0.0) + event["zygote_cpu_s"]
            before = float(event.get("info", {}).get("cpu_at_start", 0.0))
            cpu["test process before the program (entry, guard, module)"] = cpu.get(
                "test process before the program (entry, guard, module)", 0.0) + before
            cpu["test process: program and exit"] = cpu.get("test process: program and exit", 0.0) + max(
                float(event.get("cpu_s", 0.0)) - before, 0.0)
            for key, name in (("faults", "test process"), ("zygote_faults", "zygote per test")):
                faults[name] = faults.get(name, 0) + int(event.get(key, 0))
    ran = {e["index"]: e for e in run.events if e.get("event") == "ran" and "zygote_stamps" in e}
    judged = {e["index"]: e for e in run.events if e.get("event") == "test" and "harness_stamps" in e}
    tests, previous = [], None
    for index in sorted(ran):
        z, c = ran[index]["zygote_stamps"], ran[index].get("info", {}).get("stamps")
        h = judged.get(index, {}).get("harness_stamps")
        if not c or not h or len(c) != 4:
            continue
        # the zygote idle between the previous test's end and this fork: reporting, then
        # waiting for this test's input from the harness
        waited = (z[0] - previous) if previous is not None else 0.0
        tests.append([z[1] - z[0], c[0] - z[0], c[1] - c[0], c[2] - c[1], c[3] - c[2], z[2] - c[3], z[3] - z[2],
                      h[0] - z[3], h[1] - h[0], max(waited, 0.0)])
        previous = z[3]
    last_judged = max((h[1] for h in (e["harness_stamps"] for e in judged.values())), default=None)
    program[9] = harness[3] - (last_judged if last_judged is not None else harness[2])
    program[9] = max(program[9], 0.0)
    return program, tests, cpu, faults


def _minor_faults(pid: int | None) -> int:
    """A live process's minor page faults so far (its own; /proc/PID/stat field 10), 0 if unknown."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[7])
    except (OSError, ValueError, IndexError, TypeError):
        return 0


def _fault_time(faults: dict[str, int], faulted: int) -> list[str]:
    """The per-test faults in CPU time, at this machine's measured cost per fault: the test
    process's at most (every fault a copy), the zygote's at least (every fault after the test
    process has gone: no copy) and at most."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fault_cost import fault_costs

    cost = fault_costs(pages=2000, rounds=3)
    test, zygote = (faults.get(name, 0) / max(faulted, 1) for name in ("test process", "zygote per test"))
    return ["", f"a fault costs {cost['copy_us']:.2f} us with a copy, {cost['reuse_us']:.2f} us without, "
                f"{cost['fresh_us']:.2f} us on new memory (benchmarks/perf/fault_cost.py): per test, the test "
                f"process's faults <= {test * cost['copy_us'] / 1000:.2f} ms of CPU, the zygote's "
                f"{zygote * cost['reuse_us'] / 1000:.2f}-{zygote * cost['copy_us'] / 1000:.2f} ms"]


def _breakdown(args) -> int:
    """Where the harness spends its time, per program and per test (all public tests)."""
    from lcb.sandbox import fork_server_pid, run_in_sandbox

    items = _load_items(args.limit)
    run_in_sandbox(_timed_job(*items[0], 6.0))  # fork server up outside the measurement
    server_faults = _minor_faults(fork_server_pid())
    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        runs = list(pool.map(lambda item: run_in_sandbox(_timed_job(item[0], item[1], 6.0)), items))
    wall = time.perf_counter() - began
    server_faults = _minor_faults(fork_server_pid()) - server_faults
    programs, tests, cpu, faults = [], [], {}, {}
    for run in runs:
        program, per_test, cpu_parts, fault_parts = _breakdown_of(run)
        programs.append(program)
        tests.extend(per_test)
        for name, seconds in cpu_parts.items():
            cpu[name] = cpu.get(name, 0.0) + seconds
        for name, count in fault_parts.items():
            faults[name] = faults.get(name, 0) + count
    load = os.getloadavg()
    native = sum(1 for run in runs for e in run.events if e.get("event") == "ready" and e.get("native"))
    lines = [f"{len(items)} programs, {len(tests)} tests, {args.workers} workers, wall {wall:.2f} s, "
             f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
             f"test processes forked by the C helper in {native} of {len(runs)} programs, one call per test (the "
             f"stamps below need Python between tests; grading without them runs the helper's loop, which "
             f"costs less per test: see --cost-model)" if native else
             "test processes forked by the Python path (LCB_SANDBOX_NATIVE=0, or the C helper is not built)", "",
             f"{'per program':<46} {'total s':>9} {'mean ms':>9}"]
    for i, name in enumerate(_PROGRAM_PARTS):
        total = sum(p[i] for p in programs)
        lines.append(f"{name:<46} {total:9.2f} {1000 * total / max(len(programs), 1):9.3f}")
    lines += ["", f"{'per test':<46} {'total s':>9} {'mean ms':>9} {'median ms':>10}"]
    for i, name in enumerate(_TEST_PARTS):
        values = sorted(t[i] for t in tests)
        median = values[len(values) // 2] if values else 0.0
        lines.append(f"{name:<46} {sum(values):9.2f} {1000 * sum(values) / max(len(values), 1):9.3f} "
                     f"{1000 * median:10.3f}")
    lines += ["", "CPU seconds (much less disturbed by other load than the wall-clock parts above)",
              f"{'':<60} {'total s':>9} {'per program ms':>15}"]
    for name, seconds in sorted(cpu.items()):
        lines.append(f"{name:<60} {seconds:9.2f} {1000 * seconds / max(len(programs), 1):15.3f}")
    faulted = sum(1 for run in runs for e in run.events if e.get("event") == "ran" and "faults" in e)
    lines += ["", "Minor page faults (after a fork, mostly copies of pages shared with the parent: each costs"
                  " microseconds)", f"{'':<60} {'per program':>12} {'per test':>9}",
              f"{'fork server (its own, while zygotes share its pages)':<60} {server_faults / max(len(programs), 1):12.0f}"]
    for name, count in faults.items():
        per_test = name in ("test process", "zygote per test")
        lines.append(f"{name:<60} {'' if per_test else f'{count / max(len(programs), 1):12.0f}':>12}"
                     f"{f'{count / max(faulted, 1):9.0f}' if per_test else ''}")
    lines += _fault_time(faults, faulted)
    program_total = sum(map(sum, programs))
    test_total = sum(map(sum, tests))
    lines += ["", f"worker seconds: per-program parts {program_total:.2f}, per-test parts {test_total:.2f}, "
                  f"of {args.workers * wall:.2f} ({args.workers} x wall)"]
    print("\n".join(lines))
    return 0


def _differing(a: list[list[bool]], b: list[list[bool]]) -> int:
    return sum(x != y for x, y in zip(a, b))


def _against(args) -> int:
    """This checkout's grader vs the one at git revision ``args.against``, same programs."""
    folder = Path(tempfile.mkdtemp(prefix="lcb-bench-baseline-"))
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.against, "lcb"],
                                 capture_output=True, check=False)
        if archive.returncode != 0:
            print(f"error: cannot export revision {args.against!r}: {archive.stderr.decode().strip()}",
                  file=sys.stderr)
            return 2
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
        rounds = []
        for _ in range(args.rounds):  # alternate, so drifting machine load hits both alike
            rounds.append((_run_worker(ROOT, args, args.timeout), _run_worker(folder, args, args.timeout)))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    new = sorted(r[0]["tests_per_s"] for r in rounds)[len(rounds) // 2]
    old = sorted(r[1]["tests_per_s"] for r in rounds)[len(rounds) // 2]
    # CPU seconds of harness, server, zygotes and programs together: what grading costs the
    # machine, much less sensitive than wall time to what else the machine is doing.
    new_cpu = sorted(r[0]["tests"] / r[0]["cpu_s"] for r in rounds)[len(rounds) // 2]
    old_cpu = sorted(r[1]["tests"] / r[1]["cpu_s"] for r in rounds)[len(rounds) // 2]
    report = {"tests": rounds[0][0]["tests"], "rounds": args.rounds, "workers": args.workers,
              "new_tests_per_cpu_s": round(new_cpu, 1), f"{args.against}_tests_per_cpu_s": round(old_cpu, 1),
              "ratio_new_over_old_cpu": round(new_cpu / old_cpu, 3),
              "new_tests_per_s": round(new, 1), f"{args.against}_tests_per_s": round(old, 1),
              "ratio_new_over_old": round(new / old, 3),
              "verdicts_differing": _differing(rounds[0][0]["verdicts"], rounds[0][1]["verdicts"])}
    print(json.dumps(report, indent=2))
    return 0


def _load(args) -> int:
    """Verdicts at the official limit, quiet and beside a CPU hog on every core."""
    quiet = _run_worker(ROOT, args, 6.0)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True:\n    pass\n"]) for _ in range(os.cpu_count() or 1)]
    try:
        loaded = _run_worker(ROOT, args, 6.0)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    differing = [i for i, (a, b) in enumerate(zip(quiet["verdicts"], loaded["verdicts"])) if a != b]
    report = {"programs": len(quiet["verdicts"]), "tests": quiet["tests"], "hogs": len(hogs),
              "quiet_tests_per_s": round(quiet["tests_per_s"], 1), "loaded_tests_per_s": round(loaded["tests_per_s"], 1),
              "verdicts_differing": len(differing), "differing_programs": differing[:20]}
    print(json.dumps(report, indent=2))
    return 0


def _shape(text: str) -> tuple[int, int]:
    programs, _, tests = text.partition("x")
    return int(programs), int(tests)


def main() -> int:
    global SHARED
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="use only the first N (problem, solution) pairs")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=20.0,
                        help="per-test seconds for both graders (generous, so load cannot flip verdicts)")
    parser.add_argument("--against", metavar="REF", help="compare throughput with the grader of git revision REF")
    parser.add_argument("--rounds", type=int, default=3, help="--against: alternating runs per grader (median)")
    parser.add_argument("--load", action="store_true", help="verdicts quiet vs beside a CPU hog per core")
    parser.add_argument("--against-lcb-runner", metavar="DIR",
                        help="compare with LiveCodeBench's codegen_metrics from the checkout DIR")
    parser.add_argument("--lcb-python", default=sys.executable,
                        help="--against-lcb-runner: the interpreter that can import lcb_runner's evaluation")
    parser.add_argument("--subsets", type=int, default=0, metavar="K",
                        help="--against-lcb-runner: also compare on K random halves of the programs without the slow ones")
    parser.add_argument("--breakdown", action="store_true",
                        help="print where the harness spends its time per program and per test")
    parser.add_argument("--shared", type=Path, default=SHARED,
                        help="the lcb-real folder (default: ../shared/lcb-real beside the checkout)")
    parser.add_argument("--cost-model", action="store_true",
                        help="--against-lcb-runner: per-program and per-test cost of both graders on synthetic sets")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--synthetic", type=_shape, default=None, help=argparse.SUPPRESS)  # --worker: PxT
    parser.add_argument("--only", default=None, help=argparse.SUPPRESS)  # --worker: these item indices
    args = parser.parse_args()
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    SHARED = args.shared
    if args.cost_model and not args.against_lcb_runner:
        parser.error("--cost-model needs --against-lcb-runner DIR")
    if args.cost_model:  # (synthetic programs: no shared data needed)
        return _no_lcb_checkout(args) or _cost_model(args)
    if args.worker and args.synthetic:
        return _worker(args)
    if not (SHARED / "release_v1_rows.jsonl").exists():
        print(f"error: shared data not found at {SHARED.resolve()}; nothing to benchmark", file=sys.stderr)
        return 0
    if args.worker:
        return _worker(args)
    if args.breakdown:
        return _breakdown(args)
    if args.against_lcb_runner:
        return _against_lcb_runner(args)
    if args.against:
        return _against(args)
    if args.load:
        return _load(args)
    items = _load_items(args.limit)
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
