"""A seccomp filter for sandboxed children, written as classic BPF by hand (child side, stdlib only).

Why: where a fresh network namespace cannot be had, the kernel must still refuse the network;
and in every case no graded program should create namespaces (that is how an unprivileged
process regains capabilities), trace other processes or reach the kernel's more exotic
interfaces. What the filter refuses, and how:

* ``socket``/``socketpair`` of any family but AF_UNIX: EAFNOSUPPORT (no IP, UDP, raw,
  packet or netlink sockets at all);
* ``unshare``, ``setns``, and ``clone`` with a namespace flag: EPERM; ``clone3`` (its flags
  are behind a pointer the filter cannot read): ENOSYS, so the C library falls back to
  ``clone`` for threads and forks;
* ``io_uring_setup`` (it can open sockets without the ``socket`` call), ``ptrace``,
  ``process_vm_readv``/``writev``, ``bpf``, ``perf_event_open``, ``userfaultfd``, the key
  ring calls and the mount family: EPERM;
* any call through a foreign ABI (x32, 32-bit compat): the process is killed.

A second part, switched on its own (``sockets_paired_only``; the layer ``socketpair-only``),
closes the one door the rest leaves open: a unix socket a process of the host listens on at a
path (an ssh agent, D-Bus, a container runtime, an X server, a listener of another graded
program). Neither Landlock nor a network namespace confines ``connect`` to a pathname, and the
filter cannot read the address behind the pointer, so it refuses the calls that need one:

* ``socket`` of every family (EPERM for AF_UNIX): the only sockets left come from ``socketpair``,
  already connected to each other and to nothing else;
* ``socketpair`` only of stream or seqpacket type (a datagram pair could ``sendto`` any path);
  those refuse an address on ``sendto``/``sendmsg`` and ``connect`` (EISCONN) by themselves;
* ``connect`` and ``bind``: EPERM (belt and braces; nothing legitimate is left to call them on).

Pipes, ``socketpair`` (``asyncio``'s self-pipe, ``multiprocessing.Pipe``) and everything else
keep working. ``pidfd_getfd`` (copying a descriptor, a socket too, out of another process) is
refused by the first part, like ``ptrace``.

Everything else is allowed. Installing a filter needs ``no_new_privs`` (set first) and is
inherited by every process the caller forks; it cannot be removed.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2

_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_ALU_AND = 0x54  # BPF_ALU | BPF_AND | BPF_K
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K

_ALLOW = 0x7FFF0000
_KILL_PROCESS = 0x80000000
_OFFSET_NR, _OFFSET_ARCH, _OFFSET_ARG0, _OFFSET_ARG1 = 0, 4, 16, 24  # struct seccomp_data; low words (little endian)

_AF_UNIX = 1
_SOCK_STREAM, _SOCK_SEQPACKET, _SOCK_TYPE_MASK = 1, 5, 0xF  # the type without SOCK_NONBLOCK/CLOEXEC
_CLONE_NAMESPACES = 0x7E020000  # NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
_X32_SYSCALL_BIT = 0x40000000


def _errno(code: int) -> int:
    return 0x00050000 | code  # SECCOMP_RET_ERRNO


# Per architecture: the audit arch, a foreign-ABI bit (x32) if any, and the system call numbers.
_ARCHES = {
    "x86_64": (0xC000003E, _X32_SYSCALL_BIT, {
        "socket": 41, "socketpair": 53, "clone": 56, "clone3": 435, "unshare": 272, "setns": 308,
        "io_uring_setup": 425, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
        "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "keyctl": 250, "add_key": 248,
        "request_key": 249, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "mount_setattr": 442, "connect": 42, "bind": 49, "pidfd_getfd": 438}),
    "aarch64": (0xC00000B7, None, {
        "socket": 198, "socketpair": 199, "clone": 220, "clone3": 435, "unshare": 97, "setns": 268,
        "io_uring_setup": 425, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
        "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "keyctl": 219, "add_key": 217,
        "request_key": 218, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "mount_setattr": 442, "connect": 203, "bind": 200, "pidfd_getfd": 438}),
}
_REFUSED = ("unshare", "setns", "io_uring_setup", "ptrace", "process_vm_readv", "process_vm_writev", "bpf",
            "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key", "mount", "umount2",
            "pivot_root", "chroot", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick",
            "mount_setattr", "pidfd_getfd")


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> tuple[int, int, int, int]:
    return code, jt, jf, k


def _when(nr: int, body: list[tuple]) -> list[tuple]:
    """``body`` (which always returns) runs only for system call ``nr``."""
    return [_op(_JEQ, nr, 0, len(body)), *body]


def program(machine: str | None = None, *, base: bool = True,
            sockets_paired_only: bool = False) -> list[tuple[int, int, int, int]] | None:
    """The filter for ``machine`` (default: this one) as (code, jt, jf, k); None if unsupported
    or empty. ``base``: the first part (see above); ``sockets_paired_only``: the second."""
    arch = _ARCHES.get(machine or platform.machine())
    if arch is None or not (base or sockets_paired_only):
        return None
    audit_arch, foreign_bit, nrs = arch
    refuse_unix = _errno(errno.EPERM) if sockets_paired_only else _ALLOW
    only_unix = [_op(_LD_W_ABS, _OFFSET_ARG0), _op(_JEQ, _AF_UNIX, 0, 1), _op(_RET, refuse_unix),
                 _op(_RET, _errno(errno.EAFNOSUPPORT) if base else refuse_unix)]
    # socketpair: AF_UNIX only and, with the second part, of a stream or seqpacket type only
    pair = [_op(_LD_W_ABS, _OFFSET_ARG0), _op(_JEQ, _AF_UNIX, 1, 0), _op(_RET, _errno(errno.EAFNOSUPPORT))]
    if sockets_paired_only:
        pair += [_op(_LD_W_ABS, _OFFSET_ARG1), _op(_ALU_AND, _SOCK_TYPE_MASK), _op(_JEQ, _SOCK_STREAM, 2, 0),
                 _op(_JEQ, _SOCK_SEQPACKET, 1, 0), _op(_RET, _errno(errno.EPERM))]
    pair += [_op(_RET, _ALLOW)]
    no_namespaces = [_op(_LD_W_ABS, _OFFSET_ARG0), _op(_JSET, _CLONE_NAMESPACES, 0, 1),
                     _op(_RET, _errno(errno.EPERM)), _op(_RET, _ALLOW)]
    code = [_op(_LD_W_ABS, _OFFSET_ARCH), _op(_JEQ, audit_arch, 1, 0), _op(_RET, _KILL_PROCESS),
            _op(_LD_W_ABS, _OFFSET_NR)]
    if foreign_bit is not None:
        code += [_op(_JGE, foreign_bit, 0, 1), _op(_RET, _KILL_PROCESS)]
    code += _when(nrs["socket"], only_unix) + _when(nrs["socketpair"], pair)
    refused = list(_REFUSED) if base else []
    if sockets_paired_only:
        refused += ["connect", "bind"]
    if base:
        code += _when(nrs["clone"], no_namespaces)
        code += _when(nrs["clone3"], [_op(_RET, _errno(errno.ENOSYS))])
    for name in refused:
        code += _when(nrs[name], [_op(_RET, _errno(errno.EPERM))])
    return code + [_op(_RET, _ALLOW)]


class _Program(ctypes.Structure):  # struct sock_fprog
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_PACKED: dict[tuple[bool, bool], bytes | None] = {}
_LIBC: list = []
# The filter as the kernel reads it, in C memory, with its struct sock_fprog: made by the fork
# server (``prepared``) for the zygotes to pass on. Building them in a freshly forked zygote
# touched ~100 memory pages (each a copy) of ctypes' machinery, per program.
_PROGRAMS: dict[tuple[bool, bool], tuple] = {}


def packed(*, base: bool = True, sockets_paired_only: bool = False) -> bytes | None:
    """The filter as the kernel reads it (struct sock_filter[]); None if unsupported or empty.
    Made once per process: the fork server makes it before forking, its zygotes inherit it."""
    key = (base, sockets_paired_only)
    if key not in _PACKED:
        code = program(base=base, sockets_paired_only=sockets_paired_only)
        _PACKED[key] = None if code is None else b"".join(struct.pack("=HBBI", *op) for op in code)
    return _PACKED[key]


def prepared(*, base: bool = True, sockets_paired_only: bool = False) -> tuple | None:
    """(libc, filter buffer, struct sock_fprog) for the filter; None if unsupported or empty.
    Made once per process: the fork server makes the default one, its zygotes inherit it."""
    key = (base, sockets_paired_only)
    if key not in _PROGRAMS:
        data = packed(base=base, sockets_paired_only=sockets_paired_only)
        if data is None:
            return None
        if not _LIBC:
            _LIBC.append(ctypes.CDLL(None, use_errno=True))
        filters = ctypes.create_string_buffer(data, len(data))
        prog = _Program(len(data) // 8, ctypes.addressof(filters))  # 8 bytes per instruction
        _PROGRAMS[key] = (_LIBC[0], filters, prog)
    return _PROGRAMS[key]


def install(*, base: bool = True, sockets_paired_only: bool = False) -> bool:
    """Install the filter on the calling process (and so on all it forks); False if unavailable."""
    try:
        ready = prepared(base=base, sockets_paired_only=sockets_paired_only)
        if ready is None:
            return False
        libc, _filters, prog = ready
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False
        return libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) == 0
    except (OSError, AttributeError):
        return False
