"""Grade a program on a problem's tests, with LiveCodeBench's official semantics.

Stdin tests run the program as a real script (real stdin file, ``__main__``, ``sys.stdin.buffer``,
``global`` all behave as under ``python main.py``; where the module's own code loops, its top-level
statements run as a function body, so they are as fast as under the official wrapping:
lcb/_script.py) and pass iff it exits
0 and its stdout matches by the official comparator (lcb/compare.py). Functional tests call
``Solution().<fn_name>`` or the top-level function, with one JSON value per input line as
positional arguments; a returned tuple becomes a list; pass iff ``==`` the JSON-decoded expected
value. Both modes get the official implicit-import prelude, recursion limit 50000, no int-to-str
digit limit, and numpy imported before the guard, as officially.

Each test runs in its own process, which never sees an expected output or another test's
input; the harness judges what it left behind (lcb/judge.py). The limit is CPU time (6 s), with
a wall-clock backstop for programs that block, so machine load does not flip verdicts; each
test result records both times.

Deliberate differences from the official harness (all make correct programs pass, or keep
answers out of reach):
* stdin programs keep script semantics (``global``, non-final ``__main__`` guards, real
  ``sys.stdin.buffer`` / ``sys.stdout.buffer``), which the official wrapping breaks;
* a non-zero exit code fails the test (the official harness swallows ``SystemExit``);
* big integers print without the 50000-digit limit;
* ``Solution`` is used when the code defines such a class (official: when the text
  ``class Solution`` occurs anywhere in the code), and every test gets a fresh instance in a
  fresh process (official: one instance for all tests, which would let a process hold other
  tests' inputs);
* a functional return value is compared as plain data (numpy numbers and arrays as the Python
  values they equal; objects of the program's own classes are refused, so no ``__eq__`` of the
  program's decides its verdict);
* the limit is CPU time, not wall-clock time;
* all tests are graded for the pass count, except that after a time or memory limit the
  remaining tests are not run (they count as failed with the same outcome).
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

from lcb.errors import DataError
from lcb.problem import Problem, TestCase, TestKind, TestSelection
from lcb.sandbox import SandboxJob, SandboxRun, memory_limit_bytes, run_in_sandbox
from lcb.verdict import Outcome, TestResult, Verdict

DEFAULT_TIMEOUT_S = 6.0
_STOPPING = (Outcome.TIME_LIMIT, Outcome.MEMORY_LIMIT)
_CLIP = 200


def _clip(text: str, limit: int = _CLIP) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 15] + f" ... [{len(text)} chars]"


def _selected(problem: Problem, tests: TestSelection | str, max_tests: int | None) -> tuple[TestSelection, tuple[TestCase, ...]]:
    selection = TestSelection(tests)
    cases = problem.tests(selection)
    if max_tests is not None:
        if max_tests < 1:
            raise ValueError(f"max_tests must be at least 1, got {max_tests}")
        cases = cases[:max_tests]
    if not cases:
        raise DataError(f"problem {problem.id}: no {selection.value} tests to grade")
    return selection, cases


def _mode(problem: Problem, cases: tuple[TestCase, ...]) -> TestKind:
    kinds = {case.kind for case in cases}
    if len(kinds) != 1:
        raise DataError(f"problem {problem.id}: mixes stdin and functional tests")
    kind = kinds.pop()
    if kind is TestKind.FUNCTIONAL and not problem.fn_name:
        raise DataError(f"problem {problem.id}: functional tests but no fn_name (metadata.func_name)")
    return kind


def _visible_count(problem: Problem, selection: TestSelection) -> int:
    """How many leading tests of the selection are public (their content may be shown)."""
    return 0 if selection is TestSelection.HIDDEN else len(problem.public_tests)


def _results(run: SandboxRun, total: int) -> list[TestResult]:
    compile_errors = run.of_kind("compile_error")
    if compile_errors:
        detail = _clip(compile_errors[0].get("detail", ""), 300)
        return [TestResult(i, Outcome.COMPILE_ERROR, 0.0, detail) for i in range(total)]
    by_index: dict[int, TestResult] = {}
    for event in run.of_kind("test"):
        index = int(event["index"])
        if 0 <= index < total and index not in by_index:
            by_index[index] = TestResult(index, Outcome(event["outcome"]), float(event.get("wall_s", 0.0)),
                                         _clip(event.get("detail") or "", 300), float(event.get("cpu_s", 0.0)))
    results, carried = [], None
    for index in range(total):
        if index in by_index:
            result = by_index[index]
            if carried is None and result.outcome in _STOPPING:
                carried = (result.outcome, f"not run: {result.outcome.value} on test {index + 1}")
        elif carried is not None:
            result = TestResult(index, carried[0], 0.0, carried[1])
        elif run.backstop_hit:
            result = TestResult(index, Outcome.TIME_LIMIT, 0.0, "global deadline exceeded")
        else:
            result = TestResult(index, Outcome.SANDBOX_ERROR, 0.0,
                                _clip(run.error or "no result from the sandbox", 300))
        results.append(result)
    return results


def _feedback(problem: Problem, selection: TestSelection, cases: tuple[TestCase, ...],
              results: list[TestResult], run: SandboxRun | None) -> str:
    """Short text for optimizers. Hidden tests contribute counts and outcome kinds only."""
    total, passed = len(results), sum(r.outcome is Outcome.PASSED for r in results)
    head = f"passed {passed}/{total} {selection.value} tests"
    failing = next((r for r in results if r.outcome is not Outcome.PASSED), None)
    if failing is None:
        return head
    kind = cases[failing.index].kind.value
    text = f"{head}; first failure: {failing.outcome.value} on test {failing.index + 1} ({kind})"
    if failing.outcome is Outcome.COMPILE_ERROR:
        return f"{text}: {failing.detail}"  # about the code, not about any test
    if failing.index < _visible_count(problem, selection):
        case = cases[failing.index]
        got = next((e.get("got") for e in (run.of_kind("test") if run else ())
                    if e.get("index") == failing.index and e.get("got") is not None), None)
        text += f"\ninput: {_clip(case.input)}\nexpected: {_clip(case.output)}"
        if got is not None:
            text += f"\ngot: {_clip(got)}"
        if failing.detail:
            text += f"\ndetail: {failing.detail}"
    elif failing.outcome is Outcome.RUNTIME_ERROR and ":" in failing.detail:
        exc_type = failing.detail.split(":", 1)[0]
        if exc_type.isidentifier():  # the exception's type only; its message may quote the input
            text += f" [{exc_type}]"
    return text


def grade(problem: Problem, code: str | None, *, tests: TestSelection | str = TestSelection.HIDDEN,
          max_tests: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> Verdict:
    """Grade ``code`` on ``problem``'s selected tests (the first ``max_tests`` of them)."""
    selection, cases = _selected(problem, tests, max_tests)
    kind = _mode(problem, cases)
    if code is None or not code.strip():
        results = [TestResult(i, Outcome.NO_CODE, 0.0, "no code") for i in range(len(cases))]
        return Verdict(problem.id, Outcome.NO_CODE, 0, len(cases), tuple(results),
                       f"no code to grade; passed 0/{len(cases)} {selection.value} tests")
    job = SandboxJob(
        mode=kind.value, code=code, tests=tuple((c.input, c.output) for c in cases),
        fn_name=problem.fn_name if kind is TestKind.FUNCTIONAL else None,
        timeout_s=timeout_s, memory_bytes=memory_limit_bytes(),
        output_limit_bytes=max(32 * 1024**2, 4 * max(len(c.output) for c in cases) + 1024**2),
    )
    run = run_in_sandbox(job)
    data_errors = run.of_kind("data_error")
    if data_errors:
        raise DataError(f"problem {problem.id}: {data_errors[0].get('detail', '')}")
    results = _results(run, len(cases))
    failing = next((r for r in results if r.outcome is not Outcome.PASSED), None)
    passed = sum(r.outcome is Outcome.PASSED for r in results)
    return Verdict(problem.id, failing.outcome if failing else Outcome.PASSED, passed, len(cases),
                   tuple(results), _feedback(problem, selection, cases, results, run), run.layers)


_POOL_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None


def _shared_pool() -> ThreadPoolExecutor:
    """Threads only wait on sandbox processes; the bound keeps CPU contention (false TLEs) low."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="lcb-grade")
        return _POOL


async def agrade(problem: Problem, code: str | None, *, tests: TestSelection | str = TestSelection.HIDDEN,
                 max_tests: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> Verdict:
    """``grade`` without blocking the event loop; at most ``cpu_count`` gradings run at once."""
    loop = asyncio.get_running_loop()
    call = functools.partial(grade, problem, code, tests=tests, max_tests=max_tests, timeout_s=timeout_s)
    return await loop.run_in_executor(_shared_pool(), call)


def largest_first(pairs: Sequence[tuple[Problem, str | None]], *, tests: TestSelection | str = TestSelection.HIDDEN,
                  max_tests: int | None = None) -> list[int]:
    """The order ``grade_many`` starts the pairs in: most work first by what is known before
    running anything (the number of selected tests, then their input bytes; ties in input
    order). Why: a batch ends when its last program does, and a long program started last
    leaves the other workers idle meanwhile (on the 537 shipped programs in their listed
    order two programs of 1.7 and 2.3 s started near the end cost 2 workers 12 % of their
    time); starting the likely-longest first is the classic longest-processing-time rule."""
    def work(index: int) -> tuple[int, int]:
        try:
            cases = _selected(pairs[index][0], tests, max_tests)[1]
        except Exception:  # grade itself reports a bad selection; its place in the queue is moot
            return (0, 0)
        return (len(cases), sum(len(c.input) for c in cases))

    return sorted(range(len(pairs)), key=work, reverse=True)  # stable: ties keep the input order


def grade_many(items: Iterable[tuple[Problem, str | None]], *, workers: int | None = None,
               tests: TestSelection | str = TestSelection.HIDDEN, max_tests: int | None = None,
               timeout_s: float = DEFAULT_TIMEOUT_S) -> list[Verdict]:
    """Grade many (problem, code) pairs in parallel, most work first (``largest_first``);
    verdicts come back in input order."""
    pairs = list(items)
    call = functools.partial(grade, tests=tests, max_tests=max_tests, timeout_s=timeout_s)
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        futures = {index: pool.submit(call, *pairs[index]) for index in largest_first(pairs, tests=tests,
                                                                                        max_tests=max_tests)}
        return [futures[index].result() for index in range(len(pairs))]
