"""Least privilege for a job's zygote and so for every test process it forks (child side, stdlib only).

Once per program, in the zygote, before any model-written code runs:

1. **Namespaces**: a fresh network namespace (its only interface a loopback that is down, so
   no UDP, TCP, raw, packet or netlink traffic goes anywhere, and its own abstract unix socket
   names), a fresh IPC namespace (System V shared memory, semaphores, message queues and
   POSIX message queues of its own) and a fresh PID namespace whose init is the zygote (a
   program sees, and can signal, only its own processes, whatever Landlock offers; the
   zygote, as init, ignores every signal from inside but those it handles; when it ends, the
   kernel kills everything left in it). As root directly; otherwise inside a new user
   namespace where the kernel allows unprivileged ones.
2. **Identity**: as root, an unprivileged uid and gid of its own (``UID_BASE`` + the zygote's
   pid modulo ``UID_SPAN``, so programs graded at the same time do not share a uid), with no
   supplementary groups; the job folder is handed to it.
3. **Capabilities**: the bounding set emptied, and no effective, permitted, inheritable or
   ambient capabilities left; ``no_new_privs`` (no set-uid or file capabilities regained).
4. **Limits**: every rlimit's hard value lowered to its soft value, so none can be raised.

Then the caller adds Landlock (lcb/_landlock.py) and the seccomp filter (lcb/_seccomp.py).
Each step degrades on its own where the kernel or the situation does not allow it; the
layers actually in force are reported (``Layers``) and end up in the records.

As root, a fork server first makes the interpreter reachable for the unprivileged uid where it
is not (a Python under ``/root``): see ``bridge_for_unprivileged``.
"""

from __future__ import annotations

import collections
import ctypes
import os
import platform
import resource
import stat

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91}
_MS_BIND, _MS_REC, _MS_PRIVATE, _MS_NOSUID, _MS_NODEV = 0x1000, 0x4000, 0x40000, 0x2, 0x4
_MNT_DETACH = 2

UID_BASE, UID_SPAN = 200_000, 100_000
FALLBACK_UID = 65534  # nobody: where the uids above are not mapped (a user-namespaced container)

_libc = ctypes.CDLL(None, use_errno=True)


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


# ---------------------------------------------------------------- namespaces


def enter_namespaces(pid: bool = True) -> tuple[str, bool]:
    """A fresh network and IPC namespace for the caller and, with ``pid``, a fresh PID namespace
    for the children it forks next (the first becomes its init): (how, whether the PID namespace
    came too). ``how`` is "" if no namespace could be had, else "root" or "user" (via an
    unprivileged user namespace)."""
    base = CLONE_NEWNET | CLONE_NEWIPC
    tries = (base | CLONE_NEWPID, base) if pid else (base,)
    if os.geteuid() == 0:
        for flags in tries:
            if _libc.unshare(flags) == 0:
                return "root", bool(flags & CLONE_NEWPID)
    uid, gid = os.geteuid(), os.getegid()
    for flags in tries:
        if _libc.unshare(CLONE_NEWUSER | flags) == 0:
            break
    else:
        return "", False
    try:  # map ourselves onto ourselves: same uid, no root inside
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
        _write("/proc/self/gid_map", f"{gid} {gid} 1\n")
    except OSError:
        pass  # unmapped ids read as "nobody"; the namespaces themselves are in force
    return "user", bool(flags & CLONE_NEWPID)


def setns(fd: int, kind: int) -> bool:
    return _libc.setns(fd, kind) == 0


class ZygoteNamespaces:
    """As root, the fork server's share of the namespaces (cheaper than a warden per program):

    * a PID namespace per zygote without an extra process: ``unshare(CLONE_NEWPID)`` before the
      fork (the zygote becomes init of a fresh one), then ``setns`` back to our own, so the next
      unshare is allowed again;
    * network namespaces reused: creating one and tearing it down costs milliseconds of kernel
      time per program. A namespace whose program has ended (its init is reaped, so every
      process of it is gone, and with them every socket) goes back to the pool and serves the
      next program; two programs graded at the same time never share one.

    ``usable`` is False where we are not root or the kernel refuses any of it: the zygote then
    makes its own namespaces (``enter_namespaces``, with a warden for the PID namespace).
    """

    def __init__(self) -> None:
        self.free: collections.deque[int] = collections.deque()  # network namespaces no live program uses (FIFO)
        self.busy: dict[int, int] = {}  # zygote pid -> its network namespace
        self.usable = False
        if os.geteuid() != 0:
            return
        try:
            self._own_pid = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
            self._own_net = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        self.usable = True

    def _network(self) -> int | None:
        if self.free:
            return self.free.popleft()
        if _libc.unshare(CLONE_NEWNET) != 0:
            return None
        try:
            return os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        finally:
            if not setns(self._own_net, CLONE_NEWNET):
                raise OSError("cannot return to the fork server's network namespace")

    def before_fork(self) -> int | None:
        """The network namespace for the next zygote, with the PID namespace prepared; None
        (nothing prepared) where that fails."""
        if not self.usable:
            return None
        net = self._network()
        if net is None:
            self.usable = False
            return None
        if _libc.unshare(CLONE_NEWPID) != 0:
            self.free.append(net)
            self.usable = False
            return None
        return net

    def after_fork(self, pid: int, net: int) -> None:
        """In the server: our own PID namespace for the children after this one again."""
        if not setns(self._own_pid, CLONE_NEWPID):
            self.usable = False
        self.busy[pid] = net

    def in_zygote(self, net: int) -> list[str]:
        """In the fresh zygote (init of its PID namespace): the network namespace from the pool,
        an IPC namespace of its own (System V objects outlive processes: never reused). The
        pool's descriptors are closed here."""
        joined = setns(net, CLONE_NEWNET)
        for fd in [self._own_pid, self._own_net, *self.free, *self.busy.values(), net]:
            try:
                os.close(fd)
            except OSError:
                pass
        ipc = _libc.unshare(CLONE_NEWIPC) == 0
        return (["netns"] if joined else []) + (["ipcns"] if ipc else []) + ["pidns"]

    def reaped(self, pid: int) -> None:
        net = self.busy.pop(pid, None)
        if net is not None:
            self.free.append(net)


# ---------------------------------------------------------------- identity


_UID_RANGES: list[tuple[int, int]] = []  # our user namespace's mapped uids (read once; forks inherit it)


def _mapped(uid: int) -> bool:
    if not _UID_RANGES:
        try:
            with open("/proc/self/uid_map") as fh:
                for line in fh:
                    inside, _outside, count = (int(x) for x in line.split())
                    _UID_RANGES.append((inside, inside + count))
        except (OSError, ValueError):
            _UID_RANGES[:] = [(0, 0)]  # unreadable: nothing counts as mapped
    return any(low <= uid < high for low, high in _UID_RANGES)


def unprivileged_id(pid: int) -> int:
    """The uid (and gid) for the zygote ``pid``: one of its own where the range is mapped."""
    candidate = UID_BASE + pid % UID_SPAN
    return candidate if _mapped(candidate) else FALLBACK_UID


def reachable_by_others(path: str) -> bool:
    """Whether a uid that owns nothing and is in no group can list and read ``path``."""
    path = os.path.realpath(path)
    try:
        info = os.stat(path)
        if not (info.st_mode & stat.S_IROTH and info.st_mode & stat.S_IXOTH):
            return False
        parent = os.path.dirname(path)
        while parent != path:
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return False
            path, parent = parent, os.path.dirname(parent)
    except OSError:
        return False
    return True


def become_unprivileged(uid: int, folder: str) -> bool:
    """As root: hand ``folder`` to ``uid`` and switch to it (gid = uid, no supplementary
    groups). The capability bounding set must already be empty."""
    try:
        os.chown(folder, uid, uid)
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    except OSError:
        return False
    return os.getresuid() == (uid,) * 3 and not os.getgroups()


# ---------------------------------------------------------------- capabilities and limits


_LAST_CAP: list[int] = []


def last_capability() -> int:
    """The kernel's highest capability number (read once per process; forks inherit it)."""
    if not _LAST_CAP:
        try:
            with open("/proc/sys/kernel/cap_last_cap") as fh:
                _LAST_CAP.append(int(fh.read()))
        except (OSError, ValueError):
            _LAST_CAP.append(63)
    return _LAST_CAP[0]


def drop_bounding_set() -> bool:
    """Empty the bounding set (needs CAP_SETPCAP: root, or inside our own user namespace)."""
    return all(_libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) == 0 for cap in range(last_capability() + 1))


# capset's arguments, made at import (the fork server's): a zygote only passes them on. Building
# them there touched ~50 memory pages of ctypes' machinery per program (each a copy after fork).
_CAPSET_NR = _SYS_CAPSET.get(platform.machine())
_CAPSET_HEADER = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
_CAPSET_DATA = (ctypes.c_uint32 * 6)()  # two {effective, permitted, inheritable} words, all zero


def clear_capabilities() -> bool:
    """No effective, permitted, inheritable or ambient capabilities; ``no_new_privs``."""
    _libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    if _CAPSET_NR is not None:
        _CAPSET_HEADER[0], _CAPSET_HEADER[1] = _LINUX_CAPABILITY_VERSION_3, 0  # the kernel may rewrite it
        _libc.syscall(_CAPSET_NR, _CAPSET_HEADER, _CAPSET_DATA)
    return _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0


_STATUS_FIELDS = tuple((f"\n{key}:".encode(), key, 10 if key == "NoNewPrivs" else 16)
                       for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs"))


def capability_sets() -> dict[str, int]:
    """The caller's capability sets from /proc/self/status (CapInh, CapPrm, CapEff, CapBnd, CapAmb)
    and NoNewPrivs, as integers; empty if unreadable. The six fields are found in the raw bytes:
    a zygote runs this once, freshly forked, where every object it touches costs a copied
    memory page; a text file read line by line touched ~100 of them (0.3 ms), this ~40."""
    found: dict[str, int] = {}
    try:
        fd = os.open("/proc/self/status", os.O_RDONLY | os.O_CLOEXEC)
        try:
            text = os.read(fd, 1 << 14)  # ~1.5 KB
        finally:
            os.close(fd)
        for marker, key, base in _STATUS_FIELDS:
            at = text.find(marker)
            if at >= 0:
                end = text.find(b"\n", at + 1)
                found[key] = int(text[at + len(marker):end if end >= 0 else len(text)], base)
    except (OSError, ValueError):
        return {}
    return found


def freeze_rlimits() -> bool:
    """Every rlimit's hard value down to its soft one: nothing can be raised any more."""
    ok = True
    for name in dir(resource):
        if name.startswith("RLIMIT_"):
            which = getattr(resource, name)
            try:
                soft, _hard = resource.getrlimit(which)
                resource.setrlimit(which, (soft, soft))
            except (OSError, ValueError):
                ok = False
    return ok


# ---------------------------------------------------------------- making the interpreter reachable


def _blocking_ancestor(path: str) -> str | None:
    """The topmost ancestor of ``path`` that others cannot traverse, if any."""
    blocking = None
    current = os.path.dirname(path)
    while True:
        try:
            if not os.stat(current).st_mode & stat.S_IXOTH:
                blocking = current
        except OSError:
            return None
        if current == "/":
            return blocking
        current = os.path.dirname(current)


def bridge_for_unprivileged(folders: list[str]) -> bool:
    """As root, in a new mount namespace of the caller's own: where a folder the children must
    read lies below one that others cannot traverse (``/root``), cover that ancestor with an
    empty tmpfs others can traverse and bind the folder back in its place. Nothing else of the
    ancestor stays visible. True when every folder is then reachable."""
    folders = sorted({os.path.realpath(f) for f in folders})
    blocked = {f: a for f in folders if (a := _blocking_ancestor(f)) is not None
               and not any(f.startswith(other + "/") for other in folders)}  # a parent's bind brings it along
    if not blocked:
        return all(reachable_by_others(f) for f in folders)
    if os.geteuid() != 0 or _libc.unshare(CLONE_NEWNS) != 0:
        return False
    if _libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        return False
    handles = {f: os.open(f, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) for f in blocked}
    covered: list[str] = []
    mask = os.umask(0o022)
    try:
        for ancestor in sorted(set(blocked.values()), key=len):
            if _libc.mount(b"tmpfs", ancestor.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV,
                           b"mode=0755,size=1m") != 0:
                break
            covered.append(ancestor)
        else:
            for folder, handle in handles.items():
                os.makedirs(folder, mode=0o755, exist_ok=True)
                source = f"/proc/self/fd/{handle}".encode()
                if _libc.mount(source, folder.encode(), None, _MS_BIND | _MS_REC, None) != 0:
                    break
            else:
                return all(reachable_by_others(f) for f in folders)
        for ancestor in reversed(covered):  # half done: give the original view back
            _libc.umount2(ancestor.encode(), _MNT_DETACH)
        return False
    except OSError:
        for ancestor in reversed(covered):
            _libc.umount2(ancestor.encode(), _MNT_DETACH)
        return False
    finally:
        os.umask(mask)
        for handle in handles.values():
            os.close(handle)
