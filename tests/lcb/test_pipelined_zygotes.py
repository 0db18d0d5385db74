"""Pipelined zygotes (lcb/_child.py ``_Spare``): the fork server forks each program's zygote ahead,
while the previous program runs. A spare serves exactly one program, leaves with the server, and
a program sees and gets exactly what it gets from a zygote forked for it."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from lcb import sandbox
from lcb.sandbox import SandboxJob, run_in_sandbox


pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2,
                                reason="the server forks a spare only while a CPU runs none of our programs")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _wait_gone(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def server(monkeypatch, request):
    """A fork server of the test's own (pipelined or not), closed afterwards."""
    own = sandbox._ForkServer(pipelined=request.param)
    monkeypatch.setattr(sandbox, "_SERVER", own)
    yield own
    own.close()


def _started(run) -> int:
    return next(e["pid"] for e in run.events if e.get("event") == "started")


@pytest.mark.parametrize("server", [True], indirect=True)
def test_each_spare_serves_exactly_one_program(server):
    job = SandboxJob("stdin", "print(int(input()) * 2)\n", (("21\n", "42"),))
    assert run_in_sandbox(job).of_kind("test")[0]["outcome"] == "passed"
    started: list[int] = []
    for _ in range(6):
        spare = server.idle_spare()
        assert spare is not None and _alive(spare), "no spare forked ahead: nothing is pipelined"
        run = run_in_sandbox(job)
        assert run.of_kind("test")[0]["outcome"] == "passed", run
        started.append(_started(run))
        assert started[-1] == spare  # the program ran in the spare that was waiting for it
        assert server.idle_spare() not in started  # and the next one is a fresh fork, never it again
    assert len(set(started)) == len(started)
    for pid in started:
        assert _wait_gone(pid), f"zygote {pid} lives on after its program"


@pytest.mark.parametrize("server", [True], indirect=True)
def test_a_job_the_spare_does_not_fit_gets_its_own_zygote_and_the_spare_waits_on(server):
    run_in_sandbox(SandboxJob("exec", "pass", (("", ""),)))
    spare = server.idle_spare()
    assert spare is not None
    # without namespaces (a layer switched off, as the tests do): not the spare, made in them
    off = run_in_sandbox(SandboxJob("exec", "print('x')", (("", ""),), namespaces=False))
    assert off.of_kind("exec")[0]["stdout"] == "x\n" and "pidns" not in off.layers
    if os.geteuid() != 0:  # only a root server puts its spares in namespaces; others fit any job
        assert _started(off) == spare
        return
    assert _started(off) != spare and server.idle_spare() == spare
    on = run_in_sandbox(SandboxJob("exec", "print('y')", (("", ""),)))
    assert on.of_kind("exec")[0]["stdout"] == "y\n" and _started(on) == spare


@pytest.mark.parametrize("server", [True], indirect=True)
@pytest.mark.parametrize("how", ["close", "kill"])
def test_no_spare_outlives_its_server(server, how):
    run_in_sandbox(SandboxJob("exec", "pass", (("", ""),)))
    spare, server_pid = server.idle_spare(), server.pid
    assert spare is not None and _alive(spare) and server_pid is not None  # control: there is one to lose
    if how == "close":  # the harness shuts the server down (atexit, or a fork of ours)
        server.close()
    else:  # the server dies without a word: the parent-death signal and the channel's EOF
        os.kill(server_pid, signal.SIGKILL)
    assert _wait_gone(spare), f"spare zygote {spare} outlived its fork server ({how})"


@pytest.mark.parametrize("server", [True], indirect=True)
def test_the_idle_spare_alone_is_left_out_of_live_processes(server):
    # live_sandbox_processes must still see a running program: only the server's idle spare
    # (the server's own answer) is not counted
    run_in_sandbox(SandboxJob("exec", "pass", (("", ""),)))
    deadline = time.monotonic() + 3
    while sandbox.live_sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.02)  # the last zygote closes its pipes a moment before it is gone
    spare = server.idle_spare()
    assert spare is not None and spare in _below(server.pid) and sandbox.live_sandbox_processes() == []
    worker = threading.Thread(target=run_in_sandbox, args=(SandboxJob("exec", "import time\ntime.sleep(2)\n", (("", ""),)),))
    worker.start()
    try:
        deadline, live = time.monotonic() + 3, []
        while time.monotonic() < deadline and len(live) < 2:  # the zygote and its test process
            live = sandbox.live_sandbox_processes()
            time.sleep(0.02)
        assert spare in live, live  # it took the job: counted now
        assert server.idle_spare() not in live and server.idle_spare() is not None
    finally:
        worker.join()


def _below(root: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) == root:
                        found.append(int(name))
            except (OSError, IndexError, ValueError):
                pass
    return found


# What a program can see of its process: descriptors, ids, session, limits, environment.
_LOOK = """
import os, resource, sys
fds = []
for fd in range(64):
    try:
        os.fstat(fd)
        fds.append(fd)
    except OSError:
        pass
print(fds, os.getuid() == 0, os.getpid() == os.getpgrp(), os.getsid(0) == os.getpid(), os.getppid())
print([resource.getrlimit(r) for r in (resource.RLIMIT_AS, resource.RLIMIT_CPU, resource.RLIMIT_NOFILE)])
print(sorted(k for k in os.environ), os.path.realpath('.') == os.environ['HOME'])
try:
    import socket
    socket.socket(socket.AF_UNIX).connect('/run')
except OSError as exc:
    print('socket refused', type(exc).__name__)
print(sorted(sys.modules)[:0], len(sys.argv))
"""

_PROGRAMS = (
    SandboxJob("stdin", "n = int(input())\nfor i in range(n):\n    print(i * i)\n", (("3\n", "0\n1\n4"), ("2\n", "0\n2"))),
    SandboxJob("stdin", "print(1/0)\n", (("", "1"),)),
    SandboxJob("stdin", "def f(:\n", (("", ""),)),
    SandboxJob("stdin", "while True: pass\n", (("", ""),), timeout_s=0.5, wall_limit_s=2.0),
    SandboxJob("functional", "class Solution:\n    def twice(self, x):\n        return [x, x]\n",
               (("5", "[5, 5]"), ("7", "[7, 8]")), fn_name="twice"),
    SandboxJob("exec", _LOOK, (("", ""),), guard=False),  # (the guard blocks resource)
)


def _what_came_back(run) -> list:
    seen = [(e.get("outcome"), e.get("stdout"), e.get("stderr"), e.get("exit_code"))
            for e in run.events if e.get("event") in ("test", "exec")]
    return [run.layers, run.error, [e["event"] for e in run.events if e.get("event") in ("compile_error", "done")], seen]


def test_a_program_gets_the_same_with_and_without_pipelining(monkeypatch):
    results = {}
    for pipelined in (True, False):
        own = sandbox._ForkServer(pipelined=pipelined)
        monkeypatch.setattr(sandbox, "_SERVER", own)
        try:
            run_in_sandbox(SandboxJob("exec", "pass", (("", ""),)))
            assert (own.idle_spare() is not None) == pipelined  # control: the two servers differ
            results[pipelined] = [_what_came_back(run_in_sandbox(job)) for job in _PROGRAMS]
        finally:
            own.close()
    assert results[True] == results[False]
    assert [[seen[0] for seen in r[3]] for r in results[True]] == [
        ["passed", "wrong_answer"], ["runtime_error"], [], ["time_limit"], ["passed", "wrong_answer"], [None]]
    look = results[True][-1][3][0][1]
    assert look.startswith("[0, 1, 2, 3]"), look  # stdio and the status pipe: nothing of the server's or a spare's


@pytest.mark.parametrize("server", [True], indirect=True)
def test_no_spare_while_every_cpu_runs_a_program(server):
    # A spare's fork takes a core from a running program, and it starts cold: measured slower
    # where as many programs run as there are cores. So a spare only while a core is free.
    cpus = len(os.sched_getaffinity(0))
    if cpus > 4:
        pytest.skip("keeps every CPU busy with a program: only where there are few")
    run_in_sandbox(SandboxJob("exec", "pass", (("", ""),)))
    assert server.idle_spare() is not None  # control: one is made while a core is free
    long = SandboxJob("exec", "import time\ntime.sleep(3)\n", (("", ""),))
    workers = [threading.Thread(target=run_in_sandbox, args=(long,)) for _ in range(cpus)]
    for worker in workers:
        worker.start()
    try:
        deadline, spare = time.monotonic() + 2.5, 0
        while time.monotonic() < deadline and spare is not None:
            spare = server.idle_spare()
            time.sleep(0.05)
        assert spare is None, "a spare was forked while every CPU ran one of our programs"
    finally:
        for worker in workers:
            worker.join()
    deadline = time.monotonic() + 5
    while server.idle_spare() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.idle_spare() is not None  # and one again once a core is free
