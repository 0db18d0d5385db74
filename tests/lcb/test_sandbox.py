"""Sandbox plumbing: environment, limits parsing, both launch paths, comparator edge cases."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lcb import compare, sandbox
from lcb.errors import LcbError
from lcb.sandbox import SandboxJob, run_in_sandbox


def test_scrubbed_env_has_no_inherited_values(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-pass")
    env = sandbox.scrubbed_env()
    assert "OPENAI_API_KEY" not in env and env["LANG"] == "C.UTF-8"
    assert set(env) <= {"PATH", "LANG", "LC_ALL", "PYTHONIOENCODING", "PYTHONDONTWRITEBYTECODE",
                        "PYTHONHASHSEED", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "HOME"}


@pytest.mark.parametrize(("raw", "expected"), [("", 4 * 1024**3), ("0", 0), ("1048576", 1048576)])
def test_memory_limit_env(monkeypatch, raw, expected):
    monkeypatch.setenv(sandbox.MEMORY_ENV, raw)
    assert sandbox.memory_limit_bytes() == expected


@pytest.mark.parametrize("raw", ["4GB", "-1"])
def test_memory_limit_env_rejects_bad_values(monkeypatch, raw):
    monkeypatch.setenv(sandbox.MEMORY_ENV, raw)
    with pytest.raises(LcbError):
        sandbox.memory_limit_bytes()


@pytest.mark.parametrize("use_fork_server", [True, False])
def test_both_launch_paths_run_tests_and_clean_up(use_fork_server):
    job = SandboxJob("stdin", "print(int(input()) * 2)\n", (("21\n", "42"), ("1\n", "3")))
    run = run_in_sandbox(job, use_fork_server=use_fork_server)
    assert run.finished and not run.error
    assert [e["outcome"] for e in run.of_kind("test")] == ["passed", "wrong_answer"]


@pytest.mark.parametrize("use_fork_server", [True, False])
def test_home_and_temp_point_at_the_job_folder_in_os_environ_and_the_process_environment(use_fork_server):
    # the zygote sets them without os.environ.update (lcb/_child.py, _set_environment): both
    # views must agree, and a child process (tempfile, a C library) must see the same
    code = ("import ctypes, os, tempfile\n"
            "libc = ctypes.CDLL(None)\nlibc.getenv.restype = ctypes.c_char_p\n"
            "names = ('HOME', 'TMPDIR', 'TMP', 'TEMP')\n"
            "print([os.environ[n] for n in names] == [libc.getenv(n.encode()).decode() for n in names])\n"
            "print(len({os.environ[n] for n in names}), os.environ['HOME'] == os.path.realpath('.'),\n"
            "      os.path.dirname(tempfile.mkstemp()[1]) == os.environ['TMPDIR'])\n"
            "print(os.environ['LANG'], 'OPENAI_API_KEY' in os.environ)\n")
    job = SandboxJob("exec", code, (("", ""),), guard=False)  # tempfile needs os.unlink
    out = run_in_sandbox(job, use_fork_server=use_fork_server).of_kind("exec")[0]
    assert out["stdout"] == "True\n1 True True\nC.UTF-8 False\n", out["stderr"]


def test_ran_events_carry_how_each_test_ended():
    # the zygote formats the common "ran" line itself (lcb/_child.py, _Emitter.ran): it must be
    # the JSON the harness reads, for a clean exit, a signal and a test that said something
    code = ("import signal, sys\nn = int(input())\n"
            "if n == 1:\n    signal.raise_signal(signal.SIGTERM)\n"
            "if n == 2:\n    raise ValueError('no')\nprint(n)\n")
    run = run_in_sandbox(SandboxJob("stdin", code, (("0\n", "0"), ("1\n", "1"), ("2\n", "2"))))
    ran = run.of_kind("ran")
    assert [e["index"] for e in ran] == [0, 1, 2] and all(e["state"] == "exit" for e in ran)
    assert all(isinstance(e["wall_s"], float) and isinstance(e["cpu_s"], float) and e["cpu_s"] > 0 for e in ran)
    assert (ran[0]["exit_code"], ran[0]["info"]) == (0, {}) and "signal" not in ran[0]
    assert (ran[1]["signal"], ran[1]["info"]) == (signal.SIGTERM, {}) and "exit_code" not in ran[1]
    assert ran[2]["exit_code"] == 1 and ran[2]["info"]["exc"] == "ValueError"
    assert [e["outcome"] for e in run.of_kind("test")] == ["passed", "runtime_error", "runtime_error"]
    # the zygote's and the server's other events
    started, confined = run.of_kind("started"), run.of_kind("confined")
    assert len(started) == 1 and isinstance(started[0]["pid"], int) and started[0]["pid"] > 1
    assert len(confined) == 1 and tuple(confined[0]["layers"]) == run.layers and run.layers
    assert isinstance(confined[0]["landlock"], bool) and confined[0]["landlock"] == run.landlock
    assert [e["wrapped"] for e in run.of_kind("ready")] == [False] and run.finished and not run.error


def test_working_folder_is_removed_afterwards():
    job = SandboxJob("exec", "import os\nprint(os.path.realpath('.'))\n", (("", ""),), guard=False)
    folder = run_in_sandbox(job).of_kind("exec")[0]["stdout"].strip()
    assert folder and os.path.basename(folder).startswith("lcb-sbx-")
    assert not os.path.exists(folder)


def test_backstop_kills_a_zygote_that_stopped_reporting(monkeypatch):
    # Freeze the zygote from outside (model code cannot: no signals out of its domain); only
    # the harness's global deadline can end the run then.
    monkeypatch.setattr(sandbox, "_STARTUP_ALLOWANCE_S", -4.0)  # backstop = (1 + 1) + 5 - 4 = 2 s
    job = SandboxJob("stdin", "import time\ntime.sleep(60)\n", (("", ""),), timeout_s=1.0, wall_limit_s=1.0)
    stopped = []

    def parent_of(pid: int) -> int:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])

    def freeze():
        # Below the server: the job's zygote (or its warden, and below it the zygote), then the
        # test process. Once two levels exist the zygote is among them: freeze them all.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not stopped:
            live = sandbox.live_sandbox_processes()
            parents = {pid: parent_of(pid) for pid in live}
            top = [pid for pid, parent in parents.items() if parent == sandbox.fork_server_pid()]
            if any(parent in top for parent in parents.values()):
                for pid in live:
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
                break
            time.sleep(0.005)

    sandbox.run_in_sandbox(SandboxJob("exec", "pass", (("", ""),)))  # server up before freezing
    settle = time.monotonic() + 3
    while sandbox.live_sandbox_processes() and time.monotonic() < settle:
        time.sleep(0.01)  # the warm-up zygote must be gone, or we would freeze it instead
    thread = threading.Thread(target=freeze)
    thread.start()
    began = time.monotonic()
    run = run_in_sandbox(job)
    thread.join()
    assert stopped and run.backstop_hit and not run.of_kind("test")
    assert time.monotonic() - began < 6
    deadline = time.monotonic() + 3
    while sandbox.live_sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    left = sandbox.live_sandbox_processes()
    assert not left, [open(f"/proc/{p}/stat").read() for p in left]


def test_threads_work_in_a_test_process():
    # The fork server and the zygotes fork single-threaded and skip threading's after-fork hook
    # (lcb/_child.py): a program's threads, the main thread's identity and the join of a
    # non-daemon thread at exit must still be as under `python main.py`, on every test.
    code = ("import threading, time\n"
            "from concurrent.futures import ThreadPoolExecutor\n"
            "assert threading.current_thread() is threading.main_thread()\n"
            "assert threading.main_thread().ident == threading.get_ident()\n"
            "assert threading.active_count() == 1, threading.enumerate()\n"
            "with ThreadPoolExecutor(4) as pool:\n"
            "    total = sum(pool.map(lambda x: x * x, range(int(input()))))\n"
            "def late():\n"
            "    time.sleep(0.05)\n"
            "    print('late', flush=True)\n"
            "threading.Thread(target=late).start()\n"
            "print(total, flush=True)\n")
    run = run_in_sandbox(SandboxJob("stdin", code, (("10\n", "285\nlate"), ("3\n", "5\nlate"), ("4\n", "14\nlate"))))
    assert [e["outcome"] for e in run.of_kind("test")] == ["passed"] * 3


@pytest.mark.parametrize("use_fork_server", [True, False])
def test_every_test_process_starts_from_a_fresh_random_state(use_fork_server):
    # Test processes are forked without CPython's after-fork work (lcb/_child.py,
    # _fork_test_process), random's reseed included: the zygote reseeds for the next one instead.
    # Without that, a program's tests would all draw the same numbers.
    seen = []
    for _ in range(2):
        run = run_in_sandbox(SandboxJob("stdin", "print(random.getrandbits(64))\n", (("", "x"),) * 4),
                             use_fork_server=use_fork_server)
        seen += [e["got"] for e in run.of_kind("test")]
    assert len(seen) == 8 and len(set(seen)) == 8, seen


def _run_child_script(body: str) -> subprocess.CompletedProcess:
    """``body`` in a fresh interpreter that has run lcb/_child.py as a module (``child``)."""
    child = Path(__file__).resolve().parents[2] / "lcb" / "_child.py"
    setup = ("import os, runpy, sys\n"
             f"sys.argv = [{str(child)!r}]\n"
             f"child = runpy.run_path({str(child)!r}, run_name='lcb_child')\n")
    return subprocess.run([sys.executable, "-s", "-c", setup + body], capture_output=True, text=True, timeout=60)


def test_test_processes_skip_pythons_after_fork_work_only_while_every_hook_is_known():
    # The C library's fork() (no after-fork work in the child) while the at-fork hooks are
    # threading's (emptied) and random's (the zygote reseeds instead); once a module registers
    # another (logging does), os.fork() runs them. Either way the child is a working interpreter:
    # a thread starts and joins.
    body = (
        "def once():\n"
        "    pid, raw = child['_fork_test_process']()\n"
        "    if pid == 0:\n"
        "        import threading\n"
        "        got = []\n"
        "        thread = threading.Thread(target=got.append, args=(1,))\n"
        "        thread.start(); thread.join()\n"
        "        os._exit(7 if got == [1] else 1)\n"
        "    return raw, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])\n"
        "first = once()\n"
        "import logging\n"
        "print(first, once())\n")
    done = _run_child_script(body)
    assert done.returncode == 0, done.stderr[-2000:]
    raw = sys.version_info[:2] == (3, 11)  # the after-fork work it leaves out is 3.11's
    assert done.stdout.strip() == f"({raw}, 7) (False, 7)"


def test_nothing_the_interpreter_loads_before_the_sandbox_child_registers_an_at_fork_hook():
    # lcb/_child.py records the hooks registered from its first line on; earlier ones it could
    # not see. The scan finds the call where it is (threading; the control).
    listed = subprocess.run(
        [sys.executable, "-s", "-c", "import sys\nfiles = [getattr(m, '__file__', None) for m in list(sys.modules.values())]\n"
                                     "print('\\n'.join(f for f in files if f))"],
        capture_output=True, text=True, timeout=60, cwd="/")
    files = [f for f in listed.stdout.split() if f.endswith(".py")]
    assert files and listed.returncode == 0

    def registers(path: str) -> bool:
        return "register_at_fork" in Path(path).read_text(encoding="utf-8", errors="replace")

    assert not [f for f in files if registers(f)]
    assert registers(threading.__file__)


def test_a_late_non_daemon_thread_is_joined_at_exit():
    # Without concurrent.futures (which registers a threading atexit hook): the test process
    # joins threads only where the program started one (lcb/_child.py, _finish_like_python),
    # and this one is, before stdout is flushed, as under `python main.py`.
    code = ("import threading, time\n"
            "def late():\n"
            "    time.sleep(0.1)\n"
            "    print('late')\n"
            "threading.Thread(target=late).start()\n"
            "print(input())\n")
    run = run_in_sandbox(SandboxJob("stdin", code, (("1\n", "1\nlate"), ("2\n", "2\nlate"))))
    assert [e["outcome"] for e in run.of_kind("test")] == ["passed"] * 2
    daemon = code.replace("target=late)", "target=late, daemon=True)")  # control: not joined, lost
    run = run_in_sandbox(SandboxJob("stdin", daemon, (("1\n", "1\nlate"),)))
    assert [e["outcome"] for e in run.of_kind("test")] == ["wrong_answer"]


def test_each_running_program_keeps_to_a_cpu_of_its_own():
    plan = sandbox._CpuPlan()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        assert plan.take() is None  # nothing to choose
        return
    taken = [plan.take() for _ in cpus]
    assert sorted(taken) == cpus and plan.take() is None  # never two programs on one CPU
    plan.give_back(taken[0])
    assert plan.take() == taken[0]


def test_the_fork_server_binds_eagerly_and_no_program_sees_the_loader_setting():
    # The server is started with EAGER_BINDING (its process environment as exec'd holds it: the
    # control that there was something to hide); a program's os.environ and getenv lack it.
    code = ("import ctypes, os\nlibc = ctypes.CDLL(None)\nlibc.getenv.restype = ctypes.c_char_p\n"
            "print('LD_BIND_NOW' in os.environ, libc.getenv(b'LD_BIND_NOW'))\n")
    out = run_in_sandbox(SandboxJob("exec", code, (("", ""),), guard=False)).of_kind("exec")[0]
    assert out["stdout"] == "False None\n", out["stderr"]
    with open(f"/proc/{sandbox.fork_server_pid()}/environ", "rb") as fh:
        assert b"LD_BIND_NOW=1\0" in fh.read()


def test_a_program_runs_on_the_cpu_it_was_given():
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: programs are not kept to one")
    code = "import os\nprint(len(os.sched_getaffinity(0)))\n"
    run = run_in_sandbox(SandboxJob("stdin", code, (("", "1"), ("", "1"))))
    assert [e["outcome"] for e in run.of_kind("test")] == ["passed", "passed"]


def test_guarded_shutil_and_the_compression_modules_the_server_leaves_out():
    # The fork server imports shutil without zlib, bz2 and lzma (fewer mappings per fork): the
    # guard still disables shutil's three functions, and a program still gets the modules.
    code = ("import shutil, zlib, bz2, lzma\n"
            "print(shutil.rmtree, shutil.move, shutil.chown, zlib.crc32(b'a'),"
            " bz2.decompress(bz2.compress(b'x')), lzma.decompress(lzma.compress(b'y')))\n")
    run = run_in_sandbox(SandboxJob("stdin", code, (("", "None None None 3904355907 b'x' b'y'"),)))
    assert [e["outcome"] for e in run.of_kind("test")] == ["passed"], run.of_kind("test")


def test_comparator_matches_official_rules():
    assert compare.outputs_match("1.50 2\n", "1.5 2")
    assert not compare.outputs_match("0.333", "0.3333")
    assert compare.outputs_match("\n  a b \n c\n\n", "a b\nc")
    assert not compare.outputs_match("a  b", "a b")  # different text, and not numbers
    assert compare.outputs_match("1  2", "1 2")  # numbers: token lists compared as Decimals
    assert not compare.outputs_match("sNaN", "sNaN x")
    assert not compare.outputs_match("sNaN 1", "sNaN 2")  # sNaN refuses comparison: no crash
    assert compare.first_mismatch("1\n2", "1\n3") == "line 2 differs"
    assert "output lines" in compare.first_mismatch("1", "1\n2")


@pytest.mark.parametrize("filled_by_server", [False, True])
def test_copied_prelude_binds_exactly_what_running_it_after_the_guard_binds(tmp_path, filled_by_server):
    """Test processes inherit the program's module with the prelude's bindings (made once per
    program, or filled ahead by the fork server) instead of running the prelude: after the guard
    it must hold, name for name, in the same order and object for object, what running the
    prelude then gives."""
    import subprocess
    import sys
    from pathlib import Path

    child = Path(__file__).resolve().parents[2] / "lcb" / "_child.py"
    check = (
        "import os, runpy, sys\n"
        f"sys.argv = [{str(child)!r}]\n"
        f"child = runpy.run_path({str(child)!r}, run_name='lcb_child')\n"
        "job = {'mode': 'stdin', 'main_path': '/x/main.py', 'prelude': True}\n"
        + ("child['_FILLED'].append(child['_filled_module']())  # as the server does before the fork\n"
           if filled_by_server else "") +
        f"child['reliability_guard']({str(tmp_path)!r})  # in the zygote, once per program\n"
        "job['module'] = child['program_module'](job)\n"
        "ran, copied = {}, dict(child['_enter_module'](job))\n"
        "exec(child['PRELUDE_CODE'], ran)\n"
        "for name in ('__name__', '__doc__', '__package__', '__loader__', '__spec__', '__file__', '_lcb_seed_'):\n"
        "    del copied[name]\n"
        "assert list(ran) == list(copied), ran.keys() ^ copied.keys()\n"
        "assert all(ran[k] is copied[k] for k in ran), [k for k in ran if ran[k] is not copied[k]]\n"
        "assert copied['open'] is not child['_real_os_open']\n"
        "assert not child['_FILLED']  # the filled module was the one used\n"
        "print('same', len(ran))\n"
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("same"), done.stderr[-2000:]


def test_landlock_abi_cap_reads_the_environment_and_refuses_nonsense(monkeypatch):
    monkeypatch.delenv(sandbox.LANDLOCK_ABI_ENV, raising=False)
    assert sandbox.landlock_abi_cap() is None
    monkeypatch.setenv(sandbox.LANDLOCK_ABI_ENV, "5")
    assert sandbox.landlock_abi_cap() == 5
    assert SandboxJob("exec", "pass", (("", ""),)).to_wire("/x")["landlock_abi_cap"] == 5
    for bad in ("five", "-1"):
        monkeypatch.setenv(sandbox.LANDLOCK_ABI_ENV, bad)
        with pytest.raises(LcbError, match=sandbox.LANDLOCK_ABI_ENV):
            sandbox.landlock_abi_cap()


def test_job_folders_go_in_memory_only_where_a_roomy_tmpfs_is(tmp_path):
    assert not sandbox._is_roomy_tmpfs(str(tmp_path / "missing"))
    root = sandbox.job_root()
    assert root is None or sandbox._is_roomy_tmpfs(root)


@pytest.mark.parametrize("use_fork_server", [True, False])
def test_timings_report_faults_per_lap_and_per_test_only_when_asked(use_fork_server):
    """``timings`` (benchmarks/perf/grading_speed.py --breakdown): the zygote's set-up by lap in
    seconds, CPU seconds and page faults, and each test's faults (its own and the zygote's); a
    program that writes to 2000 fresh pages shows them. Without ``timings`` none of it is sent."""
    code = "import sys\nbuf = bytearray(2000 * 4096)\nfor i in range(0, len(buf), 4096):\n    buf[i] = 1\nprint(1)\n"
    job = SandboxJob("stdin", code, (("", "1"), ("", "1")), timings=True)
    run = run_in_sandbox(job, use_fork_server=use_fork_server)
    assert run.error == "", run.error
    ready = next(e for e in run.events if e.get("event") == "ready")
    laps = ("namespaces", "identity", "landlock", "seccomp", "compile", "module")
    assert set(laps) <= set(ready["setup_faults"]) and set(laps) <= set(ready["setup_cpu_s"])
    assert ready["setup_faults"]["fork, job file"] > 0 and all(v >= 0 for v in ready["setup_faults"].values())
    ran = [e for e in run.events if e.get("event") == "ran"]
    assert len(ran) == 2 and all(e["faults"] >= 2000 and e["zygote_faults"] >= 0 for e in ran)
    plain = run_in_sandbox(SandboxJob("stdin", code, (("", "1"),)), use_fork_server=use_fork_server)
    ready = next(e for e in plain.events if e.get("event") == "ready")
    assert not {"setup_faults", "setup_s", "setup_cpu_s"} & set(ready)
    assert not {"faults", "zygote_faults"} & {k for e in plain.events if e.get("event") == "ran" for k in e}
