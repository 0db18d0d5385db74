"""Harness side of one test: turn what a test process left behind into an outcome.

The child reports facts (how it ended, CPU and wall seconds, what it said about itself); the
program's stdout or its encoded return value lies in the job folder. Only here, in the harness,
are they compared with the expected output, which no sandboxed process ever sees.

Time: the limit is CPU time (LiveCodeBench's 6 s), so machine load cannot flip a verdict; a
program that blocks (sleeps, waits on input) is stopped by a generous wall-clock backstop. A
functional test's setup (running the module, making ``Solution()``) and its call each get the
full limit, as the official harness gives each its own alarm.
"""

from __future__ import annotations

import json
import os
import signal
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lcb import _returns, compare

STDOUT_FILE, STDERR_FILE, RESULT_FILE = "stdout-{}.txt", "stderr-{}.txt", "result-{}.json"  # per test index


@dataclass(frozen=True, slots=True)
class Ran:
    """One test process's end, as the zygote reported it."""

    state: str  # "exit", "cpu" (killed at the CPU limit) or "timeout" (the wall-clock backstop)
    exit_code: int | None
    signal: int | None
    cpu_s: float
    wall_s: float
    info: dict[str, Any]

    @classmethod
    def from_event(cls, event: dict[str, Any]) -> Ran:
        info = event.get("info")
        return cls(str(event.get("state", "exit")), _int_or_none(event.get("exit_code")),
                   _int_or_none(event.get("signal")), float(event.get("cpu_s", 0.0)),
                   float(event.get("wall_s", 0.0)), info if isinstance(info, dict) else {})

    @property
    def clean_exit(self) -> bool:
        return self.state == "exit" and self.exit_code == 0


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int) else None


@dataclass(frozen=True, slots=True)
class Limits:
    timeout_s: float
    wall_s: float
    output_limit_bytes: int
    capture_bytes: int
    got_preview_chars: int


def clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit // 2] + " ... " + text[-limit // 2:]


def read_head(path: str, limit: int) -> tuple[bytes, bool]:
    """The first ``limit`` bytes of a file the program left and whether there was more.

    Only a plain file with one link counts: a program may have replaced its output by a
    symlink or hard link to a file that the harness, unconfined, could read (missing or
    anything else: empty)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return b"", False
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            return b"", False
        data = fh.read(limit + 1)
    return data[:limit], len(data) > limit


def _size(path: str) -> int:
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0


def _time_limit(ran: Ran, limits: Limits, cpu_used: float) -> str | None:
    if ran.state == "timeout":
        return f"no exit within the {limits.wall_s:g} s wall-clock backstop (blocked or starved)"
    if ran.state == "cpu" or ran.signal == signal.SIGXCPU or cpu_used > limits.timeout_s:
        return f"CPU time limit exceeded ({cpu_used:.2f} s > {limits.timeout_s:g} s)"
    return None


def _death(ran: Ran) -> tuple[str, str]:
    """Outcome and detail for a test process that did not end cleanly (and not by time)."""
    if ran.signal is not None:
        if ran.signal == signal.SIGXFSZ:
            return "wrong_answer", "output limit exceeded"
        if ran.signal == signal.SIGKILL:
            return "memory_limit", "killed (SIGKILL), most likely out of memory"
        name = signal.Signals(ran.signal).name if ran.signal in signal.Signals._value2member_map_ else str(ran.signal)
        return "runtime_error", f"killed by {name}"
    info = ran.info
    if info.get("exc") == "MemoryError":
        return "memory_limit", f"MemoryError: {info.get('msg', info.get('setup_error', ''))}"
    if "setup_error" in info:
        return "runtime_error", str(info["setup_error"])
    if "result_error" in info:
        return "runtime_error", str(info["result_error"])
    if "exc" in info:
        return "runtime_error", f"{info['exc']}: {info.get('msg', '')}"
    if ran.exit_code == 125 and not info:
        return "sandbox_error", "the test process could not confine itself"
    return "runtime_error", f"exit code {ran.exit_code}"


def _base(index: int, ran: Ran) -> dict[str, Any]:
    return {"event": "test", "index": index, "duration_s": ran.wall_s, "cpu_s": ran.cpu_s, "wall_s": ran.wall_s}


def judge_stdin(index: int, ran: Ran, expected: str, folder: str, limits: Limits) -> dict[str, Any]:
    event = _base(index, ran)
    late = _time_limit(ran, limits, ran.cpu_s)
    stdout = os.path.join(folder, STDOUT_FILE.format(index))
    if late:
        return {**event, "outcome": "time_limit", "detail": late}
    if _size(stdout) >= limits.output_limit_bytes:
        # Python ignores SIGXFSZ, so hitting the cap shows up as an OSError (EFBIG).
        return {**event, "outcome": "wrong_answer", "detail": "output limit exceeded"}
    if not ran.clean_exit:
        outcome, detail = _death(ran)
        return {**event, "outcome": outcome, "detail": detail}
    raw, cut = read_head(stdout, limits.output_limit_bytes)
    got = raw.decode("utf-8", errors="replace")
    mismatch = "output limit exceeded" if cut else compare.first_mismatch(got, expected)
    if mismatch:
        return {**event, "outcome": "wrong_answer", "detail": mismatch, "got": clip(got, limits.got_preview_chars)}
    return {**event, "outcome": "passed", "detail": ""}


def judge_functional(index: int, ran: Ran, expected: str, folder: str, limits: Limits) -> dict[str, Any]:
    event = _base(index, ran)
    setup = float(ran.info.get("setup_cpu_s", 0.0)) if isinstance(ran.info.get("setup_cpu_s"), (int, float)) else 0.0
    late = _time_limit(ran, limits, max(ran.cpu_s - setup, 0.0)) or (
        f"setup took {setup:.2f} s of CPU time (> {limits.timeout_s:g} s)" if setup > limits.timeout_s else None)
    if late:
        return {**event, "outcome": "time_limit", "detail": late}
    if not ran.clean_exit or "returned" not in ran.info:
        outcome, detail = _death(ran) if not ran.clean_exit else ("runtime_error", "no return value reported")
        return {**event, "outcome": outcome, "detail": detail}
    raw, cut = read_head(os.path.join(folder, RESULT_FILE.format(index)), limits.output_limit_bytes)
    if cut:
        return {**event, "outcome": "wrong_answer", "detail": "the return value is over the size limit"}
    try:
        got = _returns.decode(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return {**event, "outcome": "runtime_error", "detail": "the reported return value is malformed"}
    if got == json.loads(expected):
        return {**event, "outcome": "passed", "detail": ""}
    return {**event, "outcome": "wrong_answer", "detail": "", "got": clip(repr(got), limits.got_preview_chars)}


def judge_exec(index: int, ran: Ran, expected: str, folder: str, limits: Limits) -> dict[str, Any]:
    """python_exec: no expected output; capture the streams."""
    del expected
    out, out_cut = read_head(os.path.join(folder, STDOUT_FILE.format(index)), limits.capture_bytes)
    err, err_cut = read_head(os.path.join(folder, STDERR_FILE.format(index)), limits.capture_bytes)
    timed_out = ran.state != "exit" or ran.signal == signal.SIGXCPU
    if ran.state != "exit":
        exit_code = -signal.SIGKILL
    elif ran.signal is not None:
        exit_code = -ran.signal
    else:
        exit_code = ran.exit_code if ran.exit_code is not None else -1
    sizes = [_size(os.path.join(folder, name.format(index))) for name in (STDOUT_FILE, STDERR_FILE)]
    truncated = out_cut or err_cut or any(size >= limits.output_limit_bytes for size in sizes)
    return {"event": "exec", "stdout": out.decode("utf-8", errors="replace"),
            "stderr": err.decode("utf-8", errors="replace"), "exit_code": exit_code, "timed_out": timed_out,
            "duration_s": ran.wall_s, "cpu_s": ran.cpu_s, "truncated": truncated, "exception": ran.info.get("exc")}


def functional_data_error(tests: tuple[tuple[str, str], ...]) -> str | None:
    """A functional test whose input is not one JSON value per line, or whose output is not JSON."""
    for index, (given, expected) in enumerate(tests):
        try:
            for line in given.split("\n"):
                json.loads(line)
            json.loads(expected)
        except ValueError as exc:
            return f"functional test {index} is not JSON per line: {clip(str(exc), 120)}"
    return None


Judge = Callable[[int, Ran, str, str, Limits], dict[str, Any]]
JUDGES: dict[str, Judge] = {"stdin": judge_stdin, "functional": judge_functional, "exec": judge_exec}
STOPPING = ("time_limit", "memory_limit")  # after these the remaining tests are not run
