"""Child side of the sandbox: fork server, per-program zygote, per-test processes.

Runs as its own script (never imported by the harness): ``python _child.py --server FD`` starts a
fork server that reads jobs from a unix socket, ``python _child.py --job PATH --commands FD`` runs
one job and writes its events to stdout. Stdlib only; it loads its helper modules from its own
folder and then drops that folder from ``sys.path``. numpy, when a program mentions it, is
imported by the zygote before any test process applies the guard (as officially).

Process tree (all single-threaded, so forking is safe)::

    harness (threads) --spawn--> fork server --fork--> job zygote --fork--> test process
                                                     (one per program)      (one per test)

The server forks each zygote ahead, while the previous program runs (``_Spare``): it waits,
having done only what is the same for every program, for the one job it will ever get.
Where the harness has built and checked it, a C helper (lcb/csrc/sandbox.c, via lcb/_native.py)
runs the zygote's loop over its tests and each test process's entry, with no Python between two
tests (``_serve_tests_natively``); what it hands back, and everything without it, is the Python
path below.
The zygote is init of a PID namespace of its own: as root the fork server prepares it (and a
network namespace from its pool) before the fork; otherwise the zygote's first process creates
it inside a user namespace and stays behind as its warden (between server and zygote).

What each process knows: the server only job paths; the zygote the program, its limits and its
folder (the job file holds nothing else); a test process additionally its own test's input,
which the harness puts in an anonymous memory file and hands over as a descriptor with the "run"
command; the zygote passes it on unread. No process here ever holds an expected output or
another test's input: the harness compares what a test process left behind (stdout, or its
encoded return value) after it has exited.

The zygote sets the rlimits, enters its namespaces and drops its privileges (lcb/_isolate.py),
confines writes and reads with Landlock, installs the seccomp filter (lcb/_seccomp.py),
compiles the program once, applies the reliability guard (keeping for itself the calls the
guard disables) and prepares its module, then forks one test process per "run INDEX" command.
A test process scopes its signals (a Landlock domain of its own), blocks the guard's modules and
runs. The zygote enforces the wall-clock backstop,
kills the test's process group, measures its CPU time, and as a child subreaper kills any
descendant that tried to escape. It reports facts ("ran": how it ended, CPU and wall time, what
the process said about itself); the verdict is the harness's.
"""

from __future__ import annotations

import os

# The fork server's loader has read it (lcb/sandbox.py, EAGER_BINDING); nothing after it should.
os.environ.pop("LD_BIND_NOW", None)

# Every at-fork hook registered from here on, by any module the server or a zygote imports: a
# test process is forked without running them where the only ones are known (_fork_test_process).
# Nothing the interpreter imports before this line registers one (tests/lcb/test_sandbox.py).
_AT_FORK_HOOKS: list[tuple] = []
_register_at_fork = os.register_at_fork


def _recorded_register_at_fork(*, before=None, after_in_child=None, after_in_parent=None):
    kinds = {"before": before, "after_in_child": after_in_child, "after_in_parent": after_in_parent}
    _register_at_fork(**{kind: hook for kind, hook in kinds.items() if hook is not None})
    _AT_FORK_HOOKS.append((before, after_in_child, after_in_parent))  # (once the call was accepted)


os.register_at_fork = _recorded_register_at_fork

import atexit  # noqa: E402
import builtins  # noqa: E402
import collections  # noqa: E402
import ctypes  # noqa: E402
import errno  # noqa: E402
import faulthandler  # noqa: E402
import gc  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import sysconfig  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import types  # noqa: E402

# shutil imports zlib, bz2 and lzma for its archive formats: three extension modules and three
# libraries, 30 memory mappings that every fork (of a zygote, of a test) copies: ~0.1 ms each.
# The sandbox needs shutil (the guard disables three of its functions) but not them; shutil then
# offers no compressed archive formats, and a program that imports one of the three gets it.
for _name in ("zlib", "bz2", "lzma"):
    sys.modules.setdefault(_name, None)
import shutil  # noqa: E402
for _name in ("zlib", "bz2", "lzma"):
    if sys.modules.get(_name, 0) is None:
        del sys.modules[_name]

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import _isolate  # noqa: E402
import _landlock  # noqa: E402
import _native  # noqa: E402
import _returns  # noqa: E402
import _script  # noqa: E402
import _seccomp  # noqa: E402
from _prelude import PRELUDE_MODULES, PRELUDE_SOURCE  # noqa: E402

sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]


def _single_threaded_after_fork() -> None:
    """threading's after-fork hook, for a child of a single-threaded process: nothing to redo."""


# Every process here forks while it is single-threaded (the server, each zygote; a test process
# cannot fork: the guard removes os.fork). threading's after-fork hook rebuilds its thread table
# and locks for the child of a multi-threaded parent; for ours they are already right (the same
# thread, the same ident, no lock held), and running it writes to ~120 memory pages, each a
# copy-on-write fault in the child: ~0.3 ms of CPU per fork, i.e. per test. os.register_at_fork
# cannot unregister it, so its body is emptied (tests/lcb/test_sandbox.py: threads still work in
# a test process).
threading._after_fork.__code__ = _single_threaded_after_fork.__code__
for _name in ("_isolate", "_landlock", "_native", "_returns", "_script", "_seccomp", "_prelude"):
    del sys.modules[_name]  # model code must not find them by name

for _name in PRELUDE_MODULES:
    __import__(_name)  # warm: the fork server pays the import once, every test inherits it
PRELUDE_CODE = compile(PRELUDE_SOURCE, "<prelude>", "exec", dont_inherit=True)
_PRELUDE_NAMESPACE: dict = {}
exec(PRELUDE_CODE, _PRELUDE_NAMESPACE)  # also sets the recursion limit, for every process forked from here
KNOWN_NAMES = frozenset(_PRELUDE_NAMESPACE) | frozenset(dir(builtins))
# What the prelude binds, made once: each zygote puts it into the program's module (see
# program_module) instead of every test process running the 35 import statements (about a
# millisecond per test). The names the reliability guard rebinds are fetched again after the
# guard, so the module holds exactly what running the prelude after the guard would bind
# (tests/lcb/test_sandbox.py checks it).
_PRELUDE_BINDINGS = {k: v for k, v in _PRELUDE_NAMESPACE.items() if k != "__builtins__"}
_GUARD_REBINDS = ("open", "quit", "help")
del _PRELUDE_NAMESPACE
# The interpreter builds its Python-level AST classes on the first parse (a few milliseconds):
# do it here once, not in every zygote.
_script.compile_program("def _f():\n    pass\n_x = [i for i in range(1)]\n", "<warm>", known_names=KNOWN_NAMES)


def rebind_guarded(namespace: dict) -> None:
    for name in _GUARD_REBINDS:
        namespace[name] = getattr(builtins, name)

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_NPROC_HEADROOM = 64
_STATUS_FD = 3
_libc = ctypes.CDLL(None, use_errno=True)
_LANDLOCK_ABI = _landlock.abi_version()
_real_os_open = os.open
# The zygote applies the reliability guard once per program (its test processes inherit it) and
# keeps what it needs itself: the guard disables these for the program.
_os_fork, _os_kill, _os_killpg, _os_setpgid = os.fork, os.kill, os.killpg, os.setpgid


# A test process is made by the C library's fork() called through ctypes, not by os.fork().
# Why: os.fork() runs CPython's after-fork work in the child, written for the child of a
# multi-threaded parent (GIL, thread states, import lock and runtime locks made anew, at-fork
# hooks run); in the child of a single-threaded zygote it has nothing to redo, but it writes to
# ~70 memory pages shared with the zygote, each a copy-on-write fault: ~0.15 ms of CPU per test.
# What of it matters is done otherwise: the GIL is free in the child (ctypes released it around
# the call; the child takes it back as after any foreign call), and of the at-fork hooks,
# threading's is empty (above) and random's reseed is made by the zygote once the test process
# has gone, so every test process still starts from a fresh random state. That is what CPython
# 3.11's after-fork work is; with another version, or once anything registered another hook
# (a module a zygote imports for its program), os.fork() as ever.
_RAW_FORK_PYTHON = sys.version_info[:2] == (3, 11)
_libc_fork = _libc.fork
_libc_fork.restype = ctypes.c_int
_libc_fork.argtypes = []


# The C helper (lcb/csrc/sandbox.c), mapped once by the fork server (or a one-shot zygote) where
# the harness has checked its build (main, --native); a job uses it where the harness says so.
_NATIVE: _native.Helper | None = None
_NATIVE_RANDOM: tuple[int, int] | None = None  # where the helper reseeds random._inst (Helper.generator_words)


def _use_native(source_sha256: str | None) -> None:
    """Map the helper if the library file is still the one the harness checked: built from the
    source whose hash it passed (without hashing here: hashlib would map OpenSSL into every fork)."""
    global _NATIVE, _NATIVE_RANDOM
    if source_sha256 and _native.built_from(_native.LIBRARY) == source_sha256:
        _NATIVE = _native.load(verify=False)
        if _NATIVE is not None:
            _NATIVE_RANDOM = _NATIVE.generator_words(random._inst)


def _only_known_at_fork_hooks() -> bool:
    known = {(None, threading._after_fork, None), (None, random._inst.seed, None)}
    return all(hook in known for hook in _AT_FORK_HOOKS)


def _raw_fork_is_safe() -> bool:
    """Whether a fork may skip CPython's after-fork work (the C library's fork, or the C helper's):
    on the CPython whose internals we checked, and while every at-fork hook is one we know has
    nothing to redo in our children (a test process or a zygote reseeds random where it needs it)."""
    return _RAW_FORK_PYTHON and _only_known_at_fork_hooks()


def _fork_test_process() -> tuple[int, bool]:
    """fork() for a test process (see above): (pid, whether the C library's). Like os.fork(),
    raises OSError where it fails."""
    if not _raw_fork_is_safe():
        return _os_fork(), False
    pid = _libc_fork()
    if pid < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return pid, True


def _fresh_random_state() -> None:
    """In the zygote, once a raw-forked test process has gone: what random's at-fork hook would
    have done in it, done for the next one."""
    random._inst.seed()


STDOUT_FILE, STDERR_FILE, RESULT_FILE = "stdout-{}.txt", "stderr-{}.txt", "result-{}.json"  # per test index


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit // 2] + " ... " + text[-limit // 2:]


def _system_readable_paths() -> tuple[list[str], list[str]]:
    """(folders, files) every test process may read: the interpreter, its libraries, the
    system's shared libraries and time zones, a few devices. Not the home folder, the project
    checkout (except the virtual environment the interpreter runs from), /tmp, other jobs'
    folders, /proc, or /etc beyond what the dynamic loader needs."""
    folders = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        for vars_ in (None, {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}):
            try:
                folders.add(sysconfig.get_paths(vars=vars_)[key])
            except KeyError:
                pass
    folders.update(("/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin"))
    files = ["/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/etc/ld.so.cache",
             "/etc/localtime", "/etc/nsswitch.conf"]
    return sorted(f for f in folders if f and os.path.isdir(f)), [f for f in files if os.path.exists(f)]


_SYSTEM_READABLE = _system_readable_paths()


def readable_paths(folder: str) -> tuple[list[str], list[str]]:
    """What a test process of the job in ``folder`` may read: the system's part and its folder."""
    return [folder, *_SYSTEM_READABLE[0]], list(_SYSTEM_READABLE[1])


# ---------------------------------------------------------------- the reliability guard


def _refuse_writes_outside(folder: str) -> None:
    """Python-level twin of the Landlock rule: open for writing only inside ``folder``."""
    real_open, real_os_open, realpath = builtins.open, _real_os_open, os.path.realpath
    devices = {"/dev/null", "/dev/stdout", "/dev/stderr"}

    def allowed(path) -> bool:
        if isinstance(path, int):
            return True
        name = os.fsdecode(os.fspath(path))
        full = realpath(os.path.join(folder, name))
        return name in devices or full in devices or full == folder or full.startswith(folder + "/")

    def refuse(path):
        raise PermissionError(errno.EACCES, "sandbox: writing outside the working folder is refused",
                              str(path))

    def guarded_open(file, mode="r", *args, **kwargs):
        if isinstance(mode, str) and any(c in mode for c in "wax+") and not allowed(file):
            refuse(file)
        return real_open(file, mode, *args, **kwargs)

    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

    def guarded_os_open(path, flags, mode=0o777, *, dir_fd=None):
        if flags & write_flags and (dir_fd is not None or not allowed(path)):
            refuse(path)
        return real_os_open(path, flags, mode, dir_fd=dir_fd)

    builtins.open = io.open = guarded_open
    os.open = guarded_os_open


# Official list plus ways to start or detach processes (setsid, spawn, exec).
_OS_DISABLED = (
    "kill", "killpg", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid",
    "fork", "forkpty", "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown",
    "chmod", "chown", "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir",
    "setsid", "setpgid", "setpgrp", "popen", "posix_spawn", "posix_spawnp",
    "execl", "execle", "execlp", "execlpe", "execv", "execve", "execvp", "execvpe",
    "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe",
)
_BLOCKED_MODULES = ("ipdb", "joblib", "resource", "psutil", "tkinter")


def block_modules() -> None:
    """The guard's last step, in each test process: the zygote itself still needs ``resource``
    (``os.wait4`` imports it for its result)."""
    for name in _BLOCKED_MODULES:
        sys.modules[name] = None


def reliability_guard(folder: str, block: bool = True) -> None:
    """Our version of LiveCodeBench's guard, applied only inside a disposable test process.

    Like the official one it is not a security boundary by itself (rlimits, Landlock, the own
    session and the subreaper are); it makes the common destructive calls fail fast.
    """
    faulthandler.disable()
    builtins.quit = None  # official: quit() is gone, exit() stays
    builtins.help = None
    os.environ["OMP_NUM_THREADS"] = "1"
    _refuse_writes_outside(folder)
    for name in _OS_DISABLED:
        if hasattr(os, name):
            setattr(os, name, None)
    shutil.rmtree = shutil.move = shutil.chown = None
    subprocess.Popen = None
    if block:
        block_modules()


# ---------------------------------------------------------------- test process side


def _enter_test_process(job: dict, status_w: int, stdin: int, stdout: str | None, stderr: str | None) -> None:
    """Runs first in every forked test process: own group, stdio, limits, confinement.
    ``stdin``: the descriptor of this test's input (a memfd the harness filled); ``stdout``,
    ``stderr``: files in the job folder, None for /dev/null."""
    _os_setpgid(0, 0)
    if job["zygote_pid"] != 1:  # init of our PID namespace: its end kills us without being asked
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != job["zygote_pid"]:  # the zygote died between fork and prctl
        os._exit(137)
    # A domain of its own (the zygote made the ruleset once): no signals to the zygote or others.
    # First, while the ruleset's descriptor is where the zygote left it (the dup2s below may reuse its number).
    if job["scope_ruleset"] is not None and not _landlock.enforce(job["scope_ruleset"]):
        os._exit(125)  # confinement was promised for this job: never run unconfined
    os.dup2(stdin, 0)
    for target, path in ((1, stdout), (2, stderr)):
        if path is None:  # the zygote opened /dev/null once for all its tests
            os.dup2(job["devnull_fd"], target)
            continue
        fd = _real_os_open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, target)
        os.close(fd)
    os.dup2(status_w, _STATUS_FD)
    os.closerange(_STATUS_FD + 1, 1 << 20)  # the zygote's channels, the job file, the ruleset: gone
    for which, value in job["test_rlimits"]:  # worked out once by the zygote (see _test_rlimits)
        resource.setrlimit(which, (value, value))


def _test_rlimits(job: dict) -> tuple[tuple[int, int], ...]:
    """In the zygote, once per program: the limits each test process sets for itself (soft and
    hard alike, never above the hard limit it inherits from here)."""
    limits = [(resource.RLIMIT_CPU, math.ceil(job["cpu_limit_s"] * 1.5) + 1),  # a backstop: the zygote watches the CPU clock
              (resource.RLIMIT_FSIZE, job["output_limit_bytes"])]
    if job["nproc_limit"]:  # RLIMIT_NPROC counts per user and is not enforced for root
        limits.append((resource.RLIMIT_NPROC, job["nproc_limit"]))
    return tuple((which, _within_hard_limit(which, value)) for which, value in limits)


def _stamp(stamps: list[float] | None, report: bool = False) -> None:
    """With ``timings``: when a test process reached each step (entered, guarded, module live)."""
    if stamps is not None:
        stamps.append(time.monotonic())
        if report:
            _report({"stamps": stamps, "cpu_at_start": time.thread_time()})


def _within_hard_limit(which: int, value: int) -> int:
    """``value``, or the hard limit already there if that is lower (no process can raise it)."""
    hard = resource.getrlimit(which)[1]
    return value if hard == resource.RLIM_INFINITY else min(value, hard)


def _lower_rlimit(which: int, value: int) -> None:
    """Soft and hard to ``value`` (or to the hard limit already there, if lower): never raisable."""
    value = _within_hard_limit(which, value)
    resource.setrlimit(which, (value, value))


def _report(message: dict) -> None:
    try:
        os.write(_STATUS_FD, (json.dumps(message) + "\n").encode())
    except OSError:
        pass


def _print_user_traceback(exc: BaseException) -> None:
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next  # hide our own frames, as `python main.py` would
    traceback.print_exception(type(exc), exc, tb)


def _exit_code_of(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _finish_like_python(exit_code: int) -> None:
    """What the interpreter does at exit: join threads, run atexit, flush; then leave.
    threading's shutdown only where it has something to do: a thread the program started
    (each non-daemon one leaves its lock in _shutdown_locks, beside the main thread's) or a
    threading atexit hook (concurrent.futures). Called regardless, it touches ~60 memory pages
    of this freshly forked process, each a copy: 0.15 ms per test for the many programs that
    start none."""
    locks, hooks = getattr(threading, "_shutdown_locks", None), getattr(threading, "_threading_atexits", None)
    main = getattr(getattr(threading, "_main_thread", None), "_tstate_lock", None)
    if locks is None or hooks is None or hooks or len(locks) > (main in locks):  # (unknown internals: always)
        try:
            threading._shutdown()
        except BaseException:
            pass
    try:
        atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in {id(s): s for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)}.values():
        try:
            if stream is not None:
                stream.flush()
        except BaseException:
            exit_code = exit_code or 120
    os._exit(exit_code)


def _new_module(name: str, prelude: bool) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__["__builtins__"] = builtins.__dict__  # where running the prelude would put it
    if prelude:
        module.__dict__.update(_PRELUDE_BINDINGS)
    return module


# Filling a module with the prelude's 600 bindings takes a reference to each of their objects, so
# it writes to ~270 memory pages, which a zygote shares with the fork server: ~270 copy-on-write
# faults, ~0.5 ms per program. The server fills them 16 at a time instead (each page written once
# per batch) and hands one to each zygote it forks; the spent ones go together at the next refill.
# (More at a time would save little and make every fork copy more page-table entries.)
_POOL_SIZE = 16
_pool_ready: list[types.ModuleType] = []
_pool_spent: list[types.ModuleType] = []
_FILLED: list[types.ModuleType] = []  # in a zygote: the module the server filled for it


def _filled_module() -> types.ModuleType:
    """In the server, before forking a zygote: a fresh module with the prelude's bindings."""
    if not _pool_ready:
        _pool_spent.clear()
        _pool_ready.extend(_new_module("__main__", True) for _ in range(_POOL_SIZE))
        gc.freeze()  # no collection in the server walks (writes to) them again
    module = _pool_ready.pop()
    _pool_spent.append(module)
    return module


def program_module(job: dict) -> types.ModuleType:
    """The program's module as it is before the program runs, made once per program in the
    zygote: every test process inherits it as it is (no copying, no reference counting on the
    prelude's objects, so fewer memory pages to copy per test)."""
    functional = job["mode"] == "functional"
    name = "solution" if functional else "__main__"
    if job["prelude"] and _FILLED:
        module = _FILLED.pop()  # the server's (see _filled_module), used by no other zygote
        module.__name__ = name
    else:
        module = _new_module(name, job["prelude"])
    if not functional:
        module.__file__ = job["main_path"]
        sys.argv = [job["main_path"]]  # as `python main.py` has it (this zygote needs its own no more)
    namespace = module.__dict__
    namespace[_script.SEED] = _script.seed_function(namespace)
    if job["prelude"]:
        namespace["argv"] = sys.argv  # `from sys import *` binds the list as it is when it runs
        rebind_guarded(namespace)  # made after the guard: bind what it left, as the prelude would
    return module


def _enter_module(job: dict) -> dict:
    """In the test process (the guard already in force): the program's module goes live."""
    module = job["module"]
    sys.modules[module.__name__] = module  # dataclasses & co. look classes' modules up here
    return module.__dict__


def _begin_test_process(job: dict, status_w: int, stdin: int, stdout: str | None, stderr: str | None,
                        entered: tuple[int, float, bool] | None) -> list[float] | None:
    """The test process's entry: made here (``entered`` None), or already by the C helper
    (``entered``: its result, negative for a failed step, when the process began, and whether the
    zygote reseeded random for it). Returns the timing stamps so far (with ``timings``): when the
    process began."""
    if entered is None:
        stamps = [time.monotonic()] if job["timings"] else None
        _enter_test_process(job, status_w, stdin, stdout, stderr)
    else:
        result, began, reseeded = entered
        if result < 0:
            raise OSError(f"test process set-up: {_native.ENTRY_FAILURES.get(result, result)}")
        stamps = [began] if job["timings"] else None
        if not reseeded:  # what random's at-fork hook does (the loop leaves the zygote no turn for it)
            random._inst.seed()
    return stamps


def _script_process(job: dict, code, status_w: int, index: int, input_fd: int,
                    entered: tuple[int, float, bool] | None = None) -> None:
    """Run the program as ``python main.py`` would, with the prelude first. Never returns."""
    exit_code = 0
    graded = job["mode"] != "exec"
    try:
        stamps = _begin_test_process(job, status_w, input_fd, STDOUT_FILE.format(index),
                                     None if graded else STDERR_FILE.format(index), entered)
        _stamp(stamps)
        if job["guard"]:
            block_modules()  # the rest of the guard was applied once, in the zygote
        _stamp(stamps)
        namespace = _enter_module(job)
        _stamp(stamps, report=True)
        exec(code, namespace)
    except SystemExit as exc:
        exit_code = _exit_code_of(exc)
    except BaseException as exc:
        _report({"exc": type(exc).__name__, "msg": _clip(str(exc))})
        if not graded:  # graded runs discard stderr; a 50000-frame traceback is slow
            try:
                _print_user_traceback(exc)
            except BaseException:
                pass
        exit_code = 1
    _finish_like_python(exit_code)


def _functional_process(job: dict, code, status_w: int, index: int, input_fd: int,
                        entered: tuple[int, float, bool] | None = None) -> None:
    """Call the method on this test's arguments and leave the encoded return value behind."""
    try:
        stamps = _begin_test_process(job, status_w, input_fd, None, None, entered)
        with open(0, encoding="utf-8", closefd=False) as fh:
            args = [json.loads(line) for line in fh.read().split("\n")]
        quiet = os.open(os.devnull, os.O_RDONLY)
        os.dup2(quiet, 0)
        os.close(quiet)
        _stamp(stamps)
        if job["guard"]:
            block_modules()  # the rest of the guard was applied once, in the zygote
        _stamp(stamps)
        namespace = _enter_module(job)
        _stamp(stamps, report=True)
        exec(code, namespace)
        solution = namespace.get("Solution")
        target = solution() if isinstance(solution, type) else sys.modules["solution"]
        method = getattr(target, job["fn_name"], None)
        if not callable(method):
            where = "Solution()" if isinstance(solution, type) else "the module"
            _report({"setup_error": f"no callable {job['fn_name']!r} on {where}"})
            os._exit(1)
    except BaseException as exc:
        _report({"setup_error": f"{type(exc).__name__}: {_clip(str(exc))}", "exc": type(exc).__name__})
        os._exit(1)
    _report({"setup_cpu_s": time.process_time()})  # setup and call each get the full limit, as officially
    try:
        encoded = _returns.encode(method(*args)).encode("utf-8")
    except BaseException as exc:
        _report({"exc": type(exc).__name__, "msg": _clip(str(exc))})
        os._exit(1)
    try:
        fd = _real_os_open(RESULT_FILE.format(index), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        view = memoryview(encoded)
        while view:
            view = view[os.write(fd, view):]
        os.close(fd)
    except OSError as exc:
        _report({"result_error": "the return value is over the size limit" if exc.errno == errno.EFBIG
                 else f"could not store the return value: {exc}"})
        os._exit(1)
    _report({"returned": len(encoded)})
    os._exit(0)


_PROCESSES = {"stdin": _script_process, "exec": _script_process, "functional": _functional_process}


# ---------------------------------------------------------------- zygote side


class _Emitter:
    def __init__(self, fd: int):
        self.fd = fd

    def __call__(self, event: str, **fields) -> None:
        self._write((json.dumps({"event": event, **fields}) + "\n").encode())

    def ran(self, report: dict) -> None:
        """A "ran" event. Most tests end without a word of their own (empty info): that line is
        formatted here, the same JSON as json.dumps makes, which in a zygote just forked from
        (each test's fork protects its pages again) touches ~60 memory pages per test."""
        if report["info"] or set(report) - _PLAIN_RAN_KEYS:
            self("ran", **report)
            return
        ending = f'"exit_code": {report["exit_code"]}' if "exit_code" in report else f'"signal": {report["signal"]}'
        self._write(f'{{"event": "ran", "index": {report["index"]}, "state": "{report["state"]}", '
                    f'"wall_s": {report["wall_s"]!r}, "cpu_s": {report["cpu_s"]!r}, "info": {{}}, {ending}}}\n'.encode())

    def _write(self, data: bytes) -> None:
        while data:
            try:
                data = data[os.write(self.fd, data):]
            except BrokenPipeError:
                os._exit(0)  # the harness is gone; nothing left to tell


_PLAIN_RAN_KEYS = frozenset({"index", "state", "wall_s", "cpu_s", "info", "exit_code", "signal"})
_CHILDREN_FD: list[int] = []  # /proc/self/task/<pid>/children, opened before /proc is out of reach


def _children() -> list[int]:
    pid = os.getpid()
    if _CHILDREN_FD:
        try:
            return [int(p) for p in os.pread(_CHILDREN_FD[0], 1 << 20, 0).split()]
        except OSError:
            pass
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(p) for p in fh.read().split()]
    except OSError:
        found = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat") as fh:
                        if int(fh.read().rsplit(")", 1)[1].split()[1]) == pid:
                            found.append(int(name))
                except (OSError, IndexError, ValueError):
                    pass
        return found


def kill_all_descendants(keep: frozenset[int] = frozenset()) -> None:
    """As subreaper, orphaned descendants become our children: kill and reap until none."""
    if os.getpid() == 1 and not keep:
        if _CHILDREN_FD and _childless():
            return  # after each test, usually: its orphans would be our children by now
        _kill_namespace()
        return
    for _ in range(1000):
        try:
            while True:
                pid, _status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
        except ChildProcessError:
            return
        alive = [p for p in _children() if p not in keep]
        if not alive:
            return
        for pid in alive:
            for kill in (_os_killpg, _os_kill):
                try:
                    kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        time.sleep(0.001)


def _childless() -> bool:
    """As init of our PID namespace: whether no process is left in it (every one of them
    descends from us; an orphan is ours once its parent has exited). One read, where a
    kill(-1) that finds nobody fails with an exception (~60 us in a freshly forked zygote)."""
    try:
        return not os.pread(_CHILDREN_FD[0], 16, 0)
    except OSError:
        return False


def _kill_namespace() -> None:
    """As init of our own PID namespace: every other process in it is ours to kill (kill(-1)
    reaches exactly them), and each ends as our child (orphans are re-parented to init)."""
    while True:
        try:
            _os_kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            return  # nothing else in the namespace, not even a zombie to reap (the usual case)
        except OSError:
            pass
        try:
            os.waitpid(-1, 0)  # each was just killed: this does not wait long
        except ChildProcessError:
            return


_CPU_POLL_S = 0.02


def _cpu_clock(pid: int) -> int | None:
    """The CPU-time clock of process ``pid`` (clock_getcpuclockid), None where unavailable."""
    clock = ctypes.c_int()
    try:
        if _libc.clock_getcpuclockid(pid, ctypes.byref(clock)) != 0:
            return None
    except AttributeError:
        return None
    return clock.value


class _Watched:
    """A forked test process we can wait for with a deadline (pidfd when the kernel has it)."""

    def __init__(self, pid: int, pidfd: int | None | bool = True):
        """``pidfd``: True opens one (None where the kernel has none); or one already open, or None."""
        self.pid = pid
        self.pidfd = pidfd if pidfd is not True else None
        if pidfd is True:
            try:
                self.pidfd = os.pidfd_open(pid)
            except (AttributeError, OSError):
                pass

    def wait(self, deadline: float, cpu_limit: float | None = None,
             commands: socket.socket | None = None) -> str:
        """'exit', 'timeout' (wall clock), 'cpu' (CPU time over ``cpu_limit``) or 'stopped'
        (the harness hung up: it needs no more results). Does not reap, so the pid stays ours
        to kill. The CPU clock is polled: RLIMIT_CPU alone fires early on some (virtualized)
        kernels, before the process's own CPU clock reaches the limit. The first round waits
        for the exit alone: most tests end within it, and the less the zygote does while its
        test process shares its memory, the fewer pages either of them copies."""
        clock = None
        watch_hangup = False
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            step = remaining if self.pidfd is not None else min(remaining, 0.002)
            if cpu_limit is not None:
                step = min(step, _CPU_POLL_S)
            fds = ([self.pidfd] if self.pidfd is not None else []) + ([commands] if watch_hangup else [])
            ready, _, _ = select.select(fds, [], [], step)
            if watch_hangup and commands in ready:
                try:
                    if not commands.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                        return "stopped"
                except BlockingIOError:
                    pass
                except OSError:
                    return "stopped"
                commands = None  # a queued command, not a hangup: stop watching for this test
            watch_hangup = commands is not None
            if self.pidfd is not None:
                if self.pidfd in ready:
                    return "exit"
            elif os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return "exit"
            if cpu_limit is not None:
                if clock is None:  # asked only now: a ctypes call the many short tests never need
                    clock = _cpu_clock(self.pid)
                    clock = False if clock is None else clock
                try:
                    if clock is not False and time.clock_gettime(clock) > cpu_limit:
                        return "cpu"
                except OSError:
                    clock = False  # it is exiting; the next round sees it

    def finish(self, kill: bool) -> tuple[int, resource.struct_rusage]:
        """Kill the test process group (always: it may have left children), reap, clean up."""
        for sig_target in (_os_killpg, _os_kill) if kill else (_os_killpg,):
            try:
                sig_target(self.pid, signal.SIGKILL)
            except OSError:
                pass
        _pid, status, usage = os.wait4(self.pid, 0)
        if self.pidfd is not None:
            os.close(self.pidfd)
        kill_all_descendants()
        return status, usage


def _read_all(fd: int, limit: int = 1 << 16) -> bytes:
    os.set_blocking(fd, False)
    chunks, size = [], 0
    try:
        while size < limit and (chunk := os.read(fd, 65536)):
            chunks.append(chunk)
            size += len(chunk)
    except BlockingIOError:
        pass
    os.close(fd)
    return b"".join(chunks)[:limit]


def _status_info(data: bytes) -> dict:
    """Everything the test process said about itself, later messages winning."""
    if not data:  # most tests: a stdin program that ended without an exception says nothing
        return {}
    info: dict = {}
    for line in data.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            info.update(value)
    return {k: _clip(v) if isinstance(v, str) else v for k, v in info.items()}


def run_test(job: dict, code, index: int, input_fd: int, commands: socket.socket) -> dict:
    """Fork one test process and report how it ended (never the verdict). The input arrives
    as a descriptor that only the test process reads: the zygote never holds its content."""
    faults = _faults() if job["timings"] else 0
    status_r, status_w = os.pipe()
    began, began_cpu = time.monotonic(), time.thread_time()
    if job["native"]:
        watched, state, forked, ended = _fork_and_watch_natively(job, code, index, input_fd, status_w, began, commands)
        raw = False  # random was reseeded for the test process (by the helper, or by it: _begin_test_process)
        os.close(status_w)
        os.close(input_fd)
    else:
        pid, raw = _fork_test_process()
        if pid == 0:
            os.close(status_r)
            _PROCESSES[job["mode"]](job, code, status_w, index, input_fd)
            os._exit(1)  # not reached
        forked = time.monotonic()
        os.close(status_w)
        os.close(input_fd)
        watched = _Watched(pid)
        state = watched.wait(began + job["wall_limit_s"], job["cpu_limit_s"], commands)
        ended = time.monotonic()
    status, usage = watched.finish(kill=state != "exit")
    if raw:
        _fresh_random_state()
    wall = time.monotonic() - began
    report = {"index": index, "state": state, "wall_s": round(wall, 6),
              "cpu_s": round(usage.ru_utime + usage.ru_stime, 6),
              "info": _status_info(_read_all(status_r))}
    if job["timings"]:  # the zygote's side: fork called, fork returned, exit seen, reaped and cleaned
        report["zygote_stamps"] = [began, forked, ended, time.monotonic()]
        report["zygote_cpu_s"] = time.thread_time() - began_cpu
        report["zygote_faults"], report["faults"] = _faults() - faults, usage.ru_minflt
    return report | _ending(status)


def _ending(status: int) -> dict[str, int]:
    """A "ran" report's last field: the signal that ended the test process, or its exit code."""
    return {"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status) else {"exit_code": os.WEXITSTATUS(status)}


def _native_entry(job: dict, index: int, input_fd: int, status_w: int) -> _native.Entry:
    """What _enter_test_process does, as the C helper's arguments."""
    if job["mode"] == "functional":
        stdout = stderr = None
    else:
        stdout = STDOUT_FILE.format(index).encode()
        stderr = None if job["mode"] != "exec" else STDERR_FILE.format(index).encode()
    limits = job["test_rlimits"]
    ruleset = job["scope_ruleset"]
    return _native.Entry(input_fd, status_w, _STATUS_FD, job["devnull_fd"], -1 if ruleset is None else ruleset,
                         job["zygote_pid"], stdout, stderr, len(limits),
                         (ctypes.c_int * _native.MAX_RLIMITS)(*(which for which, _ in limits)),
                         (ctypes.c_ulonglong * _native.MAX_RLIMITS)(*(value for _, value in limits)))


def _native_cpu_limit(job: dict) -> float:
    return -1.0 if job["cpu_limit_s"] is None else float(job["cpu_limit_s"])  # negative: none


def _fork_and_watch_natively(job: dict, code, index: int, input_fd: int, status_w: int, began: float,
                             commands: socket.socket) -> tuple[_Watched, str, float, float]:
    """The C helper's fork, the test process's entry and the zygote's wait in one call (see
    lcb/csrc/sandbox.c): the same steps as the Python path, without running Python in between.
    In the test process it does not return; in the zygote: (watched, state, forked, ended)."""
    entry = _native_entry(job, index, input_fd, status_w)
    watch = _native.Watch(began + job["wall_limit_s"], _native_cpu_limit(job), _CPU_POLL_S, commands.fileno(),
                          -1, -1, 0.0, 0.0, *(_NATIVE_RANDOM or (None, None)))
    result = _NATIVE.fork_test(ctypes.byref(entry), ctypes.byref(watch))
    if _native.FORK_FAILED < result <= 0:  # in the test process, entered (or not: result < 0)
        _PROCESSES[job["mode"]](job, code, status_w, index, input_fd, entered=(result, entry.began, bool(watch.reseeded)))
        os._exit(1)  # not reached
    if result <= _native.WAIT_FAILED:
        _os_kill(watch.pid, signal.SIGKILL)
        raise OSError(_native.WAIT_FAILED - result, "waiting for a test process failed")
    if result <= _native.FORK_FAILED:
        number = _native.FORK_FAILED - result
        raise OSError(number, os.strerror(number))
    return _Watched(watch.pid, watch.pidfd if watch.pidfd >= 0 else None), _native.STATES[result], watch.forked, watch.ended


def _set_limits(job: dict) -> None:
    memory = int(job["memory_bytes"])
    if memory > 0:
        _lower_rlimit(resource.RLIMIT_AS, memory)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _lower_rlimit(resource.RLIMIT_CPU, math.ceil(job["backstop_s"]) + 1)


_BRIDGE: list[bool] = []  # whether the interpreter is reachable for an unprivileged uid (decided once)


_REACHABLE: dict[str, bool] = {}  # jobs' parent folders -> reachable by the unprivileged uids


def _unprivileged_can_run(folder: str) -> bool:
    """Whether a uid of no group can run the interpreter and reach ``folder``. The fork server
    asks first (as root), so its zygotes inherit the answer for their common parent folder."""
    if not _BRIDGE:
        _BRIDGE.append(_isolate.bridge_for_unprivileged(_SYSTEM_READABLE[0]))
    parent = os.path.dirname(folder)
    if parent not in _REACHABLE:
        _REACHABLE[parent] = _isolate.reachable_by_others(parent)
    return _BRIDGE[0] and _REACHABLE[parent]


_FROM_SERVER: list[list[str]] = []  # the namespaces the fork server gave this zygote (as root)


def _enter_namespaces(job: dict) -> list[str]:
    """Network, IPC and PID namespaces (see lcb/_isolate.py); the layers in force. As root the
    fork server has prepared them (``ZygoteNamespaces``); otherwise, with a PID namespace, this
    forks: the caller stays behind as the zygote's warden (its pid is the one the harness
    watches and kills, its process group the zygote's) and only the zygote, init of the new
    namespace, returns."""
    if _FROM_SERVER:
        return _FROM_SERVER[0]
    if not job["namespaces"]:
        return []
    how, pid_ns = _isolate.enter_namespaces(pid=True)
    if not how:
        return []
    layers = ["netns", "ipcns"] + (["pidns"] if pid_ns else []) + (["userns"] if how == "user" else [])
    if pid_ns:
        _become_init()
    return layers


def _become_init() -> None:
    """Fork the zygote into the fresh PID namespace; the caller waits for it and leaves."""
    zygote = os.fork()
    if zygote == 0:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        return
    os.closerange(3, 1 << 20)  # the job's channels are the zygote's alone: EOF comes when it ends
    while True:
        try:
            os.waitpid(zygote, 0)
            break
        except ChildProcessError:
            break
    os._exit(0)


def _least_privilege(job: dict, folder: str) -> list[str]:
    """Identity, capabilities, frozen rlimits (see lcb/_isolate.py); the layers in force."""
    layers: list[str] = []
    if not job["drop_privileges"]:
        return layers
    bounding = _isolate.drop_bounding_set()
    if os.geteuid() == 0 and _unprivileged_can_run(folder):
        uid = _isolate.unprivileged_id(job["outer_pid"])  # not our pid: that is 1 in a PID namespace
        if _isolate.become_unprivileged(uid, folder):
            layers.append("unprivileged-uid")
    _isolate.clear_capabilities()
    caps = _isolate.capability_sets()
    if bounding and caps and not any(caps.get(k) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")):
        layers.append("no-caps")
    if caps.get("NoNewPrivs"):
        layers.append("no-new-privs")
    if _isolate.freeze_rlimits():
        layers.append("rlimits-frozen")
    return layers


def _nproc_limit() -> int:
    if os.geteuid() == 0:
        return 0
    with open("/proc/loadavg") as fh:  # field 4 = "running/total" tasks on the machine
        return int(fh.read().split()[3].split("/")[1]) + _NPROC_HEADROOM


def _compile(job: dict, emit: _Emitter):
    """The code object to run, or None after reporting a compile error."""
    try:
        code, wrapped = _script.compile_program(
            job["code"], job["main_path"], known_names=KNOWN_NAMES if job["prelude"] else frozenset(dir(builtins)),
            wrap=job["mode"] == "stdin" and job["wrap_top_level"])
        return code, wrapped
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError) as exc:
        if job["mode"] != "exec":
            emit("compile_error", detail=f"{type(exc).__name__}: {_clip(str(exc))}")
            return None, False
        # python_exec shows a syntax error the way `python main.py` would: stderr, exit 1.
        message = "".join(traceback.format_exception_only(type(exc), exc))
        return compile(f"import sys\nsys.stderr.write({message!r})\nraise SystemExit(1)\n",
                       "<compile>", "exec", dont_inherit=True), False


def _warm_numpy() -> None:
    """As in LiveCodeBench's harness, numpy is imported before the guard (importing it under
    the guard fails). Only for programs that mention it: the others fork a leaner zygote."""
    try:
        import numpy  # noqa: F401
    except ImportError:
        pass


def _commands(commands: socket.socket):
    """(command, descriptors) messages from the harness; ends at EOF (the harness is done or gone)."""
    while True:
        try:
            message, fds, _flags, _addr = socket.recv_fds(commands, 256, 1)
        except OSError:
            return
        if not message:
            return
        yield message.decode(errors="replace"), fds


def _install_seccomp(job: dict) -> list[str]:
    base, paired = bool(job["seccomp"]), bool(job["sockets_paired_only"])
    if not (base or paired) or not _seccomp.install(base=base, sockets_paired_only=paired):
        return []
    return (["seccomp"] if base else []) + (["socketpair-only"] if paired else [])


_FS_ENCODING = sys.getfilesystemencoding()  # what os.environ encodes with (POSIX: surrogateescape)


def _set_environment(values: dict[str, str]) -> None:
    """``os.environ.update(values)`` without its Python-level machinery (a mapping's update,
    the key and value encoders): in a freshly forked zygote that machinery alone touches ~50
    memory pages, each a copy (0.1 ms). The process's environment and ``os.environ`` end up
    the same (tests/lcb/test_sandbox.py)."""
    data = getattr(os.environ, "_data", None)
    if not isinstance(data, dict):
        os.environ.update(values)
        return
    for key, value in values.items():
        key_b, value_b = key.encode(_FS_ENCODING, "surrogateescape"), value.encode(_FS_ENCODING, "surrogateescape")
        os.putenv(key_b, value_b)
        data[key_b] = value_b


def run_job(job: dict, commands_fd: int, emit: _Emitter, layers: list[str], clock: _Clock) -> None:
    """The zygote: one program; one test process per "run INDEX" command (with its input)."""
    folder = job["folder"]
    os.chdir(folder)
    _set_environment({"HOME": folder, "TMPDIR": folder, "TMP": folder, "TEMP": folder})
    if os.getpid() != 1:  # init of a PID namespace gets every orphan of it anyway
        _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    layers = layers + _least_privilege(job, folder)
    clock.lap("identity")
    job["nproc_limit"] = _nproc_limit()
    job["test_rlimits"] = _test_rlimits(job)
    job["devnull_fd"] = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    job["main_path"] = os.path.join(folder, "main.py")
    job["zygote_pid"] = os.getpid()
    with open(job["main_path"], "w", encoding="utf-8") as fh:
        fh.write(job["code"])  # tracebacks show source lines
    if "numpy" in job["code"]:
        _warm_numpy()  # before reads are confined: numpy looks at /proc and /sys as it loads
        clock.lap("numpy")
    try:  # before /proc is out of reach; init of a PID namespace only asks whether it is empty
        _CHILDREN_FD[:] = [os.open("/proc/thread-self/children", os.O_RDONLY | os.O_CLOEXEC)]
    except OSError:
        if os.getpid() != 1:
            raise
    # Once per program: writes, TCP, then reads and scopes in a nested domain. Each test process
    # adds only a scope-only domain of its own, so it cannot signal the zygote: the ruleset is
    # made here once, a test process only enforces it (one system call).
    cap = job.get("landlock_abi_cap")  # LCB_SANDBOX_LANDLOCK_ABI: run as on an older kernel
    abi = job["landlock_abi"] = _LANDLOCK_ABI if cap is None else min(_LANDLOCK_ABI, int(cap))
    confined = bool(job["landlock"]) and _landlock.confine_writes(folder, abi) \
        and _landlock.confine_reads(*readable_paths(folder), abi)
    job["scope_ruleset"] = _landlock.scope_ruleset(abi) if confined else None
    if confined and abi >= _landlock.SCOPE_ABI and job["scope_ruleset"] is None:
        raise OSError("cannot make the test processes' scope-only Landlock ruleset")
    if confined:
        layers.append(f"landlock-{abi}")
    clock.lap("landlock")
    layers += _install_seccomp(job)
    clock.lap("seccomp")
    emit("confined", landlock=confined, reads=confined, layers=layers)
    code, wrapped = _compile(job, emit)
    if code is None:
        emit("done")
        return
    clock.lap("compile")
    if job["guard"]:
        # Once for all the program's tests (each inherits it), as each test process would have
        # applied it first thing: after numpy, before the program's module is made.
        reliability_guard(folder, block=False)
    job["module"] = program_module(job)
    # The C helper forks as raw a fork as _fork_test_process does: only where that one would.
    job["native"] = bool(job["native"] and _NATIVE is not None and _raw_fork_is_safe()
                         and len(job["test_rlimits"]) <= _native.MAX_RLIMITS)
    gc.freeze()  # test processes inherit these objects; a collection there must not touch (copy) them
    clock.lap("module")
    emit("ready", wrapped=wrapped, native=job["native"], **({"setup_s": clock.laps, "setup_cpu_s": clock.cpu_laps, "setup_faults": clock.fault_laps,
                                                  "setup_began": clock.began} if job["timings"] else {}))
    commands = socket.socket(fileno=commands_fd)
    if job["native"] and not job["timings"]:
        _serve_tests_natively(job, code, commands, emit)
    else:
        for command, fds in _commands(commands):
            if not _run_command(job, code, command, fds, commands, emit):
                break
    kill_all_descendants()
    emit("done")


def _run_command(job: dict, code, command: str, fds: list[int], commands: socket.socket, emit: _Emitter) -> bool:
    """One command from the harness ("run INDEX [last]" with the test's input); False once no
    more are wanted."""
    name, argument, *flags = command.split(" ") + [""]
    if name == "run" and argument.isdigit() and len(fds) == 1:
        report = run_test(job, code, int(argument), fds[0], commands)
        if report["state"] == "stopped":
            return False
        emit.ran(report)
        return "last" not in flags  # last: the harness has no more tests for us, end without waiting
    for fd in fds:
        os.close(fd)
    return True


def _serve_tests_natively(job: dict, code, commands: socket.socket, emit: _Emitter) -> None:
    """The C helper's loop over the tests (lcb/csrc/sandbox.c, lcb_serve_tests): it runs and
    reports every test that ends plainly without coming back here (a zygote's Python touches
    ~200 memory pages per test, each a fault after that test's fork); what it hands back is
    finished here exactly as in _run_command and run_test."""
    loop = _native.Loop(commands.fileno(), emit.fd, _CHILDREN_FD[0] if _CHILDREN_FD else -1, os.getpid() == 1,
                        job["mode"] != "functional", job["mode"] == "exec",
                        job["wall_limit_s"], _native_cpu_limit(job), _CPU_POLL_S, *(_NATIVE_RANDOM or (None, None)))
    entry = _native_entry(job, 0, -1, -1)  # the loop fills in each test's descriptors and files
    while True:
        reason = _NATIVE.serve_tests(ctypes.byref(loop), ctypes.byref(entry))
        if reason == _native.LOOP_CHILD:  # the test process
            _PROCESSES[job["mode"]](job, code, loop.status_w, loop.index, loop.input_fd,
                                    entered=(loop.state, loop.began, bool(loop.reseeded)))
            os._exit(1)  # not reached
        if reason == _native.LOOP_FINISHED:  # it said something, or left a descendant
            kill_all_descendants()
            emit.ran({"index": loop.index, "state": _native.STATES[loop.state], "wall_s": round(loop.wall_s, 6),
                      "cpu_s": round(loop.cpu_s, 6), "info": _status_info(ctypes.string_at(loop.said, loop.said_len)),
                      **_ending(loop.status)})
            if loop.last:
                return
        elif reason == _native.LOOP_COMMAND:
            message = _native.raw(loop, "message", loop.message_len).decode(errors="replace")
            if not _run_command(job, code, message, list(loop.fds[:loop.n_fds]), commands, emit):
                return
        elif reason == _native.LOOP_GONE:
            os._exit(0)  # the harness is gone; nothing left to tell (as _Emitter._write)
        elif reason in (_native.LOOP_EOF, _native.LOOP_STOPPED, _native.LOOP_LAST):
            return
        else:
            number = _native.LOOP_FAILED - reason
            raise OSError(number, f"the test loop failed: {os.strerror(number)}")


def _faults() -> int:
    """This process's minor page faults so far: after a fork, mostly copies of pages it shares
    with its parent (a few microseconds each; the harness's largest cost per test)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class _Clock:
    """Where a zygote's set-up spends its time (``--breakdown`` of benchmarks/perf/grading_speed.py).
    CPU time is the thread's clock: the process's is only brought up to date at scheduler ticks
    once an RLIMIT_CPU is set (ours are single-threaded, so the two are the same otherwise)."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self.cpu_laps: dict[str, float] = {}
        self.fault_laps: dict[str, int] = {}
        self.began = self._last = time.monotonic()
        self._last_cpu = time.thread_time()
        self._last_faults = 0
        self.on = False

    def start(self, on: bool) -> None:
        """Once the job says whether it wants timings: without them a lap does nothing (each
        would touch memory pages of a freshly forked zygote, each a copy)."""
        self.on = on
        if on:  # a forked process counts from 0: these are the fork's and the job file's
            self._last_faults = self.fault_laps["fork, job file"] = _faults()

    def lap(self, name: str) -> None:
        if not self.on:
            return
        now, cpu, faults = time.monotonic(), time.thread_time(), _faults()
        self.laps[name] = round(now - self._last, 6)
        self.cpu_laps[name] = round(max(cpu - self._last_cpu, 0.0), 6)
        self.fault_laps[name] = faults - self._last_faults
        self._last, self._last_cpu, self._last_faults = now, cpu, faults

    def forked(self) -> None:
        """In a forked child, whose CPU clock and fault count start again at 0."""
        self._last_cpu, self._last_faults = 0.0, 0


def _host_pid() -> int:
    """Our pid as the host sees it (/proc is the host's), also inside a PID namespace of our own."""
    try:
        return int(os.readlink("/proc/self"))
    except (OSError, ValueError):
        return os.getpid()


def _read_file(path: str) -> bytes:
    """The whole file, read without a text stream: in a freshly forked zygote the stream's
    objects (buffer, decoder) cost ~30 first-written memory pages, 0.1 ms."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def _zygote_main(job_path: str, result_fd: int, commands_fd: int) -> None:
    emit = _Emitter(result_fd)
    try:
        # No "started" of our own: whoever made us (the fork server, or the harness in the
        # one-shot path) has told the harness our pid already.
        clock = _Clock()
        job = json.loads(_read_file(job_path).decode("utf-8"))
        clock.start(bool(job["timings"]))
        job["outer_pid"] = _host_pid()
        if job.get("keep_to_cpu") is not None:  # the harness's choice (lcb/sandbox.py, _CpuPlan)
            try:
                os.sched_setaffinity(0, (job["keep_to_cpu"],))
            except OSError:
                pass  # best effort: the CPU went offline or out of our cpuset meanwhile
        _set_limits(job)
        parent = os.getpid()
        layers = _enter_namespaces(job)  # with a PID namespace, only the zygote comes back
        if os.getpid() != parent:
            clock.forked()
        clock.lap("namespaces")
        run_job(job, commands_fd, emit, layers, clock)
    except BaseException as exc:  # our bug or a hostile environment: say so, never hang
        emit("error", detail=f"{type(exc).__name__}: {_clip(str(exc), 1000)}\n"
                            f"{_clip(traceback.format_exc(), 3000)}")
    finally:
        try:
            kill_all_descendants()
        finally:
            # Our channels first: the harness sees the end now, while the kernel still takes
            # this process's memory apart (a few hundred microseconds its next program can use).
            for fd in (result_fd, commands_fd):
                try:
                    os.close(fd)
                except OSError:
                    pass
            os._exit(0)


def _prepare_process() -> None:
    sys.set_int_max_str_digits(0)  # big-integer output is legitimate (official: 50000)
    os.umask(0o077)


def _prepare_once_for_all_zygotes() -> None:
    """As the fork server: the per-program work that is the same for every program, done once
    and inherited by each zygote (each step is checked again where its layer is reported)."""
    if os.geteuid() == 0:
        # our own mount namespace, the interpreter reachable for the unprivileged uids
        _BRIDGE.append(_isolate.bridge_for_unprivileged(_SYSTEM_READABLE[0]))
        _isolate.unprivileged_id(0)  # reads the uid map once
    _isolate.last_capability()  # reads the kernel's number once
    _seccomp.prepared(base=True, sockets_paired_only=True)  # the default filter, assembled once
    if _LANDLOCK_ABI:  # the rules for the system's paths, with descriptors, made once (after the bridge)
        folders, files = _SYSTEM_READABLE
        _landlock.prepare(_landlock.read_rules(folders, files) + _landlock.write_rules("", _LANDLOCK_ABI)[1:])


class _Spare:
    """A zygote the fork server forked before its program arrived (pipelined zygotes): it has
    done only what is the same for every program (its own session, the parent-death signal,
    the namespaces the server prepares as root, a filled module) and waits for one job on a
    channel of its own. Why: forking a zygote costs the server ~1.7 ms of wall time per program
    (the page tables of a warm interpreter); forked while the previous program's tests run, a
    program no longer waits for it. It serves exactly one program: the channel carries one job
    and is closed on both sides after it; the server never hands it another. Everything that
    confines the program (identity, rlimits, Landlock with its folder's rule, seccomp, the
    closing of descriptors in each test process) happens after the job arrives, as in a zygote
    forked for the job."""

    def __init__(self, pid: int, channel: socket.socket, server_namespaces: bool):
        self.pid, self.channel, self.server_namespaces = pid, channel, server_namespaces

    def fits(self, wants_namespaces: bool) -> bool:
        """Whether this spare may serve a job: one the server put into namespaces only serves a
        job that wants them (a job with the layer off, in tests, gets a zygote forked for it);
        one without serves any (the zygote makes its own namespaces from the job, as ever)."""
        return wants_namespaces or not self.server_namespaces


def _fork_zygote(sock: socket.socket, namespaces: _isolate.ZygoteNamespaces, wants_namespaces: bool,
                 close_in_child: list[socket.socket], job=None) -> tuple[int, int | None, socket.socket | None]:
    """Fork a zygote: for ``job`` (job path, result fd, command fd) at once, or, with ``job``
    None, a spare that waits for its job on a channel of its own. (pid, its network namespace
    from the pool or None, our end of the spare's channel or None); raises OSError where fork fails."""
    net = namespaces.before_fork() if wants_namespaces else None
    module = _filled_module()
    ours = theirs = None
    if job is None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        pid = os.fork()
    except OSError:
        if net is not None:  # back to our own PID namespace for whatever forks next
            namespaces.after_fork(-1, net)
            namespaces.reaped(-1)
        for end in (ours, theirs):
            if end is not None:
                end.close()
        raise
    if pid == 0:
        try:
            sock.close()
            for other in close_in_child + ([ours] if ours is not None else []):
                other.close()  # another spare's channel, or our own end of ours
            os.setsid()
            # (Should the server die before this prctl, a spare still ends: its channel's
            # other end closes with the server, and the wait below gets EOF.)
            _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            _FILLED.append(module)
            if net is not None:
                _FROM_SERVER.append(namespaces.in_zygote(net))
            if job is None:  # a spare: wait for the one job (EOF: the server is gone or shuts down)
                message, fds, _flags, _addr = socket.recv_fds(theirs, 65536, 2)
                theirs.close()
                if not message or len(fds) != 2:
                    os._exit(0)
                job = (message.decode(), fds[0], fds[1])
        except BaseException:
            os._exit(0)
        _zygote_main(*job)
    if theirs is not None:
        theirs.close()
    if net is not None:
        namespaces.after_fork(pid, net)
    return pid, net, ours


def _pin(pid: int, cpu: str) -> None:
    """Before the zygote runs its job: it starts on its CPU, not wherever fork put it."""
    if cpu.isdigit():
        try:
            os.sched_setaffinity(pid, (int(cpu),))
        except OSError:
            pass


def _announce(pid: int, result_fd: int) -> None:
    """Tell the harness the zygote's pid ourselves: it can then kill a zygote that never got as
    far as reporting (a small write to a fresh pipe does not block)."""
    try:
        os.write(result_fd, (json.dumps({"event": "started", "pid": pid}) + "\n").encode())
    except OSError:
        pass


class _ServerLoop:
    """The fork server's loop in the C helper (lcb/csrc/sandbox.c, lcb_serve_zygotes): it forks
    the zygote of each plain job itself, without Python running between two forks (the server's
    Python wrote ~215 pages per program, each a copy while zygotes share them). The records stay
    Python's: the zygotes, the network namespaces and the filled modules are copied into the
    helper's struct before each call and read back after it; whatever it does not handle comes
    back here with the message (serve() handles it exactly as before)."""

    def __init__(self, sock: socket.socket, namespaces: _isolate.ZygoteNamespaces):
        state = self.state = _native.Server()
        state.sock = sock.fileno()
        state.euid_root = int(os.geteuid() == 0)
        state.own_pid_ns = getattr(namespaces, "_own_pid", -1)
        state.own_net_ns = getattr(namespaces, "_own_net", -1)

    @staticmethod
    def fits(zygotes: dict[int, str], namespaces: _isolate.ZygoteNamespaces) -> bool:
        """Whether the records fit the helper's tables (else Python serves this round)."""
        return (len(zygotes) < _native.MAX_ZYGOTES and len(namespaces.free) <= _native.MAX_NETNS
                and all(len(folder.encode()) < _native.FOLDER_MAX for folder in zygotes.values()))

    def serve(self, zygotes: dict[int, str], namespaces: _isolate.ZygoteNamespaces, pipelined: bool, cpus: int) -> int:
        state = self.state
        state.pipelined, state.cpus = int(pipelined), cpus
        state.pool_left = len(_pool_ready)
        state.ns_usable = int(namespaces.usable)
        state.n_free = len(namespaces.free)
        for i, net in enumerate(namespaces.free):
            state.free_ns[i] = net
        state.n_zygotes = len(zygotes)
        for i, (pid, folder) in enumerate(zygotes.items()):
            state.zygote_pid[i] = pid
            state.zygote_net[i] = namespaces.busy.get(pid, -1)
            state.zygote_folder[i].value = folder.encode()
        checked = next(reversed(_REACHABLE), "") if state.euid_root else ""
        state.checked_parent = checked.encode() if len(checked.encode()) < _native.FOLDER_MAX else b""
        reason = _NATIVE.serve_zygotes(ctypes.byref(state))
        if reason == _native.SERVER_CHILD:
            return reason  # the zygote: the records are the server's business
        for _ in range(state.pool_used):
            _pool_spent.append(_pool_ready.pop())
        namespaces.usable = bool(state.ns_usable)
        namespaces.free = collections.deque(state.free_ns[:state.n_free])
        zygotes.clear()
        namespaces.busy.clear()
        for i in range(state.n_zygotes):
            pid = state.zygote_pid[i]
            zygotes[pid] = state.zygote_folder[i].value.decode()
            if state.zygote_net[i] >= 0:
                namespaces.busy[pid] = state.zygote_net[i]
        return reason

    def message(self) -> tuple[bytes, list[int]]:
        state = self.state
        return _native.raw(state, "message", state.message_len), list(state.fds[:state.n_fds])

    def become_zygote(self, sock: socket.socket) -> None:
        """In the zygote the helper forked: what _fork_zygote's child does in Python, then the job."""
        state = self.state
        try:
            sock.detach()  # the helper closed it: this object must not close the number again
            _FILLED.append(_pool_ready[-1 - state.pool_used])
            if state.child_net >= 0:
                _FROM_SERVER.append((["netns"] if state.child_net_joined else [])
                                    + (["ipcns"] if state.child_ipc else []) + ["pidns"])
            job_path = _native.raw(state, "message", state.message_len).decode().partition("\n")[0]
            job = (job_path, state.fds[0], state.fds[1])
        except BaseException:
            os._exit(0)
        _zygote_main(*job)


SPARES_QUERY = b"?spare"  # the harness asks which pid is an idle spare (tests: live_sandbox_processes)


def serve(sock_fd: int, pipelined: bool = True) -> None:
    """Fork server: receive (job path; result pipe, command pipe) messages; one zygote per job,
    forked ahead as a spare where ``pipelined`` (see ``_Spare``)."""
    _prepare_process()
    _prepare_once_for_all_zygotes()
    gc.freeze()  # the warm modules: forked children's collections skip them (fewer page copies)
    _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    sock = socket.socket(fileno=sock_fd)
    zygotes: dict[int, str] = {}  # pid -> the job's folder ("" for a spare without a job)
    namespaces = _isolate.ZygoteNamespaces()
    spare: _Spare | None = None

    def drop_spare() -> None:
        nonlocal spare
        if spare is not None:
            spare.channel.close()  # EOF: an idle spare leaves on its own
            spare = None

    def make_spare() -> None:
        nonlocal spare
        try:
            pid, net, channel = _fork_zygote(sock, namespaces, True, [])
        except OSError:
            return  # the next job gets a zygote forked for it
        zygotes[pid] = ""
        spare = _Spare(pid, channel, net is not None)

    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = 1
    loop = _ServerLoop(sock, namespaces) if _NATIVE is not None and _raw_fork_is_safe() else None
    while True:
        # A spare only while a CPU runs none of our programs: measured on 2 cores, with one
        # worker it saved 3-9 % of the wall time (its fork and set-up overlap the last program's
        # tests on the idle core); with as many programs as cores at once it cost 4-5 % wall
        # and CPU (its fork takes a core from a running program, and it starts its job with
        # caches gone cold), so there each zygote is forked for its job, as before.
        spare_failed = False
        if pipelined and spare is None and sum(1 for folder in zygotes.values() if folder) < cpus:
            make_spare()  # while the last program's tests run, not when the next program comes
            spare_failed = spare is None
        if loop is not None and spare is None and loop.fits(zygotes, namespaces):
            # The C helper's loop: it forks the zygotes of plain jobs itself and returns with
            # whatever is left to do here (a message it leaves to us, a spare wanted)
            reason = loop.serve(zygotes, namespaces, pipelined and not spare_failed, cpus)
            if reason == _native.SERVER_CHILD:
                loop.become_zygote(sock)  # never returns
            if reason == _native.SERVER_SPARE:
                continue
            if reason <= _native.SERVER_FAILED:  # a failed fork, as _fork_zygote raises it
                number = _native.SERVER_FAILED - reason
                raise OSError(number, os.strerror(number))
            message, fds = loop.message()
        else:
            ready, _, _ = select.select([sock], [], [], 1.0)
            if not ready:
                _reap(zygotes, namespaces)
                continue
            try:
                message, fds, _flags, _addr = socket.recv_fds(sock, 65536, 2)
            except OSError:
                message, fds = b"", []
        if not message:
            break  # the harness closed its end (or died): shut down
        if message.startswith(SPARES_QUERY) and not fds:
            _reap(zygotes, namespaces)
            idle = spare.pid if spare is not None and spare.pid in zygotes else ""
            try:
                sock.send(message + f" {idle}".encode())
            except OSError:
                pass
            continue
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            continue
        job_path, _, wants = message.decode().partition("\n")
        wants, _, cpu = wants.partition("\n")
        _reap(zygotes, namespaces)  # first: a network namespace may have come free
        if spare is not None and spare.pid not in zygotes:
            drop_spare()  # it died idle (reaped above)
        if os.geteuid() == 0:  # the answer for the jobs' parent folder, inherited by later zygotes
            _unprivileged_can_run(os.path.dirname(job_path))
        pid = None
        if spare is not None and spare.fits(wants == "namespaces"):
            taken = spare
            spare = None
            _pin(taken.pid, cpu)
            try:
                socket.send_fds(taken.channel, [job_path.encode()], fds)
                pid = taken.pid
                _announce(pid, fds[0])
            except OSError:
                pass  # it died meanwhile: a zygote forked for the job below
            taken.channel.close()  # one job per spare, never a second
        if pid is None:
            others = [spare.channel] if spare is not None else []
            pid, _net, _channel = _fork_zygote(sock, namespaces, wants == "namespaces", others,
                                               (job_path, fds[0], fds[1]))
            _pin(pid, cpu)
            _announce(pid, fds[0])
        os.close(fds[0])
        os.close(fds[1])
        zygotes[pid] = os.path.dirname(job_path)
        _reap(zygotes, namespaces)
    drop_spare()
    for pid in zygotes:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    kill_all_descendants()
    for folder in zygotes.values():  # the harness died mid-job: nobody else will remove these
        if folder and os.path.basename(folder).startswith("lcb-sbx-"):
            shutil.rmtree(folder, ignore_errors=True)


def _reap(zygotes: dict[int, str], namespaces: _isolate.ZygoteNamespaces) -> None:
    reaped = False
    try:
        while True:
            pid, _status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            reaped = True
            zygotes.pop(pid, None)
            namespaces.reaped(pid)  # init of its PID namespace: everything of that program is gone
    except ChildProcessError:
        return
    if not reaped:
        return  # orphans come to us only when a zygote ends, before we can reap it
    # Children that are not zygotes are orphans of a dead zygote's tests: kill them.
    for pid in _children():
        if pid not in zygotes:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def main(argv: list[str]) -> None:
    if len(argv) >= 3 and argv[-2] == "--native":  # the helper's source hash, as the harness checked it
        _use_native(argv[-1])
        argv = argv[:-2]
    if len(argv) in (3, 4) and argv[1] == "--server" and argv[3:] in ([], ["--no-spare"]):
        serve(int(argv[2]), pipelined=argv[3:] != ["--no-spare"])
        return
    if len(argv) == 5 and argv[1] == "--job" and argv[3] == "--commands":
        _prepare_process()
        result_fd = os.dup(1)  # stdout becomes the event channel; fd 1 itself goes quiet
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 1)
        os.close(devnull)
        _zygote_main(argv[2], result_fd, int(argv[4]))
    print("usage: _child.py --server FD [--no-spare] | --job PATH --commands FD  [--native SHA256]", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    main(sys.argv)
