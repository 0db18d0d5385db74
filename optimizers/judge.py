"""Model calls that are not team rollouts: judges and probes (MAPRO, MASPO).

They are never charged to the rollout budget, but they are real compute, so every call goes
through the same counted, journaled, replayable machinery as reflection (``ReflectionModel``),
with its own journal (``judge.jsonl``), and is reported per purpose as
``metadata["uncharged_calls"]`` (see the job: result.json, W&B, report).

- ``Judge.score``: a pointwise 0-1 rating (MAPRO's node and edge rewards);
- ``Judge.prefer``: a pairwise A/B verdict (MASPO's local validity and lookahead);
- ``Judge.probe``: one single-agent call with a candidate role prompt as the system message
  (MAPRO's candidate outputs).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from optimizers.base import OptimizerInfrastructureError
from optimizers.reflection import DEFAULT_DECODING, ReflectionModel, clip

JUDGE_JOURNAL = "judge.jsonl"
JUDGE_SYSTEM = (
    "You are an impartial judge of the messages written by LLM agents in a team that solves "
    "competitive programming problems graded by hidden tests."
)
SCORE_FLOOR = 1e-6  # rewards are multiplied (summed in log space): never exactly zero
PURPOSES = ("judge", "probe")
JUDGE_MODELS = ("task", "reflection")

_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?|\.\d+)")
_VERDICT = re.compile(r"\b(A|B|TIE)\b")


def parse_score(reply: str | None) -> float | None:
    """The first number of a reply as a 0-1 score (a 0-10 or 0-100 scale is rescaled)."""
    if not reply:
        return None
    match = _NUMBER.search(reply)
    if match is None:
        return None
    value = float(match.group(1))
    for scale in (1.0, 10.0, 100.0):
        if value <= scale:
            return value / scale
    return None


def parse_verdict(reply: str | None) -> float | None:
    """1.0 when A wins, 0.0 when B wins, 0.5 for a tie; None when the reply names none."""
    if not reply:
        return None
    match = _VERDICT.search(reply.strip().upper())
    if match is None:
        return None
    return {"A": 1.0, "B": 0.0, "TIE": 0.5}[match.group(1)]


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
        max_consecutive_failures: int = 5,
    ) -> None:
        self.temperature = temperature
        self.max_tokens = max_tokens
        probe = dict(probe_decoding or {})
        self.probe_temperature = float(probe.get("temperature", temperature))
        self.probe_max_tokens = int(probe.get("max_tokens", max_tokens))
        self.model = ReflectionModel(
            client,
            method=method,
            workdir=workdir,
            seed=seed,
            decoding={"temperature": temperature, "top_p": float(probe.get("top_p", 1.0)), "max_tokens": max_tokens},
            max_consecutive_failures=max_consecutive_failures,
            journal_name=JUDGE_JOURNAL,
            system_intro=JUDGE_SYSTEM,
            label="judge model",
        )

    async def score(self, prompt: str) -> float | None:
        """A 0-1 rating, or None when the call failed or the reply has no number."""
        reply = await self.model.ask(prompt, purpose="judge", temperature=self.temperature, max_tokens=self.max_tokens)
        return parse_score(reply)

    async def prefer(self, question: str, a: str, b: str, *, what: str) -> float:
        """Pairwise verdict for A over B: 1 win, 0 loss, 0.5 tie.

        Identical or empty pairs are a tie without a call; a malformed verdict counts as a loss
        for A (the candidate is always shown as A, so an unusable judge never promotes it).
        """
        if a.strip() == b.strip() or not a.strip() or not b.strip():
            return 0.5
        prompt = (
            f"{question}\n\nCompare two versions of {what}.\n\n=== A ===\n{clip(a, 3000)}\n\n=== B ===\n"
            f"{clip(b, 3000)}\n\nWhich is more correct and more useful for solving the problem? "
            "Answer with exactly one word: A, B or TIE."
        )
        reply = await self.model.ask(prompt, purpose="judge", temperature=self.temperature, max_tokens=self.max_tokens)
        verdict = parse_verdict(reply)
        return 0.0 if verdict is None else verdict

    async def probe(self, role_prompt: str, context: str) -> str | None:
        """One agent's reply under ``role_prompt`` to ``context`` (no tools, no team)."""
        return await self.model.ask(context, purpose="probe", system=role_prompt,
                                    temperature=self.probe_temperature, max_tokens=self.probe_max_tokens)

    def uncharged_calls(self) -> dict[str, dict[str, int]]:
        """``{purpose: {calls, failed, prompt_tokens, completion_tokens}}`` (COST_SCHEMA)."""
        return uncharged_calls_from(self.model.usage())


def judge_from_context(
    ctx: Any, method: str, *, model: str, temperature: float, max_tokens: int | None,
    probe: Mapping[str, Any] | None = None,
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
                 max_tokens=max_tokens, probe_decoding=probe)


def uncharged_calls_from(usage: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for purpose, counts in (usage.get("by_purpose") or {}).items():
        out[purpose] = {
            "calls": int(counts.get("calls", 0)),
            "failed": int(counts.get("failed_calls", 0)),
            "prompt_tokens": int(counts.get("prompt_tokens", 0)),
            "completion_tokens": int(counts.get("completion_tokens", 0)),
        }
    return out
