"""The reflection model as optimizers use it: counted, journaled, replayable, seeded.

``ReflectionModel`` wraps the job's reflection ``ChatClient`` (``ctx.reflection``):

- every call is journaled to ``<workdir>/reflection.jsonl`` (purpose, prompt hash, prompt, reply,
  token usage, logical seed) before its reply is used;
- a restarted job replays journaled replies instead of calling the model again: the n-th call
  with the same (purpose, prompt) gets the n-th journaled reply. Together with the evaluator's
  rollout journal this makes a deterministic method resume exactly where it was killed, without
  pickled state and without paying twice for reflection;
- the request seed is *logical*: derived from (method, job seed, purpose, prompt hash,
  occurrence), so it does not depend on call order or concurrency;
- a failed call returns ``None`` (methods fall back: keep the current prompt, neutral credit).
  A reply cut at the token limit (``finish_reason == "length"``) is a failed call by default: its
  text is journaled for inspection but never handed to the method, so no half-written instruction
  or JSON can be parsed into a prompt. Call sites whose text never becomes a prompt (a judge's
  score, a probe's output, a critique) pass ``keep_cut=True`` and get the cut text, as the
  reference methods use it;
  ``max_consecutive_failures`` failures in a row raise ``ReflectionUnavailable`` (the job then
  reports the optimization as infrastructure-invalid instead of searching blind).

It also holds the small text helpers the reflective methods share: JSON / fenced-block
extraction, clipping, and rendering of source-tagged team traces.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optimizers.base import OptimizerInfrastructureError
from optimizers.journal import JsonlJournal, read_jsonl
from topologies.types import TRUNCATED, finish_reason_of

JOURNAL_NAME = "reflection.jsonl"
REFLECTION_SYSTEM = (
    "You are the reflection model of an automatic prompt optimizer for teams of LLM agents that "
    "solve competitive programming problems graded by hidden tests."
)
# Mirrors JobConfig.reflection_decoding (the reference's 48000-token reflection limit); used when
# the context does not carry one.
DEFAULT_DECODING = {"temperature": 1.0, "top_p": 1.0, "max_tokens": 48000}


class ReflectionUnavailable(OptimizerInfrastructureError):
    """The reflection model failed too many times in a row to keep optimizing."""


@dataclass(frozen=True, slots=True)
class _Replay:
    reply: str | None
    prompt_tokens: int
    completion_tokens: int
    truncated: bool = False


def prompt_hash(purpose: str, system: str, prompt: str) -> str:
    return hashlib.sha256(f"{purpose}\x00{system}\x00{prompt}".encode()).hexdigest()


def logical_seed(*parts: Any) -> int:
    digest = hashlib.sha256("\x00".join(str(p) for p in parts).encode()).hexdigest()
    return int(digest[:8], 16) % (2**31 - 1)


def _decoding_from(value: Any) -> dict[str, Any]:
    if value is None:
        return dict(DEFAULT_DECODING)
    if isinstance(value, Mapping):
        return {**DEFAULT_DECODING, **{k: value[k] for k in DEFAULT_DECODING if k in value}}
    return {k: getattr(value, k, DEFAULT_DECODING[k]) for k in DEFAULT_DECODING}


class ReflectionModel:
    """A counted, journaled, replayable view of the reflection client for one method."""

    def __init__(
        self,
        client: Any,
        *,
        method: str,
        workdir: Path,
        seed: int,
        decoding: Any = None,
        max_consecutive_failures: int = 3,
        journal_name: str = JOURNAL_NAME,
        system_intro: str = REFLECTION_SYSTEM,
        label: str = "reflection model",
    ) -> None:
        self.client = client
        self.method = method
        self.seed = seed
        self.decoding = _decoding_from(decoding)
        self.max_consecutive_failures = max(1, int(max_consecutive_failures))
        # Other uncharged model surfaces (e.g. a task-model judge) reuse this machinery with
        # their own journal, system prompt and name in error messages.
        self.system_intro = system_intro
        self.label = label
        self.path = Path(workdir) / journal_name
        self._journal = JsonlJournal(self.path)
        self._lock = threading.Lock()
        self._occurrences: dict[tuple[str, str], int] = {}
        self._replays: dict[tuple[str, str, int], _Replay] = {}
        self._consecutive_failures = 0
        self._totals = {"calls": 0, "live_calls": 0, "replayed_calls": 0, "failed_calls": 0,
                        "truncated_calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
        self._by_purpose: dict[str, dict[str, int]] = {}
        for record in read_jsonl(self.path):
            if record.get("method") != method:
                continue
            usage = record.get("usage") or {}
            key = (record["purpose"], record["prompt_sha256"], int(record["occurrence"]))
            self._replays[key] = _Replay(
                record.get("reply") if record.get("ok") else None,
                int(usage.get("prompt_tokens", 0)),
                int(usage.get("completion_tokens", 0)),
                record.get("finish_reason") == TRUNCATED,
            )

    @classmethod
    def from_context(cls, ctx: Any, method: str, **options: Any) -> ReflectionModel:
        if ctx.reflection is None:
            raise OptimizerInfrastructureError(f"{method} needs a reflection model, but the job has none")
        return cls(
            ctx.reflection,
            method=method,
            workdir=ctx.workdir,
            seed=ctx.seed,
            decoding=getattr(ctx, "reflection_decoding", None),
            **options,
        )

    # ---------------------------------------------------------------- calls

    def system_for(self, purpose: str) -> str:
        """The system prompt of a purpose; its ``Task: method/purpose.`` tag names the request."""
        return f"{self.system_intro} Task: {self.method}/{purpose}."

    async def ask(
        self,
        prompt: str,
        *,
        purpose: str,
        temperature: float | None = None,
        max_tokens: int | None = None,
        top_p: float | None = None,
        system: str | None = None,
        keep_cut: bool = False,
        extra_body: Mapping[str, Any] | None = None,
    ) -> str | None:
        """The reply text, or None when the call failed (after the client's own retries).

        ``system`` replaces the purpose's system prompt (e.g. a probe that runs a candidate role
        prompt as the system message, a method's own system text); ``""`` sends no system
        message at all (``optimizers.surfaces.NO_SYSTEM``). It is part of the journal key. ``keep_cut``: a reply cut at
        the token limit is returned (counted as truncated, not failed). ``extra_body``: request
        fields for the endpoint (e.g. vLLM's ``chat_template_kwargs``)."""
        system = self.system_for(purpose) if system is None else system
        digest = prompt_hash(purpose, system, prompt)
        with self._lock:
            occurrence = self._occurrences.get((purpose, digest), 0)
            self._occurrences[(purpose, digest)] = occurrence + 1
            replay = self._replays.pop((purpose, digest, occurrence), None)
        if replay is not None:
            self._count(purpose, "replayed_calls", replay.prompt_tokens, replay.completion_tokens,
                        failed=replay.reply is None, truncated=replay.truncated)
            return replay.reply
        seed = logical_seed(self.method, self.seed, purpose, digest, occurrence)
        decoding = self._decoding(temperature, max_tokens, seed, top_p)
        started = time.monotonic()
        reply: str | None = None
        error: str | None = None
        finish: str | None = None
        cut_text: str | None = None
        prompt_tokens = completion_tokens = 0
        try:
            message = await self.client.complete(
                f"reflection/{self.method}/{purpose}",
                [*([{"role": "system", "content": system}] if system else []), {"role": "user", "content": prompt}],
                decoding=decoding,
                **({"extra_body": dict(extra_body)} if extra_body else {}),
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of the model call is a failed reflection
            if _is_programming_error(exc):
                raise
            error = f"{type(exc).__name__}: {exc}"[:500]
        else:
            content = getattr(message, "content", message)
            reply = content if isinstance(content, str) else json.dumps(content, default=str)
            meta = getattr(message, "usage_metadata", None) or {}
            prompt_tokens = int(meta.get("input_tokens", 0) or 0)
            completion_tokens = int(meta.get("output_tokens", 0) or 0)
            finish = finish_reason_of(message)
            if finish == TRUNCATED and keep_cut:
                cut_text = reply
            elif finish == TRUNCATED:
                cut_text, reply = reply, None
                error = f"reply cut at the token limit ({decoding.max_tokens} tokens)"
        self._journal.append({
            "schema": 1,
            "method": self.method,
            "purpose": purpose,
            "prompt_sha256": digest,
            "occurrence": occurrence,
            "seed": seed,
            "temperature": decoding.temperature,
            "max_tokens": decoding.max_tokens,
            "prompt": prompt,
            "reply": reply,
            "ok": reply is not None,
            "error": error,
            "finish_reason": finish,
            **({"truncated_reply": cut_text} if cut_text is not None and reply is None else {}),
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
            "latency_s": round(time.monotonic() - started, 4),
            "time": time.time(),
        })
        self._count(purpose, "live_calls", prompt_tokens, completion_tokens, failed=reply is None,
                    truncated=cut_text is not None)
        if reply is None:
            self._note_failure(error or "unknown error")
        else:
            with self._lock:
                self._consecutive_failures = 0
        return reply

    def ask_blocking(self, loop: asyncio.AbstractEventLoop, prompt: str, *, purpose: str, **options: Any) -> str | None:
        """``ask`` from a worker thread, run on ``loop`` (the job's event loop)."""
        future = asyncio.run_coroutine_threadsafe(self.ask(prompt, purpose=purpose, **options), loop)
        return future.result()

    def _decoding(self, temperature: float | None, max_tokens: int | None, seed: int,
                  top_p: float | None = None) -> Any:
        from topologies.types import Decoding

        return Decoding(
            temperature=float(self.decoding["temperature"] if temperature is None else temperature),
            top_p=float(self.decoding["top_p"] if top_p is None else top_p),
            max_tokens=int(self.decoding["max_tokens"] if max_tokens is None else max_tokens),
            seed=seed,
        )

    def _count(self, purpose: str, kind: str, prompt_tokens: int, completion_tokens: int, *, failed: bool,
               truncated: bool = False) -> None:
        with self._lock:
            for table in (self._totals, self._by_purpose.setdefault(purpose, {})):
                table["calls"] = table.get("calls", 0) + 1
                table[kind] = table.get(kind, 0) + 1
                table["prompt_tokens"] = table.get("prompt_tokens", 0) + prompt_tokens
                table["completion_tokens"] = table.get("completion_tokens", 0) + completion_tokens
                table.setdefault("truncated_calls", 0)
                if failed:
                    table["failed_calls"] = table.get("failed_calls", 0) + 1
                if truncated:
                    table["truncated_calls"] += 1

    def _note_failure(self, error: str) -> None:
        with self._lock:
            self._consecutive_failures += 1
            failures = self._consecutive_failures
        if failures >= self.max_consecutive_failures:
            raise ReflectionUnavailable(
                f"the {self.label} failed {failures} times in a row (last: {error})"
            )

    # ---------------------------------------------------------------- reporting

    def usage(self) -> dict[str, Any]:
        """Totals over this job (replayed calls count with their journaled tokens)."""
        with self._lock:
            totals = dict(self._totals)
            totals["total_tokens"] = totals["prompt_tokens"] + totals["completion_tokens"]
            totals["by_purpose"] = {k: dict(v) for k, v in sorted(self._by_purpose.items())}
            totals["journal"] = self.path.name
            return totals


def _is_programming_error(exc: Exception) -> bool:
    return isinstance(exc, (TypeError, AttributeError, NameError, AssertionError))


# ------------------------------------------------------------------------------------------------
# Reply parsing

_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)


def extract_fenced(text: str | None) -> str | None:
    """The content of the longest fenced block (``` ... ```), or None."""
    if not text:
        return None
    blocks = [b.strip() for b in _FENCE.findall(text)]
    blocks = [b for b in blocks if b]
    return max(blocks, key=len) if blocks else None


def extract_json(text: str | None) -> Any | None:
    """The first JSON object or array in ``text`` (fenced or bare), or None."""
    if not text:
        return None
    candidates = [b for b in _FENCE.findall(text)] + [text]
    decoder = json.JSONDecoder()
    for candidate in candidates:
        stripped = candidate.strip()
        try:
            return json.loads(stripped)
        except ValueError:
            pass
        for index, char in enumerate(stripped):
            if char in "{[":
                try:
                    value, _ = decoder.raw_decode(stripped, index)
                except ValueError:
                    continue
                return value
    return None


def string_list(value: Any, *, limit: int = 20, chars: int = 600) -> list[str]:
    """A clean list of non-empty strings from a JSON value that should be one."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Sequence):
        return []
    out = []
    for item in value:
        if isinstance(item, Mapping):
            item = item.get("text") or item.get("suggestion") or item.get("rule") or ""
        text = " ".join(str(item).split())
        if text and text not in out:
            out.append(text[:chars])
        if len(out) >= limit:
            break
    return out


# ------------------------------------------------------------------------------------------------
# Prompt material


def clip(text: str | None, limit: int) -> str:
    """``text`` cut to about ``limit`` characters, keeping its head and tail."""
    text = text or ""
    if len(text) <= limit:
        return text
    head = max(0, limit * 2 // 3)
    tail = max(0, limit - head)
    return f"{text[:head]}\n[... {len(text) - head - tail} characters cut ...]\n{text[len(text) - tail:]}"


def task_text(trace: Sequence[Mapping[str, Any]], limit: int = 2000) -> str:
    """The problem as the team saw it: the first user message of a trace."""
    for message in trace:
        if message.get("kind") == "user":
            return clip(str(message.get("content", "")), limit)
    return ""


def speaker(message: Mapping[str, Any]) -> str:
    agent = message.get("agent") or ""
    source = str(message.get("source", ""))
    return f"{source} ({agent})" if agent and agent != source else source


def render_message(message: Mapping[str, Any], limit: int) -> str:
    calls = message.get("tool_calls") or ()
    suffix = f"\n[calls tools: {', '.join(map(str, calls))}]" if calls else ""
    if message.get("finish_reason") == TRUNCATED:
        suffix += "\n[this reply was cut off at the token limit]"
    return f"[{speaker(message)} | {message.get('kind', '')}]\n{clip(str(message.get('content', '')), limit)}{suffix}"


def render_trace(
    trace: Sequence[Mapping[str, Any]], *, role: str | None = None, each: int = 1500, total: int = 6000
) -> str:
    """Messages of a trace (only ``role``'s own turns when given), newest kept when too long."""
    messages = [m for m in trace if m.get("kind") != "system" and (role is None or m.get("source") == role)]
    if role is None:
        messages = [m for m in messages if not (m.get("kind") == "user" and m is _first_user(trace))]
    rendered = [render_message(m, each) for m in messages]
    out: list[str] = []
    size = 0
    for text in reversed(rendered):
        if size + len(text) > total and out:
            out.append(f"[... {len(rendered) - len(out)} earlier message(s) cut ...]")
            break
        out.append(text)
        size += len(text)
    return "\n\n".join(reversed(out))


def tagged_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """One message of a trajectory as the reflection model reads it: who sent it (role prompt and
    agent), what kind it is and its whole content (tool calls and a cut-off flag when present)."""
    out: dict[str, Any] = {"source": str(message.get("source", "")), "kind": str(message.get("kind", ""))}
    if message.get("agent") and message.get("agent") != message.get("source"):
        out["agent"] = str(message["agent"])
    out["content"] = str(message.get("content", "") or "")
    if message.get("tool_calls"):
        out["tool_calls"] = message["tool_calls"]
    if message.get("finish_reason") == TRUNCATED:
        out["cut_at_token_limit"] = True
    return out


def team_trajectory(trace: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every message the team saw or wrote, in order, whole; system messages (the candidate's
    own prompts, which the proposal prompt already shows) are left out."""
    return [tagged_message(m) for m in trace if m.get("kind") != "system"]


def _first_user(trace: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    return next((m for m in trace if m.get("kind") == "user"), None)


def roles_in_trace(trace: Sequence[Mapping[str, Any]]) -> list[str]:
    seen: list[str] = []
    for message in trace:
        if message.get("kind") == "ai" and message.get("source") not in seen:
            seen.append(str(message.get("source")))
    return seen


def outcome_line(rollout: Any) -> str:
    """Score plus our verdict feedback (counts and outcome kinds; never hidden-test content)."""
    verdict = getattr(rollout, "verdict", {}) or {}
    head = f"score {rollout.score:g}"
    if verdict:
        head += f" (outcome {verdict.get('outcome')}, passed {verdict.get('passed')}/{verdict.get('total')})"
    feedback = (getattr(rollout, "feedback", "") or "").strip()
    return f"{head}\n{feedback}" if feedback else head


def team_description(role_names: Sequence[str], agents: int | None = None) -> str:
    """``a single agent (solver)`` / ``a team of 2 agents sharing the role prompt(s): debater``."""
    if agents is None or agents < len(role_names):
        agents = len(role_names)
    if agents == 1:
        return f"a single agent ({role_names[0]})"
    shared = " sharing" if agents > len(role_names) else " with"
    return f"a team of {agents} agents{shared} the role prompt(s): {', '.join(role_names)}"


def agents_in_trace(trace: Sequence[Mapping[str, Any]]) -> int:
    """How many distinct agents spoke (several agents may share one role prompt)."""
    return len({(m.get("source"), m.get("agent")) for m in trace if m.get("kind") == "ai"})




# ------------------------------------------------------------------------------------------------
# Shared by the reflective methods: knobs and rollout checks


def params_from(cls: type, values: Mapping[str, Any], method: str) -> Any:
    """A frozen params dataclass from ``ctx.method_params``; unknown keys are refused (typos)."""
    import dataclasses

    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ValueError(f"{method}: unknown parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(fields))}")
    converted: dict[str, Any] = {}
    for name, value in values.items():
        default = fields[name].default
        if value is None or default is None or isinstance(default, str):
            converted[name] = value
        elif isinstance(default, bool):
            if isinstance(value, str):
                value = value.strip().lower() in ("1", "true", "yes", "on")
            converted[name] = bool(value)
        elif isinstance(default, (int, float)):
            try:
                converted[name] = type(default)(value)
            except (TypeError, ValueError):
                raise ValueError(f"{method}: parameter {name} must be a number, not {value!r}") from None
        else:
            converted[name] = value
    params = cls(**converted)
    check = getattr(params, "check", None)
    if check is not None:
        check()
    return params


class RolloutGuard:
    """Counts rollouts that stayed unusable after the evaluator's retries (infrastructure).

    More than ``tolerance`` of them means the search is looking at noise, so the method stops
    with ``OptimizerInfrastructureError`` (the job then deploys the seed, infrastructure_invalid).
    """

    def __init__(self, method: str, tolerance: int = 0) -> None:
        self.method = method
        self.tolerance = tolerance
        self.unusable = 0
        self.exhausted = 0

    def check(self, rollouts: Sequence[Any]) -> None:
        for rollout in rollouts:
            if rollout.budget_exhausted:
                self.exhausted += 1
            elif not rollout.usable:
                self.unusable += 1
        if self.unusable > self.tolerance:
            raise OptimizerInfrastructureError(
                f"{self.method}: {self.unusable} rollout(s) failed for infrastructure reasons after retries"
            )


def record_step(ctx: Any, method: str, history: list[dict[str, Any]], row: Mapping[str, Any],
                state: Mapping[str, Any]) -> None:
    """Append a history row (stamped with the charged budget), send its numbers to the tracker
    as ``<method>/<key>`` and save the method's JSON state (``<method>.json``) with the history."""
    row = {**row, "charged": ctx.budget.charged}
    history.append(row)
    ctx.tracker.log(row["charged"], {f"{method}/{k}": v for k, v in row.items()
                                     if isinstance(v, (int, float)) and not isinstance(v, bool)})
    ctx.save_state(method, {"history": history, **state})


def mean_score(rollouts: Sequence[Any]) -> float | None:
    """Mean score over usable rollouts; None when any was not run (budget) or none is usable."""
    if not rollouts or any(r.budget_exhausted for r in rollouts):
        return None
    usable = [r for r in rollouts if r.usable]
    return sum(r.score for r in usable) / len(usable) if usable else None


async def gather_limited(limit: asyncio.Semaphore, coroutines: Sequence[Any]) -> list[Any]:
    """Run coroutines at most ``limit`` at a time; results in input order."""

    async def one(coroutine: Any) -> Any:
        async with limit:
            return await coroutine

    tasks = [asyncio.ensure_future(one(c)) for c in coroutines]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        raise
