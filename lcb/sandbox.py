"""Harness side of the sandbox: model-written code runs only in child processes.

What a child gets (see lcb/_child.py for the child side):

* a fresh temporary working folder, removed afterwards;
* a scrubbed environment (minimal PATH, UTF-8 locale, no secrets from ours);
* rlimits: address space (``LCB_FUNCTIONAL_MEMORY_BYTES``, default 4 GiB, ``0`` disables),
  CPU time, file size (caps captured output), core dumps off, process count for non-root users;
* Landlock where the kernel has it: writes only inside the working folder, no TCP, no signals
  to processes outside the test's domain;
* its own session; on a per-test timeout the test's process group is killed, and the zygote
  (a child subreaper) kills any descendant that left the group; a global backstop
  ``(timeout + 1) * n + 5`` s kills the zygote from here.

Known limits (documented, not hidden): files stay readable (the guard is not a confidentiality
boundary; a same-user process can read ``/proc/<harness pid>/environ``), and RLIMIT_NPROC does
not bind root, where the guard and the group kills are what stops a fork bomb.

Speed: one long-lived fork server per harness process has the interpreter started and the
prelude modules imported; each program costs a fork, each test another fork.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lcb.errors import LcbError

CHILD_SCRIPT = str(Path(__file__).resolve().with_name("_child.py"))
MEMORY_ENV = "LCB_FUNCTIONAL_MEMORY_BYTES"
DEFAULT_MEMORY_BYTES = 4 * 1024**3
DEFAULT_OUTPUT_LIMIT_BYTES = 32 * 1024**2
_EVENT_STREAM_CAP = 16 * 1024**2
_STARTUP_ALLOWANCE_S = 10.0


def memory_limit_bytes() -> int:
    """The address-space limit for children: env ``LCB_FUNCTIONAL_MEMORY_BYTES`` or 4 GiB."""
    raw = os.environ.get(MEMORY_ENV, "").strip()
    if not raw:
        return DEFAULT_MEMORY_BYTES
    try:
        value = int(raw)
    except ValueError:
        raise LcbError(f"{MEMORY_ENV} must be an integer number of bytes (0 disables), got {raw!r}") from None
    if value < 0:
        raise LcbError(f"{MEMORY_ENV} must not be negative, got {value}")
    return value


def scrubbed_env() -> dict[str, str]:
    """The whole environment a child sees; nothing is inherited from ours."""
    python_dir = os.path.dirname(sys.executable)
    return {
        "PATH": f"{python_dir}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",  # reproducible set/dict-of-str iteration across runs
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "HOME": "/nonexistent",  # the zygote points HOME and TMPDIR at the job folder
    }


@dataclass(frozen=True, slots=True)
class SandboxJob:
    """One program and the inputs to run it on.

    ``mode``: ``stdin`` (compare stdout with the official comparator), ``functional`` (call
    ``fn_name`` with JSON arguments) or ``exec`` (run once, capture stdout/stderr).
    """

    mode: str
    code: str
    tests: tuple[tuple[str, str], ...]
    fn_name: str | None = None
    timeout_s: float = 6.0
    memory_bytes: int = DEFAULT_MEMORY_BYTES
    output_limit_bytes: int = DEFAULT_OUTPUT_LIMIT_BYTES
    capture_bytes: int = 1024**2
    guard: bool = True
    prelude: bool = True
    got_preview_chars: int = 300

    @property
    def backstop_s(self) -> float:
        """The official global deadline, plus room for starting the zygote."""
        return (self.timeout_s + 1) * len(self.tests) + 5 + _STARTUP_ALLOWANCE_S

    def to_wire(self, folder: str) -> dict[str, Any]:
        return {
            "mode": self.mode, "code": self.code, "fn_name": self.fn_name, "folder": folder,
            "tests": [{"input": i, "output": o} for i, o in self.tests],
            "timeout_s": self.timeout_s, "memory_bytes": self.memory_bytes,
            "output_limit_bytes": self.output_limit_bytes, "capture_bytes": self.capture_bytes,
            "guard": self.guard, "prelude": self.prelude, "backstop_s": self.backstop_s,
            "got_preview_chars": self.got_preview_chars,
        }


@dataclass(frozen=True, slots=True)
class SandboxRun:
    """What came back: the child's events in order, and how the run ended for us."""

    events: tuple[dict[str, Any], ...]
    backstop_hit: bool = False
    error: str = ""
    landlock: bool = False
    duration_s: float = 0.0

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("event") == kind]

    @property
    def finished(self) -> bool:
        return any(e.get("event") == "done" for e in self.events)


class _ForkServer:
    """One per harness process, started lazily, stopped at exit or when our process forks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-s", CHILD_SCRIPT, "--server", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], env=scrubbed_env(), cwd="/",
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            theirs.close()
        self._sock = ours

    def submit(self, job_path: str, result_w: int) -> None:
        """Hand a job and its result pipe to the server; restart it once if it died."""
        with self._lock:
            for attempt in range(2):
                if self._proc is None or self._proc.poll() is not None:
                    self._close_locked()
                    self._start()
                try:
                    socket.send_fds(self._sock, [job_path.encode()], [result_w])
                    return
                except OSError:
                    self._close_locked()
                    if attempt:
                        raise

    def _close_locked(self) -> None:
        if self._sock is not None:
            self._sock.close()  # EOF tells the server to kill its jobs and leave
            self._sock = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
            self._proc = None

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def forget(self) -> None:
        """In a forked copy of our process: never touch the parent's server."""
        self._lock = threading.Lock()
        self._proc = None
        self._sock = None


_SERVER = _ForkServer()
atexit.register(_SERVER.close)
os.register_at_fork(after_in_child=_SERVER.forget)


def fork_server_pid() -> int | None:
    """The running fork server's pid (tests use it to check that nothing is left running)."""
    return _SERVER.pid


def live_sandbox_processes() -> list[int]:
    """Pids of live (non-zombie) processes below the fork server; empty when all is clean."""
    root = _SERVER.pid
    if root is None:
        return []
    parents: dict[int, int] = {}
    states: dict[int, str] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents[int(name)], states[int(name)] = int(fields[1]), fields[0]
    found = []
    for pid in parents:
        cursor, seen = parents.get(pid), 0
        while cursor and cursor != root and seen < 64:
            cursor, seen = parents.get(cursor), seen + 1
        if cursor == root and states[pid] != "Z":
            found.append(pid)
    return sorted(found)


def _kill_zygote(pid: int, pidfd: int | None) -> None:
    if pidfd is not None:
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except OSError:
            return
        # The zygote was alive a moment ago, so its group id cannot belong to anyone else.
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _collect(fd: int, deadline: float) -> tuple[list[dict[str, Any]], bool]:
    """Read JSON-line events until EOF or the deadline; kill the zygote at the deadline."""
    events: list[dict[str, Any]] = []
    pending, received, backstop_hit = b"", 0, False
    zygote, pidfd = None, None
    poller = select.poll()  # not select(): our fds may be above 1024 in a busy harness
    poller.register(fd, select.POLLIN)
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if backstop_hit:
                    break  # it does not even close its pipe after a SIGKILL: give up on it
                backstop_hit = True
                if zygote is not None:
                    _kill_zygote(zygote, pidfd)
                deadline = time.monotonic() + 2.0
                continue
            if not poller.poll(remaining * 1000):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            received += len(chunk)
            if received > _EVENT_STREAM_CAP:
                continue  # a flood on our channel: drop it, the events we need came first
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if isinstance(event, dict):
                    events.append(event)
                    if event.get("event") == "started" and zygote is None:
                        zygote = int(event["pid"])
                        try:
                            pidfd = os.pidfd_open(zygote)
                        except (AttributeError, OSError):
                            pidfd = None
    finally:
        if pidfd is not None:
            os.close(pidfd)
    return events, backstop_hit


def _run_via_server(job_path: str, deadline: float) -> tuple[list[dict[str, Any]], bool]:
    result_r, result_w = os.pipe()
    try:
        _SERVER.submit(job_path, result_w)
    finally:
        os.close(result_w)
    try:
        return _collect(result_r, deadline)
    finally:
        os.close(result_r)


def _run_one_shot(job_path: str, folder: str, deadline: float) -> tuple[list[dict[str, Any]], bool]:
    """Fallback without the fork server: one fresh interpreter as the zygote."""
    proc = subprocess.Popen(
        [sys.executable, "-s", CHILD_SCRIPT, "--job", job_path], cwd=folder, env=scrubbed_env(),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        return _collect(proc.stdout.fileno(), deadline)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # before reaping: the group id is still ours
        except OSError:
            pass
        proc.stdout.close()
        proc.wait()


def run_in_sandbox(job: SandboxJob, *, use_fork_server: bool = True) -> SandboxRun:
    """Run ``job`` in a fresh sandboxed zygote and return its events. Never raises for
    anything the program does; harness failures come back as ``SandboxRun.error``."""
    began = time.monotonic()
    folder = os.path.realpath(tempfile.mkdtemp(prefix="lcb-sbx-"))
    try:
        job_path = os.path.join(folder, "job.json")
        with open(job_path, "w", encoding="utf-8") as fh:
            json.dump(job.to_wire(folder), fh)
        deadline = began + job.backstop_s
        try:
            if use_fork_server:
                events, backstop_hit = _run_via_server(job_path, deadline)
            else:
                events, backstop_hit = _run_one_shot(job_path, folder, deadline)
        except OSError as exc:
            return SandboxRun((), error=f"could not start the sandbox: {exc}",
                              duration_s=time.monotonic() - began)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    errors = [e.get("detail", "") for e in events if e.get("event") == "error"]
    finished = any(e.get("event") == "done" for e in events)
    error = errors[0] if errors else "" if finished or backstop_hit else "the sandbox ended without reporting"
    confined = any(e.get("event") == "confined" and e.get("landlock") for e in events)
    return SandboxRun(tuple(events), backstop_hit=backstop_hit, error=error, landlock=confined,
                      duration_s=time.monotonic() - began)

