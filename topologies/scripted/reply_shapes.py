"""Reply shapes of the methods' reflection requests: what a scripted reflection model answers.

One table, per ``(method, purpose)`` (the ``Task: method/purpose.`` tag of the reflection system
prompt), of a reply in the shape that method's prompt asks for: a fenced instruction, a JSON
object, a pool of variants, a lessons block... The instruction a reply proposes is built around
``MARKER`` (useful) or a text that changes nothing (useless). The methods' tests
(``tests/optimizers/scripted_world.py``) keep it in sync with their prompts and parsers; the
optimizer gym (``optimizers/gym/shapes.py``) puts its reflector's edit where the table puts
``MARKER``. It lives in the product so nothing in the product reads a test file.
"""

from __future__ import annotations

import json
import re
from typing import Any

MARKER = "SAMPLE-FIRST PROTOCOL: run every sample case before answering."


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
        ("random", "propose"): lambda: _fenced(_instruction(useful)),
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
