"""The sandbox's C helper (lcb/csrc/sandbox.c): used only when built from the source beside it,
refusing to run a test unconfined, and ending every test as the Python path it replaces does."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lcb import _native, sandbox
from lcb.errors import LcbError
from lcb.sandbox import SandboxJob, run_in_sandbox

NO_HELPER = _native.ensure_built()
if NO_HELPER is None and os.environ.get(sandbox.NATIVE_ENV, "").strip() == "0":
    NO_HELPER = f"this run has {sandbox.NATIVE_ENV}=0 (the Python path)"
needs_helper = pytest.mark.skipif(NO_HELPER is not None, reason=f"the C helper is not in use here: {NO_HELPER}")


@needs_helper
def test_a_library_built_from_another_version_of_the_source_is_never_used(tmp_path, monkeypatch):
    source = (Path(_native.__file__).parent / "csrc" / "sandbox.c").read_text()
    monkeypatch.setattr(_native, "FOLDER", str(tmp_path))
    monkeypatch.setattr(_native, "SOURCE", str(tmp_path / "sandbox.c"))
    monkeypatch.setattr(_native, "LIBRARY", str(tmp_path / "liblcbsandbox.so"))
    (tmp_path / "sandbox.c").write_text(source)
    assert _native.load() is None  # nothing built yet
    assert _native.build() is None and _native.load() is not None
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no partial file left
    (tmp_path / "sandbox.c").write_text(source + "/* another version */\n")
    assert _native.load() is None  # the library no longer matches its source ...
    assert _native.load(verify=False) is not None  # ... and only that check refuses it
    assert _native.build() is None and _native.current()  # a rebuild is used again


def test_a_broken_source_leaves_the_python_path_with_a_one_line_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(_native, "FOLDER", str(tmp_path))
    monkeypatch.setattr(_native, "SOURCE", str(tmp_path / "sandbox.c"))
    monkeypatch.setattr(_native, "LIBRARY", str(tmp_path / "liblcbsandbox.so"))
    (tmp_path / "sandbox.c").write_text("this is not C\n")
    reason = _native.build()
    assert reason and "\n" not in reason and _native.load() is None
    assert not (tmp_path / "liblcbsandbox.so").exists()


def test_a_folder_it_cannot_write_leaves_the_python_path_with_a_one_line_reason(tmp_path, monkeypatch):
    # e.g. a read-only installation: building there must not raise into the harness
    source = (Path(_native.__file__).parent / "csrc" / "sandbox.c").read_text()
    (tmp_path / "sandbox.c").write_text(source)
    monkeypatch.setattr(_native, "FOLDER", str(tmp_path / "not-there"))
    monkeypatch.setattr(_native, "SOURCE", str(tmp_path / "sandbox.c"))
    monkeypatch.setattr(_native, "LIBRARY", str(tmp_path / "not-there" / "liblcbsandbox.so"))
    reason = _native.build()
    assert reason and "\n" not in reason and _native.load() is None


def test_the_switch_reads_the_environment_and_refuses_nonsense(monkeypatch):
    monkeypatch.setenv(sandbox.NATIVE_ENV, "0")
    assert sandbox.native_helper() is False
    monkeypatch.setenv(sandbox.NATIVE_ENV, "yes")
    with pytest.raises(LcbError, match="LCB_SANDBOX_NATIVE"):
        sandbox.native_helper()
    monkeypatch.setenv(sandbox.NATIVE_ENV, "1")
    assert sandbox.native_helper() is (_native.ensure_built() is None)


_DIRECT = textwrap.dedent("""
    import ctypes, os, sys, time
    sys.path.insert(0, {folder!r})
    import _native
    fork_test = _native.load().fork_test
    devnull = os.open(os.devnull, os.O_WRONLY)
    def run(ruleset=-1, zygote=None, wall=5.0, cpu=-1.0, body=lambda: os._exit(7)):
        r, w = os.pipe()
        entry = _native.Entry(os.open(os.devnull, os.O_RDONLY), w, 3, devnull, ruleset,
                              os.getpid() if zygote is None else zygote, None, None, 0)
        watch = _native.Watch(time.monotonic() + wall, cpu, 0.02, -1)
        result = fork_test(ctypes.byref(entry), ctypes.byref(watch))
        if _native.FORK_FAILED < result <= 0:  # the test process
            if result < 0:
                os._exit(100 - result)
            body()
        state = _native.STATES.get(result, result)
        if state != "exit":
            os.kill(watch.pid, 9)
        _, status = os.waitpid(watch.pid, 0)
        return state, os.waitstatus_to_exitcode(status)
    print(run())                                  # entered: the Python after it runs
    print(run(ruleset=devnull))                   # a scope that cannot be enforced: never runs
    print(run(zygote=1 if os.getpid() != 1 else 2))  # not the parent it expects: never runs
    print(run(wall=0.3, body=lambda: time.sleep(5)))
    print(run(cpu=0.2, body=lambda: [None for _ in iter(int, 1)]))
""")


@needs_helper
def test_the_helper_itself_runs_nothing_unconfined_and_ends_tests_by_wall_and_cpu_clock():
    script = _DIRECT.format(folder=str(Path(_native.__file__).parent))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:5] == ["('exit', 7)", "('exit', 125)", "('exit', 137)",
                                           "('timeout', -9)", "('cpu', -9)"]


# How each test ended, by both paths: states, exit codes, signals, what the process said, outcomes.
_CASES = {
    "stdin": ("stdin", "import signal, sys\nn = int(input())\n"
                       "if n == 1:\n    signal.raise_signal(signal.SIGTERM)\n"
                       "if n == 2:\n    raise ValueError('no')\n"
                       "if n == 3:\n    sys.exit(3)\n"
                       "print(n * 2)\n",
              tuple((f"{n}\n", str(n * 2)) for n in range(5)), {}),
    "process": ("exec", "import os, resource\nfree = sum(1 for fd in range(4, 256) if _open(fd))\n"
                         "print(os.getpgrp() == os.getpid(), free, os.path.basename(os.readlink('/proc/self/fd/0'))[:6])\n"
                         "print(resource.getrlimit(resource.RLIMIT_CPU), resource.getrlimit(resource.RLIMIT_FSIZE))\n",
                (("", ""),), {"guard": False}),
    "functional": ("functional", "class Solution:\n    def twice(self, x):\n        if x == 2:\n            raise KeyError(x)\n"
                                 "        return [x] * 2\n",
                   (("1", "[1, 1]"), ("2", "[2, 2]"), ("3", "[3]")), {"fn_name": "twice"}),
    # a program that writes on the status pipe itself: lines the helper must not take as its own
    "forged": ("functional", "import os\nclass Solution:\n    def f(self, x):\n"
                             "        os.write(3, [b'{\"setup_cpu_s\": 01}\\n', b'{\"returned\": 7}\\n{\"returned\": 2}\\n',"
                             " b'{\"setup_cpu_s\": 1e5}\\n{\"returned\": 9}\\n', b'\\x00'][x])\n        return x\n",
               tuple((str(x), str(x)) for x in range(4)), {"fn_name": "f", "guard": False}),
    "cpu": ("stdin", "while True:\n    pass\n", (("", ""),), {"timeout_s": 0.4}),
    "wall": ("stdin", "import time\ntime.sleep(5)\n", (("", ""),), {"timeout_s": 0.3, "wall_limit_s": 0.6}),
    "exec": ("exec", "import sys\nprint(sys.stdin.read().upper())\nprint('to stderr', file=sys.stderr)\n",
             (("abc\n", ""),), {"guard": False}),
    "orphan": ("exec", "import os, time\nif os.fork() == 0:\n    time.sleep(30)\nprint('parent done')\n",
               (("", ""), ("", "")), {"guard": False}),
}
_OPEN_HELPER = "def _open(fd):\n    try:\n        os.fstat(fd)\n        return True\n    except OSError:\n        return False\n"


def _ended(kind: str, native: bool, timings: bool = False) -> tuple[list, list, list]:
    mode, code, tests, extra = _CASES[kind]
    if kind == "process":
        code = "import os\n" + _OPEN_HELPER + code
    run = run_in_sandbox(SandboxJob(mode, code, tests, native=native, timings=timings, **extra))
    assert run.finished and not run.error, run.error
    ran = [{k: e.get(k) for k in ("index", "state", "exit_code", "signal")}
           | {"said": sorted(set(e["info"]) - {"stamps", "cpu_at_start"}),  # (what timings add)
              "returned": e["info"].get("returned")}
           for e in run.of_kind("ran")]
    results = [{k: e.get(k) for k in ("outcome", "got", "stdout", "stderr", "exit_code", "timed_out")}
               for e in run.of_kind("test") + run.of_kind("exec")]
    return ran, results, [e.get("native") for e in run.of_kind("ready")]


@needs_helper
@pytest.mark.parametrize("kind", sorted(_CASES))
def test_the_helper_ends_every_test_as_the_python_path_does(kind):
    # the helper's loop (lcb_serve_tests), its one-test call (lcb_fork_test: with timings, and
    # for what the loop hands back) and the Python path
    ran, results, native = _ended(kind, native=True)
    ran_one, results_one, native_one = _ended(kind, native=True, timings=True)
    ran_python, results_python, native_python = _ended(kind, native=False)
    assert native == native_one == [True] and native_python == [False]  # each path was the one asked for
    assert ran == ran_one == ran_python and results == results_one == results_python
    if kind == "process":  # own group, no inherited descriptor, the memory file as stdin, both limits
        lines = results[0]["stdout"].splitlines()
        assert lines[0].startswith("True 0 memfd:") and lines[1].startswith("(") and results[0]["exit_code"] == 0, lines
    if kind in ("cpu", "wall"):
        assert ran[0]["state"] == kind.replace("wall", "timeout") and ran[0]["signal"] == 9


def test_commands_the_loop_does_not_parse_are_handled_as_before(monkeypatch):
    # before each test the harness (patched) sends two commands that are not "run INDEX" with
    # one descriptor: the helper's loop hands them back and Python ignores them, as it always did
    real_send = sandbox._send_test
    sent = []

    def send_with_noise(commands, index, text, last=False):
        noise = os.memfd_create("noise")
        try:
            socket.send_fds(commands, [b"hello there"], [noise])
            socket.send_fds(commands, [f"run {index}".encode()], [])  # no input descriptor
        finally:
            os.close(noise)
        sent.append(index)
        real_send(commands, index, text, last)

    monkeypatch.setattr(sandbox, "_send_test", send_with_noise)
    for native in (True, False):
        run = run_in_sandbox(SandboxJob("stdin", "print(int(input()) + 1)\n", (("1\n", "2"), ("5\n", "6")), native=native))
        assert run.finished and not run.error, run.error
        assert [e["outcome"] for e in run.of_kind("test")] == ["passed", "passed"]
        assert [e["index"] for e in run.of_kind("ran")] == [0, 1]
    assert sent == [0, 1, 0, 1]


@needs_helper
def test_the_sandbox_maps_only_the_library_the_harness_checked(monkeypatch):
    # the one-shot zygote (like the fork server) gets the source hash the harness checked and
    # maps the library only if the file carries it: a library swapped after the check is not used
    job = SandboxJob("stdin", "print(input())\n", (("x\n", "x"),))
    assert [e["native"] for e in run_in_sandbox(job, use_fork_server=False).of_kind("ready")] == [True]
    monkeypatch.setattr(sandbox, "_native_arguments", lambda: ["--native", "0" * 64])
    run = run_in_sandbox(job, use_fork_server=False)
    assert [e["native"] for e in run.of_kind("ready")] == [False]
    assert [e["outcome"] for e in run.of_kind("test")] == ["passed"]  # by the Python path


_SEEDING = textwrap.dedent("""
    import random, sys
    sys.path.insert(0, {folder!r})
    import _native
    helper = _native.load()
    words = helper.generator_words(random._inst)
    before = random._inst.getstate()
    assert words is not None and helper.seed_mt(words[0], words[1], None, 0) == 0
    after = random._inst.getstate()
    print(after != before, after[1][-1] == 624, len({{random.random() for _ in range(100)}}))
    class Mine(random.Random):
        pass
    print(helper.generator_words(Mine()))     # not the layout it checked
    helper.seed_mt = lambda *args: 0           # a seeding that does not match CPython's
    print(helper.generator_words(random._inst))
""")


@needs_helper
def test_the_loop_reseeds_random_only_where_its_seeding_provably_matches_cpythons():
    # the zygote's loop seeds random._inst before each fork (lcb_seed_mt); generator_words allows
    # that only after checking the object's layout and the seeding against random.Random(key)
    script = _SEEDING.format(folder=str(Path(_native.__file__).parent))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:3] == ["True True 100", "None", "None"]


@pytest.mark.parametrize(("native", "timings"), [(True, False), (True, True), (False, False)])
def test_every_path_starts_each_test_process_from_a_fresh_random_state(native, timings):
    # the loop, the one-test call (timings) and the Python path each reseed random per test
    seen = []
    for _ in range(2):
        run = run_in_sandbox(SandboxJob("stdin", "print(random.getrandbits(64))\n", (("", "x"),) * 4,
                                        native=native, timings=timings))
        seen += [e["got"] for e in run.of_kind("test")]
    assert len(seen) == 8 and len(set(seen)) == 8, seen
