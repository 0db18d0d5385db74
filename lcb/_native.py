"""The sandbox's optional C helper (lcb/csrc/sandbox.c): build it, load it, never a stale one.

Stdlib only: the harness builds it (``python -m lcb._native``; scripts/setup.sh runs that, and
the harness tries once per process where it is missing or stale), the fork server loads it from
the same folder (lcb/_child.py imports this module as a sibling). The library carries the
SHA-256 of the source it was built from, and the harness lets a job use it only after checking
that hash against the source beside it (``ensure_built``), so the structures below can never
disagree with the library's. The fork server maps the library without hashing anything: what
it imports, every fork copies (hashlib would map OpenSSL into every zygote and test process).
Without a C compiler nothing breaks: test processes are then forked and watched in Python.
"""

from __future__ import annotations

import ctypes
import os
import sys

FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc")
SOURCE = os.path.join(FOLDER, "sandbox.c")
LIBRARY = os.path.join(FOLDER, "liblcbsandbox.so")
MAX_RLIMITS = 8  # LCB_MAX_RLIMITS
MT_WORDS = 624  # MT_N


class Entry(ctypes.Structure):
    """struct lcb_entry"""
    _fields_ = [("input_fd", ctypes.c_int), ("status_w", ctypes.c_int), ("status_fd", ctypes.c_int),
                ("devnull_fd", ctypes.c_int), ("scope_ruleset", ctypes.c_int), ("zygote_pid", ctypes.c_int),
                ("stdout_path", ctypes.c_char_p), ("stderr_path", ctypes.c_char_p),
                ("n_rlimits", ctypes.c_int), ("rlimit_which", ctypes.c_int * MAX_RLIMITS),
                ("rlimit_value", ctypes.c_ulonglong * MAX_RLIMITS), ("began", ctypes.c_double)]


class Watch(ctypes.Structure):
    """struct lcb_watch"""
    _fields_ = [("deadline", ctypes.c_double), ("cpu_limit", ctypes.c_double), ("cpu_poll_s", ctypes.c_double),
                ("commands_fd", ctypes.c_int), ("pid", ctypes.c_int), ("pidfd", ctypes.c_int),
                ("forked", ctypes.c_double), ("ended", ctypes.c_double),
                ("mt_state", ctypes.c_void_p), ("mt_index", ctypes.c_void_p), ("reseeded", ctypes.c_int)]


class Loop(ctypes.Structure):
    """struct lcb_loop"""
    _fields_ = [("commands_fd", ctypes.c_int), ("emit_fd", ctypes.c_int), ("children_fd", ctypes.c_int),
                ("is_init", ctypes.c_int), ("stdout_files", ctypes.c_int), ("stderr_files", ctypes.c_int),
                ("wall_limit", ctypes.c_double), ("cpu_limit", ctypes.c_double), ("cpu_poll_s", ctypes.c_double),
                ("mt_state", ctypes.c_void_p), ("mt_index", ctypes.c_void_p), ("reseeded", ctypes.c_int),
                ("index", ctypes.c_int), ("last", ctypes.c_int), ("state", ctypes.c_int), ("status", ctypes.c_int),
                ("pid", ctypes.c_int), ("status_r", ctypes.c_int), ("status_w", ctypes.c_int), ("input_fd", ctypes.c_int),
                ("began", ctypes.c_double), ("wall_s", ctypes.c_double), ("cpu_s", ctypes.c_double),
                ("message", ctypes.c_char * 257), ("message_len", ctypes.c_int), ("fds", ctypes.c_int * 1),
                ("n_fds", ctypes.c_int), ("said", ctypes.c_void_p), ("said_len", ctypes.c_int)]


MAX_ZYGOTES, MAX_NETNS, FOLDER_MAX, JOB_MESSAGE_MAX = 128, 128, 512, 65536  # LCB_MAX_ZYGOTES ...


class Server(ctypes.Structure):
    """struct lcb_server"""
    _fields_ = [("sock", ctypes.c_int), ("euid_root", ctypes.c_int), ("pipelined", ctypes.c_int),
                ("cpus", ctypes.c_int), ("pool_left", ctypes.c_int), ("pool_used", ctypes.c_int),
                ("ns_usable", ctypes.c_int), ("own_pid_ns", ctypes.c_int), ("own_net_ns", ctypes.c_int),
                ("n_free", ctypes.c_int), ("free_ns", ctypes.c_int * MAX_NETNS), ("n_zygotes", ctypes.c_int),
                ("zygote_pid", ctypes.c_int * MAX_ZYGOTES), ("zygote_net", ctypes.c_int * MAX_ZYGOTES),
                ("zygote_folder", (ctypes.c_char * FOLDER_MAX) * MAX_ZYGOTES),
                ("checked_parent", ctypes.c_char * FOLDER_MAX), ("message_len", ctypes.c_int),
                ("n_fds", ctypes.c_int), ("fds", ctypes.c_int * 2), ("child_net", ctypes.c_int),
                ("child_net_joined", ctypes.c_int), ("child_ipc", ctypes.c_int),
                ("message", ctypes.c_char * (JOB_MESSAGE_MAX + 1))]


SERVER_CHILD, SERVER_MESSAGE, SERVER_SPARE = range(1, 4)
SERVER_FAILED = -3000


def raw(record: ctypes.Structure, field: str, size: int) -> bytes:
    """The first ``size`` bytes of a char-array field, NULs included (reading the field stops at one)."""
    return ctypes.string_at(ctypes.addressof(record) + getattr(type(record), field).offset, size)


STATES = {1: "exit", 2: "timeout", 3: "cpu", 4: "stopped"}
LOOP_CHILD, LOOP_FINISHED, LOOP_COMMAND, LOOP_EOF, LOOP_STOPPED, LOOP_LAST, LOOP_GONE = range(1, 8)
LOOP_FAILED = -3000
ENTRY_FAILURES = {-1: "setpgid failed", -2: "stdio could not be set up", -3: "setrlimit failed"}
FORK_FAILED, WAIT_FAILED = -1000, -2000
_MARKER = b"lcb-source-sha256:"  # before the hash in the library's lcb_source_sha256


def source_sha256() -> str:
    import hashlib
    with open(SOURCE, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def built_from(path: str) -> str | None:
    """The SHA-256 of the source the library at ``path`` was built from, read from the file (not
    by loading it: a process that has loaded one version of a path gets that one again)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    at = data.find(_MARKER)
    return data[at + len(_MARKER):at + len(_MARKER) + 64].decode("ascii", "replace") if at >= 0 else None


def current() -> bool:
    """Whether the library beside the source was built from it."""
    return built_from(LIBRARY) == source_sha256()


class Helper:
    """The library's entry points, typed."""

    def __init__(self, library: ctypes.CDLL):
        self.fork_test = library.lcb_fork_test
        self.fork_test.restype = ctypes.c_int
        self.fork_test.argtypes = [ctypes.POINTER(Entry), ctypes.POINTER(Watch)]
        self.serve_tests = library.lcb_serve_tests
        self.serve_tests.restype = ctypes.c_int
        self.serve_tests.argtypes = [ctypes.POINTER(Loop), ctypes.POINTER(Entry)]
        self.serve_zygotes = library.lcb_serve_zygotes
        self.serve_zygotes.restype = ctypes.c_int
        self.serve_zygotes.argtypes = [ctypes.POINTER(Server)]
        self.seed_mt = library.lcb_seed_mt
        self.seed_mt.restype = ctypes.c_int
        self.seed_mt.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32), ctypes.c_size_t]

    def generator_words(self, generator) -> tuple[int, int] | None:
        """Where the loop may seed ``generator`` (a ``random.Random``) itself: the addresses of its
        624 state words and its index, or None. Only where that layout is CPython 3.11's
        (_randommodule.c: the object header, an int index, the words; read back, never written,
        to check) and the helper's seeding then yields exactly what ``random.Random(key)`` makes of
        the same 624-word key (on a scratch generator)."""
        import random
        if type(generator) is not random.Random or sys.version_info[:2] != (3, 11) or ctypes.sizeof(ctypes.c_void_p) != 8:
            return None
        index_at, words_at = 16, 20
        probe = random.Random(0)
        probe.setstate((3, tuple(range(7, 7 + MT_WORDS)) + (MT_WORDS,), None))
        memory = ctypes.string_at(id(probe), words_at + 4 * MT_WORDS)
        if (int.from_bytes(memory[index_at:index_at + 4], sys.byteorder) != MT_WORDS
                or list(memoryview(memory[words_at:]).cast("I")) != list(range(7, 7 + MT_WORDS))):
            return None
        key = [int.from_bytes(os.urandom(4), "little") for _ in range(MT_WORDS)]
        key[-1] |= 1 << 31  # all 624 words used (seed(int) drops leading zero words)
        expected = random.Random(sum(word << (32 * i) for i, word in enumerate(key))).getstate()
        if self.seed_mt(id(probe) + words_at, id(probe) + index_at, (ctypes.c_uint32 * MT_WORDS)(*key), MT_WORDS) != 0:
            return None
        if probe.getstate() != expected:
            return None
        return id(generator) + words_at, id(generator) + index_at


def load(verify: bool = True, path: str | None = None) -> Helper | None:
    """The built library, or None (none built, a platform where it cannot load, or with
    ``verify`` one built from another version of the source)."""
    if verify and not current():
        return None
    try:
        return Helper(ctypes.CDLL(path or LIBRARY))
    except (OSError, AttributeError):
        return None


def compiler() -> str | None:
    import shutil
    for name in filter(None, (os.environ.get("CC"), "cc", "gcc", "clang")):
        if shutil.which(name):
            return name
    return None


def build() -> str | None:
    """Compile the library (atomically: a concurrent build or load never sees half a file).
    None on success, else why not, in one line."""
    import subprocess
    import tempfile
    cc = compiler()
    if cc is None:
        return "no C compiler (cc, gcc or clang; or set CC)"
    if not sys.platform.startswith("linux"):
        return "the helper is Linux-only"
    digest = source_sha256()
    partial = ""
    try:
        fd, partial = tempfile.mkstemp(prefix=".liblcbsandbox-", suffix=".so", dir=FOLDER)  # a read-only install: OSError
        os.close(fd)
        done = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-Wall", f'-DLCB_SOURCE_SHA256="{digest}"',
                               "-o", partial, SOURCE], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            return f"{cc} failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}"
        if built_from(partial) != digest or load(verify=False, path=partial) is None:
            return "built, but the library does not load"
        os.chmod(partial, 0o755)
        os.replace(partial, LIBRARY)
        partial = ""
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{cc} could not run: {exc}"
    finally:
        if partial:
            try:
                os.unlink(partial)
            except OSError:
                pass
    return None


_ENSURED: list[tuple[str | None, str | None]] = []  # (why not, the source hash the library carries)


def ensure_built() -> str | None:
    """Once per process: a loadable library, building it where it is missing or stale. None when
    it is there, else why the Python path runs instead."""
    if not _ENSURED:
        problem = None if current() else build()
        _ENSURED.append((problem, built_from(LIBRARY) if problem is None else None))
    return _ENSURED[0][0]


def checked_sha256() -> str | None:
    """The source hash of the library ``ensure_built`` checked (or built), None without one: what a
    fork server is told to expect in the library file before it maps it."""
    ensure_built()
    return _ENSURED[0][1]


def main() -> int:
    import json
    problem = build()
    print(json.dumps({"library": LIBRARY, "built": problem is None, **({"reason": problem} if problem else {})}))
    if problem:
        print(f"lcb._native: the sandbox's C helper was not built ({problem}); grading uses the Python path",
              file=sys.stderr)
    return 0 if problem is None else 1


if __name__ == "__main__":
    sys.exit(main())
