"""The gym's scripted models, in process (no HTTP): the team model, judges and the reflector.

They stand in for the models only; the team runtime, evaluator, budget, journals and methods are
the real ones. None of them holds the world: this module imports nothing of ``world``,
``worlds`` or ``generators`` (a test checks), and what they know is the language
(``optimizers.gym.lexicon``) and the knobs of their own noise.

- ``RolloutModel`` answers the team's turns in one rollout whose outcome and symptom lines the
  environment (``system.GymSystem``) already drew: each turn is the role's symptom lines (if the
  rollout fails) plus the problem's correct or wrong reference program. A centralized manager
  first delegates to each worker it can reach.
- ``ScriptedJudge`` scores what it is shown: a reply holding a correct program scores high, each
  symptom sentence it reads lowers the score, and Gaussian noise (``judge_noise``) is added,
  drawn from the request seed. Pairwise requests compare the two noisy scores.
- Probes (a candidate role prompt answering one context, MAPRO) go to the environment, which
  runs the seed team with that prompt in place as one more stochastic rollout.
- ``ScriptedReflector`` proposes edits from the request text alone, through a noisy channel: it
  keeps the instruction sentences the request shows (a rewrite keeps what the prompt said); with
  probability ``fix_rate`` it acts on one symptom it reads (a lack symptom: it adds an instruction
  form of that concept; an excess symptom: it drops the sentences carrying it), misreading the
  concept with probability ``garble_rate``; otherwise it makes a blind edit: half the time a
  harmless generic sentence, else an instruction form of a random concept of its vocabulary (the
  whole lexicon: a blind edit rarely touches the world). Symptoms may be decoys or point the
  wrong way; the reflector cannot tell. The reply has the shape the method's prompt asks for
  (``shapes``).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from optimizers.gym.draws import Channel, unit_draw
from optimizers.gym.lexicon import EXCESS, Lexicon

PARAPHRASES = (
    "Write clear, well-structured code.",
    "Think about the problem before you start writing code.",
    "Keep explanations short and focused.",
    "Use descriptive variable names.",
)


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


_CASE = re.compile(r"Case ([A-Za-z0-9_\-]+~\d+)\.")


def program(problem_id: str, correct: bool) -> str:
    """The reference program (correct or wrong) of a problem, a synthetic case's being its
    built-in problem's (``<builtin id>~<k>``)."""
    code = reference_programs()[problem_id.partition("~")[0]]["correct" if correct else "wrong"].strip()
    return f"```python\n{code}\n```"


def problem_in(text: str) -> str | None:
    """The problem a text is about: a synthetic case by its ``Case <id>.`` line, else a built-in
    problem by the opening of its statement."""
    case = _CASE.search(text)
    if case is not None:
        return case.group(1)
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
# Judges


_SECTION = re.compile(r"^=== (.+?) ===$", re.MULTILINE)


def judge_sections(prompt: str) -> dict[str, str]:
    marks = list(_SECTION.finditer(prompt))
    return {m.group(1): prompt[m.end():marks[i + 1].start() if i + 1 < len(marks) else len(prompt)].strip()
            for i, m in enumerate(marks)}


class ScriptedJudge:
    """Scores shown outputs: correct program high, symptoms it reads lower it, Gaussian noise."""

    def __init__(self, lexicon: Lexicon, *, noise: float, salt: str) -> None:
        self.lexicon, self.noise, self.salt = lexicon, noise, salt

    def quality(self, text: str, *draw: object) -> float:
        score = 0.8 if shows_correct_program(text) else 0.3
        score -= 0.15 * len(self.lexicon.symptoms_in(text))
        score += self.noise * _gauss(self.salt, "judge", *draw)
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


# ------------------------------------------------------------------------------------------------
# The reflector


def proposal(lexicon: Lexicon, channel: Channel, request_text: str, salt: str, *draw: object) -> str:
    """The sentences of one proposed prompt or rule (one line, no quotes), from what
    ``request_text`` shows; the reply shape puts them where the method expects its edit."""

    def u(what: str) -> float:
        return unit_draw(salt, what, *draw)

    def written(key: str) -> str:
        forms = lexicon.concept(key).forms
        return forms[int(u("form") * len(forms))] if channel.paraphrase else forms[0]

    vocabulary = channel.blind or lexicon.keys
    instructions = lexicon.instructions_in(request_text)
    signals = lexicon.symptoms_in(request_text)
    if channel.legacy_reading:  # the first gym's reading: in vocabulary order (a stable sort)
        rank = {key: index for index, key in enumerate(vocabulary)}
        instructions = sorted(instructions, key=lambda item: rank.get(item[0], len(rank)))
        signals = sorted(signals, key=lambda item: rank.get(item[0], len(rank)))
    kept = list(dict.fromkeys(sentence for _, sentence in instructions))
    extra: str | None = None
    if signals and u("fix") < channel.fix_rate:
        key, direction = signals[int(u("target") * len(signals))]
        if channel.garble_rate > 0 and u("garble") < channel.garble_rate:
            key = lexicon.keys[int(u("misread") * len(lexicon.keys))]
        if direction == EXCESS:
            kept = [s for s in kept if s not in lexicon.concept(key).forms]
        else:
            extra = written(key)
    elif u("fallback") < 0.5:
        extra = PARAPHRASES[int(u("paraphrase") * len(PARAPHRASES))]
    else:
        extra = written(vocabulary[int(u("random") * len(vocabulary))])
    if extra is not None and extra not in kept:
        kept.append(extra)
    return " ".join(kept) or PARAPHRASES[0]


class ScriptedReflector:
    """Answers reflection requests ((method, purpose), ``optimizers.surfaces.identify``) in the
    method's reply shape."""

    def __init__(self, lexicon: Lexicon, channel: Channel, *, salt: str) -> None:
        self.lexicon, self.channel, self.salt = lexicon, channel, salt
        self.unknown: dict[str, int] = {}  # method/purpose tags no shape is known for

    def reply(self, task: tuple[str, str], prompt: str, seed: int) -> str | None:
        import optimizers.gym.shapes as shapes

        method, purpose = task
        key = _digest(prompt)
        text = shapes.reply(method, purpose, prompt,
                            lambda index: proposal(self.lexicon, self.channel, prompt, self.salt, seed, key, index))
        if text is None:
            self.unknown[f"{method}/{purpose}"] = self.unknown.get(f"{method}/{purpose}", 0) + 1
        return text


Probe = Callable[[str, str, int], str]  # (role prompt, context, seed) -> the agent's answer


class GymModel:
    """The one in-process client of a world outside rollouts: judge and probe requests on the
    task model, reflection (and judge) requests on the reflection model. It counts calls and
    tokens per surface (judge, probe, reflection): the information a method gets without paying
    rollouts."""

    def __init__(self, *, lexicon: Lexicon, channel: Channel, judge_noise: float, salt: str, probe: Probe,
                 model_id: str) -> None:
        self.model_id = model_id
        self.judge = ScriptedJudge(lexicon, noise=judge_noise, salt=salt)
        self.reflector = ScriptedReflector(lexicon, channel, salt=salt)
        self._probe = probe
        self.usage: dict[str, dict[str, int]] = {}

    @property
    def calls(self) -> int:
        return sum(u["calls"] for u in self.usage.values())

    async def complete(self, role: str, messages: Sequence[Any], *, decoding: Any, tools: Sequence[Any] = (),
                       tool_choice: str | None = None) -> Any:
        from optimizers.surfaces import identify
        from topologies.types import ErrorKind, ModelCallError

        system, rest, _ = request_texts(messages)
        seed = _seed_of(decoding)
        task = identify(system, rest)
        if task is not None and task[1] == "judge":
            surface, text = "judge", self.judge.reply(rest, seed)
        elif task is not None:
            surface, text = "reflection", self.reflector.reply(task, rest, seed)
        else:  # a probe: a candidate role prompt as the system message
            surface, text = "probe", self._probe(system, rest, seed)
        if text is None:
            raise ModelCallError(f"the gym's scripted model has no reply for {role}", ErrorKind.MODEL)
        message = ai_message(text, prompt_chars=len(system) + len(rest))
        count = self.usage.setdefault(surface, {"calls": 0, "tokens": 0})
        count["calls"] += 1
        count["tokens"] += message.usage_metadata["total_tokens"]
        return message
