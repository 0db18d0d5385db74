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
  (a fenced instruction, or JSON) and, in the ``useful`` world, includes ``MARKER``. In the
  ``useless`` world it proposes text that changes nothing that matters.

Run as a script it is a job entry point for kill/resume tests:
``python tests/optimizers/scripted_world.py OUT BASE_URL JSON_OVERRIDES`` prints the summary line.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # when run as a script
    sys.path.insert(0, str(REPO))

MARKER = "SAMPLE-FIRST PROTOCOL: run every sample case before answering."
MODEL_ID = "scripted/team-model"
REFLECTION_ID = "scripted/reflection-model"
WORLDS = ("useful", "useless", "broken")  # broken: every reflection request fails (HTTP 400)



def _instruction(useful: bool, role_hint: str = "") -> str:
    base = f"You are a meticulous competitive programmer{(' acting as ' + role_hint) if role_hint else ''}."
    if useful:
        return f"{base}\n{MARKER}\nKeep the final program complete and self-contained."
    return f"{base}\nThink step by step and write clean code."


def _fenced(text: str) -> str:
    return f"```\n{text}\n```"


def reflection_reply(method: str, purpose: str, prompt: str, *, useful: bool,
                     marked: tuple[str | None, str] = (None, "pattern-based"),
                     maspob_reply: str = "variant") -> str | None:
    """The scripted reflection model's answer for one purpose (None: not a request it knows)."""
    rule = MARKER if useful else "Write clean code."
    replies: dict[tuple[str, str], Any] = {
        ("gepa", "propose"): lambda: _fenced(_instruction(useful)),
        ("mamut_gepa", "propose"): lambda: f"New prompt:\nBEGIN_PROMPT\n{_instruction(useful)}\nEND_PROMPT",
        ("mipro", "summary"): lambda: "Competitive programming problems: stdin/stdout programs and "
                                      "LeetCode-style class methods, graded by hidden tests.",
        ("mipro", "propose"): lambda: "Proposed instruction:\n" + _fenced(_instruction(useful)),
        ("tavo", "rate"): lambda: json.dumps({"ratings": [
            {"index": i, "progress": 5, "coordination": 5, "stage": 5, "score": 5,
             "analysis": "routine step", "suggestion": rule} for i in range(_segment_count(prompt))]}),
        ("tavo", "credit"): lambda: json.dumps({
            "overall_score": 4, "analysis": "the program failed hidden tests",
            "strengths": ["clear structure"], "weaknesses": ["did not test samples"],
            "prompt_suggestions": [rule],
            "prompt_modifications": {"add": [rule], "remove": [], "restructure": []}}),
        ("tavo", "aggregate"): lambda: json.dumps({"add": [rule], "remove": [], "restructure": []}),
        ("tavo", "rewrite"): lambda: _fenced(_instruction(useful)),
        ("tavo", "overlay"): lambda: json.dumps({"rules": [rule, "State the algorithm before coding."]}),
        ("hivemind", "lessons"): lambda: "Here is what the role should learn:\n<lessons>\n"
                                         f"- {rule}\n- State the algorithm before coding.\n"
                                         "- Re-read the input format.\n</lessons>",
        ("mapro", "pool"): lambda: _variants(useful),
        ("mapro", "blame"): lambda: "\n".join(f"BLAME {name}: {rule}" for name in _blamed(prompt)),
        ("mapro", "mutate"): lambda: _fenced(_instruction(useful)),
        ("mapro", "judge"): lambda: judge_reply(prompt, useful=useful),
        ("maspo", "propose"): lambda: f"<prompt>\n{_instruction(useful)}{_focus(prompt)}\n</prompt>",
        ("maspo", "judge"): lambda: judge_reply(prompt, useful=useful),
    }
    if (method, purpose) == ("maspob", "variant"):
        return maspob_variant(prompt, useful=useful, marked=marked, reply=maspob_reply)
    make = replies.get((method, purpose))
    return make() if make is not None else None


def _variants(useful: bool) -> str:
    """Four reworded variants; in the useful world only the third carries the marker."""
    plain = [f"You are a careful competitive programmer (variant {i}).\nWrite clean code." for i in range(4)]
    if useful:
        plain[2] = _instruction(True)
    return "\n".join(f"VARIANT:\n{text}" for text in plain)


def _focus(prompt: str) -> str:
    """A line naming the first sample problem, so rewrites from different samples differ."""
    match = re.search(r"^### Problem (\S+)", prompt, flags=re.MULTILINE)
    if match is None:  # MASPO's proposer shows "Problem 1:" and the problem text (its 2nd line differs)
        match = re.search(r"^Problem 1:\n[^\n]*\n([^\n]{1,24})", prompt, flags=re.MULTILINE)
    return f"\nStart from what {match.group(1).strip()} taught." if match else ""


def _blamed(prompt: str) -> list[str]:
    match = re.search(r"Critique what (.+?) did", prompt)
    if match is None:  # MAPRO's blame lists the upstream agents it asks about
        return re.findall(r"^--- upstream ([\w.-]+) ---$", prompt, flags=re.MULTILINE)
    return re.findall(r"`([\w.-]+)`", match.group(1))


_SECTION = re.compile(r"^=== (.+?) ===$", re.MULTILINE)


def judge_sections(prompt: str) -> dict[str, str]:
    """A judge prompt's ``=== NAME ===`` sections (the judged replies are among them)."""
    marks = list(_SECTION.finditer(prompt))
    return {m.group(1): prompt[m.end():marks[i + 1].start() if i + 1 < len(marks) else len(prompt)].strip()
            for i, m in enumerate(marks)}


def solves_a_problem(text: str) -> bool:
    """Whether a reply contains the reference program of a built-in problem."""
    from lcb.builtin import load_solutions

    return any(s["correct"].strip() in text for s in load_solutions().values())


def judge_reply(prompt: str, *, useful: bool) -> str:
    """The scripted judge. Useful world: it rates replies that contain a correct program high
    (0.9 vs 0.2) and prefers them pairwise; edges are neutral (0.5). Useless world: it prefers
    nothing (0.5, TIE)."""
    sections = judge_sections(prompt)
    for first, second in (("A", "B"), ("OUTPUT A", "OUTPUT B")):  # pairwise
        if first in sections and second in sections:
            if not useful:
                return "TIE"
            a, b = solves_a_problem(sections[first]), solves_a_problem(sections[second])
            return "A" if a and not b else "B" if b and not a else "TIE"
    reply = sections.get("REPLY", sections.get("AGENT RESPONSE"))  # a node rating; edges stay neutral
    if not useful or reply is None:
        return "0.5"
    return "0.9" if solves_a_problem(reply) else "0.2"


MASPOB_MARKED = (None, "pattern-based")  # (role or None for every role, style) that gets MARKER
# How the scripted model answers MASPOB's variant requests: ``variant`` writes one; the others
# are models that cannot: ``echo`` repeats the original, ``refuse`` declines in prose, ``break``
# rewrites it but drops its interface (every placeholder, tool and tag).
MASPOB_REPLIES = ("variant", "echo", "refuse", "break")


def maspob_variant(prompt: str, *, useful: bool, marked: tuple[str | None, str] = MASPOB_MARKED,
                   reply: str = "variant") -> str | None:
    """A MASPOB pool variant: the seed prompt (kept verbatim, so its interface survives) plus a
    line in the requested style; in the useful world the ``marked`` (role, style) adds MARKER."""
    seed = re.search(r"^BEGIN PROMPT\n(.*?)\nEND PROMPT$", prompt, flags=re.MULTILINE | re.DOTALL)
    role = re.search(r"for the `([^`]+)` role", prompt)
    style = re.search(r"^Style to follow \(([a-z0-9\-]+)\):", prompt, flags=re.MULTILINE)
    if seed is None or role is None or style is None:
        return None
    if reply == "refuse":
        return "I'm sorry, but I can't rewrite system prompts."
    if reply == "echo":
        return f"BEGIN PROMPT\n{seed.group(1)}\nEND PROMPT"
    if reply == "break":
        plain = f"You are a helpful assistant. Solve the problem in the {style.group(1)} style."
        return f"BEGIN PROMPT\n{plain}\nEND PROMPT"
    extra = f"Work in a {style.group(1)} way."
    want_role, want_style = marked
    if useful and style.group(1) == want_style and want_role in (None, role.group(1)):
        extra += f"\n{MARKER}"
    return f"Here is the rewritten prompt.\nBEGIN PROMPT\n{seed.group(1)}\n{extra}\nEND PROMPT"


def _segment_count(prompt: str) -> int:
    return len(re.findall(r"^### Step (\d+)", prompt, flags=re.MULTILINE)) or 1


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
