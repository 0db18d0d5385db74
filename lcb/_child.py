"""Child side of the sandbox: fork server, per-program zygote, per-test processes.

Runs as its own script (never imported by the harness): ``python _child.py --server FD`` starts a
fork server that reads jobs from a unix socket, ``python _child.py --job PATH`` runs one job and
writes its events to stdout. Stdlib only; it loads ``compare.py`` and ``_landlock.py`` from its
own folder and then drops that folder from ``sys.path`` so model code cannot import it.

Process tree (all single-threaded, so forking is safe)::

    harness (threads) --spawn--> fork server --fork--> job zygote --fork--> test process
                                                     (one per program)      (one per test /
                                                                             per functional run)

The zygote sets the rlimits and Landlock rules, compiles the program once, then forks a test
process per test (stdin) or one process that runs the functional tests in order on one
``Solution()`` instance, as the official harness does (a fresh process takes over after a
crash). The zygote enforces the per-test wall-clock limit, kills the test process group, and
as a child subreaper also kills any descendant that tried to escape into another session.
Events go to the harness as JSON lines on the result channel.
"""

from __future__ import annotations

import atexit
import builtins
import ctypes
import errno
import faulthandler
import io
import json
import math
import os
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import types

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import _landlock  # noqa: E402
import compare  # noqa: E402
from _prelude import PRELUDE_MODULES, PRELUDE_SOURCE  # noqa: E402

sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
del sys.modules["compare"], sys.modules["_landlock"], sys.modules["_prelude"]  # model code must not find them by name

for _name in PRELUDE_MODULES:
    __import__(_name)  # warm: the fork server pays the import once, every test inherits it
PRELUDE_CODE = compile(PRELUDE_SOURCE, "<prelude>", "exec", dont_inherit=True)

STOPPING = ("time_limit", "memory_limit")  # after these the remaining tests are not run
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_NPROC_HEADROOM = 64
_STATUS_FD = 3
_libc = ctypes.CDLL(None, use_errno=True)
_LANDLOCK_ABI = _landlock.abi_version()


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit // 2] + " ... " + text[-limit // 2:]


# ---------------------------------------------------------------- the reliability guard


def _refuse_writes_outside(folder: str) -> None:
    """Python-level twin of the Landlock rule: open for writing only inside ``folder``."""
    real_open, real_os_open, realpath = builtins.open, os.open, os.path.realpath
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


def reliability_guard(folder: str) -> None:
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
    for name in _BLOCKED_MODULES:
        sys.modules[name] = None


# ---------------------------------------------------------------- test process side


def _enter_test_process(job: dict, status_w: int, stdin: str, stdout: str, stderr: str,
                        tests_here: int = 1) -> None:
    """Runs first in every forked test process: own group, stdio, limits, signal scope.

    ``tests_here``: how many tests this process may run (functional runs share one process);
    the CPU rlimit is a backstop for all of them, the zygote times each test on the wall clock.
    """
    os.setpgid(0, 0)
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != job["zygote_pid"]:  # the zygote died between fork and prctl
        os._exit(137)
    for target, path, flags in ((0, stdin, os.O_RDONLY),
                                (1, stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        fd = os.open(path, flags, 0o600)
        os.dup2(fd, target)
        os.close(fd)
    os.dup2(status_w, _STATUS_FD)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > _STATUS_FD:
            try:
                os.close(fd)
            except OSError:
                pass
    cpu = (math.ceil(job["timeout_s"]) + 1) * tests_here
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (job["output_limit_bytes"],) * 2)
    if os.geteuid() != 0:  # RLIMIT_NPROC counts per user and is not enforced for root
        with open("/proc/loadavg") as fh:  # field 4 = "running/total" tasks on the machine
            total = int(fh.read().split()[3].split("/")[1])
        resource.setrlimit(resource.RLIMIT_NPROC, (total + _NPROC_HEADROOM,) * 2)
    _landlock.scope_signals(_LANDLOCK_ABI)


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
    """What the interpreter does at exit: join threads, run atexit, flush; then leave."""
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


def _fresh_main_module(path: str) -> dict:
    module = types.ModuleType("__main__")
    module.__file__ = path
    sys.modules["__main__"] = module
    sys.argv = [path]
    return module.__dict__


def _script_process(job: dict, code, status_w: int, stdin: str, stdout: str, stderr: str) -> None:
    """Run the program as ``python main.py`` would, with the prelude first. Never returns."""
    exit_code = 0
    try:
        _enter_test_process(job, status_w, stdin, stdout, stderr)
        if job["guard"]:
            reliability_guard(job["folder"])
        namespace = _fresh_main_module(job["main_path"])
        if job["prelude"]:
            exec(PRELUDE_CODE, namespace)
        exec(code, namespace)
    except SystemExit as exc:
        exit_code = _exit_code_of(exc)
    except BaseException as exc:
        _report({"exc": type(exc).__name__, "msg": _clip(str(exc))})
        if job["mode"] == "exec":  # graded runs discard stderr; a 50000-frame traceback is slow
            try:
                _print_user_traceback(exc)
            except BaseException:
                pass
        exit_code = 1
    _finish_like_python(exit_code)


def _functional_process(job: dict, code, args: list, expected: list, start: int, status_w: int) -> None:
    """Run tests ``start..`` in order on one target, as the official call-based grader does."""
    try:
        _enter_test_process(job, status_w, os.devnull, os.devnull, os.devnull, len(args) - start)
        if job["guard"]:
            reliability_guard(job["folder"])
        module = types.ModuleType("solution")
        sys.modules["solution"] = module  # dataclasses & co. look classes' modules up here
        namespace = module.__dict__
        if job["prelude"]:
            exec(PRELUDE_CODE, namespace)
        exec(code, namespace)
        solution = namespace.get("Solution")
        target = solution() if isinstance(solution, type) else module
        method = getattr(target, job["fn_name"], None)
    except BaseException as exc:
        _report({"setup_error": f"{type(exc).__name__}: {_clip(str(exc))}",
                 "memory": isinstance(exc, MemoryError)})
        os._exit(1)
    if not callable(method):
        _report({"setup_error": f"no callable {job['fn_name']!r} on "
                                f"{'Solution()' if target is not module else 'the module'}"})
        os._exit(1)
    for index in range(start, len(args)):
        _report({"start": index})
        began = time.perf_counter()
        try:
            prediction = method(*args[index])
            if isinstance(prediction, tuple):
                prediction = list(prediction)  # official: top level only
            ok = bool(prediction == expected[index])
        except BaseException as exc:
            outcome = "memory_limit" if isinstance(exc, MemoryError) else "runtime_error"
            _report({"index": index, "outcome": outcome, "duration_s": time.perf_counter() - began,
                     "detail": f"{type(exc).__name__}: {_clip(str(exc))}"})
            if outcome == "memory_limit":
                os._exit(1)
            continue
        message = {"index": index, "outcome": "passed" if ok else "wrong_answer",
                   "duration_s": time.perf_counter() - began}
        if not ok:
            try:
                message["got"] = _clip(repr(prediction))
            except BaseException:
                message["got"] = "<unprintable>"
        _report(message)
    os._exit(0)


# ---------------------------------------------------------------- zygote side


class _Emitter:
    def __init__(self, fd: int):
        self.fd = fd

    def __call__(self, event: str, **fields) -> None:
        data = (json.dumps({"event": event, **fields}) + "\n").encode()
        while data:
            try:
                data = data[os.write(self.fd, data):]
            except BrokenPipeError:
                os._exit(0)  # the harness is gone; nothing left to tell


def _children() -> list[int]:
    pid = os.getpid()
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
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        time.sleep(0.001)


class _Watched:
    """A forked test process we can wait for with a deadline (pidfd when the kernel has it)."""

    def __init__(self, pid: int):
        self.pid = pid
        try:
            self.pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self.pidfd = None

    def wait(self, deadline: float, read_fd: int | None = None) -> str:
        """'exit', 'read' or 'timeout'. Does not reap, so the pid stays ours to kill."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            fds = [fd for fd in (self.pidfd, read_fd) if fd is not None]
            step = remaining if self.pidfd is not None else min(remaining, 0.002)
            ready, _, _ = select.select(fds, [], [], step)
            if read_fd is not None and read_fd in ready:
                return "read"
            if self.pidfd is not None:
                if self.pidfd in ready:
                    return "exit"
            elif os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return "exit"

    def finish(self, kill: bool) -> int:
        """Kill the test process group (always: it may have left children), reap, clean up."""
        for sig_target in (os.killpg, os.kill) if kill else (os.killpg,):
            try:
                sig_target(self.pid, signal.SIGKILL)
            except OSError:
                pass
        _pid, status = os.waitpid(self.pid, 0)
        if self.pidfd is not None:
            os.close(self.pidfd)
        kill_all_descendants()
        return status


def _death_outcome(status: int, info: dict) -> tuple[str, str]:
    """Outcome and detail for a test process that did not end cleanly."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        if sig == signal.SIGXCPU:
            return "time_limit", "CPU time limit exceeded"
        if sig == signal.SIGXFSZ:
            return "wrong_answer", "output limit exceeded"
        if sig == signal.SIGKILL:
            return "memory_limit", "killed (SIGKILL), most likely out of memory"
        return "runtime_error", f"killed by {name}"
    if info.get("exc") == "MemoryError":
        return "memory_limit", f"MemoryError: {info.get('msg', '')}"
    if "exc" in info:
        return "runtime_error", f"{info['exc']}: {info.get('msg', '')}"
    return "runtime_error", f"exit code {os.WEXITSTATUS(status)}"


def _read_all(fd: int) -> bytes:
    os.set_blocking(fd, False)
    chunks = []
    try:
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    except BlockingIOError:
        pass
    os.close(fd)
    return b"".join(chunks)


def _last_json(data: bytes) -> dict:
    for line in reversed(data.splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return {}


def _read_head(path: str, limit: int) -> tuple[bytes, bool]:
    with open(path, "rb") as fh:
        data = fh.read(limit + 1)
    return data[:limit], len(data) > limit


def _run_once(job: dict, code, stdin_text: str, stderr_path: str) -> tuple[str, int, dict, float]:
    """Fork one script run; returns (how it ended, wait status, status info, seconds)."""
    with open("stdin.txt", "w", encoding="utf-8", newline="") as fh:
        fh.write(stdin_text)
    status_r, status_w = os.pipe()
    began = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(status_r)
        _script_process(job, code, status_w, "stdin.txt", "stdout.txt", stderr_path)
    os.close(status_w)
    watched = _Watched(pid)
    state = watched.wait(began + job["timeout_s"])
    status = watched.finish(kill=state == "timeout")
    return state, status, _last_json(_read_all(status_r)), time.monotonic() - began


def _run_stdin_tests(job: dict, code, emit: _Emitter) -> None:
    preview = job["got_preview_chars"]
    for index, test in enumerate(job["tests"]):
        state, status, info, took = _run_once(job, code, test["input"], os.devnull)
        if state == "timeout":
            emit("test", index=index, outcome="time_limit", duration_s=took,
                 detail=f"no exit within {job['timeout_s']:g} s")
            return
        if os.path.getsize("stdout.txt") >= job["output_limit_bytes"]:
            # Python ignores SIGXFSZ, so hitting the cap shows up as an OSError (EFBIG).
            fields = {"outcome": "wrong_answer", "detail": "output limit exceeded"}
        elif os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            raw, cut = _read_head("stdout.txt", job["output_limit_bytes"])
            got = raw.decode("utf-8", errors="replace")
            mismatch = "output limit exceeded" if cut else compare.first_mismatch(got, test["output"])
            fields = {"outcome": "wrong_answer", "detail": mismatch, "got": _clip(got, preview)} \
                if mismatch else {"outcome": "passed", "detail": ""}
        else:
            outcome, detail = _death_outcome(status, info)
            fields = {"outcome": outcome, "detail": detail}
        emit("test", index=index, duration_s=took, **fields)
        if fields["outcome"] in STOPPING:
            return


def _run_exec(job: dict, code, emit: _Emitter) -> None:
    test = job["tests"][0]
    state, status, info, took = _run_once(job, code, test["input"], "stderr.txt")
    limit = job["capture_bytes"]
    out, out_cut = _read_head("stdout.txt", limit)
    err, err_cut = _read_head("stderr.txt", limit)
    if state == "timeout":
        exit_code = -signal.SIGKILL
    elif os.WIFSIGNALED(status):
        exit_code = -os.WTERMSIG(status)
    else:
        exit_code = os.WEXITSTATUS(status)
    truncated = out_cut or err_cut or max(os.path.getsize("stdout.txt"), os.path.getsize(
        "stderr.txt")) >= job["output_limit_bytes"]
    emit("exec", stdout=out.decode("utf-8", errors="replace"), stderr=err.decode("utf-8", errors="replace"),
         exit_code=exit_code, timed_out=state == "timeout", duration_s=took, truncated=truncated,
         exception=info.get("exc"))


def _parse_functional(job: dict, emit: _Emitter) -> tuple[list, list] | None:
    args, expected = [], []
    for index, test in enumerate(job["tests"]):
        try:
            args.append([json.loads(line) for line in test["input"].split("\n")])
            expected.append(json.loads(test["output"]))
        except ValueError as exc:
            emit("data_error", detail=f"functional test {index} is not JSON per line: {_clip(str(exc), 120)}")
            return None
    return args, expected


def _run_functional_tests(job: dict, code, emit: _Emitter) -> None:
    parsed = _parse_functional(job, emit)
    if parsed is None:
        return
    args, expected = parsed
    timeout = job["timeout_s"]
    next_index = 0
    while next_index < len(args):
        status_r, status_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(status_r)
            _functional_process(job, code, args, expected, next_index, status_w)
        os.close(status_w)
        watched = _Watched(pid)
        current, began, pending = None, time.monotonic(), b""
        deadline, reader, stop = began + timeout, status_r, False
        while True:
            state = watched.wait(deadline, reader)
            if state == "read":
                chunk = os.read(reader, 65536)
                if not chunk:
                    reader = None
                    continue
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    try:
                        message = json.loads(line)
                    except ValueError:
                        continue
                    if not isinstance(message, dict):
                        continue
                    if "start" in message:
                        current, began = int(message["start"]), time.monotonic()
                        deadline = began + timeout
                    elif "setup_error" in message:
                        outcome = "memory_limit" if message.get("memory") else "runtime_error"
                        for index in range(next_index, len(args)):
                            emit("test", index=index, outcome=outcome, duration_s=0.0,
                                 detail=message["setup_error"])
                        next_index, stop = len(args), True
                    elif "index" in message and message.get("index") == current:
                        emit("test", index=current, outcome=message["outcome"],
                             duration_s=float(message.get("duration_s", 0.0)),
                             detail=message.get("detail", ""), got=message.get("got"))
                        next_index, current = current + 1, None
                        stop = stop or message["outcome"] in STOPPING
                continue
            if state == "timeout":
                watched.finish(kill=True)
                os.close(status_r)
                emit("test", index=current if current is not None else next_index,
                     outcome="time_limit", duration_s=time.monotonic() - began,
                     detail=f"no result within {timeout:g} s")
                return
            status = watched.finish(kill=False)
            os.close(status_r)
            if stop:
                return
            if next_index < len(args):  # it died in the middle of a test (or of the setup)
                index = current if current is not None else next_index
                outcome, detail = _death_outcome(status, {})
                if os.WIFEXITED(status):
                    detail = f"the process exited ({os.WEXITSTATUS(status)}) during the call"
                emit("test", index=index, outcome=outcome, duration_s=time.monotonic() - began,
                     detail=detail)
                if outcome in STOPPING:
                    return
                next_index = index + 1
            break


_MODES = {"stdin": _run_stdin_tests, "functional": _run_functional_tests, "exec": _run_exec}


def _set_limits(job: dict) -> None:
    memory = int(job["memory_bytes"])
    if memory > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    backstop = math.ceil(job["backstop_s"]) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (backstop, backstop + 1))


def run_job(job_path: str, emit: _Emitter) -> None:
    """The zygote: one program, all its tests."""
    emit("started", pid=os.getpid(), landlock=_LANDLOCK_ABI)
    with open(job_path, encoding="utf-8") as fh:
        job = json.load(fh)
    folder = job["folder"]
    os.chdir(folder)
    os.environ.update({"HOME": folder, "TMPDIR": folder, "TMP": folder, "TEMP": folder})
    _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    _set_limits(job)
    confined = _landlock.confine_writes(folder, _LANDLOCK_ABI)
    emit("confined", landlock=confined)
    job["main_path"] = os.path.join(folder, "main.py")
    job["zygote_pid"] = os.getpid()
    with open(job["main_path"], "w", encoding="utf-8") as fh:
        fh.write(job["code"])  # tracebacks show source lines
    try:
        code = compile(job["code"], job["main_path"], "exec", dont_inherit=True)
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError) as exc:
        if job["mode"] != "exec":
            emit("compile_error", detail=f"{type(exc).__name__}: {_clip(str(exc))}")
            emit("done")
            return
        # python_exec shows a syntax error the way `python main.py` would: stderr, exit 1.
        message = "".join(traceback.format_exception_only(type(exc), exc))
        code = compile(f"import sys\nsys.stderr.write({message!r})\nraise SystemExit(1)\n",
                       "<compile>", "exec", dont_inherit=True)
    _MODES[job["mode"]](job, code, emit)
    kill_all_descendants()
    emit("done")


def _zygote_main(job_path: str, result_fd: int) -> None:
    emit = _Emitter(result_fd)
    try:
        run_job(job_path, emit)
    except BaseException as exc:  # our bug or a hostile environment: say so, never hang
        emit("error", detail=f"{type(exc).__name__}: {_clip(str(exc), 1000)}\n"
                            f"{_clip(traceback.format_exc(), 3000)}")
    finally:
        try:
            kill_all_descendants()
        finally:
            os._exit(0)


def _prepare_process() -> None:
    sys.set_int_max_str_digits(0)  # big-integer output is legitimate (official: 50000)
    os.umask(0o077)


def serve(sock_fd: int) -> None:
    """Fork server: receive (job path, result pipe) messages; fork one zygote per job."""
    _prepare_process()
    _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    sock = socket.socket(fileno=sock_fd)
    zygotes: set[int] = set()
    while True:
        ready, _, _ = select.select([sock], [], [], 1.0)
        if ready:
            try:
                message, fds, _flags, _addr = socket.recv_fds(sock, 65536, 1)
            except OSError:
                message, fds = b"", []
            if not message:
                break  # the harness closed its end (or died): shut down
            if not fds:
                continue
            pid = os.fork()
            if pid == 0:
                sock.close()
                os.setsid()
                _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
                _zygote_main(message.decode(), fds[0])
            # Tell the harness the zygote's pid ourselves: it can then kill a zygote that
            # never got as far as reporting (a small write to a fresh pipe does not block).
            try:
                os.write(fds[0], (json.dumps({"event": "started", "pid": pid}) + "\n").encode())
            except OSError:
                pass
            os.close(fds[0])
            zygotes.add(pid)
        _reap(zygotes)
    for pid in zygotes:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    kill_all_descendants()


def _reap(zygotes: set[int]) -> None:
    try:
        while True:
            pid, _status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            zygotes.discard(pid)
    except ChildProcessError:
        return
    # Children that are not zygotes are orphans of a dead zygote's tests: kill them.
    for pid in _children():
        if pid not in zygotes:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def main(argv: list[str]) -> None:
    if len(argv) == 3 and argv[1] == "--server":
        serve(int(argv[2]))
        return
    if len(argv) == 3 and argv[1] == "--job":
        _prepare_process()
        result_fd = os.dup(1)  # stdout becomes the event channel; fd 1 itself goes quiet
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 1)
        os.close(devnull)
        _zygote_main(argv[2], result_fd)
    print("usage: _child.py --server FD | --job PATH", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    main(sys.argv)
