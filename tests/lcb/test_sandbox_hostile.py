"""Hostile programs: the harness survives, the outcome is right, nothing is left running."""

from __future__ import annotations

import os
import tempfile
import time
import uuid

import pytest

from lcb import sandbox
from lcb._landlock import abi_version
from lcb.grading import grade
from lcb.problem import Problem, TestCase
from lcb.problem import TestKind as Kind
from lcb.sandbox import SandboxJob, run_in_sandbox
from lcb.verdict import Outcome


def problem(expected: str = "", stdin: str = "") -> Problem:
    return Problem("hostile", "t", "s", "atcoder", "easy", "", "", None, (),
                   (TestCase(stdin, expected, Kind.STDIN),))


def processes_with(marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as fh:
                    if marker.encode() in fh.read():
                        found.append(int(name))
            except OSError:
                pass
    return found


def assert_nothing_left(marker: str) -> None:
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        if not sandbox.live_sandbox_processes() and not processes_with(marker):
            return
        time.sleep(0.05)
    raise AssertionError(f"left running: {sandbox.live_sandbox_processes()} {processes_with(marker)}")


def run(code: str, expected: str = "", timeout_s: float = 1.0, stdin: str = ""):
    marker = f"lcb-hostile-{uuid.uuid4().hex}"
    verdict = grade(problem(expected, stdin), f"# {marker}\n{code}", timeout_s=timeout_s)
    assert_nothing_left(marker)
    # the harness is alive and still grades correctly afterwards
    assert grade(problem("7"), "print(7)").solved
    return verdict


def test_infinite_loop():
    assert run("while True:\n    pass\n").outcome is Outcome.TIME_LIMIT


def test_sleep():
    started = time.monotonic()
    assert run("import time\ntime.sleep(100)\n").outcome is Outcome.TIME_LIMIT
    assert time.monotonic() - started < 20


def test_fork_bomb_refused_by_guard():
    verdict = run("import os\nwhile True:\n    os.fork()\n")
    assert verdict.outcome is Outcome.RUNTIME_ERROR and "TypeError" in verdict.tests[0].detail


def test_fork_around_the_guard_is_cleaned_up():
    code = ("import posix, time\nfor _ in range(5):\n    posix.fork()\n"
            "time.sleep(100)\n")
    assert run(code).outcome is Outcome.TIME_LIMIT


def test_detached_grandchild_is_killed():
    code = ("import posix, time\nif posix.fork() == 0:\n    import ctypes\n"
            "    ctypes.CDLL(None).setsid()\n    time.sleep(100)\nprint(1)\n")
    assert run(code, expected="1").solved


def test_a_test_leaves_nothing_running_for_the_next():
    # a detached grandchild of the first test would write a file during the second one; the
    # zygote kills every process left in its namespace after each test (lcb/_child.py)
    code = ("import os, posix, time\n"
            "if input() == 'first':\n"
            "    if posix.fork() == 0:\n"
            "        import ctypes\n        ctypes.CDLL(None).setsid()\n        time.sleep(0.3)\n"
            "        open('late.txt', 'w').write('x')\n        posix._exit(0)\n"
            "    print('ok')\n"
            "else:\n    time.sleep(0.8)\n    print('present' if os.path.exists('late.txt') else 'absent')\n")
    job = SandboxJob("stdin", code, (("first\n", "ok"), ("second\n", "absent")), timeout_s=5.0)
    assert [e["outcome"] for e in run_in_sandbox(job).of_kind("test")] == ["passed", "passed"]


def test_ten_gigabyte_allocation():
    verdict = run("x = bytearray(10 * 1024**3)\nprint(len(x))\n")
    assert verdict.outcome is Outcome.MEMORY_LIMIT


def test_hundred_megabytes_of_output():
    verdict = run("import sys\nchunk = 'x' * 10**6\nfor _ in range(100):\n    sys.stdout.write(chunk)\n",
                  expected="short", timeout_s=6.0)
    assert verdict.outcome is Outcome.WRONG_ANSWER
    assert "output limit" in verdict.tests[0].detail


def test_kill_parent_is_refused():
    verdict = run("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint(1)\n", expected="1")
    assert verdict.outcome is Outcome.RUNTIME_ERROR


def test_kill_parent_around_the_guard():
    code = "import ctypes, os\nctypes.CDLL(None).kill(os.getppid(), 9)\nprint(1)\n"
    verdict = run(code, expected="1")
    if abi_version() >= 6:  # Landlock signal scoping: the kill fails, the program goes on
        assert verdict.solved
    else:  # the zygote dies; the harness reports it and carries on
        assert verdict.outcome in (Outcome.SANDBOX_ERROR, Outcome.PASSED)


def test_write_outside_the_folder_is_refused(tmp_path):
    target = tmp_path / "pwned.txt"
    verdict = run(f"open({str(target)!r}, 'w').write('x')\nprint(1)\n", expected="1")
    assert verdict.outcome is Outcome.RUNTIME_ERROR and "PermissionError" in verdict.tests[0].detail
    assert not target.exists()


@pytest.mark.skipif(abi_version() < 1, reason="kernel without Landlock")
def test_write_around_the_guard_is_refused_by_landlock(tmp_path):
    target = tmp_path / "pwned2.txt"
    verdict = run(f"import _io\n_io.open({str(target)!r}, 'w').write('x')\nprint(1)\n", expected="1")
    assert verdict.outcome is Outcome.RUNTIME_ERROR
    assert not target.exists()


def test_write_inside_the_folder_is_allowed():
    code = "open('scratch.txt', 'w').write('42')\nprint(open('scratch.txt').read())\n"
    assert run(code, expected="42").solved


def test_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv("LCB_TEST_SECRET_TOKEN", "s3cr3t-value")
    sandbox._SERVER.close()  # even a server started after the secret appeared must not see it
    code = ("import os\nprint(os.environ.get('LCB_TEST_SECRET_TOKEN'))\n"
            "try:\n    print('s3cr3t' in open('/proc/self/environ').read())\n"
            "except PermissionError:\n    print(False)  # /proc is unreadable under Landlock\n")
    assert run(code, expected="None\nFalse").solved


def test_exit_zero_before_printing():
    assert run("exit(0)\nprint('late')\n", expected="").solved
    assert run("exit(0)\nprint('late')\n", expected="late").outcome is Outcome.WRONG_ANSWER


def test_recursion_depth_ten_to_the_fifth():
    deep = "def d(n):\n    return 0 if n == 0 else 1 + d(n - 1)\nprint(d(10**5))\n"
    assert run(deep, expected="100000").outcome is Outcome.RUNTIME_ERROR  # official limit 50000
    raised = "import sys\nsys.setrecursionlimit(10**6)\n" + deep
    assert run(raised, expected="100000", timeout_s=6.0).solved


def test_huge_integer_output():
    assert run("print(10**100000)\n", expected="1" + "0" * 100000, timeout_s=6.0).solved


def test_killed_harness_leaves_no_folder_and_no_process(tmp_path):
    """SIGKILL the harness in the middle of a job: the fork server notices, kills the job and
    removes its folder."""
    import signal
    import subprocess
    import sys

    marker = f"lcb-orphan-{uuid.uuid4().hex}"
    script = tmp_path / "harness.py"
    script.write_text(
        "from lcb.grading import grade\nfrom lcb.problem import Problem, TestCase, TestKind\n"
        "p = Problem('x', 't', 's', 'atcoder', 'easy', '', '', None, (), (TestCase('', '', TestKind.STDIN),))\n"
        f"grade(p, '# {marker}\\nimport time\\ntime.sleep(60)\\n', timeout_s=30.0)\n")
    harness = subprocess.Popen([sys.executable, str(script)], cwd=os.getcwd())
    try:
        deadline, folder = time.monotonic() + 30, None
        while time.monotonic() < deadline and folder is None:
            root = sandbox.job_root() or tempfile.gettempdir()
            for candidate in os.listdir(root):
                path = os.path.join(root, candidate)
                try:
                    if candidate.startswith("lcb-sbx-") and marker in open(os.path.join(path, "main.py")).read():
                        folder = path
                except OSError:
                    pass
            time.sleep(0.05)
        assert folder, "the job never started"
    finally:
        harness.send_signal(signal.SIGKILL)
        harness.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (os.path.exists(folder) or processes_with(marker)):
        time.sleep(0.1)
    assert not os.path.exists(folder) and not processes_with(marker)
