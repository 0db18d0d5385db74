"""The gym's scripted models, in process (no HTTP): the team model, judges and the reflector.

They stand in for the models only; the team runtime, evaluator, budget, journals and methods are
the real ones.

- ``RolloutModel`` answers the team's turns in one rollout whose outcome the world already drew:
  each turn is the role's symptom lines (if the rollout fails) plus the problem's correct or
  wrong reference program. A centralized manager first delegates to each worker it can reach.
- ``ScriptedJudge`` scores what it is shown: a reply holding a correct program scores high, each
  symptom phrase in it lowers the score, and Gaussian noise (``world.judge_noise``) is added,
  drawn from the request seed. Pairwise requests compare the two noisy scores.
- ``ScriptedReflector`` proposes edits from the request text alone (never the hidden table): it
  keeps the world phrases the request shows (a rewrite keeps what the prompt said), and with
  probability ``fix_rate`` acts on a symptom it finds (adds the fact behind it, or drops the
  distractor behind it); otherwise it adds a paraphrase (harmless) or a random world phrase (a
  fact, maybe for the wrong role, or a distractor). A request with no symptom (e.g. a pure style
  variant) gets the latter. The reply has the shape the method's prompt asks for (``shapes``).
  What the reflector knows of the world is its vocabulary: the phrases, and which phrase cures
  which symptom (what a competent model would infer from the symptom's wording). It never uses
  the weights, the home components, the synergies, the difficulties or the optimum: whether an
  edit lands in the right role, pays off, or combines is for the method's search to find out.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from optimizers.gym.world import World, unit_draw

PARAPHRASES = (
    "Write clear, well-structured code.",
    "Think about the problem before you start writing code.",
    "Keep explanations short and focused.",
    "Use descriptive variable names.",
)
FIX_RATE = 0.6  # the chance the reflector acts on a symptom it sees


# ------------------------------------------------------------------------------------------------
# Requests as text


def _role_and_text(message: Any) -> tuple[str, str]:
    """(system | user | ai | tool, text) of a dict or a LangChain message."""
    if isinstance(message, Mapping):
        role, content = str(message.get("role", "")), message.get("content", "")
    else:
        role, content = str(getattr(message, "type", "")), getattr(message, "content", "")
    role = {"human": "user", "assistant": "ai", "developer": "system"}.get(role, role)
    if not isinstance(content, str):
        content = " ".join(str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in content or ())
    return role, content


def request_texts(messages: Sequence[Any]) -> tuple[str, str, bool]:
    """(system text, all non-system text, whether a tool result is in the conversation)."""
    system, rest, has_tool_result = [], [], False
    for message in messages:
        role, text = _role_and_text(message)
        if role == "system":
            system.append(text)
        else:
            rest.append(text)
        has_tool_result |= role == "tool"
    return "\n".join(system), "\n".join(rest), has_tool_result


def ai_message(content: str, *, tool_calls: Sequence[Mapping[str, Any]] = (), prompt_chars: int = 0) -> Any:
    from langchain_core.messages import AIMessage

    usage = {"input_tokens": prompt_chars // 4 + 1, "output_tokens": len(content) // 4 + 1}
    usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
    return AIMessage(content=content, tool_calls=list(tool_calls), usage_metadata=usage,
                     response_metadata={"finish_reason": "tool_calls" if tool_calls else "stop"})


@lru_cache(maxsize=1)
def _problem_keys() -> dict[str, str]:
    """problem id -> the opening of its statement (identifies the problem in any prompt)."""
    from lcb.data import load_problems

    return {p.id: p.statement[:80] for p in load_problems("builtin").problems}


@lru_cache(maxsize=1)
def reference_programs() -> dict[str, dict[str, str]]:
    from lcb.builtin import load_solutions

    return {pid: dict(s) for pid, s in load_solutions().items()}


def program(problem_id: str, correct: bool) -> str:
    code = reference_programs()[problem_id]["correct" if correct else "wrong"].strip()
    return f"```python\n{code}\n```"


def problem_in(text: str) -> str | None:
    return next((pid for pid, key in _problem_keys().items() if key in text), None)


def shows_correct_program(text: str) -> bool:
    return any(s["correct"].strip() in text for s in reference_programs().values())


def _seed_of(decoding: Any) -> int:
    seed = getattr(decoding, "seed", None)
    return int(seed) if seed is not None else 0


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _gauss(*parts: object) -> float:
    """A reproducible standard normal draw (Box-Muller on two unit draws)."""
    u1 = max(unit_draw(*parts, 1), 1e-12)
    u2 = unit_draw(*parts, 2)
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2 * math.pi * u2)


# ------------------------------------------------------------------------------------------------
# The team model inside one rollout


class RolloutModel:
    """The task model for one rollout: the outcome and each role's symptoms are already drawn."""

    def __init__(self, *, model_id: str, problem_id: str, solved: bool, symptoms: Mapping[str, Sequence[str]],
                 shared_symptoms: Sequence[str] = ()) -> None:
        self.model_id = model_id
        self.problem_id = problem_id
        self.solved = solved
        self.symptoms = symptoms  # role name -> symptom lines (empty when solved)
        self.shared_symptoms = shared_symptoms  # protocol symptoms: every role says them

    async def complete(self, role: str, messages: Sequence[Any], *, decoding: Any, tools: Sequence[Any] = (),
                       tool_choice: str | None = None) -> Any:
        system, rest, has_tool_result = request_texts(messages)
        lines = [*self.symptoms.get(role, ()), *self.shared_symptoms]
        note = "\n".join(lines) + ("\n" if lines else "")
        names = [str(t.get("function", {}).get("name", "")) for t in tools if isinstance(t, Mapping)]
        delegates = [name for name in names if name.startswith("delegate_to_")]
        if delegates and not has_tool_result:
            # A manager hands the task to its workers first, so every role gets a turn.
            calls = [{"name": name, "args": {"instructions": f"{note}Solve the problem and return the program."},
                      "id": f"call_{index}"} for index, name in enumerate(delegates)]
            return ai_message(f"{note}Delegating to the workers.", tool_calls=calls,
                              prompt_chars=len(system) + len(rest))
        content = f"{note}Here is my program.\n{program(self.problem_id, self.solved)}"
        return ai_message(content, prompt_chars=len(system) + len(rest))


# ------------------------------------------------------------------------------------------------
# Judges and probes


_SECTION = re.compile(r"^=== (.+?) ===$", re.MULTILINE)


def judge_sections(prompt: str) -> dict[str, str]:
    marks = list(_SECTION.finditer(prompt))
    return {m.group(1): prompt[m.end():marks[i + 1].start() if i + 1 < len(marks) else len(prompt)].strip()
            for i, m in enumerate(marks)}


class ScriptedJudge:
    """Scores shown outputs: correct program high, symptoms lower it, Gaussian noise on top."""

    def __init__(self, world: World) -> None:
        self.world = world

    def quality(self, text: str, *draw: object) -> float:
        score = 0.8 if shows_correct_program(text) else 0.3
        score -= 0.15 * sum(1 for s in self.world.symptoms() if s in text)
        score += self.world.judge_noise * _gauss(self.world.name, "judge", *draw)
        return min(1.0, max(0.0, score))

    def reply(self, prompt: str, seed: int) -> str:
        sections = judge_sections(prompt)
        key = _digest(prompt)
        if "A" in sections and "B" in sections:
            a = self.quality(sections["A"], seed, key, "A")
            b = self.quality(sections["B"], seed, key, "B")
            return "A" if a > b + 0.05 else "B" if b > a + 0.05 else "TIE"
        shown = sections.get("REPLY", prompt)
        return f"{self.quality(shown, seed, key):.2f}"


def probe_reply(world: World, role_prompt: str, context: str) -> str:
    """One agent's answer under a candidate role prompt (MAPRO's probes): the symptoms of the
    needed facts this prompt lacks, for the roles it names (all when it names none), and a
    program that is correct only when none is missing."""
    needed = [f for f in world.facts if f.id in world.needed_facts()]
    named = [f for f in needed if f.home.partition("/")[2] in role_prompt or f.home.startswith("protocol/")]
    relevant = named or needed
    missing = [f for f in relevant if f.text not in role_prompt]
    lines = [f.symptom for f in missing] + [d.symptom for d in world.distractors if d.text in role_prompt]
    problem_id = problem_in(context)
    answer = program(problem_id, not missing and not any(d.text in role_prompt for d in world.distractors)) \
        if problem_id else "I would start by restating the task."
    return "\n".join([*lines, answer])


# ------------------------------------------------------------------------------------------------
# The reflector


def proposal(world: World, request_text: str, *draw: object) -> str:
    """The phrases of one proposed prompt or rule (one line, no quotes), from what
    ``request_text`` shows; the reply shape puts them where the method expects its edit."""
    kept = [p for p in world.phrases() if p in request_text]
    targets: list[tuple[str, str]] = [("add", f.text) for f in world.facts if f.symptom in request_text]
    targets += [("drop", d.text) for d in world.distractors if d.symptom in request_text]
    extra: str | None = None
    if targets and unit_draw(world.name, "fix", *draw) < FIX_RATE:
        action, phrase = targets[int(unit_draw(world.name, "target", *draw) * len(targets))]
        if action == "drop":
            kept = [p for p in kept if p != phrase]
        else:
            extra = phrase
    elif unit_draw(world.name, "fallback", *draw) < 0.5:
        extra = PARAPHRASES[int(unit_draw(world.name, "paraphrase", *draw) * len(PARAPHRASES))]
    else:
        phrases = world.phrases()
        extra = phrases[int(unit_draw(world.name, "random", *draw) * len(phrases))]
    if extra is not None and extra not in kept:
        kept.append(extra)
    return " ".join(kept) or PARAPHRASES[0]


class ScriptedReflector:
    """Answers reflection requests ((method, purpose), ``optimizers.surfaces.identify``) in the
    method's reply shape."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.unknown: dict[str, int] = {}  # method/purpose tags no shape is known for

    def reply(self, task: tuple[str, str], prompt: str, seed: int) -> str | None:
        import optimizers.gym.shapes as shapes

        method, purpose = task
        key = _digest(prompt)
        text = shapes.reply(method, purpose, prompt, lambda index: proposal(self.world, prompt, seed, key, index))
        if text is None:
            self.unknown[f"{method}/{purpose}"] = self.unknown.get(f"{method}/{purpose}", 0) + 1
        return text


class GymModel:
    """The one in-process client of a world outside rollouts: judge and probe requests on the
    task model, reflection (and judge) requests on the reflection model."""

    def __init__(self, world: World, *, model_id: str) -> None:
        self.world = world
        self.model_id = model_id
        self.judge = ScriptedJudge(world)
        self.reflector = ScriptedReflector(world)
        self.calls = 0

    async def complete(self, role: str, messages: Sequence[Any], *, decoding: Any, tools: Sequence[Any] = (),
                       tool_choice: str | None = None) -> Any:
        from optimizers.surfaces import identify
        from topologies.types import ErrorKind, ModelCallError

        self.calls += 1
        system, rest, _ = request_texts(messages)
        seed = _seed_of(decoding)
        task = identify(system, rest)
        if task is not None and task[1] == "judge":
            text: str | None = self.judge.reply(rest, seed)
        elif task is not None:
            text = self.reflector.reply(task, rest, seed)
        else:  # a probe: a candidate role prompt as the system message
            text = probe_reply(self.world, system, rest)
        if text is None:
            raise ModelCallError(f"the gym's scripted model has no reply for {role}", ErrorKind.MODEL)
        return ai_message(text, prompt_chars=len(system) + len(rest))
