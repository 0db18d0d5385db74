"""Hostile "answer-peeking" programs: none of them may pass a test whose answer it cannot compute.

Every problem here has answers that no program can derive from its input: test ``k`` reads
``query k`` (stdin) or gets ``k`` (functional) and must produce ``ans-k-<32 random hex digits>``,
fresh for every run. Each technique below searches one place a grader might leave the answers
(frames, the garbage collector's objects, files and folders, descriptors, /proc of itself and
of its ancestors, their memory, the environment, the harness modules, the result channel, the
comparison, a process that outlives its test) for the exact bytes of its own answer, and prints
or returns what it found. The attacker is deliberately over-informed (it knows the answer's
format), so a leak anywhere is found.

The suite proves itself: every probe must end each test as a plain wrong answer (a crash would
also "find nothing"), and every probe has a positive control that does get the secret: the
same probe with the protection it targets switched off, or with the secret planted where it
looks. So no probe can pass by being broken.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import textwrap

import pytest

from lcb.grading import grade
from lcb.problem import Problem, TestCase
from lcb.problem import TestKind as Kind
from lcb.sandbox import SandboxJob, run_in_sandbox
from lcb.verdict import Outcome

ROOT = os.geteuid() == 0
ALL_OFF = {"namespaces": False, "drop_privileges": False, "seccomp": False, "landlock": False,
           "sockets_paired_only": False}

N_TESTS = 3
TIMEOUT_S = 10.0

# Shared by every technique: search byte blobs for this test's answer.
FINDER = r'''
import gc, os, re, stat, sys
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
    # files only: reading another process's pipe or socket would steal its data (answers are
    # never in transit there; the harness's own events are, and a control must not eat them)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return b""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
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


# Where each technique's control plants the answers (``ANSWERS``: the list, defined before this
# code), and which layers it switches off so that the probe can look there at all.
PLANTS = {
    "frame_walk": ("_planted = {k: a for k, a in enumerate(ANSWERS)}\n", {}),
    "gc_scan": ("_planted = [list(ANSWERS)]\n", {}),
    "harness_files": ("with open('planted.txt', 'w') as _fh:\n    _fh.write(' '.join(ANSWERS))\n", {}),
    "inherited_fds": ("import posix as _posix\n_r, _w = _posix.pipe()\n"
                      "_posix.write(_w, ' '.join(ANSWERS).encode())\n", {}),
    # /proc itself is what Landlock keeps from the program: off, plus an open file holding the answers
    "proc_self": ("_keep = open('planted.txt', 'w+')\n_keep.write(' '.join(ANSWERS))\n_keep.flush()\n",
                  {"landlock": False}),
    # the harness (an ancestor) holds the answers in an open file: see _harness_holds_the_answers
    "proc_parent": ("", ALL_OFF),
    # the harness's memory holds the expected outputs; Landlock and the unprivileged uid keep it away
    "parent_memory": ("", ALL_OFF),
    # os.environ's own store (the guard disables putenv, which assigning would call)
    "environment": ("import os as _os\n_os.environ._data[_os.environ.encodekey('PLANTED')] = "
                    "_os.environ.encodevalue(' '.join(ANSWERS))\n", {}),
    "harness_modules": ("import sys as _sys, types as _types\n_m = _types.ModuleType('lcb_planted')\n"
                        "_m.__file__ = '/x/lcb/planted.py'\n_m.answers = list(ANSWERS)\n"
                        "_sys.modules['lcb_planted'] = _m\n", {}),
}
NEEDS_ROOT = {"proc_parent", "parent_memory"}  # as another user, Yama and dumpability decide


def _skip_where_the_control_cannot_run(technique: str) -> None:
    """A probe whose control cannot run here proves nothing by finding nothing: both skip."""
    if technique in NEEDS_ROOT and not ROOT:
        pytest.skip("as another user, Yama's ptrace scope and dumpability decide what an ancestor "
                    "shows: the control cannot show this probe working, so the probe is not run either")


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


PROBLEMS = {"stdin": (stdin_problem, stdin_program), "functional": (functional_problem, functional_program)}


def _graded(problem: Problem, code: str):
    return grade(problem, code, timeout_s=TIMEOUT_S)


def _outcomes(problem: Problem, code: str, **layers) -> list[str]:
    """Each test's outcome with some sandbox layers switched off (for the controls)."""
    cases = problem.private_tests
    job = SandboxJob(cases[0].kind.value, code, tuple((c.input, c.output) for c in cases),
                     fn_name=problem.fn_name, timeout_s=TIMEOUT_S, **layers)
    return [e["outcome"] for e in run_in_sandbox(job).of_kind("test")]


def assert_gets_nothing(verdict) -> None:
    """Every test ran and ended as a plain wrong answer: the probe ran to its end, found nothing."""
    outcomes = [t.outcome for t in verdict.tests]
    assert outcomes == [Outcome.WRONG_ANSWER] * N_TESTS, (
        f"expected {N_TESTS} wrong answers, got {[o.value for o in outcomes]}: {verdict.feedback} "
        f"{[t.detail for t in verdict.tests]}")


@contextlib.contextmanager
def _harness_holds_the_answers(folder, answers):
    """The grading process (an ancestor of every test process) keeps a file with the answers open."""
    path = folder / "harness-answers.txt"
    path.write_text(" ".join(answers))
    path.chmod(0o644)
    with open(path):
        yield


@pytest.mark.parametrize("mode", sorted(PROBLEMS))
@pytest.mark.parametrize("technique", sorted(SOURCES))
def test_program_cannot_peek(technique, mode, tmp_path):
    _skip_where_the_control_cannot_run(technique)
    make_problem, make_program = PROBLEMS[mode]
    answers = _answers()
    with _harness_holds_the_answers(tmp_path, answers):  # within reach of the controls: not of this
        assert_gets_nothing(_graded(make_problem(answers), make_program(SOURCES[technique])))


@pytest.mark.parametrize("mode", sorted(PROBLEMS))
@pytest.mark.parametrize("technique", sorted(SOURCES))
def test_control_the_probe_gets_a_secret_within_its_reach(technique, mode, tmp_path):
    _skip_where_the_control_cannot_run(technique)
    make_problem, make_program = PROBLEMS[mode]
    answers = _answers()
    plant, layers = PLANTS[technique]
    code = make_program(f"ANSWERS = {answers!r}\n" + plant + SOURCES[technique])
    if plant:  # the plant names the answers in the program: without the probe nothing passes
        assert _outcomes(make_problem(answers), make_program(f"ANSWERS = {answers!r}\n" + plant +
                                                             "def blobs():\n    return []\n"), **layers) \
            == ["wrong_answer"] * N_TESTS
    with _harness_holds_the_answers(tmp_path, answers):
        assert _outcomes(make_problem(answers), code, **layers) == ["passed"] * N_TESTS


FORGER = textwrap.dedent('''
    import json, os
    class Solution:
        def solve(self, k):
            lines = []
            for index in range(8):
                lines.append({"start": index})
                lines.append({"index": index, "outcome": "passed", "duration_s": 0.0})
                lines.append({"event": "test", "index": index, "outcome": "passed"})
                lines.append({"event": "ran", "index": index, "state": "exit", "exit_code": 0,
                              "info": {"returned": 1}})
            data = "".join(json.dumps(line) + "\\n" for line in lines).encode()
            for fd in range(3, 64):
                try:
                    os.write(fd, data)
                except OSError:
                    pass
            return ANSWERS[k] if ANSWERS else "nothing"
''')


def test_functional_program_cannot_forge_the_result_channel():
    """Write 'passed' reports on every descriptor and in every format a grader might read."""
    assert_gets_nothing(_graded(functional_problem(_answers()), "ANSWERS = []\n" + FORGER))


def test_control_the_forger_passes_when_it_knows_the_answers():
    """The same program returning the real answers passes: forging costs it nothing it needs."""
    answers = _answers()
    assert _graded(functional_problem(answers), f"ANSWERS = {answers!r}\n" + FORGER).solved


HOOK = textwrap.dedent('''
    class Anything(str):
        def __eq__(self, other):
            return True
        def __ne__(self, other):
            return False
        __hash__ = str.__hash__
    class Solution:
        def solve(self, k):
            return Anything(ANSWERS[k] if ANSWERS else "?")
''')


def test_functional_program_cannot_hook_the_comparison():
    """An object that claims to equal anything: compared by its value, not its hook."""
    assert_gets_nothing(_graded(functional_problem(_answers()), "ANSWERS = []\n" + HOOK))


def test_control_the_hooked_object_passes_with_the_right_value():
    answers = _answers()
    assert _graded(functional_problem(answers), f"ANSWERS = {answers!r}\n" + HOOK).solved


def _lingering_program(carry: dict[int, str] | None) -> str:
    """Test k prints the loot a process left for it in ``loot-k`` (or "nothing"), then leaves a
    detached process behind that outlives the test and hunts for later tests' answers in what
    the harness writes or holds afterwards, storing each in that test's own loot file. With
    ``carry`` (the control) the process carries a known token for the next test instead."""
    return (FINDER + SOURCES["harness_files"] + SOURCES["proc_parent"].replace("def blobs", "def blobs2")
            + f"CARRY = {carry!r}\n" + textwrap.dedent('''
        import posix, time
        k = int(input().split()[1])
        try:
            with open("loot-%d" % k) as fh:
                print(fh.read().strip() or "nothing")
        except OSError:
            print("nothing")
        sys.stdout.flush()
        if posix.fork() == 0:
            import ctypes
            ctypes.CDLL(None).setsid()
            def leave(j, text):
                with open("loot-%d.tmp" % j, "w") as fh:
                    fh.write(text)
                posix.rename("loot-%d.tmp" % j, "loot-%d" % j)
            if CARRY is not None:
                if k + 1 in CARRY:
                    leave(k + 1, CARRY[k + 1])
                posix._exit(0)
            end = time.time() + 3
            while time.time() < end:
                for j in range(k + 1, k + 3):
                    found = hunt(j, list(blobs()) + list(blobs2()))
                    if found:
                        leave(j, found)
                time.sleep(0.05)
            posix._exit(0)
        if CARRY is not None:  # the control: wait until the carrier has left its token
            end = time.time() + 3
            while k + 1 in CARRY and time.time() < end and not posix.access("loot-%d" % (k + 1), posix.F_OK):
                time.sleep(0.01)
    '''))


def test_lingering_process_cannot_carry_answers_to_a_later_test():
    assert_gets_nothing(_graded(stdin_problem(_answers()), _lingering_program(None)))


def test_control_a_lingering_process_does_carry_a_known_token_to_the_next_test():
    tokens = {k: f"carried-{k}-{secrets.token_hex(8)}" for k in range(1, N_TESTS)}
    problem = Problem("peek-carry", "t", "s", "atcoder", "easy", "", "", None, (),
                      tuple(TestCase(f"query {k}\n", tokens.get(k, "nothing"), Kind.STDIN) for k in range(N_TESTS)))
    assert _graded(problem, _lingering_program(tokens)).solved


STDOUT_OF_TEST_0 = "stdout-0.txt"  # where a test process's output lies (lcb/judge.py STDOUT_FILE)


@pytest.mark.parametrize("link", ["symlink", "hardlink", "control: a copy the program wrote"])
def test_output_replaced_by_a_link_does_not_make_the_harness_read_for_the_program(tmp_path, link):
    """The harness reads what a program left in its folder; a link to a file only the harness
    can read must not come back as output (python_exec returns it, feedback previews it). The
    control replaces the output file by a file holding the secret: that does come back, so the
    links were placed where the harness reads."""
    from lcb.tools import python_exec

    secret = tmp_path / "harness-only.txt"
    secret.write_text("harness-secret-7f3a")
    make = {"symlink": f"posix.symlink({str(secret)!r}, {STDOUT_OF_TEST_0!r})",
            "hardlink": f"posix.link({str(secret)!r}, {STDOUT_OF_TEST_0!r})"}.get(
        link, f"open({STDOUT_OF_TEST_0!r}, 'w').write('harness-secret-7f3a')")
    code = textwrap.dedent(f'''
        import posix, sys
        print("visible")
        sys.stdout.flush()
        try:
            posix.unlink({STDOUT_OF_TEST_0!r})
        except OSError:
            pass
        try:
            {make}
        except OSError:
            pass
    ''')
    problem = Problem("peek-link", "t", "s", "atcoder", "easy", "", "", None,
                      (TestCase("", "x", Kind.STDIN),), ())
    verdict = grade(problem, code, tests="public")  # public: the feedback previews the output
    shown = python_exec(code).stdout
    assert "got:" in verdict.feedback
    if link.startswith("control"):
        assert "harness-secret" in shown and "harness-secret" in verdict.feedback
    else:
        assert "harness-secret" not in shown and "harness-secret" not in verdict.feedback
