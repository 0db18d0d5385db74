"""The fork server's loop in the C helper (lcb/csrc/sandbox.c, lcb_serve_zygotes): it forks the
zygote of each plain job itself and hands everything else back to the Python loop it replaces;
programs get exactly what the Python loop gives them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lcb import _native, sandbox
from lcb.sandbox import SandboxJob, run_in_sandbox

NO_HELPER = _native.ensure_built()
if NO_HELPER is None and os.environ.get(sandbox.NATIVE_ENV, "").strip() == "0":
    NO_HELPER = f"this run has {sandbox.NATIVE_ENV}=0 (the Python path)"
needs_helper = pytest.mark.skipif(NO_HELPER is not None, reason=f"the C helper is not in use here: {NO_HELPER}")

# The loop called directly, in a process of its own (it forks): a job, then what it hands back.
_DIRECT = textwrap.dedent("""
    import ctypes, os, signal, socket, sys, time
    sys.path.insert(0, {folder!r})
    import _native
    helper = _native.load()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    state = _native.Server()
    state.sock, state.euid_root, state.pipelined, state.cpus = theirs.fileno(), 0, 0, 1
    state.pool_left, state.ns_usable, state.own_pid_ns, state.own_net_ns = 2, 0, -1, -1

    def serve(*messages):
        for text, fds in messages:
            socket.send_fds(ours, [text], fds)
            for fd in fds:
                os.close(fd)  # as the harness: the copies sent are the loop's
        reason = helper.serve_zygotes(ctypes.byref(state))
        if reason == _native.SERVER_CHILD:  # a zygote: say what it got, then leave
            path = _native.raw(state, "message", state.message_len).decode().partition("\\n")[0]
            os.write(state.fds[0], f"zygote {{path}} {{state.pool_used}} {{sorted(os.sched_getaffinity(0))}} "
                                   f"{{os.getsid(0) == os.getpid()}} {{os.read(state.fds[1], 10).decode()}}\\n".encode())
            os._exit(0)
        return reason, _native.raw(state, "message", state.message_len), state.n_fds

    def everything(fd):  # until the zygote has gone (the loop closed our copy of its end)
        chunks = []
        while chunk := os.read(fd, 1000):
            chunks.append(chunk)
        return b"".join(chunks).decode()

    def pipes():
        result_r, result_w = os.pipe()
        commands_r, commands_w = os.pipe()
        os.write(commands_w, b"hello")
        return result_r, [result_w, commands_r]

    # a plain job: forked here (the zygote announced, our ends closed); then a query: handed back
    result_r, fds = pipes()
    first = min(os.sched_getaffinity(0))  # a CPU we may run on, to be pinned to
    print(serve((f"/tmp/lcb-direct/folder-1/job.json\\n-\\n{{first}}".encode(), fds), (b"?spare", [])))
    print(everything(result_r).replace(str(state.zygote_pid[0]), "PID").replace(f"[{{first}}]", "[FIRST]")
          .strip().split("\\n"))
    print(state.n_zygotes, state.zygote_folder[0].value, state.pool_used, state.pool_left)
    # handed back, with the descriptors, untouched: no filled module left; one descriptor; a
    # message it does not parse; a CPU number out of range
    state.pool_left = 0
    result_r, fds = pipes()
    print(serve((b"/tmp/lcb-direct/folder-2/job.json\\n-\\n-", fds))[::2], state.pool_used)
    state.pool_left = 2
    for text, count in ((b"/tmp/x/job.json\\n-\\n-", 1), (b"/tmp/x/job.json\\nmaybe\\n-", 2),
                        (b"/tmp//x/job.json\\n-\\n-", 2), (b"/tmp/x/job.json\\n-\\n99999", 2),
                        ("/tmp/\\u00e9/job.json\\n-\\n-".encode(), 2)):
        print(serve((text, pipes()[1][:count]))[::2])
    # as root: a parent folder Python has not checked goes back; the checked one is forked here
    state.euid_root, state.checked_parent = 1, b"/tmp/lcb-direct"
    result_r, fds = pipes()
    print(serve((b"/tmp/elsewhere/folder-3/job.json\\n-\\n-", fds))[::2])
    result_r, fds = pipes()
    print(serve((b"/tmp/lcb-direct/folder-4/job.json\\n-\\n-", fds), (b"?spare", []))[::2],
          everything(result_r).count("zygote /tmp/lcb-direct/folder-4/job.json 0"))
    # a spare wanted (fewer programs running than CPUs): back before anything is received
    time.sleep(0.3)
    state.pipelined, state.cpus = 1, 8
    print(serve()[0])
    state.pipelined = 0
    # the ended zygotes are reaped (after a poll without news) and a child that is no zygote killed
    orphan = os.fork()
    if orphan == 0:
        time.sleep(60)
        os._exit(0)
    ours.settimeout(None)
    import threading
    threading.Timer(1.5, lambda: ours.close()).start()  # EOF after a poll that timed out
    print(serve(), state.n_zygotes, os.waitpid(orphan, 0)[1] == signal.SIGKILL)
""")


@needs_helper
def test_the_loop_forks_plain_jobs_and_hands_everything_else_back():
    script = _DIRECT.format(folder=str(Path(_native.__file__).parent))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:13] == [
        "(2, b'?spare', 0)",
        "['{\"event\": \"started\", \"pid\": PID}', 'zygote /tmp/lcb-direct/folder-1/job.json 0 [FIRST] True hello']",
        "1 b'/tmp/lcb-direct/folder-1' 1 1",
        "(2, 2) 0",
        "(2, 1)", "(2, 2)", "(2, 2)", "(2, 2)", "(2, 2)",
        "(2, 2)",
        "(2, 0) 1",
        "3",
        "(2, b'', 0) 0 True",
    ], done.stdout


def _server_faults(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[7])


_PROGRAMS = (
    SandboxJob("stdin", "n = int(input())\nfor i in range(n):\n    print(i * i)\n", (("3\n", "0\n1\n4"), ("2\n", "0\n2"))),
    SandboxJob("stdin", "print(1/0)\n", (("", "1"),)),
    SandboxJob("stdin", "def f(:\n", (("", ""),)),
    SandboxJob("functional", "class Solution:\n    def twice(self, x):\n        return [x, x]\n",
               (("5", "[5, 5]"), ("7", "[7, 8]")), fn_name="twice"),
    SandboxJob("exec", "import os, resource, sys\nprint(sorted(os.listdir('/proc/self/fd')), os.getpid() == os.getpgrp(),"
                       " os.getsid(0) == os.getpid(), resource.getrlimit(resource.RLIMIT_CPU), sorted(os.environ))\n",
               (("", ""),), guard=False),
)


def _seen(run) -> list:
    return [run.layers, run.error, [(e.get("outcome"), e.get("stdout"), e.get("exit_code"))
                                    for e in run.events if e.get("event") in ("test", "exec", "compile_error")]]


@needs_helper
def test_programs_get_the_same_from_the_c_loop_and_the_python_loop(monkeypatch):
    results, faults = {}, {}
    for native in ("1", "0"):
        monkeypatch.setenv(sandbox.NATIVE_ENV, native)
        own = sandbox._ForkServer(pipelined=False)  # no spares: every job is forked for it
        monkeypatch.setattr(sandbox, "_SERVER", own)
        try:
            run_in_sandbox(SandboxJob("exec", "pass", (("", ""),)))
            before = _server_faults(own.pid)
            results[native] = [_seen(run_in_sandbox(job)) for job in _PROGRAMS * 8]  # past a refill of 16
            faults[native] = (_server_faults(own.pid) - before) / (len(_PROGRAMS) * 8)
        finally:
            own.close()
    assert results["1"] == results["0"]
    assert [r[2][0][0] for r in results["1"][:5]] == ["passed", "runtime_error", None, "passed", None]
    # control: the two servers ran different loops (the Python one writes ~200 pages per program)
    assert faults["1"] < 60 < 120 < faults["0"], faults
