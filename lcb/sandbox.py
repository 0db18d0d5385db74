"""Harness side of the sandbox: model-written code runs only in child processes.

What a child gets (see lcb/_child.py for the child side):

* only what one test needs: the program, its limits and that test's input (an anonymous memory
  file whose descriptor only that test's process reads); never an expected output or another
  test's input. The
  harness keeps the expected outputs and judges each test after its process has exited
  (lcb/judge.py), so nothing a program can reach holds an answer;
* a fresh temporary working folder, removed afterwards (in memory, /dev/shm, where it can be:
  see ``job_root``);
* a scrubbed environment (minimal PATH, UTF-8 locale, no secrets from ours);
* rlimits: address space (``LCB_FUNCTIONAL_MEMORY_BYTES``, default 4 GiB, ``0`` disables),
  CPU time (the per-test limit), file size (caps captured output), core dumps off, process
  count for non-root users; every hard limit lowered to its soft one, so none can be raised;
* least privilege, once per program (lcb/_isolate.py): a fresh network namespace (only a
  loopback that is down: no UDP, TCP, raw, packet or netlink traffic goes anywhere; abstract
  unix socket names of its own), IPC namespace (System V and POSIX IPC of its own) and PID
  namespace (the zygote is its init: a program sees and signals only its own processes), via
  an unprivileged user namespace when we are not root; as root, an unprivileged uid and gid of
  its own with no supplementary groups; no capabilities (bounding set empty) and
  ``no_new_privs``;
* a seccomp filter (lcb/_seccomp.py): no sockets but AF_UNIX, no new namespaces, no ptrace,
  pidfd_getfd, io_uring, bpf, perf, key ring or mounts; and as a layer of its own
  (``socketpair-only``) no ``socket``, ``connect`` or ``bind`` at all: a program's only sockets
  are connected pairs from ``socketpair`` (pipes too), so no unix socket that a process of the
  host listens on at a path (ssh agent, D-Bus, docker, X11, another graded program) is
  reachable, whether we run as root or not;
* Landlock where the kernel has it, once per program: writes only inside the working folder,
  reads only of the interpreter, its libraries and the working folder, no TCP; per test a
  scope-only domain (ABI 6+): no signals to and no abstract unix sockets of processes outside
  it; no ptrace-style access (``/proc/<pid>/mem``) to processes outside the domain;
* its own session; a per-test wall-clock backstop (generous: the limit is CPU time) kills the
  test's process group, the zygote (a child subreaper) kills any descendant that left the group,
  and a global backstop kills the zygote from here.

Each layer degrades on its own where the kernel does not offer it; the layers in force come
back as ``SandboxRun.layers`` and go into every verdict, record and ``lcb.evaluate`` summary.

Known limits (documented, not hidden): without Landlock, files stay readable, and a process of
the harness's own user (a grader not running as root, so without the uid switch) can read
other processes' memory and environment through /proc (the harness's included, so the
expected outputs too: tests/lcb/test_answer_peeking.py shows it with the layers off); without
Landlock ABI 6 and without a PID namespace a test process can signal its own zygote (which ends
the run as a sandbox error, never a pass). ``LCB_SANDBOX_LANDLOCK_ABI`` caps the Landlock ABI
used (``5``: as on a kernel without scoping), so the tests can show what holds there.
As root, where the interpreter lies below a folder others cannot enter (a Python under
/root), the fork server covers that folder with an empty tmpfs in a mount namespace of its own
and binds the interpreter's folders back, so the unprivileged uid can run it; where even that
fails, programs keep uid 0 (still without capabilities) and the layers say so.

Speed: one long-lived fork server per harness process has the interpreter started, the
prelude modules imported and the AST classes built, and fills program modules with the prelude's
names ahead (16 at a time); each program costs a fork, made ahead: the server forks the next
program's zygote while the current one runs, as a spare that waits for exactly one job
(lcb/_child.py ``_Spare``), so no program waits for its fork (its zygote sets up namespaces, identity,
Landlock and seccomp once, imports numpy if the program mentions it, compiles the program and
takes a filled module), each test another fork that only enforces the scope-only Landlock ruleset
its zygote made, the guard's last step, and runs. A program's zygote and tests keep to one CPU
(``_CpuPlan``), so a forked test runs where its zygote waits for it.
"""

from __future__ import annotations

import atexit
import contextlib
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

from lcb import _native, judge
from lcb.errors import LcbError

CHILD_SCRIPT = str(Path(__file__).resolve().with_name("_child.py"))
MEMORY_ENV = "LCB_FUNCTIONAL_MEMORY_BYTES"
DEFAULT_MEMORY_BYTES = 4 * 1024**3
DEFAULT_OUTPUT_LIMIT_BYTES = 32 * 1024**2
_EVENT_STREAM_CAP = 16 * 1024**2
_STARTUP_ALLOWANCE_S = 10.0
WALL_FACTOR, WALL_SLACK_S = 3.0, 5.0  # default wall-clock backstop: 3 x the CPU limit + 5 s


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


LANDLOCK_ABI_ENV = "LCB_SANDBOX_LANDLOCK_ABI"


def landlock_abi_cap() -> int | None:
    """The highest Landlock ABI the sandbox may use: env ``LCB_SANDBOX_LANDLOCK_ABI`` (unset: the
    kernel's). ``5`` runs as on a kernel without scoping (e.g. Linux 6.8): the tests use it to show
    that two programs still cannot reach each other there."""
    raw = os.environ.get(LANDLOCK_ABI_ENV, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise LcbError(f"{LANDLOCK_ABI_ENV} must be an integer Landlock ABI version (0 disables), got {raw!r}") from None
    if value < 0:
        raise LcbError(f"{LANDLOCK_ABI_ENV} must not be negative, got {value}")
    return value


NATIVE_ENV = "LCB_SANDBOX_NATIVE"


def native_helper() -> bool:
    """Whether test processes are forked and watched by the C helper (lcb/_native.py): built from
    the source beside it (built here, once per process, where missing or stale) and not switched
    off with ``LCB_SANDBOX_NATIVE=0``. Without it the same steps run in Python, more slowly."""
    raw = os.environ.get(NATIVE_ENV, "").strip()
    if raw not in ("", "0", "1"):
        raise LcbError(f"{NATIVE_ENV} must be 0 or 1, got {raw!r}")
    return raw != "0" and _native.ensure_built() is None


# For the fork server alone: its dynamic loader binds every function of the interpreter and the C
# library at start (about a millisecond, once) instead of at each function's first call. Bound
# lazily, every zygote and test process resolved again each function the server had never called
# itself and wrote the address into a page it shared with the server: a copy-on-write fault, and
# ~1 % of the CPU of grading the shared programs (benchmarks/perf/grading_speed.py). The server
# removes it from its environment at once (lcb/_child.py), so no program sees it.
EAGER_BINDING = {"LD_BIND_NOW": "1"}


def _native_arguments() -> list[str]:
    """For the fork server's (or a one-shot zygote's) command line: the hash of the helper's
    source it may load the library for (it checks the library carries it), or nothing."""
    return ["--native", _native.checked_sha256()] if native_helper() else []


_MEMORY_FOLDER, _MEMORY_FOLDER_MIN_FREE = "/dev/shm", 1024**3
_JOB_ROOT: list[str | None] = []


def job_root() -> str | None:
    """Where the jobs' folders go: /dev/shm where it is a tmpfs we may write with at least 1 GiB
    free, else the system's temporary folder. Why: each program's folder holds its job file,
    source and one output file per test, created and removed within milliseconds; on a disk
    file system (ext4 with online discard on a virtual disk, say) that costs ~3 ms of journal
    and discard per program, in memory ~0.1 ms. Nothing else of /dev/shm is open to a program
    (Landlock: reads and writes only inside its own folder)."""
    if not _JOB_ROOT:
        _JOB_ROOT.append(_MEMORY_FOLDER if _is_roomy_tmpfs(_MEMORY_FOLDER) else None)
    return _JOB_ROOT[0]


def _is_roomy_tmpfs(path: str) -> bool:
    try:
        with open("/proc/self/mounts", encoding="utf-8") as fh:
            kinds = {fields[1]: fields[2] for fields in (line.split() for line in fh) if len(fields) > 2}
        info = os.statvfs(path)
    except OSError:
        return False
    return (kinds.get(path) == "tmpfs" and os.access(path, os.W_OK | os.X_OK)
            and info.f_bavail * info.f_frsize >= _MEMORY_FOLDER_MIN_FREE)


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
    """One program and the tests to run it on (the tests stay in the harness).

    ``mode``: ``stdin`` (compare stdout with the official comparator), ``functional`` (call
    ``fn_name`` with JSON arguments) or ``exec`` (run once, capture stdout/stderr).
    ``timeout_s`` is CPU time per test; ``wall_limit_s`` the wall-clock backstop (default
    ``3 * timeout_s + 5``). ``landlock=False`` runs without Landlock, as on kernels without it;
    ``namespaces``, ``drop_privileges``, ``seccomp`` and ``sockets_paired_only`` switch the other
    layers (lcb/_isolate.py, lcb/_seccomp.py) the same way: off only to show, in tests, what each
    one stops. ``timings``: the zygote and the harness report where they spend their time (for
    ``benchmarks/perf/grading_speed.py --breakdown``).
    ``wrap_top_level``: stdin programs' top-level statements run as a function body where the
    module itself loops (fast locals, as officially; see lcb/_script.py).
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
    wall_limit_s: float | None = None
    landlock: bool = True
    wrap_top_level: bool = True
    namespaces: bool = True
    drop_privileges: bool = True
    seccomp: bool = True
    sockets_paired_only: bool = True
    native: bool = True  # the C helper where there is one (native_helper); False: the Python path
    timings: bool = False

    @property
    def wall_s(self) -> float:
        return self.wall_limit_s if self.wall_limit_s is not None else WALL_FACTOR * self.timeout_s + WALL_SLACK_S

    @property
    def backstop_s(self) -> float:
        """The global deadline: every test at its backstop, plus room for starting the zygote."""
        return (self.wall_s + 1) * len(self.tests) + 5 + _STARTUP_ALLOWANCE_S

    @property
    def limits(self) -> judge.Limits:
        return judge.Limits(self.timeout_s, self.wall_s, self.output_limit_bytes, self.capture_bytes,
                            self.got_preview_chars)

    def to_wire(self, folder: str, keep_to_cpu: int | None = None) -> dict[str, Any]:
        """What the zygote gets: no test inputs, no expected outputs. ``keep_to_cpu``: the CPU
        its processes keep to (see ``_CpuPlan``), None for any."""
        # A functional test process runs the module and the call, each allowed the full limit.
        cpu = self.timeout_s * (2 if self.mode == "functional" else 1)
        return {
            "mode": self.mode, "code": self.code, "fn_name": self.fn_name, "folder": folder,
            "cpu_limit_s": cpu, "wall_limit_s": self.wall_s, "memory_bytes": self.memory_bytes,
            "output_limit_bytes": self.output_limit_bytes, "guard": self.guard, "prelude": self.prelude,
            "backstop_s": self.backstop_s, "landlock": self.landlock, "wrap_top_level": self.wrap_top_level,
            "namespaces": self.namespaces, "drop_privileges": self.drop_privileges, "seccomp": self.seccomp,
            "sockets_paired_only": self.sockets_paired_only, "landlock_abi_cap": landlock_abi_cap(),
            "timings": self.timings, "keep_to_cpu": keep_to_cpu, "native": self.native and native_helper(),
        }


class _CpuPlan:
    """Which CPU a program's zygote and its test processes keep to: one that none of the other
    programs we are running now keeps to (the next in turn among those), or none when every CPU
    has one. Why: each test is a fork and an exit, two hand-offs. The kernel puts a freshly
    forked process on the CPU that looks idlest, which is seldom the one where its zygote is
    about to go to sleep waiting for it, so it waits for another program's work there while this
    CPU idles; kept to the zygote's CPU, it runs the moment the zygote sleeps, and wakes it there.
    Measured alternately on the 2-core machine with two workers: 5-16 % less wall time, a little
    less CPU time. Never two of our programs on one CPU: with more programs than CPUs the rest
    run where the kernel puts them (a program that computes for seconds would otherwise hold
    back the others kept to its CPU)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._taken: set[int] = set()
        self._turn = 0

    def take(self) -> int | None:
        try:
            cpus = sorted(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            return None
        if len(cpus) < 2:
            return None
        with self._lock:
            self._turn += 1
            start = self._turn % len(cpus)
            cpu = next((c for c in cpus[start:] + cpus[:start] if c not in self._taken), None)
            if cpu is not None:
                self._taken.add(cpu)
            return cpu

    def give_back(self, cpu: int | None) -> None:
        if cpu is not None:
            with self._lock:
                self._taken.discard(cpu)


_CPUS = _CpuPlan()


@dataclass(frozen=True, slots=True)
class SandboxRun:
    """What came back: the child's events in order, and how the run ended for us."""

    events: tuple[dict[str, Any], ...]
    backstop_hit: bool = False
    error: str = ""
    landlock: bool = False
    duration_s: float = 0.0
    layers: tuple[str, ...] = ()  # the isolation layers in force (see ``describe_layers``)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("event") == kind]

    @property
    def finished(self) -> bool:
        return any(e.get("event") == "done" for e in self.events)


class _ForkServer:
    """One per harness process, started lazily, stopped at exit or when our process forks.
    ``pipelined``: the server forks each zygote ahead, as a spare that waits for its one program
    (lcb/_child.py ``_Spare``); False only to show, in tests, that nothing depends on it."""

    def __init__(self, pipelined: bool = True) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self.pipelined = pipelined
        self._queries = 0

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-s", CHILD_SCRIPT, "--server", str(theirs.fileno())]
                + ([] if self.pipelined else ["--no-spare"]) + _native_arguments(),
                pass_fds=[theirs.fileno()], env={**scrubbed_env(), **EAGER_BINDING}, cwd="/",
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            theirs.close()
        self._sock = ours

    def submit(self, job_path: str, fds: list[int], namespaces: bool = True, cpu: int | None = None) -> None:
        """Hand a job and its pipes (results, commands) to the server; restart it once if it died.
        ``namespaces``: whether the server prepares the zygote's namespaces (where it can);
        ``cpu``: where the zygote is to run from its first instruction on (see ``_CpuPlan``)."""
        message = f"{job_path}\n{'namespaces' if namespaces else '-'}\n{'-' if cpu is None else cpu}".encode()
        with self._lock:
            for attempt in range(2):
                if self._proc is None or self._proc.poll() is not None:
                    self._close_locked()
                    self._start()
                try:
                    socket.send_fds(self._sock, [message], fds)
                    return
                except OSError:
                    self._close_locked()
                    if attempt:
                        raise

    def idle_spare(self) -> int | None:
        """The pid of the zygote the server has forked ahead and not yet given a job (None if
        none, or no server): the server's own answer, which no program can reach or forge."""
        with self._lock:
            if self._sock is None or self._proc is None or self._proc.poll() is not None:
                return None
            self._queries += 1
            token = f"?spare {self._queries}".encode()
            try:
                self._sock.send(token)
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline:
                    self._sock.settimeout(max(deadline - time.monotonic(), 0.01))
                    reply = self._sock.recv(256)
                    if reply.startswith(token + b" "):  # (an older answer, after a timeout: skipped)
                        pid = reply[len(token) + 1:]
                        return int(pid) if pid.isdigit() else None
            except OSError:
                return None
            finally:
                with contextlib.suppress(OSError):
                    self._sock.settimeout(None)
            return None

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
    """Pids of live (non-zombie) processes below the fork server; empty when all is clean.
    The server's idle spare zygote (forked ahead for the next program, it has run nothing) is
    not counted; anything below it would be."""
    root = _SERVER.pid
    if root is None:
        return []
    spare = _SERVER.idle_spare()
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
        if cursor == root and states[pid] != "Z" and pid != spare:
            found.append(pid)
    return sorted(found)


class _EventStream:
    """JSON-line events from a zygote, read up to deadlines; kills the zygote at the global one."""

    def __init__(self, fd: int, deadline: float):
        self.fd, self.deadline = fd, deadline
        self.events: list[dict[str, Any]] = []
        self.backstop_hit = self.closed = False
        self._pending, self._received, self._next = b"", 0, 0
        self._zygote: int | None = None
        self._pidfd: int | None = None
        self._poller = select.poll()  # not select(): our fds may be above 1024 in a busy harness
        self._poller.register(fd, select.POLLIN)

    def next_event(self, until: float | None = None) -> dict[str, Any] | None:
        """The next event not yet returned; None at EOF, after the global backstop, or at ``until``."""
        while len(self.events) == self._next:
            if self.closed:
                return None
            now = time.monotonic()
            if until is not None and now >= until and now < self.deadline:
                return None
            if now >= self.deadline:
                if self.backstop_hit:  # it does not even close its pipe after a SIGKILL: give up
                    self.closed = True
                    return None
                self.backstop_hit = True
                self.kill()
                self.deadline = now + 2.0
                continue
            limit = min(self.deadline, until) if until is not None else self.deadline
            if self._poller.poll(max(limit - now, 0) * 1000):
                self._read()
        self._next += 1
        return self.events[self._next - 1]

    def _read(self) -> None:
        chunk = os.read(self.fd, 65536)
        if not chunk:
            self.closed = True
            return
        self._received += len(chunk)
        if self._received > _EVENT_STREAM_CAP:
            return  # a flood on our channel: drop it, the events we need came first
        *lines, self._pending = (self._pending + chunk).split(b"\n")
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                self.events.append(event)
                pid = event.get("pid")  # never a pid from inside a PID namespace (there the zygote is 1)
                if event.get("event") == "started" and self._zygote is None and isinstance(pid, int) and pid > 1:
                    self._watch(pid)

    def _watch(self, pid: int) -> None:
        self._zygote = pid
        try:
            self._pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self._pidfd = None

    def kill(self) -> None:
        if self._zygote is None:
            return
        if self._pidfd is not None:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except OSError:
                return
            # The zygote was alive a moment ago, so its group id cannot belong to anyone else.
        with contextlib.suppress(OSError):
            os.killpg(self._zygote, signal.SIGKILL)

    def close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


_AHEAD = 2  # tests queued at the zygote, so it starts the next one while we judge the last


def _send_test(commands: socket.socket, index: int, text: str, last: bool = False) -> None:
    """Queue one test: its input in an anonymous memory file, handed over as a descriptor.
    Only the test process reads it; it is in no folder another program could look into.
    ``last``: the zygote may end after it without waiting for us to hang up (one hand-off less)."""
    fd = os.memfd_create(f"lcb-input-{index}", os.MFD_CLOEXEC)
    try:
        data = memoryview(text.encode("utf-8"))
        while data:
            data = data[os.write(fd, data):]
        os.lseek(fd, 0, os.SEEK_SET)
        socket.send_fds(commands, [f"run {index}{' last' if last else ''}".encode()], [fd])
    finally:
        os.close(fd)


def _drive(job: SandboxJob, folder: str, stream: _EventStream, commands: socket.socket) -> list[dict[str, Any]]:
    """Run the tests in order and judge each report here, as it comes; stop after a time or
    memory limit (hanging up makes the zygote kill the test it is running and leave)."""
    verdicts: list[dict[str, Any]] = []
    judge_test = judge.JUDGES[job.mode]
    try:
        sent = 0
        while sent < min(_AHEAD, len(job.tests)):  # queued before the zygote is even ready
            _send_test(commands, sent, job.tests[sent][0], sent == len(job.tests) - 1)
            sent += 1
        while (event := stream.next_event()) is not None and event.get("event") != "ready":
            if event.get("event") in ("compile_error", "done", "error"):
                return verdicts
        if event is None:
            return verdicts
        for index, (_given, expected) in enumerate(job.tests):
            until = time.monotonic() + job.wall_s + 5.0
            while (event := stream.next_event(until)) is not None and not (
                    event.get("event") == "ran" and event.get("index") == index):
                pass
            if event is None:  # the zygote died, hung or missed its own backstop
                if not stream.closed and not stream.backstop_hit:
                    stream.kill()
                return verdicts
            seen = time.monotonic()
            verdicts.append(judge_test(index, judge.Ran.from_event(event), expected, folder, job.limits))
            if job.timings:  # when the report came in, and how long judging it took
                verdicts[-1]["harness_stamps"] = [seen, time.monotonic()]
            if verdicts[-1].get("outcome") in judge.STOPPING:
                break
            if sent < len(job.tests):
                _send_test(commands, sent, job.tests[sent][0], sent == len(job.tests) - 1)
                sent += 1
    except OSError:
        return verdicts  # the zygote is gone (its events say why)
    finally:
        commands.close()  # EOF: the zygote kills what is left, says "done" and exits
        while stream.next_event() is not None:
            pass
    return verdicts


def _run_via_server(job_path: str, job: SandboxJob, folder: str, deadline: float, cpu: int | None):
    result_r, result_w = os.pipe()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        _SERVER.submit(job_path, [result_w, theirs.fileno()], job.namespaces, cpu)
    except BaseException:
        ours.close()
        raise
    finally:
        os.close(result_w)
        theirs.close()
    stream = _EventStream(result_r, deadline)
    try:
        verdicts = _drive(job, folder, stream, ours)
        return stream.events + verdicts, stream.backstop_hit
    finally:
        stream.close()
        os.close(result_r)


def _run_one_shot(job_path: str, job: SandboxJob, folder: str, deadline: float, cpu: int | None):
    """Fallback without the fork server: one fresh interpreter as the zygote (it keeps to
    ``cpu`` itself, from the job file)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-s", CHILD_SCRIPT, "--job", job_path, "--commands", str(theirs.fileno())]
            + _native_arguments(),
            cwd=folder, env=scrubbed_env(), pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    stream = _EventStream(proc.stdout.fileno(), deadline)
    stream.events.append({"event": "started", "pid": proc.pid})
    stream._watch(proc.pid)
    try:
        verdicts = _drive(job, folder, stream, ours)
        return stream.events + verdicts, stream.backstop_hit
    finally:
        stream.close()
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)  # before reaping: the group id is still ours
        proc.stdout.close()
        proc.wait()


def run_in_sandbox(job: SandboxJob, *, use_fork_server: bool = True) -> SandboxRun:
    """Run ``job`` in a fresh sandboxed zygote and return its events (the zygote's, then one
    "test"/"exec" event per judged test). Never raises for anything the program does; harness
    failures come back as ``SandboxRun.error``."""
    began = time.monotonic()
    if job.mode == "functional":
        problem = judge.functional_data_error(job.tests)
        if problem:
            return SandboxRun(({"event": "data_error", "detail": problem},), duration_s=0.0)
    folder = os.path.realpath(tempfile.mkdtemp(prefix="lcb-sbx-", dir=job_root()))
    cpu = _CPUS.take()
    try:
        job_path = os.path.join(folder, "job.json")
        with open(job_path, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(job.to_wire(folder, cpu)))  # dumps: the C encoder (dump to a file is the Python one)
        deadline = began + job.backstop_s
        run = _run_via_server if use_fork_server else _run_one_shot
        submitted = time.monotonic()
        try:
            events, backstop_hit = run(job_path, job, folder, deadline, cpu)
        except OSError as exc:
            return SandboxRun((), error=f"could not start the sandbox: {exc}",
                              duration_s=time.monotonic() - began)
        ended = time.monotonic()
    finally:
        _CPUS.give_back(cpu)
        shutil.rmtree(folder, ignore_errors=True)
    if job.timings:  # began, job handed to the server, last event in, folder removed
        events = [*events, {"event": "harness", "stamps": [began, submitted, ended, time.monotonic()]}]
    errors = [e.get("detail", "") for e in events if e.get("event") == "error"]
    finished = any(e.get("event") == "done" for e in events)
    error = errors[0] if errors else "" if finished or backstop_hit else "the sandbox ended without reporting"
    confined = any(e.get("event") == "confined" and e.get("landlock") for e in events)
    layers = next((tuple(map(str, e.get("layers") or ())) for e in events if e.get("event") == "confined"), ())
    return SandboxRun(tuple(events), backstop_hit=backstop_hit, error=error, landlock=confined,
                      duration_s=time.monotonic() - began, layers=layers)
