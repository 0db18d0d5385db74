"""Least privilege for graded programs and python_exec: no capabilities, no root, frozen limits,
no network, and each layer shown to matter by a control that switches it off.

The probes run as model-written code would (through the sandbox, the reliability guard on), and
report what the kernel let them do. Controls run the same probe with the layer under test off;
where a control needs root (capabilities, a foreign uid), it is skipped precisely when the
harness is not root.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import textwrap
import time

import pytest

from lcb import _isolate, _seccomp
from lcb._landlock import abi_version
from lcb.sandbox import SandboxJob, landlock_abi_cap, run_in_sandbox
from lcb.tools import python_exec

ROOT = os.geteuid() == 0
ALL_OFF = {"namespaces": False, "drop_privileges": False, "seccomp": False, "landlock": False,
           "sockets_paired_only": False}
needs_root = pytest.mark.skipif(not ROOT, reason="the control needs a root harness (capabilities to lose)")
_AVAILABLE: list[tuple[str, ...]] = []


def available_layers() -> tuple[str, ...]:
    """The layers this kernel and harness give a program with everything on."""
    if not _AVAILABLE:
        _AVAILABLE.append(run_in_sandbox(SandboxJob("exec", "print(1)", (("", ""),))).layers)
    return _AVAILABLE[0]


def needs_layer(name: str) -> None:
    if name not in available_layers():
        pytest.skip(f"this kernel or harness does not give the {name!r} layer: {available_layers()}")

PRIVILEGES = textwrap.dedent(r'''
    import ctypes, json, posix
    libc = ctypes.CDLL(None, use_errno=True)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    libc.capget(header, data)
    found = {
        "uid": posix.getuid(), "gid": posix.getgid(), "groups": posix.getgroups(),
        "effective": data[0] | data[3], "permitted": data[1] | data[4],
        "bounding": [cap for cap in range(41) if libc.prctl(23, cap, 0, 0, 0) == 1],
        "no_new_privs": libc.prctl(39, 0, 0, 0, 0),
        "unshare_mount_ns": libc.unshare(0x00020000) == 0,
        # how an unprivileged process gets capabilities back: in a user namespace of its own
        "unshare_user_ns": libc.unshare(0x10000000) == 0,
        "chroot": libc.chroot(b"/") == 0,
    }
    print(json.dumps(found))
''')


def _exec(code: str, **layers) -> dict:
    run = run_in_sandbox(SandboxJob("exec", code, (("", ""),), timeout_s=10.0, **layers))
    event = run.of_kind("exec")[0]
    assert event["exit_code"] == 0, event["stderr"]
    return json.loads(event["stdout"].strip().splitlines()[-1])


def test_graded_program_has_no_capabilities_and_no_way_to_regain_them():
    found = _exec(PRIVILEGES)
    assert found["effective"] == found["permitted"] == 0 and found["no_new_privs"] == 1
    if ROOT or "userns" in available_layers():  # otherwise the kernel lets us keep no bounding set
        assert found["bounding"] == []
    assert not found["unshare_mount_ns"] and not found["chroot"]
    if "seccomp" in available_layers():
        assert not found["unshare_user_ns"]
    if ROOT:
        assert found["uid"] != 0 and found["gid"] != 0 and found["groups"] == []


def test_python_exec_has_no_capabilities_either():
    found = json.loads(python_exec(PRIVILEGES, timeout_s=10.0).stdout)
    assert found["effective"] == 0 and found["no_new_privs"] == 1
    if ROOT or "userns" in available_layers():
        assert found["bounding"] == []
    if ROOT:
        assert found["uid"] != 0 and found["groups"] == []


@needs_root
def test_control_without_the_drop_a_root_program_keeps_its_powers():
    found = _exec(PRIVILEGES, **ALL_OFF)
    assert found["uid"] == 0 and found["effective"] != 0 and found["bounding"]
    assert found["unshare_mount_ns"] and found["chroot"] and found["unshare_user_ns"]


RLIMITS = textwrap.dedent(r'''
    import json, resource
    frozen, raised = [], []
    for name in sorted(n for n in dir(resource) if n.startswith("RLIMIT_")):
        which = getattr(resource, name)
        soft, hard = resource.getrlimit(which)
        frozen.append(soft == hard)
        wanted = (hard, hard) if soft != hard else (soft, hard + 1) if hard != resource.RLIM_INFINITY else None
        if wanted is not None:
            try:
                resource.setrlimit(which, wanted)
                raised.append(name)
            except (OSError, ValueError):
                pass
    print(json.dumps({"all_frozen": all(frozen), "raised": raised}))
''')


def test_rlimits_cannot_be_raised():
    found = _exec(RLIMITS, guard=False)  # the guard hides `resource`; the kernel must refuse too
    assert found == {"all_frozen": True, "raised": []}


def test_control_without_the_freeze_a_soft_limit_is_raised():
    import resource
    if all(resource.getrlimit(getattr(resource, n))[0] == resource.getrlimit(getattr(resource, n))[1]
           for n in dir(resource) if n.startswith("RLIMIT_")):
        pytest.skip("every limit of this harness is frozen already: nothing to raise")
    assert _exec(RLIMITS, guard=False, **ALL_OFF)["raised"]


# ------------------------------------------------------------------ network


NETWORK = textwrap.dedent(r'''
    import json, socket, sys
    port, token = sys.stdin.read().split()
    found = {}
    def attempt(name, make, act=None):
        try:
            sock = make()
        except OSError as exc:
            found[name] = "socket refused: %d" % exc.errno
            return
        try:
            found[name] = "ok" if act is None else ("ok", act(sock))[0]
        except OSError as exc:
            found[name] = "failed: %d" % exc.errno
    attempt("udp_loopback", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM),
            lambda s: s.sendto(token.encode(), ("127.0.0.1", int(port))))
    attempt("udp_remote", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM),
            lambda s: s.sendto(token.encode(), ("192.0.2.1", 9)))
    attempt("raw", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
    attempt("packet", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0))
    attempt("netlink", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
    attempt("unix", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
    attempt("pair", lambda: socket.socketpair()[0])
    try:
        found["interfaces"] = sorted(name for _, name in socket.if_nameindex())
    except OSError:
        found["interfaces"] = None  # no socket to ask the kernel with
    print(json.dumps(found))
''')


def _network_probe(**layers) -> tuple[dict, bool]:
    """Run the probe beside a UDP listener on our loopback: (what it saw, whether a datagram came)."""
    token = secrets.token_hex(8)
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.bind(("127.0.0.1", 0))
    listener.settimeout(0.5)
    try:
        run = run_in_sandbox(SandboxJob("exec", NETWORK, ((f"{listener.getsockname()[1]} {token}", ""),),
                                        timeout_s=10.0, **layers))
        event = run.of_kind("exec")[0]
        assert event["exit_code"] == 0, event["stderr"]
        try:
            arrived = token.encode() in listener.recv(256)
        except TimeoutError:
            arrived = False
    finally:
        listener.close()
    return json.loads(event["stdout"]), arrived


def test_no_datagram_leaves_and_no_raw_packet_or_netlink_socket_exists():
    needs_layer("seccomp")  # with the namespace alone, raw and netlink sockets exist (see below)
    found, arrived = _network_probe()
    assert not arrived
    for name in ("udp_loopback", "udp_remote", "raw", "packet", "netlink"):
        assert found[name] != "ok", (name, found)
    if "socketpair-only" in available_layers():  # tests/lcb/test_unix_sockets.py: why
        assert found["unix"].startswith("socket refused")
    assert found["pair"] == "ok"  # local pipes between a program's own threads still work


def test_the_network_namespace_alone_leaves_nowhere_to_go():
    needs_layer("netns")
    found, arrived = _network_probe(seccomp=False, sockets_paired_only=False)
    assert not arrived and found["interfaces"] == ["lo"]
    assert found["udp_loopback"].startswith("failed") and found["udp_remote"].startswith("failed")


def test_the_seccomp_filter_alone_refuses_every_socket_but_unix():
    needs_layer("seccomp")
    found, arrived = _network_probe(namespaces=False, landlock=False, sockets_paired_only=False)
    assert not arrived
    for name in ("udp_loopback", "udp_remote", "raw", "packet", "netlink"):
        assert found[name].startswith("socket refused"), (name, found)
    assert found["unix"] == "ok" and found["pair"] == "ok"


def test_control_without_the_layers_the_datagram_arrives():
    found, arrived = _network_probe(**ALL_OFF)
    assert found["udp_loopback"] == "ok" and arrived


def test_layers_in_force_are_reported():
    everything = run_in_sandbox(SandboxJob("exec", "print(1)", (("", ""),)))
    assert {"seccomp", "socketpair-only", "no-new-privs"} <= set(everything.layers)
    assert ("netns" in everything.layers) == ("ipcns" in everything.layers)
    if ROOT:
        assert {"netns", "ipcns", "pidns", "unprivileged-uid", "no-caps", "rlimits-frozen"} <= set(everything.layers)
    cap = landlock_abi_cap()  # LCB_SANDBOX_LANDLOCK_ABI: run as on an older kernel
    abi = abi_version() if cap is None else min(abi_version(), cap)
    if abi >= 1:
        assert f"landlock-{abi}" in everything.layers
    fewer = run_in_sandbox(SandboxJob("exec", "print(1)", (("", ""),), namespaces=False, seccomp=False))
    assert "netns" not in fewer.layers and "pidns" not in fewer.layers and "seccomp" not in fewer.layers
    assert "socketpair-only" in fewer.layers  # a layer of its own, switched on its own
    assert run_in_sandbox(SandboxJob("exec", "print(1)", (("", ""),), **ALL_OFF)).layers == ()


# ------------------------------------------------------------------ the layers on their own


def _in_child(body) -> int:
    """Run ``body()`` in a forked copy of this process; its exit status (0 = all asserts held)."""
    pid = os.fork()
    if pid == 0:
        try:
            body()
            code = 0
        except BaseException:
            code = 1
        os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_seccomp_filter_keeps_threads_and_forks_working():
    needs_layer("seccomp")

    def body():
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()  # works before
        assert _seccomp.install()
        try:
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            raise AssertionError("AF_INET socket allowed")
        except OSError as exc:
            assert exc.errno == 97
        socket.socketpair().__len__()
        import threading
        worker = threading.Thread(target=lambda: None)
        worker.start()
        worker.join()
        child = os.fork()
        if child == 0:
            os._exit(7)
        assert os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 7
    assert _in_child(body) == 0


@pytest.mark.skipif(not ROOT, reason="switching to an unprivileged uid first needs root")
def test_an_unprivileged_harness_gets_its_namespaces_through_a_user_namespace():
    if not os.path.exists("/proc/self/ns/user") or open("/proc/sys/user/max_user_namespaces").read().strip() == "0":
        pytest.skip("this kernel allows no user namespaces")
    before = os.readlink("/proc/self/ns/net")

    def body():
        os.setgroups([])
        os.setresgid(65534, 65534, 65534)
        os.setresuid(65534, 65534, 65534)
        assert _isolate.enter_namespaces(pid=False) == ("user", False)
        assert os.readlink("/proc/self/ns/net") != before
        assert _isolate.drop_bounding_set() and _isolate.clear_capabilities()
        assert not any(v for k, v in _isolate.capability_sets().items() if k.startswith("Cap"))
    assert _in_child(body) == 0


def test_the_unprivileged_program_still_imports_the_whole_standard_library_and_numpy():
    """The uid switch must not cost a program its interpreter (a Python below /root included)."""
    code = ("import fractions, xml.dom.minidom, sqlite3, decimal\n"
            "try:\n    import numpy\n    extra = int(numpy.arange(4).sum())\nexcept ImportError:\n    extra = 6\n"
            "print(fractions.Fraction(1, 3), extra)\n")
    run = run_in_sandbox(SandboxJob("exec", code, (("", ""),), timeout_s=10.0))
    assert run.of_kind("exec")[0]["stdout"] == "1/3 6\n", run.of_kind("exec")[0]["stderr"]
    if ROOT:
        assert "unprivileged-uid" in run.layers


# ------------------------------------------------------------------ network namespaces reused (as root)


LINGERER = textwrap.dedent(r'''
    import os, socket, sys, time
    name = sys.stdin.read().strip()
    print(os.readlink("/proc/self/ns/net"), flush=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen(4)
    if os.fork() == 0:  # a descendant that would keep the name alive after the program ends
        os.setsid()
        time.sleep(30)
        os._exit(0)
    mine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mine.connect("\0" + name)  # the probe works: its own name is reachable
    print("own name reached", flush=True)
''')

ASKER = textwrap.dedent(r'''
    import os, socket, sys
    name = sys.stdin.read().strip()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect("\0" + name)
        print(os.readlink("/proc/self/ns/net"), "reached")
    except OSError as exc:
        print(os.readlink("/proc/self/ns/net"), "refused", exc.errno)
''')


@needs_root
def test_a_reused_network_namespace_holds_nothing_of_the_program_before():
    """As root the fork server reuses network namespaces (lcb/_isolate.py ZygoteNamespaces):
    only after a program has ended, with all its processes. A program that leaves a listener
    on an abstract name (in a descendant of its own) is followed by programs that look for it;
    one of them gets the same namespace, and none finds the name."""
    needs_layer("pidns")
    name = f"lcb-reuse-{secrets.token_hex(6)}"
    only = {"sockets_paired_only": False, "landlock": False}  # let the probes make sockets at all
    first = run_in_sandbox(SandboxJob("exec", LINGERER, ((name, ""),), timeout_s=10.0, guard=False, **only))
    namespace, said = first.of_kind("exec")[0]["stdout"].split("\n")[:2]
    assert said == "own name reached"
    later: list[list[str]] = []
    while len(later) < 12 and namespace not in [word[0] for word in later]:
        # the server takes a namespace back once it has reaped the program's init: soon, not at once
        later.append(run_in_sandbox(SandboxJob("exec", ASKER, ((name, ""),), timeout_s=10.0, **only))
                     .of_kind("exec")[0]["stdout"].split())
        time.sleep(0.05 * len(later))
    assert all(word[1] == "refused" for word in later), later
    assert namespace in [word[0] for word in later], "the namespace was not reused: nothing shown"
