"""Two programs graded at the same time cannot reach each other.

A planter leaves a fresh token wherever a second program might pick it up — an abstract unix
socket, a unix socket file, a file in /tmp and in /dev/shm, a System V shared memory segment —
and waits for a signal from it; a seeker, graded at the same moment, looks in all those places
and signals the planter (whose pid the test hands it). The token must not cross and the signal
must not arrive. The control runs the same pair with every layer off: then every channel
carries the token, so each probe is shown to work.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import textwrap
import threading
import time

import pytest

from lcb._landlock import abi_version
from lcb.sandbox import SandboxJob, run_in_sandbox

ALL_OFF = {"namespaces": False, "drop_privileges": False, "seccomp": False, "landlock": False}
CHANNELS = ("abstract_socket", "socket_file", "tmp_file", "shm_file", "sysv_shm")

PLANTER = textwrap.dedent(r'''
    import ctypes, posix, signal, socket, sys, threading, time
    token, nonce = sys.stdin.read().split()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(15, ("lcbplant" + nonce[:7]).encode(), 0, 0, 0)  # PR_SET_NAME: how the test finds us
    got = []
    signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
    def serve(address):
        try:
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(address)
            if not address.startswith("\0"):
                posix.chmod(address, 0o777)
            server.listen(4)
        except (OSError, ValueError):
            return
        while True:
            connection, _ = server.accept()
            connection.sendall(token.encode())
            connection.close()
    for address in ("\0lcb-chan-" + nonce, "/tmp/lcb-chan-%s.sock" % nonce):
        threading.Thread(target=serve, args=(address,), daemon=True).start()
    for path in ("/tmp/lcb-chan-%s.txt" % nonce, "/dev/shm/lcb-chan-%s" % nonce):
        try:
            fd = posix.open(path, posix.O_WRONLY | posix.O_CREAT, 0o666)
            posix.write(fd, token.encode())
            posix.close(fd)
            posix.chmod(path, 0o666)
        except OSError:
            pass
    libc.shmat.restype = ctypes.c_void_p
    segment = libc.shmget(int(nonce[:7], 16), 4096, 0o1666)  # IPC_CREAT | 0666
    if segment >= 0:
        address = libc.shmat(segment, None, 0)
        if address not in (None, ctypes.c_void_p(-1).value):
            ctypes.memmove(address, token.encode(), len(token))
    end = time.time() + 4
    while time.time() < end and not got:
        time.sleep(0.02)
    print("signalled" if got else "quiet")
''')

SEEKER = textwrap.dedent(r'''
    import ctypes, json, posix, socket, sys, time
    nonce, planter = sys.stdin.read().split()
    libc = ctypes.CDLL(None, use_errno=True)
    found = {}
    def ask(address):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(1)
        sock.connect(address)
        return sock.recv(64).decode()
    def read(path):
        fd = posix.open(path, posix.O_RDONLY)
        try:
            return posix.read(fd, 64).decode()
        finally:
            posix.close(fd)
    def sysv():
        libc.shmat.restype = ctypes.c_void_p
        segment = libc.shmget(int(nonce[:7], 16), 0, 0)
        if segment < 0:
            raise OSError(ctypes.get_errno(), "no segment")
        address = libc.shmat(segment, None, 0o10000)  # SHM_RDONLY
        if address in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "no attach")
        return ctypes.string_at(address, 64).split(b"\0")[0].decode(errors="replace")
    probes = {
        "abstract_socket": lambda: ask("\0lcb-chan-" + nonce),
        "socket_file": lambda: ask("/tmp/lcb-chan-%s.sock" % nonce),
        "tmp_file": lambda: read("/tmp/lcb-chan-%s.txt" % nonce),
        "shm_file": lambda: read("/dev/shm/lcb-chan-%s" % nonce),
        "sysv_shm": sysv,
    }
    end = time.time() + 1.5
    while time.time() < end and len(found) < len(probes):
        for name, probe in probes.items():
            if name not in found:
                try:
                    found[name] = probe()
                except Exception:
                    pass
        time.sleep(0.05)
    found["signal_sent"] = libc.kill(int(planter), 10) == 0  # SIGUSR1
    print(json.dumps(found))
''')


def _pid_named(name: str, deadline: float) -> int | None:
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/comm") as fh:
                        if fh.read().strip() == name:
                            return int(entry)
                except OSError:
                    pass
        time.sleep(0.02)
    return None


def _graded_together(**layers) -> tuple[dict, str, str]:
    """Planter and seeker graded at the same time: (what the seeker found, the planter's last
    word, the token)."""
    import json

    token, nonce = f"tok-{secrets.token_hex(12)}", secrets.token_hex(8)
    planted: dict = {}

    def plant():
        planted["run"] = run_in_sandbox(SandboxJob("exec", PLANTER, ((f"{token} {nonce}", ""),),
                                                   timeout_s=10.0, **layers))

    thread = threading.Thread(target=plant)
    thread.start()
    try:
        planter = _pid_named("lcbplant" + nonce[:7], time.monotonic() + 20)
        assert planter is not None, "the planter never started"
        time.sleep(0.3)  # its sockets and files are in place
        seeker = run_in_sandbox(SandboxJob("exec", SEEKER, ((f"{nonce} {planter}", ""),), timeout_s=10.0, **layers))
    finally:
        thread.join()
        for path in (f"/tmp/lcb-chan-{nonce}.sock", f"/tmp/lcb-chan-{nonce}.txt", f"/dev/shm/lcb-chan-{nonce}"):
            if os.path.lexists(path):
                os.unlink(path)
        # the control's System V segment outlives its planter: remove it
        subprocess.run(["ipcrm", "-M", str(int(nonce[:7], 16))], capture_output=True, check=False)
    found = json.loads(seeker.of_kind("exec")[0]["stdout"])
    return found, planted["run"].of_kind("exec")[0]["stdout"].strip(), token


def test_a_planted_token_does_not_cross_between_programs_graded_together():
    layers = run_in_sandbox(SandboxJob("exec", "print(1)", (("", ""),))).layers
    if abi_version() < 6 or "ipcns" not in layers:
        pytest.skip(f"files, signals and System V IPC stay shared without Landlock ABI 6 and an IPC "
                    f"namespace (documented limit); layers here: {layers}")
    found, planter_says, token = _graded_together()
    crossed = [name for name in CHANNELS if token in str(found.get(name, ""))]
    assert crossed == [], f"the token crossed through {crossed}"
    assert planter_says == "quiet", "a signal from the other program arrived"


@pytest.mark.skipif(os.geteuid() != 0, reason="the control shares root's powers between the two programs")
def test_control_with_every_layer_off_each_channel_carries_the_token():
    found, planter_says, token = _graded_together(**ALL_OFF)
    assert [name for name in CHANNELS if token not in str(found.get(name, ""))] == []
    assert planter_says == "signalled"
