"""The agents' python_exec tool: real sandboxed runs."""

from __future__ import annotations

import asyncio
import os
import time
import uuid

from lcb import sandbox
from lcb.tools import ExecResult, apython_exec, python_exec


def test_stdout_stdin_and_exit_code():
    result = python_exec("import sys\ndata = sys.stdin.read()\nprint(data.upper())\nsys.exit(3)\n",
                         stdin="hello")
    assert isinstance(result, ExecResult)
    assert (result.stdout, result.exit_code, result.timed_out) == ("HELLO\n", 3, False)
    text = result.render()
    assert "exit code: 3" in text and "HELLO" in text


def test_exception_shows_traceback_and_exit_code_one():
    result = python_exec("def f():\n    return 1 / 0\nf()\n")
    assert result.exit_code == 1
    assert "ZeroDivisionError" in result.stderr and "line 2" in result.stderr
    assert "ZeroDivisionError" in result.render()


def test_syntax_error_reported_like_python():
    result = python_exec("def broken(:\n")
    assert result.exit_code == 1 and "SyntaxError" in result.stderr


def test_prelude_is_available_and_can_be_turned_off():
    code = "print(List[int], defaultdict(int)['x'])\n"
    assert python_exec(code).exit_code == 0
    assert "NameError" in python_exec(code, prelude=False).stderr


def test_timeout_kills_and_is_reported():
    started = time.monotonic()
    result = python_exec("print('begun', flush=True)\nwhile True:\n    pass\n", timeout_s=1.0)
    assert result.timed_out and result.exit_code < 0
    assert result.stdout == "begun\n"
    assert time.monotonic() - started < 10
    assert "timed out" in result.render()


def test_output_capped_and_render_clipped():
    result = python_exec("print('x' * 3_000_000)\nprint('tail')\n")
    assert result.truncated and len(result.stdout) <= 1024**2
    text = result.render(max_chars=4000)
    assert len(text) <= 4100 and "clipped" in text and "over the capture limit" in text


def test_subprocess_allowed_and_detached_children_cleaned_up():
    marker = f"lcb-exec-{uuid.uuid4().hex}"
    code = ("import subprocess, sys\n"
            "print(subprocess.run([sys.executable, '-c', 'print(6*7)'], capture_output=True, text=True).stdout)\n"
            f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)  # {marker}'],\n"
            "                 start_new_session=True)\n")
    result = python_exec(code)
    assert result.exit_code == 0 and result.stdout.strip() == "42"
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:  # an exiting zygote closes its pipe a moment before it is gone
        left = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline_has(p, marker)]
        left += sandbox.live_sandbox_processes()
        if not left:
            break
        time.sleep(0.05)
    assert not left


def _cmdline_has(pid: str, marker: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return marker.encode() in fh.read()
    except OSError:
        return False


def test_environment_scrubbed(monkeypatch):
    monkeypatch.setenv("LCB_EXEC_SECRET", "do-not-leak")
    result = python_exec("import os\nprint(sorted(os.environ))\nprint(os.environ.get('LCB_EXEC_SECRET'))\n")
    assert "do-not-leak" not in result.stdout and "LCB_EXEC_SECRET" not in result.stdout


def test_memory_limit_from_env(monkeypatch):
    monkeypatch.setenv("LCB_FUNCTIONAL_MEMORY_BYTES", str(512 * 1024**2))
    small = python_exec("x = bytearray(1024**3)\n")
    assert small.exit_code == 1 and "MemoryError" in small.stderr
    monkeypatch.setenv("LCB_FUNCTIONAL_MEMORY_BYTES", "0")
    assert python_exec("x = bytearray(10**8)\nprint(len(x))\n").stdout == "100000000\n"


def test_async_does_not_block_the_loop():
    async def scenario():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.02)
                ticks += 1

        task = asyncio.create_task(ticker())
        results = await asyncio.gather(*(apython_exec("import time\ntime.sleep(0.5)\nprint(1)")
                                         for _ in range(3)))
        task.cancel()
        return results, ticks

    results, ticks = asyncio.run(scenario())
    assert all(r.stdout == "1\n" for r in results)
    assert ticks >= 10
