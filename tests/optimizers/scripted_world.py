"""A scripted world for optimizer tests: a team model that succeeds only with a marker, and a
reflection model that proposes that marker.

Both models are served by one scripted OpenAI-compatible server (an honest stand-in for the
models; the optimizers, teams, grader and job engine under test are all real):

- task requests (any request that is not a reflection request) are about a built-in problem; the
  reply is that problem's correct program (lcb/builtin/solutions.json) when the system prompt
  contains ``MARKER`` (or the problem is in ``seed_solves``), else its wrong program;
- reflection and judge requests are told apart by ``optimizers.surfaces.identify`` (the
  reflection system prompt's ``Task: <method>/<purpose>.`` tag, or a method's own system text,
  or none, with a phrase of its prompt); the reply has the shape the method's prompt asks for
  (a fenced instruction, or JSON; the table is ``topologies/scripted/reply_shapes.py``) and, in
  the ``useful`` world, includes ``MARKER``. In the
  ``useless`` world it proposes text that changes nothing that matters.

Run as a script it is a job entry point for kill/resume tests:
``python tests/optimizers/scripted_world.py OUT BASE_URL JSON_OVERRIDES`` prints the summary line.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # when run as a script
    sys.path.insert(0, str(REPO))

from topologies.scripted.reply_shapes import (  # noqa: E402,F401 - the table lives in the product
    MARKER,
    MASPOB_MARKED,
    MASPOB_REPLIES,
    judge_reply,
    judge_sections,
    maspob_variant,
    reflection_reply,
    solves_a_problem,
)

MODEL_ID = "scripted/team-model"
REFLECTION_ID = "scripted/reflection-model"
WORLDS = ("useful", "useless", "broken")  # broken: every reflection request fails (HTTP 400)


def _conversation_text(request: Any) -> str:
    """All message text except system prompts (demos in a prompt must not look like the task)."""
    parts = []
    for message in request.messages:
        if isinstance(message, Mapping) and message.get("role") not in ("system", "developer"):
            content = message.get("content")
            parts.append(content if isinstance(content, str) else json.dumps(content))
    return "\n".join(parts)


def reflection_rule(
    world: str = "useful", *, latency_s: float = 0.0,
    maspob_marked: tuple[str | None, str] = MASPOB_MARKED, maspob_reply: str = "variant",
) -> Any:
    """The scripted reflection model as a rule (it answers reflection and judge requests only)."""
    from optimizers.surfaces import identify
    from topologies.scripted import FunctionRule

    if world not in WORLDS:
        raise ValueError(f"world must be one of {WORLDS}")
    if maspob_reply not in MASPOB_REPLIES:
        raise ValueError(f"maspob_reply must be one of {MASPOB_REPLIES}")

    def reflect(request: Any) -> str | None:
        task = identify(request.system, request.last_user)
        if task is None or world == "broken":
            return None  # no rule answers: the server replies HTTP 400
        return reflection_reply(*task, request.last_user, useful=world == "useful",
                                marked=maspob_marked, maspob_reply=maspob_reply)

    return FunctionRule("reflect", reflect, latency_s=latency_s)


def world_script(
    *, world: str = "useful", seed_solves: Iterable[str] = (), latency_s: float = 0.0,
    maspob_marked: tuple[str | None, str] = MASPOB_MARKED, maspob_reply: str = "variant",
) -> Any:
    """The Script for a scripted server (``world``: useful | useless | broken)."""
    from optimizers.surfaces import identify
    from topologies.scripted import FunctionRule, Script, builtin_answers

    solved = frozenset(seed_solves)
    answer = builtin_answers(lambda request, problem_id: MARKER in request.system or problem_id in solved,
                             text=_conversation_text)

    def solve(request: Any) -> str | None:
        if identify(request.system, request.last_user) is not None:
            return None
        return answer(request)

    return Script(
        [reflection_rule(world, latency_s=latency_s, maspob_marked=maspob_marked, maspob_reply=maspob_reply),
         FunctionRule("solve", solve, latency_s=latency_s)],
        default=None,
    )


def models_by_surface(requests: Iterable[Any]) -> dict[str, set[str]]:
    """Which model ids a scripted server was asked for, per surface: ``reflection`` and
    ``judge`` (``optimizers.surfaces.identify``), ``probe`` (a bare role prompt with one user message)
    and ``team`` (everything else)."""
    from optimizers.surfaces import identify

    found: dict[str, set[str]] = {"reflection": set(), "judge": set(), "probe": set(), "team": set()}
    for request in requests:
        messages = list(request.body.get("messages") or [])
        system = " ".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")
        users = [str(m.get("content", "")) for m in messages if m.get("role") == "user"]
        task = identify(system, users[-1] if users else "")
        if task is not None:
            surface = "judge" if task[1] == "judge" else "reflection"
        elif [m.get("role") for m in messages] == ["system", "user"] and not request.body.get("tools"):
            surface = "probe"
        else:
            surface = "team"
        found[surface].add(str(request.body.get("model")))
    return found


def world_job_config(out: Path, base_url: str, **overrides: Any) -> Any:
    """A small job on built-in data whose task and reflection models are the scripted server."""
    from optimizers.protocol.grid.config import JobConfig, ModelSpec

    values: dict[str, Any] = {
        "method": "identity",
        "topology": "single",
        "model": ModelSpec("scripted", MODEL_ID, (base_url,)),
        "reflection": ModelSpec("reflection", REFLECTION_ID, (base_url,)),
        "seed": 0,
        "out": out,
        "team_size": 1,
        "data": "builtin",
        "budget": 30,
        "concurrency": 4,
        "quiet": True,
        "allow_any_cell": True,
    }
    values.update(overrides)
    return JobConfig(**values)


def fast_runtime() -> Any:
    from optimizers.protocol.job.engine import JobRuntime

    return JobRuntime(retry_delay_s=0.0, client_max_retries=0, client_backoff_s=0.0, in_grid=False)


def start_world(**options: Any) -> Any:
    """A running scripted server for ``world_script(**options)`` (call ``.stop()`` when done)."""
    from topologies.scripted import ScriptedServer

    return ScriptedServer(world_script(**options)).start()


def run_cli(base_url: str, out: Path, method: str, *extra: str, budget: int = 30, timeout_s: float = 300,
            topology: str = "single") -> Any:
    """``python -m optimizers.protocol.run`` on built-in data against the scripted server."""
    import subprocess

    command = [
        sys.executable, "-m", "optimizers.protocol.run", "--method", method, "--topology", topology,
        "--model", MODEL_ID, "--seed", "0", "--out", str(out), "--budget", str(budget), "--data", "builtin",
        "--allow-any-cell", "--task-endpoints", base_url, "--reflection-model", REFLECTION_ID,
        "--reflection-endpoints", base_url, "--quiet", *extra,
    ]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout_s, check=False)


def run_and_kill(out: Path, base_url: str, overrides: Mapping[str, Any], *, kill_after_charged: int,
                 timeout_s: float = 120) -> int:
    """Run a job in a child process and SIGKILL it once ``kill_after_charged`` rollouts are charged.

    Returns the charged count seen at the kill; raises if the job finished first (the test
    would prove nothing).
    """
    import os
    import signal
    import subprocess
    import time

    attempts = out / "optimization" / "attempts.jsonl"
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), str(out), base_url, json.dumps(dict(overrides))],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            charged = _charged_lines(attempts)
            if charged >= kill_after_charged:
                child.send_signal(signal.SIGKILL)
                child.wait(timeout=30)
                if (out / "optimization.json").exists():
                    raise AssertionError("the job finished its optimization before it could be killed")
                return charged
            if child.poll() is not None:
                stderr = child.stderr.read().decode() if child.stderr else ""
                raise AssertionError(f"the job ended before the kill (rc={child.returncode}): {stderr[-2000:]}")
            time.sleep(0.01)
        raise AssertionError("timed out waiting for charged rollouts")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
        if child.stderr:
            child.stderr.close()


def _charged_lines(path: Path) -> int:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    return sum(1 for line in data.split(b"\n")[:-1] if b'"charged": true' in line)


def main(argv: list[str]) -> int:
    out, base_url, overrides = argv[0], argv[1], json.loads(argv[2])
    from optimizers.protocol.job.errors import JobError
    from optimizers.protocol.job.engine import run_job, summary_line

    try:
        result = run_job(world_job_config(Path(out), base_url, **overrides), fast_runtime())
    except JobError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary_line(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
