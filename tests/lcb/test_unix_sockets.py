"""Graded code reaches no unix socket outside its own process tree.

A process of the host that listens on a unix socket at a path (an ssh agent, D-Bus, a container
runtime, an X server, another graded program) is reachable by any process that knows the path
and may write the socket file: Landlock does not confine ``connect`` to a pathname and a network
namespace does not separate them. The ``socketpair-only`` layer (lcb/_seccomp.py) closes that:
no ``socket``, ``connect`` or ``bind``; connected pairs from ``socketpair`` and pipes only.

Every test runs a probe that is told the path and tries to connect, once with every layer on
(unreachable) and once as its positive control with exactly that layer off (reached: the
listener hands the probe a fresh token). So each refusal is the layer's doing, not a broken probe.
"""

from __future__ import annotations

import glob
import json
import os
import secrets
import shutil
import socket
import stat
import tempfile
import textwrap
import threading
import time

import pytest

from lcb.sandbox import SandboxJob, run_in_sandbox
from lcb.tools import python_exec

ROOT = os.geteuid() == 0
ALL_OFF = {"namespaces": False, "drop_privileges": False, "seccomp": False, "landlock": False,
           "sockets_paired_only": False}

PROBE = textwrap.dedent(r'''
    import errno, json, socket, sys
    def reach(path):
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError as exc:
            return "socket refused: " + errno.errorcode.get(exc.errno, str(exc.errno))
        sock.settimeout(2)
        try:
            sock.connect(path)
        except OSError as exc:
            return "connect refused: " + errno.errorcode.get(exc.errno, str(exc.errno))
        try:
            return "reached: " + sock.recv(64).decode(errors="replace")
        except OSError:
            return "reached"
    def datagram(path):  # a datagram pair could send to any path: it must not exist
        try:
            one, _other = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        except OSError as exc:
            return "socketpair refused: " + errno.errorcode.get(exc.errno, str(exc.errno))
        try:
            one.sendto(b"x", path)
            return "sent"
        except OSError as exc:
            return "send refused: " + errno.errorcode.get(exc.errno, str(exc.errno))
    paths = sys.stdin.read().split()
    print(json.dumps({"stream": {p: reach(p) for p in paths}, "datagram": {p: datagram(p) for p in paths}}))
''')


class Listener:
    """A unix stream socket of the test's own at a path anyone may traverse and connect to
    (folder 0755, socket 0777, owned by the grading user); each connection gets the token."""

    def __init__(self) -> None:
        self.token = f"tok-{secrets.token_hex(12)}"
        self.folder = tempfile.mkdtemp(prefix="lcb-listen-")
        os.chmod(self.folder, 0o755)
        self.path = os.path.join(self.folder, "agent.sock")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        os.chmod(self.path, 0o777)
        self.server.listen(8)
        self.server.settimeout(0.2)
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self.server.accept()
            except (TimeoutError, OSError):
                continue
            self.connections += 1
            with connection:
                connection.sendall(self.token.encode())

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.server.close()
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture
def listener():
    own = Listener()
    try:
        yield own
    finally:
        own.close()


def _probe(paths: list[str], guard: bool = True, **layers) -> dict:
    run = run_in_sandbox(SandboxJob("exec", PROBE, (("\n".join(paths), ""),), timeout_s=10.0, guard=guard,
                                    **layers))
    event = run.of_kind("exec")[0]
    assert event["exit_code"] == 0, event["stderr"]
    return json.loads(event["stdout"])


def _layers() -> tuple[str, ...]:
    return run_in_sandbox(SandboxJob("exec", "print(1)", (("", ""),))).layers


# ------------------------------------------------------------------ a listener of our own


def test_with_every_layer_on_our_listener_is_unreachable(listener):
    found = _probe([listener.path])
    assert found["stream"][listener.path] == "socket refused: EPERM", found
    assert "socketpair-only" in _layers()
    assert found["datagram"][listener.path] == "socketpair refused: EPERM", found
    assert listener.connections == 0


def test_control_without_the_socketpair_only_layer_our_listener_is_reached(listener):
    """Every other layer on (namespaces, other uid, Landlock, the first seccomp part): reached."""
    found = _probe([listener.path], sockets_paired_only=False)
    assert found["stream"][listener.path] == f"reached: {listener.token}", found
    assert listener.connections == 1


def test_the_socketpair_only_layer_alone_keeps_the_listener_unreachable(listener):
    found = _probe([listener.path], **{**ALL_OFF, "sockets_paired_only": True})
    assert found["stream"][listener.path] == "socket refused: EPERM", found
    assert listener.connections == 0
    control = _probe([listener.path], **ALL_OFF)
    assert control["stream"][listener.path] == f"reached: {listener.token}", control


def test_python_exec_does_not_reach_our_listener_either(listener):
    result = python_exec(PROBE, stdin=listener.path, timeout_s=10.0)
    assert json.loads(result.stdout)["stream"][listener.path] == "socket refused: EPERM", result
    # the control: python_exec's job (guard off) with the layer off
    control = _probe([listener.path], guard=False, sockets_paired_only=False)
    assert control["stream"][listener.path] == f"reached: {listener.token}", control


# ------------------------------------------------------------------ a program graded at the same time


PLANTER = textwrap.dedent(r'''
    import ctypes, posix, socket, sys, time
    token, nonce = sys.stdin.read().split()
    ctypes.CDLL(None).prctl(15, ("lcbsock" + nonce[:8]).encode(), 0, 0, 0)  # PR_SET_NAME: how the test finds us
    try:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind("planted.sock")  # in its own folder, which it opens to everyone
        posix.chmod("planted.sock", 0o777)
        posix.chmod(".", 0o755)
        server.listen(4)
        server.settimeout(0.1)
        print("listening", flush=True)
    except OSError as exc:
        print("cannot listen: %d" % exc.errno)
        raise SystemExit(0)
    served, end = 0, time.time() + 8
    while time.time() < end:
        try:
            connection, _ = server.accept()
        except OSError:
            continue
        connection.settimeout(0.2)
        try:
            said = connection.recv(4)
        except OSError:
            said = b""
        if said == b"stop":  # the test is done
            break
        connection.sendall(token.encode())
        connection.close()
        served += 1
    print("served %d" % served)
''')


def _planter_folder(nonce: str, deadline: float) -> str | None:
    """The planter's folder (its working folder, read through /proc), once its socket is there."""
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/comm") as fh:
                    if fh.read().strip() != "lcbsock" + nonce[:8]:
                        continue
                folder = os.readlink(f"/proc/{entry}/cwd")
            except OSError:
                continue
            if os.path.exists(os.path.join(folder, "planted.sock")):
                return folder
        time.sleep(0.02)
    return None


def _beside_a_planter(planter_layers: dict, seeker_layers: dict) -> tuple[str, dict | None, str]:
    """(what the planter says, what the seeker found at its socket or None if it never
    listened, the token)."""
    token, nonce = f"tok-{secrets.token_hex(12)}", secrets.token_hex(8)
    planted: dict = {}

    def plant():
        planted["run"] = run_in_sandbox(SandboxJob("exec", PLANTER, ((f"{token} {nonce}", ""),), timeout_s=10.0,
                                                   **planter_layers))

    thread = threading.Thread(target=plant)
    thread.start()
    found = None
    try:
        folder = _planter_folder(nonce, time.monotonic() + 3)
        if folder is not None:
            path = os.path.join(folder, "planted.sock")
            found = _probe([path], **seeker_layers)["stream"][path]
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stop:
                stop.connect(path)
                stop.sendall(b"stop")
    finally:
        thread.join()
    return planted["run"].of_kind("exec")[0]["stdout"], found, token


def test_a_concurrently_graded_programs_listener_is_unreachable():
    # The planter gets to listen (its own socketpair-only layer off); the seeker has every layer.
    says, found, token = _beside_a_planter({"sockets_paired_only": False}, {})
    assert says.startswith("listening"), says
    assert found == "socket refused: EPERM"
    assert "served 0" in says


def test_control_the_other_programs_listener_is_reached_without_the_layer():
    says, found, token = _beside_a_planter({"sockets_paired_only": False}, {"sockets_paired_only": False})
    assert found == f"reached: {token}", (found, says)
    assert "served 1" in says


def test_with_every_layer_on_a_program_cannot_even_listen():
    run = run_in_sandbox(SandboxJob("exec", PLANTER, ((f"tok {secrets.token_hex(8)}", ""),), timeout_s=10.0))
    assert run.of_kind("exec")[0]["stdout"].strip() == "cannot listen: 1"


# ------------------------------------------------------------------ the host's well-known sockets


def _well_known() -> list[str]:
    candidates = [os.environ.get("SSH_AUTH_SOCK", ""), "/run/dbus/system_bus_socket", "/var/run/docker.sock",
                  "/run/docker.sock", f"/run/user/{os.getuid()}/bus", *sorted(glob.glob("/tmp/.X11-unix/*"))]
    found = []
    for path in dict.fromkeys(p for p in candidates if p):
        try:
            if stat.S_ISSOCK(os.stat(path).st_mode):
                found.append(path)
        except OSError:
            pass
    return found


def _harness_reaches(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1)
        try:
            sock.connect(path)
            return True
        except OSError:
            return False


@pytest.mark.parametrize("index", range(4))
def test_host_agent_and_bus_sockets_are_unreachable(index):
    paths = _well_known()
    if index >= len(paths):
        pytest.skip(f"this host has {len(paths)} of the well-known agent/bus sockets (SSH_AUTH_SOCK, "
                    "D-Bus, docker, X11): nothing to try here")
    path = paths[index]
    assert _probe([path])["stream"][path] == "socket refused: EPERM"
    control = _probe([path], sockets_paired_only=False)["stream"][path]
    # Without the layer the program gets as far as the socket itself: the kernel then decides
    # by the file's mode and the listener by its own checks, no longer the sandbox.
    assert not control.startswith("socket refused"), control
    mode = os.stat(path).st_mode
    if _harness_reaches(path) and mode & stat.S_IWOTH and os.access(os.path.dirname(path), os.X_OK):
        assert control.startswith("reached"), control
