"""Kernel-enforced limits for sandboxed children via Linux Landlock (child side, stdlib only).

Landlock lets an unprivileged process drop rights for itself and every process it starts, for
good. We use it for four things the Python-level guard can only ask politely for:

* no file-system writes (create, write, truncate, rename, delete) outside the sandbox folder;
* no TCP connect/bind (ABI 4+);
* no reads outside an allow-list (the interpreter, its libraries, the system's shared
  libraries, the job's folder): not the home folder, the checkout, other jobs, /proc;
* no signals to processes outside the caller's Landlock domain (ABI 6+), so a test process
  cannot kill the zygote that watches it, nor the harness. (Being in a domain also denies
  ptrace-style access, e.g. /proc/<pid>/mem, to any process outside it, on every ABI.)

Everything here is best effort: on kernels without Landlock (or where seccomp hides it) the
functions return False and the caller relies on the guard, the own session and the rlimits
(then files stay readable: see lcb/sandbox.py).
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

# Syscall numbers are the same on x86_64 and aarch64 (they were added after the tables merged).
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

_READ_FILE = 1 << 2
_READ_DIR = 1 << 3
_WRITE_FILE = 1 << 1
_REMOVE_DIR = 1 << 4
_REMOVE_FILE = 1 << 5
_MAKE_ALL = sum(1 << bit for bit in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
_REFER = 1 << 13  # ABI 2
_TRUNCATE = 1 << 14  # ABI 3
_NET_BIND_TCP = 1 << 0  # ABI 4
_NET_CONNECT_TCP = 1 << 1
_SCOPE_ABSTRACT_UNIX = 1 << 0  # ABI 6
_SCOPE_SIGNAL = 1 << 1

_libc = None


def _syscall():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc.syscall


def abi_version() -> int:
    """The kernel's Landlock ABI version, 0 when unavailable."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "aarch64"):
        return 0
    try:
        version = _syscall()(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


# Rules for paths that are the same for every program (the interpreter, the system's libraries,
# /dev/null), made once by the fork server (``prepare``): each holds an O_PATH descriptor the
# zygotes inherit, so a zygote neither opens those paths nor builds their structs. Why: in a
# freshly forked zygote every object first touched costs a copied memory page; building a
# dozen rules touched ~150 of them per ruleset. A test process closes these descriptors
# (with all others above its standard ones) before the program runs.
_PREPARED: dict[tuple[str, int], object] = {}


def _path_beneath(rights: int, fd: int) -> object:
    """struct landlock_path_beneath_attr (packed: u64 allowed_access, s32 parent_fd) in C memory."""
    return ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)


def prepare(rules: list[tuple[str, int]]) -> None:
    """In the fork server: ready-made rules for these (path, rights) pairs (paths that cannot
    be opened are left to the slow path, which skips them just the same)."""
    for path, rights in rules:
        if (path, rights) in _PREPARED:
            continue
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        _PREPARED[(path, rights)] = _path_beneath(rights, fd)


def read_rules(folders: list[str], files: list[str]) -> list[tuple[str, int]]:
    return [(path, _READ_FILE | _READ_DIR) for path in folders] + [(path, _READ_FILE) for path in files]


def write_rules(folder: str, abi: int) -> list[tuple[str, int]]:
    """Writes (and making, removing) beneath ``folder``, writing to /dev/null."""
    dir_rights = _WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE_ALL
    if abi >= 2:
        dir_rights |= _REFER
    if abi >= 3:
        dir_rights |= _TRUNCATE
    return [(folder, dir_rights), ("/dev/null", _WRITE_FILE | (_TRUNCATE if abi >= 3 else 0))]


def _restrict(attr: bytes, handled_fs: int, rules: list[tuple[str, int]]) -> bool:
    syscall = _syscall()
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = syscall(_SYS_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), 0)
    if ruleset < 0:
        return False
    try:
        for path, rights in rules:
            prepared = _PREPARED.get((path, rights & handled_fs))
            if prepared is not None:
                if syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, prepared, 0) < 0:
                    return False
                continue
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, _path_beneath(rights & handled_fs, fd), 0) < 0:
                    return False
            finally:
                os.close(fd)
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False
        return syscall(_SYS_RESTRICT_SELF, ruleset, 0) == 0
    finally:
        os.close(ruleset)


def confine_writes(folder: str, abi: int) -> bool:
    """Allow file-system writes only beneath ``folder`` (and to /dev/null); deny TCP."""
    if abi < 1:
        return False
    rules = write_rules(folder, abi)
    handled_net = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0
    # The kernel only reads the struct fields its ABI knows; older ABIs reject a larger size.
    return _restrict_sized(rules[0][1], handled_net, 0, abi, rules)


def confine_reads(folders: list[str], files: list[str], abi: int) -> bool:
    """Allow reading only beneath ``folders`` and the single ``files``; in the same new, nested
    domain forbid signals (and abstract unix sockets) to processes outside it."""
    if abi < 1:
        return False
    rules = read_rules(folders, files)
    return _restrict_sized(_READ_FILE | _READ_DIR, 0, _SCOPE_SIGNAL | _SCOPE_ABSTRACT_UNIX, abi, rules)


SCOPE_ABI = 6  # abstract unix sockets and signals scoped to the domain


def scope_ruleset(abi: int) -> int | None:
    """A ruleset that handles no file or network access, only scopes (ABI 6+), as a descriptor
    (close-on-exec); None below ABI 6 or where it cannot be made. Made once per program; each
    test process enforces it (``enforce``, one system call) and so gets a new domain of its own:
    it can no longer signal (or reach the abstract unix sockets of) processes outside it, the
    zygote and the other tests included."""
    if abi < SCOPE_ABI:
        return None
    attr = struct.pack("3Q", 0, 0, _SCOPE_SIGNAL | _SCOPE_ABSTRACT_UNIX)
    try:
        fd = _syscall()(_SYS_CREATE_RULESET, ctypes.create_string_buffer(attr, len(attr)),
                        ctypes.c_size_t(len(attr)), 0)
    except (OSError, AttributeError):
        return None
    return fd if fd >= 0 else None


def enforce(ruleset: int) -> bool:
    """A new domain for the caller from ``ruleset``; ``no_new_privs`` must be set already (a
    test process inherits it from its zygote, whose own confinement set it)."""
    return _syscall()(_SYS_RESTRICT_SELF, ruleset, 0) == 0


def _restrict_sized(handled_fs: int, handled_net: int, scoped: int, abi: int,
                    rules: list[tuple[str, int]]) -> bool:
    # The kernel rejects a ruleset struct larger than its ABI knows: ABI 1-3 read one u64
    # (file system), ABI 4-5 two (+ network), ABI 6+ three (+ scopes).
    if abi < 4:
        handled_net = 0
    if abi < 6:
        scoped = 0
    if not (handled_fs or handled_net or scoped):
        return False
    fields = (handled_fs,) if abi < 4 else (handled_fs, handled_net) if abi < 6 else (
        handled_fs, handled_net, scoped)
    try:
        return _restrict(struct.pack(f"{len(fields)}Q", *fields), handled_fs, rules)
    except (OSError, AttributeError, ValueError):
        return False
