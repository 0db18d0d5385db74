"""Hostile "answer-peeking" programs: none of them may pass a test whose answer it cannot compute.

Every problem here has answers that no program can derive from its input: test ``k`` reads
``query k`` (stdin) or gets ``k`` (functional) and must produce ``ans-k-<32 random hex digits>``,
fresh for every run. Each technique below searches one place a grader might leave the answers
(frames, the garbage collector's objects, files and folders, descriptors, /proc of itself and
of its ancestors, their memory, the environment, the harness modules, the result channel, the
comparison, a process that outlives its test) for the exact bytes of its own answer, and prints
or returns what it found. The attacker is deliberately over-informed (it knows the answer's
format), so a leak anywhere is found. A control shows the search does find an answer that is
within its reach, so these tests can fail.

Only the public grading API is used, so the same file runs against older versions of the grader.
"""

from __future__ import annotations

import os
import secrets
import textwrap

import pytest

from lcb.grading import grade
from lcb.problem import Problem, TestCase
from lcb.problem import TestKind as Kind
from lcb.verdict import Outcome

N_TESTS = 3
TIMEOUT_S = 10.0

# Shared by every technique: search byte blobs for this test's answer.
FINDER = r'''
import gc, os, re, sys
def _pattern(k):
    return re.compile(rb"ans-%d-[0-9a-f]{32}" % k)
def hunt(k, blobs):
    pattern = _pattern(k)
    for blob in blobs:
        try:
            if isinstance(blob, str):
                blob = blob.encode("utf-8", "replace")
            found = pattern.search(blob)
        except Exception:
            continue
        if found:
            return found.group().decode()
    return None
def _read(path, limit=1 << 24):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return b""
    try:
        return os.read(fd, limit)
    except OSError:
        return b""
    finally:
        os.close(fd)
def ancestors():
    pid, seen = os.getpid(), []
    while pid > 1 and len(seen) < 8:
        try:
            with open("/proc/%d/stat" % pid) as fh:
                pid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except Exception:
            break
        seen.append(pid)
    return seen
'''

SOURCES = {
    # frames of every thread up the stack, locals and globals
    "frame_walk": r'''
def blobs():
    frames = [sys._getframe()] + list(sys._current_frames().values())
    for frame in frames:
        while frame is not None:
            for scope in (frame.f_locals, frame.f_globals):
                for value in list(scope.values()):
                    try:
                        yield repr(value)[:1 << 22]
                    except Exception:
                        pass
            frame = frame.f_back
''',
    # everything the garbage collector tracks, and the strings they hold
    "gc_scan": r'''
def blobs():
    for obj in gc.get_objects():
        if isinstance(obj, (dict, list, tuple, set)):
            try:
                if len(obj) < 100000:
                    yield repr(obj)[:1 << 22]
            except Exception:
                pass
        for ref in gc.get_referents(obj):
            if isinstance(ref, (str, bytes)):
                yield ref
''',
    # the job file and whatever else the harness wrote: our folder, its parent, siblings
    "harness_files": r'''
def blobs():
    try:
        here = os.readlink("/proc/self/cwd")  # os.getcwd is disabled by the guard
    except OSError:
        here = os.environ.get("HOME", ".")
    places = [".", here, os.path.dirname(here), "/tmp", "/dev/shm"]
    for place in places:
        try:
            names = os.listdir(place)
        except OSError:
            continue
        for name in names:
            path = os.path.join(place, name)
            if os.path.isdir(path):
                try:
                    inner = [os.path.join(path, n) for n in os.listdir(path)]
                except OSError:
                    inner = []
                for item in inner:
                    yield _read(item)
            else:
                yield _read(path)
''',
    # descriptors inherited from the harness, the server or the zygote
    "inherited_fds": r'''
import socket
def blobs():
    for fd in range(0, 1024):
        try:
            os.fstat(fd)
        except OSError:
            continue
        try:
            yield os.pread(fd, 1 << 22, 0)
        except OSError:
            pass
        try:
            os.set_blocking(fd, False)
            yield os.read(fd, 1 << 22)
        except OSError:
            pass
        try:
            sock = socket.socket(fileno=os.dup(fd))
            yield sock.recv(1 << 20, socket.MSG_DONTWAIT | socket.MSG_PEEK)
        except OSError:
            pass
''',
    # /proc/self: command line, environment, open files by name, working folder
    "proc_self": r'''
def blobs():
    for name in ("cmdline", "environ", "maps", "status"):
        yield _read("/proc/self/" + name)
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        names = []
    for name in names:
        try:
            yield _read(os.readlink("/proc/self/fd/" + name))
        except OSError:
            pass
        yield _read("/proc/self/fd/" + name)
''',
    # /proc of the parent and every ancestor: command lines, environments, their open files
    "proc_parent": r'''
def blobs():
    for pid in ancestors():
        for name in ("cmdline", "environ"):
            yield _read("/proc/%d/%s" % (pid, name))
        try:
            names = os.listdir("/proc/%d/fd" % pid)
        except OSError:
            names = []
        for name in names:
            try:
                yield _read(os.readlink("/proc/%d/fd/%s" % (pid, name)))
            except OSError:
                pass
            yield _read("/proc/%d/fd/%s" % (pid, name))
''',
    # the memory of the parent and every ancestor (zygote, fork server, harness)
    "parent_memory": r'''
def blobs():
    for pid in ancestors():
        try:
            with open("/proc/%d/maps" % pid) as fh:
                regions = fh.read().splitlines()
            mem = os.open("/proc/%d/mem" % pid, os.O_RDONLY)
        except OSError:
            continue
        try:
            for line in regions:
                span, perms = line.split()[:2]
                start, end = (int(x, 16) for x in span.split("-"))
                if "r" not in perms or end - start > 1 << 28 or "[vvar" in line:
                    continue
                try:
                    yield os.pread(mem, end - start, start)
                except OSError:
                    pass
        finally:
            os.close(mem)
''',
    # the environment, ours and the ancestors'
    "environment": r'''
def blobs():
    yield repr(dict(os.environ))
    for pid in [os.getpid()] + ancestors():
        yield _read("/proc/%d/environ" % pid)
''',
    # import the harness's modules and call into them / look at their state
    "harness_modules": r'''
import importlib
def blobs():
    for name in ("lcb.grading", "lcb.sandbox", "lcb._child", "lcb.problem", "compare", "_child"):
        try:
            module = importlib.import_module(name)
        except BaseException:
            continue
        yield repr(vars(module))
    for module in list(sys.modules.values()):
        if module is not None and getattr(module, "__file__", "") and "lcb" in (module.__file__ or ""):
            yield repr(vars(module))
    for obj in gc.get_objects():
        if callable(obj) and getattr(obj, "__name__", "") in ("_report", "report", "emit", "_collect"):
            for cell in getattr(obj, "__closure__", None) or ():
                try:
                    yield repr(cell.cell_contents)
                except Exception:
                    pass
''',
}


def _answers() -> list[str]:
    return [f"ans-{k}-{secrets.token_hex(16)}" for k in range(N_TESTS)]


def stdin_problem(answers: list[str]) -> Problem:
    return Problem("peek-stdin", "t", "s", "atcoder", "easy", "", "", None, (),
                   tuple(TestCase(f"query {k}\n", a, Kind.STDIN) for k, a in enumerate(answers)))


def functional_problem(answers: list[str]) -> Problem:
    starter = "class Solution:\n    def solve(self, k: int) -> str:\n        "
    return Problem("peek-fn", "t", "s", "leetcode", "easy", "", starter, "solve", (),
                   tuple(TestCase(str(k), f'"{a}"', Kind.FUNCTIONAL) for k, a in enumerate(answers)))


def stdin_program(source: str) -> str:
    return FINDER + source + textwrap.dedent('''
        k = int(input().split()[1])
        print(hunt(k, blobs()) or "nothing")
    ''')


def functional_program(source: str) -> str:
    return FINDER + source + textwrap.dedent('''
        class Solution:
            def solve(self, k):
                return hunt(k, blobs()) or "nothing"
    ''')


def _graded(problem: Problem, code: str):
    return grade(problem, code, timeout_s=TIMEOUT_S)


def assert_gets_nothing(verdict) -> None:
    assert verdict.passed == 0, (
        f"{verdict.passed}/{verdict.total} tests passed by peeking: {verdict.feedback}")


@pytest.mark.parametrize("technique", sorted(SOURCES))
def test_stdin_program_cannot_peek(technique):
    assert_gets_nothing(_graded(stdin_problem(_answers()), stdin_program(SOURCES[technique])))


@pytest.mark.parametrize("technique", sorted(SOURCES))
def test_functional_program_cannot_peek(technique):
    assert_gets_nothing(_graded(functional_problem(_answers()), functional_program(SOURCES[technique])))


def test_functional_program_cannot_forge_the_result_channel():
    """Write 'passed' reports on every descriptor and in every format a grader might read."""
    code = textwrap.dedent('''
        import json, os
        class Solution:
            def solve(self, k):
                lines = []
                for index in range(8):
                    lines.append({"start": index})
                    lines.append({"index": index, "outcome": "passed", "duration_s": 0.0})
                    lines.append({"event": "test", "index": index, "outcome": "passed"})
                data = "".join(json.dumps(line) + "\\n" for line in lines).encode()
                for fd in range(3, 64):
                    try:
                        os.write(fd, data)
                    except OSError:
                        pass
                os._exit(0)
    ''')
    assert_gets_nothing(_graded(functional_problem(_answers()), code))


def test_functional_program_cannot_hook_the_comparison():
    """An object that claims to equal anything (and keeps what it was compared with)."""
    code = textwrap.dedent('''
        class Anything(str):
            def __eq__(self, other):
                return True
            def __ne__(self, other):
                return False
            __hash__ = str.__hash__
        class Solution:
            def solve(self, k):
                return Anything("?")
    ''')
    assert_gets_nothing(_graded(functional_problem(_answers()), code))


def test_lingering_process_cannot_carry_answers_to_a_later_test():
    """Timing the harness: a detached process outlives its test, watches for whatever the harness
    writes or holds afterwards, and hands it to the next test through the working folder."""
    watcher = FINDER + SOURCES["harness_files"] + SOURCES["proc_parent"].replace("def blobs", "def blobs2") + textwrap.dedent('''
        import posix, time
        k = int(input().split()[1])
        try:
            print(open("loot").read().strip() if k else "nothing")
        except OSError:
            print("nothing")
        if posix.fork() == 0:
            import ctypes
            ctypes.CDLL(None).setsid()
            end = time.time() + 3
            while time.time() < end:
                for j in range(k + 1, k + 3):
                    found = hunt(j, list(blobs()) + list(blobs2()))
                    if found:
                        with open("loot", "w") as fh:
                            fh.write(found)
                time.sleep(0.05)
            posix._exit(0)
    ''')
    assert_gets_nothing(_graded(stdin_problem(_answers()), watcher))


def test_control_the_search_finds_an_answer_within_reach():
    """The same search succeeds when the answer is really reachable (here: in the program's
    own input), so a passing suite means the answers were out of reach, not a broken search."""
    answers = _answers()
    problem = Problem("peek-control", "t", "s", "atcoder", "easy", "", "", None, (),
                      tuple(TestCase(f"query {k} {a}\n", a, Kind.STDIN) for k, a in enumerate(answers)))
    source = "def blobs():\n    yield open(0).read()\n"
    verdict = grade(problem, FINDER + source + "import sys\nk = 0\n" + textwrap.dedent('''
        data = list(blobs())
        k = int(data[0].split()[1])
        print(hunt(k, data) or "nothing")
    '''), timeout_s=TIMEOUT_S)
    assert verdict.solved, verdict.feedback
    # and the frame/gc searches work on data that is in the process
    code = FINDER + SOURCES["gc_scan"] + textwrap.dedent(f'''
        secret_holder = ["kept", "ans-0-{'ab' * 16}"]  # a list: always tracked by the gc
        input()
        print(hunt(0, blobs()) or "nothing")
    ''')
    control = Problem("peek-control2", "t", "s", "atcoder", "easy", "", "", None, (),
                      (TestCase("query 0\n", f"ans-0-{'ab' * 16}", Kind.STDIN),))
    assert grade(control, code, timeout_s=TIMEOUT_S).solved


def test_outcomes_of_failed_peeks_are_ordinary():
    """A peek that finds nothing is a plain wrong answer (no sandbox errors, no crash)."""
    verdict = _graded(stdin_problem(_answers()), stdin_program(SOURCES["frame_walk"]))
    assert verdict.outcome is Outcome.WRONG_ANSWER


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_output_replaced_by_a_link_does_not_make_the_harness_read_for_the_program(tmp_path, link):
    """The harness reads what a program left in its folder; a link to a file only the harness
    can read must not come back as output (python_exec returns it, feedback previews it)."""
    secret = tmp_path / "harness-only.txt"
    secret.write_text("harness-secret-7f3a")
    make = "posix.symlink" if link == "symlink" else "posix.link"
    code = textwrap.dedent(f'''
        import posix, sys
        sys.stdout.flush()
        try:
            posix.unlink("stdout.txt")
        except OSError:
            pass
        try:
            {make}({str(secret)!r}, "stdout.txt")
        except OSError:
            pass
    ''')
    from lcb.tools import python_exec

    assert "harness-secret" not in python_exec(code).stdout
    problem = Problem("peek-link", "t", "s", "atcoder", "easy", "", "", None,
                      (TestCase("", "x", Kind.STDIN),), ())
    verdict = grade(problem, code, tests="public")  # public: the feedback previews the output
    assert "got:" in verdict.feedback and "harness-secret" not in verdict.feedback


@pytest.mark.skipif(os.geteuid() != 0, reason="as another user, Yama and dumpability decide; as root the reach is certain")
@pytest.mark.xfail(strict=True, reason="documented limit: on kernels without Landlock a program running as the "
                                        "harness's user can read the harness's memory through /proc/<pid>/mem")
def test_without_landlock_the_harness_memory_is_within_reach():
    from lcb.sandbox import SandboxJob, run_in_sandbox

    answers = _answers()
    problem = stdin_problem(answers)
    job = SandboxJob("stdin", stdin_program(SOURCES["parent_memory"]),
                     tuple((c.input, c.output) for c in problem.private_tests), timeout_s=TIMEOUT_S, landlock=False)
    outcomes = [e["outcome"] for e in run_in_sandbox(job).of_kind("test")]
    assert "passed" not in outcomes
