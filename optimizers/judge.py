"""Model calls that are not team rollouts: judges and probes (MAPRO, MASPO).

They are never charged to the rollout budget, but they are real compute, so every call goes
through the same counted, journaled, replayable machinery as reflection (``ReflectionModel``),
with its own journal (``judge.jsonl``), and is reported per purpose as
``metadata["uncharged_calls"]`` (see the job: result.json, W&B, report).

- ``Judge.score``: a pointwise 0-1 rating (MAPRO's node and edge rewards);
- ``Judge.prefer``: a forced A/B verdict (MASPO's local validity and lookahead);
- ``Judge.probe``: one single-agent call with a candidate role prompt as the system message
  (MAPRO's candidate outputs).

As in the reference, a reply cut at its token limit is still used: a probe's cut output is the
candidate's output and a judge's cut reply is parsed for whatever it holds. A ``thinking_off``
judge asks Qwen3-family endpoints (vLLM) to skip thinking (``chat_template_kwargs``), and a
thinking block that arrives anyway is dropped before parsing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from optimizers.base import OptimizerInfrastructureError
from optimizers.reflection import DEFAULT_DECODING, ReflectionModel

JUDGE_JOURNAL = "judge.jsonl"
JUDGE_SYSTEM = (
    "You are an impartial judge of the messages written by LLM agents in a team that solves "
    "competitive programming problems graded by hidden tests."
)
SCORE_FLOOR = 1e-6  # rewards are multiplied (summed in log space): never exactly zero
NEUTRAL_SCORE = 0.5  # the reference's score when a reply holds no number
PURPOSES = ("judge", "probe")
JUDGE_MODELS = ("task", "reflection")
# vLLM's switch for Qwen3-family chat templates (the reference sends it with every judge/probe).
THINKING_OFF: Mapping[str, Any] = {"chat_template_kwargs": {"enable_thinking": False}}
_THINKING_FAMILY = re.compile(r"qwen3", re.IGNORECASE)

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_THINK_BLOCK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)
_VERDICT = re.compile(r"(?:<choose>\s*)?([AB])(?:\s*</choose>)?", re.IGNORECASE)


def thinking_off_body(model_id: str | None) -> dict[str, Any]:
    """The request fields that turn thinking off for ``model_id`` ({} where there is no switch)."""
    return {k: dict(v) for k, v in THINKING_OFF.items()} if _THINKING_FAMILY.search(model_id or "") else {}


def visible_text(reply: str | None) -> str:
    """A reply without its thinking: closed ``<think>`` blocks, an unclosed one (a reply cut
    while thinking) up to the end, and anything before a lone ``</think>``."""
    text = reply or ""
    if "</think>" in text and "<think>" not in text.split("</think>", 1)[0]:
        text = text.rsplit("</think>", 1)[1]
    return _THINK_BLOCK.sub("", text).strip()


def parse_score(reply: str | None, default: float = NEUTRAL_SCORE) -> float:
    """The reference's reading of a judge reply: the first number wherever it stands (a cut
    reply included), a 0-10 or 0-100 scale rescaled, above 100 read as 1, clamped to [0, 1];
    ``default`` when the visible reply holds no number."""
    match = _NUMBER.search(visible_text(reply))
    if match is None:
        return default
    value = float(match.group(0))
    if value > 1.0:
        value = value / 10.0 if value <= 10.0 else value / 100.0 if value <= 100.0 else 1.0
    return min(1.0, max(0.0, value))


def parse_verdict(reply: str | None) -> str | None:
    """``"A"`` or ``"B"`` when the visible reply is exactly that (``<choose>`` tags allowed);
    None for anything else (a tie, prose, an empty or cut reply)."""
    match = _VERDICT.fullmatch(visible_text(reply))
    return match.group(1).upper() if match else None


def neutral_pair(a: str, b: str) -> bool:
    """A pair a forced choice cannot tell apart: either side empty, or both the same."""
    a, b = a.strip(), b.strip()
    return not a or not b or a == b


class Judge:
    """A model used as judge and probe; counted and journaled per purpose."""

    def __init__(
        self,
        client: Any,
        *,
        method: str,
        workdir: Any,
        seed: int,
        temperature: float,
        max_tokens: int,
        probe_decoding: Mapping[str, Any] | None = None,
        thinking_off: bool = False,
        max_consecutive_failures: int = 5,
        judge_system: str | None = None,
    ) -> None:
        self.temperature = temperature
        # The method's own system text for judge calls ("" none; None: JUDGE_SYSTEM with its tag).
        self.judge_system = judge_system
        self.max_tokens = max_tokens
        probe = dict(probe_decoding or {})
        self.probe_temperature = float(probe.get("temperature", temperature))
        self.probe_max_tokens = int(probe.get("max_tokens", max_tokens))
        self.probe_top_p = float(probe.get("top_p", 1.0))
        self.extra_body = thinking_off_body(getattr(client, "model_id", None)) if thinking_off else {}
        self.model = ReflectionModel(
            client,
            method=method,
            workdir=workdir,
            seed=seed,
            decoding={"temperature": temperature, "top_p": 1.0, "max_tokens": max_tokens},  # judges: top-p 1
            max_consecutive_failures=max_consecutive_failures,
            journal_name=JUDGE_JOURNAL,
            system_intro=JUDGE_SYSTEM,
            label="judge model",
        )

    async def _ask(self, prompt: str, **options: Any) -> str | None:
        return await self.model.ask(prompt, keep_cut=True, extra_body=self.extra_body or None, **options)

    async def score(self, prompt: str) -> float:
        """A 0-1 rating; ``NEUTRAL_SCORE`` when the call failed or the reply has no number."""
        reply = await self._ask(prompt, purpose="judge", temperature=self.temperature, max_tokens=self.max_tokens,
                                system=self.judge_system)
        return parse_score(reply)

    async def prefer(self, candidate: str, parent: str, render: Callable[[str, str], str]) -> float:
        """Forced A/B verdict with the candidate always shown as A: 1 when A wins, else 0.

        A pair that cannot be told apart (``neutral_pair``) is 0.5 without a call; a B verdict,
        a malformed or cut reply and a failed call are all losses for the candidate, so an
        unusable judge never promotes it.
        """
        if neutral_pair(candidate, parent):
            return 0.5
        reply = await self._ask(render(candidate.strip(), parent.strip()), purpose="judge",
                                temperature=self.temperature, max_tokens=self.max_tokens, system=self.judge_system)
        return 1.0 if parse_verdict(reply) == "A" else 0.0

    async def probe(self, role_prompt: str, context: str) -> str:
        """One agent's reply under ``role_prompt`` to ``context`` (no tools, no team); a reply cut
        at the probe's token limit is still its output; "" when the call failed."""
        reply = await self._ask(context, purpose="probe", system=role_prompt,
                                temperature=self.probe_temperature, top_p=self.probe_top_p,
                                max_tokens=self.probe_max_tokens)
        return visible_text(reply)

    def uncharged_calls(self) -> dict[str, dict[str, int]]:
        """``{purpose: {calls, failed, truncated, prompt_tokens, completion_tokens}}`` (COST_SCHEMA)."""
        return uncharged_calls_from(self.model.usage())


def judge_from_context(
    ctx: Any, method: str, *, model: str, temperature: float, max_tokens: int | None,
    probe: Mapping[str, Any] | None = None, thinking_off: bool = False, judge_system: str | None = None,
) -> Judge:
    """The judge of a method on the job's task model (``model="task"``) or reflection model;
    ``max_tokens`` None: the reflection decoding's limit."""
    if model not in JUDGE_MODELS:
        raise ValueError(f"{method}: judge model must be one of {', '.join(JUDGE_MODELS)}, not {model!r}")
    client = ctx.task_model if model == "task" else ctx.reflection
    if client is None:
        raise OptimizerInfrastructureError(f"{method} needs the {model} model as judge, but the job passed none")
    if max_tokens is None:
        decoding = getattr(ctx, "reflection_decoding", None)
        max_tokens = int(getattr(decoding, "max_tokens", DEFAULT_DECODING["max_tokens"]))
    return Judge(client, method=method, workdir=ctx.workdir, seed=ctx.seed, temperature=temperature,
                 max_tokens=max_tokens, probe_decoding=probe, thinking_off=thinking_off, judge_system=judge_system)


def uncharged_calls_from(usage: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for purpose, counts in (usage.get("by_purpose") or {}).items():
        out[purpose] = {
            "calls": int(counts.get("calls", 0)),
            "failed": int(counts.get("failed_calls", 0)),
            "truncated": int(counts.get("truncated_calls", 0)),  # cut at the token limit, still used
            "prompt_tokens": int(counts.get("prompt_tokens", 0)),
            "completion_tokens": int(counts.get("completion_tokens", 0)),
        }
    return out
