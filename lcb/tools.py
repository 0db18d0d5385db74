"""``python_exec``: the code-running tool agents get, in the same sandbox as grading.

Each call runs the code as ``python main.py`` in a fresh sandboxed process (scrubbed environment,
rlimits, its own temporary folder, writes confined there, reads confined to the interpreter and
that folder where the kernel has Landlock, no TCP, killed with its whole process tree after
``timeout_s`` of CPU time or twice that of wall-clock time). The LCB prelude (``List``, ``defaultdict``, ... without imports; recursion limit 50000)
is on by default so that code behaves here as it will when graded. The reliability guard is off
by default: agents may legitimately start subprocesses to test their programs.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from lcb.sandbox import SandboxJob, memory_limit_bytes, run_in_sandbox

DEFAULT_TIMEOUT_S = 10.0
CAPTURE_BYTES = 1024**2  # per stream kept in ExecResult; the rest is dropped (truncated=True)
OUTPUT_LIMIT_BYTES = 8 * 1024**2  # per file the program may write; beyond that writes fail


@dataclass(frozen=True, slots=True)
class ExecResult:
    """Outcome of one ``python_exec`` call. ``exit_code`` < 0 means killed by that signal."""

    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool
    duration_s: float
    truncated: bool

    def render(self, max_chars: int = 4000) -> str:
        """The text an LLM tool call returns: exit status, stdout, stderr, clipped visibly."""
        status = f"exit code: {self.exit_code}"
        if self.timed_out:
            status += f" (timed out after {self.duration_s:.1f} s; process killed)"
        if self.truncated:
            status += " (output over the capture limit was dropped)"
        budget = max(max_chars - len(status) - 40, 200)
        out_share = budget if not self.stderr else max(budget // 2, budget - len(self.stderr))
        sections = [status, "--- stdout ---", _clip(self.stdout, out_share)]
        if self.stderr:
            sections += ["--- stderr ---", _clip(self.stderr, max(budget - min(len(self.stdout), out_share), 100))]
        return "\n".join(sections)


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = max(limit - head - 60, 0)
    note = f"\n[... {len(text) - head - tail} chars clipped ...]\n"
    return text[:head] + note + (text[-tail:] if tail else "")


def python_exec(code: str, stdin: str = "", timeout_s: float = DEFAULT_TIMEOUT_S, *,
                guard: bool = False, prelude: bool = True) -> ExecResult:
    """Run ``code`` with ``stdin`` in a fresh sandboxed Python process."""
    # CPU time is the limit, as in grading; a program that sleeps or blocks stops at twice that.
    job = SandboxJob(mode="exec", code=code, tests=((stdin, ""),), timeout_s=timeout_s, wall_limit_s=2 * timeout_s,
                     memory_bytes=memory_limit_bytes(), output_limit_bytes=OUTPUT_LIMIT_BYTES,
                     capture_bytes=CAPTURE_BYTES, guard=guard, prelude=prelude)
    run = run_in_sandbox(job)
    results = run.of_kind("exec")
    if not results:
        reason = run.error or ("global deadline exceeded" if run.backstop_hit else "no result")
        return ExecResult("", f"sandbox error: {reason}", -1, run.backstop_hit, run.duration_s, False)
    r = results[0]
    return ExecResult(r["stdout"], r["stderr"], int(r["exit_code"]), bool(r["timed_out"]),
                      float(r["duration_s"]), bool(r["truncated"]))


_POOL_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:  # mostly waiting on children; allow more than the core count
            _POOL = ThreadPoolExecutor(max_workers=2 * (os.cpu_count() or 1) + 2,
                                       thread_name_prefix="lcb-exec")
        return _POOL


async def apython_exec(code: str, stdin: str = "", timeout_s: float = DEFAULT_TIMEOUT_S, *,
                       guard: bool = False, prelude: bool = True) -> ExecResult:
    """``python_exec`` without blocking the event loop."""
    call = functools.partial(python_exec, code, stdin, timeout_s, guard=guard, prelude=prelude)
    return await asyncio.get_running_loop().run_in_executor(_pool(), call)
