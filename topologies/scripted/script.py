"""The script of the scripted model server: ordered rules that answer chat requests.

A script is data (frozen dataclasses, or a YAML/JSON file for the process form) plus, in-process,
optional Python callables. For every request the server walks the rules in order; the first rule
whose conditions hold answers. Conditions look at the request's text (system prompt, last user
message, any message), whether tools are offered, and a per-rule call counter. A rule may inject
faults (HTTP status, hang, malformed or truncated body) and latency, so the client's retry and
timeout paths can be exercised deterministically.

Counter semantics (one number per rule, 1-based):
- ``seen``: how many requests so far satisfied the rule's text conditions, whether or not the rule
  answered them. ``Match.calls`` filters on this number, so "the 2nd request that looks like X"
  is expressible with two rules sharing the same conditions.
- ``answered``: how many requests this rule answered (faults included). ``Fault.first`` and
  ``Fault.pattern`` count on this number, so "fail the first 2 attempts, then succeed" makes the
  retries of one logical call hit the same rule and succeed on the 3rd attempt.
Global faults (``Script.faults``) count on the global request number.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any


class ScriptError(ValueError):
    """A script that cannot be used (bad file, unknown key, bad regex)."""


# --------------------------------------------------------------------------------------------
# The request as rules see it


def _text_of(content: Any) -> str:
    """OpenAI message content is a string or a list of parts; rules match on the text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping):
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return str(content)


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A parsed ``/v1/chat/completions`` body with the texts rules match on."""

    body: Mapping[str, Any]
    number: int  # 1-based position among all requests this server received
    system: str
    last_user: str
    all_text: str
    tool_names: tuple[str, ...]

    @property
    def has_tools(self) -> bool:
        return bool(self.tool_names)

    @property
    def messages(self) -> list[Mapping[str, Any]]:
        return list(self.body.get("messages") or [])

    @classmethod
    def from_body(cls, body: Mapping[str, Any], number: int) -> ChatRequest:
        system_parts: list[str] = []
        all_parts: list[str] = []
        last_user = ""
        for message in body.get("messages") or []:
            if not isinstance(message, Mapping):
                continue
            text = _text_of(message.get("content"))
            role = message.get("role")
            if role in ("system", "developer"):
                system_parts.append(text)
            elif role == "user":
                last_user = text
            for call in message.get("tool_calls") or []:
                function = call.get("function") if isinstance(call, Mapping) else None
                if isinstance(function, Mapping):
                    text += f"\n{function.get('name', '')}({function.get('arguments', '')})"
            all_parts.append(text)
        tool_names = []
        for tool in body.get("tools") or []:
            function = tool.get("function") if isinstance(tool, Mapping) else None
            if isinstance(function, Mapping) and isinstance(function.get("name"), str):
                tool_names.append(function["name"])
        return cls(
            body=body,
            number=number,
            system="\n".join(system_parts),
            last_user=last_user,
            all_text="\n".join(all_parts),
            tool_names=tuple(tool_names),
        )


# --------------------------------------------------------------------------------------------
# Conditions


def _parse_calls(spec: Any) -> Callable[[int], bool] | None:
    """``3`` (exactly the 3rd), ``[1, 2]``, ``"3+"`` (3rd and later), ``"2-4"`` (inclusive)."""
    if spec is None:
        return None
    if isinstance(spec, bool):
        raise ScriptError(f"calls: expected a number, list or range string, got {spec!r}")
    if isinstance(spec, int):
        return lambda k: k == spec
    if isinstance(spec, (list, tuple, set, frozenset)):
        allowed = frozenset(int(k) for k in spec)
        return lambda k: k in allowed
    if isinstance(spec, str):
        text = spec.replace(" ", "")
        if m := re.fullmatch(r"(\d+)\+", text):
            low = int(m.group(1))
            return lambda k: k >= low
        if m := re.fullmatch(r"(\d+)-(\d+)", text):
            low, high = int(m.group(1)), int(m.group(2))
            return lambda k: low <= k <= high
        if text.isdigit():
            exact = int(text)
            return lambda k: k == exact
    raise ScriptError(f"calls: cannot read {spec!r} (use 3, [1, 2], '3+' or '2-4')")


def _compile(pattern: str | None, what: str) -> re.Pattern[str] | None:
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ScriptError(f"{what}: bad regular expression {pattern!r}: {exc}") from None


@dataclass(frozen=True, slots=True)
class Hit:
    """What a matching rule learned from the request: used to fill reply templates."""

    groups: tuple[str, ...] = ()  # groups of the last regex condition that matched
    matched: str = ""  # the text that regex matched


@dataclass(frozen=True, slots=True)
class Match:
    """Conditions of a rule; all given ones must hold. Substrings are case-sensitive."""

    system: str | None = None
    system_regex: str | None = None
    user: str | None = None  # in the last user message
    user_regex: str | None = None
    any: str | None = None  # in any message (tool results and tool-call arguments included)
    any_regex: str | None = None
    has_tools: bool | None = None
    tool: str | None = None  # a tool with this name is offered
    model: str | None = None
    calls: Any = None  # see _parse_calls; counts requests that satisfied the other conditions
    _regexes: tuple[tuple[str, re.Pattern[str]], ...] = field(
        init=False, repr=False, compare=False, default=()
    )
    _calls: Callable[[int], bool] | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        regexes = []
        for attribute, source in (
            ("system_regex", "system"),
            ("any_regex", "all_text"),
            ("user_regex", "last_user"),
        ):
            compiled = _compile(getattr(self, attribute), attribute)
            if compiled is not None:
                regexes.append((source, compiled))
        object.__setattr__(self, "_regexes", tuple(regexes))
        object.__setattr__(self, "_calls", _parse_calls(self.calls))

    def conditions_hold(self, request: ChatRequest) -> Hit | None:
        """The text conditions (everything but ``calls``); a Hit when they all hold."""
        if self.system is not None and self.system not in request.system:
            return None
        if self.user is not None and self.user not in request.last_user:
            return None
        if self.any is not None and self.any not in request.all_text:
            return None
        if self.has_tools is not None and self.has_tools != request.has_tools:
            return None
        if self.tool is not None and self.tool not in request.tool_names:
            return None
        if self.model is not None and self.model != request.body.get("model"):
            return None
        hit = Hit()
        for source, regex in self._regexes:
            found = regex.search(getattr(request, source))
            if found is None:
                return None
            hit = Hit(groups=tuple(g or "" for g in found.groups()), matched=found.group(0))
        return hit

    def calls_allow(self, seen: int) -> bool:
        return self._calls is None or self._calls(seen)


# --------------------------------------------------------------------------------------------
# Replies

_TEMPLATE = re.compile(r"\{\{\s*([a-z_]+(?:\.\d)?)\s*\}\}")


def _fill(text: str, request: ChatRequest, hit: Hit, call: int) -> str:
    """Replace the known ``{{name}}`` fields; anything else (e.g. f-string braces) stays as is."""

    def value(m: re.Match[str]) -> str:
        key = m.group(1)
        if key.startswith("match."):
            index = int(key[6:])
            if index == 0:
                return hit.matched
            return hit.groups[index - 1] if index <= len(hit.groups) else m.group(0)
        fields = {
            "match": lambda: hit.matched,
            "user": lambda: request.last_user,
            "system": lambda: request.system,
            "model": lambda: str(request.body.get("model", "")),
            "call": lambda: str(call),
            "request": lambda: str(request.number),
        }
        getter = fields.get(key)
        return getter() if getter is not None else m.group(0)

    return _TEMPLATE.sub(value, text) if "{{" in text else text


def _fill_value(value: Any, request: ChatRequest, hit: Hit, call: int) -> Any:
    if isinstance(value, str):
        return _fill(value, request, hit, call)
    if isinstance(value, Mapping):
        return {k: _fill_value(v, request, hit, call) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_fill_value(v, request, hit, call) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A function call in a reply; ``arguments`` is a mapping (sent as JSON) or raw JSON text."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Reply:
    """An assistant answer. Strings may use ``{{user}}``, ``{{system}}``, ``{{model}}``,
    ``{{call}}`` (this rule's answer count), ``{{request}}`` (global request number),
    ``{{match}}`` / ``{{match.N}}`` (the last regex condition's match / group N)."""

    content: str | None = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None  # default: "tool_calls" when there are calls, else "stop"
    template: bool = True

    def render(self, request: ChatRequest, hit: Hit, call: int) -> Reply:
        if not self.template:
            return self
        content = None if self.content is None else _fill(self.content, request, hit, call)
        calls = tuple(
            ToolCall(c.name, _fill_value(c.arguments, request, hit, call)) for c in self.tool_calls
        )
        return Reply(content, calls, self.finish_reason, template=False)


def as_reply(value: Reply | str | Mapping[str, Any]) -> Reply:
    """What callables may return: a Reply, plain content, or a reply mapping (file form)."""
    if isinstance(value, Reply):
        return value
    if isinstance(value, str):
        return Reply(content=value)
    if isinstance(value, Mapping):
        return _reply_from_dict(value, "reply")
    raise ScriptError(f"a rule returned {type(value).__name__}; expected Reply, str or dict")


# --------------------------------------------------------------------------------------------
# Faults


class FaultKind(StrEnum):
    STATUS = "status"  # an HTTP error status with an OpenAI-style error body
    HANG = "hang"  # never answer (until the client gives up or the server stops)
    MALFORMED = "malformed"  # 200 with a body that is not JSON
    TRUNCATED = "truncated"  # 200, Content-Length promises more than is sent, then close
    EMPTY_CHOICES = "empty_choices"  # 200, valid JSON, but no choices


@dataclass(frozen=True, slots=True)
class Fault:
    """A failure injected instead of the answer.

    When it fires: on the first ``first`` counts, or where ``pattern`` (cycled; ``x`` = fire,
    ``.`` = pass) says so, or always when neither is given.
    """

    kind: FaultKind = FaultKind.STATUS
    status: int = 503
    first: int | None = None
    pattern: str | None = None
    message: str = "injected fault"

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", FaultKind(self.kind))
        if self.pattern is not None and (
            not self.pattern or set(self.pattern) - set("xX.")
        ):
            raise ScriptError(f"fault pattern {self.pattern!r}: use only 'x' and '.'")

    def fires(self, count: int) -> bool:
        if self.first is not None:
            return count <= self.first
        if self.pattern is not None:
            return self.pattern[(count - 1) % len(self.pattern)] in "xX"
        return True


# --------------------------------------------------------------------------------------------
# Rules and scripts

Responder = Callable[[ChatRequest, Hit], "Reply | str | Mapping[str, Any]"]


@dataclass(frozen=True, slots=True)
class Rule:
    """Answer with ``reply`` (a Reply or a callable of the request) when ``match`` holds."""

    name: str
    match: Match = field(default_factory=Match)
    reply: Reply | Responder = field(default_factory=Reply)
    faults: tuple[Fault, ...] = ()
    latency_s: float = 0.0

    def respond(self, request: ChatRequest, hit: Hit, call: int) -> Reply:
        if isinstance(self.reply, Reply):
            return self.reply.render(request, hit, call)
        return as_reply(self.reply(request, hit))


@dataclass(frozen=True, slots=True)
class FunctionRule:
    """A rule that is a Python callable: returns the answer, or None when it does not apply."""

    name: str
    function: Callable[[ChatRequest], Reply | str | Mapping[str, Any] | None]
    faults: tuple[Fault, ...] = ()
    latency_s: float = 0.0


AnyRule = Rule | FunctionRule


@dataclass(frozen=True, slots=True)
class Script:
    """Ordered rules; ``default`` answers when none matches (None: answer HTTP 400, so an
    unscripted call fails loudly as a model error instead of passing silently)."""

    rules: tuple[AnyRule, ...] = ()
    default: Reply | None = field(default_factory=Reply)
    faults: tuple[Fault, ...] = ()
    latency_s: float = 0.0

    def __init__(
        self,
        rules: Iterable[AnyRule | Callable[[ChatRequest], Any]] = (),
        default: Reply | str | None = Reply(),
        faults: Iterable[Fault] = (),
        latency_s: float = 0.0,
    ) -> None:
        normalized: list[AnyRule] = []
        for position, rule in enumerate(rules, start=1):
            if isinstance(rule, (Rule, FunctionRule)):
                normalized.append(rule)
            elif callable(rule):
                name = getattr(rule, "__name__", "") or f"rule{position}"
                normalized.append(FunctionRule(name if name != "<lambda>" else f"rule{position}", rule))
            else:
                raise ScriptError(f"rule {position}: expected Rule, FunctionRule or callable")
        names = [rule.name for rule in normalized]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ScriptError(f"rule names must be unique; repeated: {', '.join(duplicates)}")
        object.__setattr__(self, "rules", tuple(normalized))
        object.__setattr__(self, "default", as_reply(default) if default is not None else None)
        object.__setattr__(self, "faults", tuple(faults))
        object.__setattr__(self, "latency_s", float(latency_s))


@dataclass(frozen=True, slots=True)
class Decision:
    """What the server does with one request."""

    rule: str | None  # None: no rule matched
    reply: Reply | None  # None with fault None: no rule matched and no default
    fault: Fault | None
    latency_s: float


@dataclass(slots=True)
class RuleCounters:
    seen: int = 0
    answered: int = 0
    faults: int = 0


DEFAULT_RULE = "<default>"


class ScriptState:
    """Runs a script: counters live here (the Script itself stays immutable). Not thread-safe;
    the server calls ``decide`` from its single event-loop thread."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests = 0
        self.counters: dict[str, RuleCounters] = {r.name: RuleCounters() for r in script.rules}
        self.counters[DEFAULT_RULE] = RuleCounters()

    def decide(self, body: Mapping[str, Any]) -> tuple[ChatRequest, Decision]:
        self.requests += 1
        request = ChatRequest.from_body(body, self.requests)
        script = self.script
        global_fault = next((f for f in script.faults if f.fires(request.number)), None)
        chosen: tuple[AnyRule, Reply | None, Hit] | None = None
        for rule in script.rules:
            if isinstance(rule, FunctionRule):
                if chosen is not None:
                    continue
                answer = rule.function(request)
                if answer is not None:
                    self.counters[rule.name].seen += 1
                    chosen = (rule, as_reply(answer), Hit())
                continue
            hit = rule.match.conditions_hold(request)
            if hit is None:
                continue
            counters = self.counters[rule.name]
            counters.seen += 1  # every rule whose conditions hold counts the request
            if chosen is None and rule.match.calls_allow(counters.seen):
                chosen = (rule, None, hit)
        if chosen is None:
            counters = self.counters[DEFAULT_RULE]
            counters.seen += 1
            counters.answered += 1
            fault = global_fault
            if fault is not None:
                counters.faults += 1
            return request, Decision(
                DEFAULT_RULE if script.default is not None else None,
                None if fault else (script.default.render(request, Hit(), counters.answered)
                                    if script.default is not None else None),
                fault,
                script.latency_s,
            )
        rule, reply, hit = chosen
        counters = self.counters[rule.name]
        counters.answered += 1
        fault = global_fault or next((f for f in rule.faults if f.fires(counters.answered)), None)
        if fault is not None:
            counters.faults += 1
            reply = None
        elif reply is None:
            reply = rule.respond(request, hit, counters.answered)  # type: ignore[union-attr]
        return request, Decision(rule.name, reply, fault, script.latency_s + rule.latency_s)


# --------------------------------------------------------------------------------------------
# Response bodies (OpenAI chat.completion shape, deterministic)

CREATED = 1_700_000_000  # fixed so responses are byte-for-byte reproducible


def approx_tokens(chars: int) -> int:
    """Deterministic token estimate (about 4 characters a token)."""
    return max(1, math.ceil(chars / 4)) if chars else 0


def _tool_call_payload(reply: Reply, number: int) -> list[dict[str, Any]]:
    calls = []
    for index, call in enumerate(reply.tool_calls):
        arguments = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
        calls.append(
            {
                "id": f"call_{number}_{index}",
                "type": "function",
                "function": {"name": call.name, "arguments": arguments},
            }
        )
    return calls


def usage_of(request: ChatRequest, reply: Reply, tool_calls: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    prompt = approx_tokens(len(request.all_text))
    generated = len(reply.content or "") + sum(
        len(c["function"]["name"]) + len(c["function"]["arguments"]) for c in tool_calls
    )
    completion = approx_tokens(generated)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def completion_body(request: ChatRequest, reply: Reply) -> dict[str, Any]:
    tool_calls = _tool_call_payload(reply, request.number)
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    finish = reply.finish_reason or ("tool_calls" if tool_calls else "stop")
    return {
        "id": f"chatcmpl-scripted-{request.number}",
        "object": "chat.completion",
        "created": CREATED,
        "model": request.body.get("model", "scripted"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": usage_of(request, reply, tool_calls),
    }


def stream_chunks(request: ChatRequest, reply: Reply) -> list[dict[str, Any]]:
    """The same answer as server-sent-event chunks (role+content, tool calls, finish, usage)."""
    body = completion_body(request, reply)
    base = {k: body[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    message = body["choices"][0]["message"]
    delta: dict[str, Any] = {"role": "assistant", "content": message["content"] or ""}
    chunks = [base | {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}]
    for index, call in enumerate(message.get("tool_calls", [])):
        tool_delta = {"tool_calls": [dict(call, index=index)]}
        chunks.append(base | {"choices": [{"index": 0, "delta": tool_delta, "finish_reason": None}]})
    finish = body["choices"][0]["finish_reason"]
    chunks.append(base | {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    options = request.body.get("stream_options") or {}
    if isinstance(options, Mapping) and options.get("include_usage"):
        chunks.append(base | {"choices": [], "usage": body["usage"]})
    return chunks


# --------------------------------------------------------------------------------------------
# Built-in problem solver


def fenced_python(code: str) -> str:
    return f"```python\n{code.strip()}\n```"


def solve_builtin(
    solutions: Mapping[str, str],
    *,
    name: str = "solve_builtin",
    where: str = "any",
    prefix: str = "",
) -> FunctionRule:
    """A rule that recognises which problem a request is about and answers with its solution.

    ``solutions`` maps a distinctive substring of a problem's statement (or its title or id, when
    those appear in the prompt) to the solution code. The longest key found wins, so a short key
    that happens to be inside a longer one cannot shadow it. ``where``: ``"any"`` (all messages),
    ``"user"`` (the last user message) or ``"system"``. Requests about no known problem fall
    through to the next rule.
    """
    sources = {"any": "all_text", "user": "last_user", "system": "system"}
    if where not in sources:
        raise ScriptError(f"solve_builtin: where must be one of {sorted(sources)}, got {where!r}")
    if not solutions:
        raise ScriptError("solve_builtin: no solutions given")
    source = sources[where]
    keys = sorted(solutions, key=len, reverse=True)
    answers = {key: (prefix + fenced_python(solutions[key])) for key in keys}

    def solve(request: ChatRequest) -> str | None:
        text = getattr(request, source)
        for key in keys:
            if key in text:
                return answers[key]
        return None

    return FunctionRule(name, solve)


def builtin_answers(
    is_solved: Callable[[ChatRequest, str], bool],
    *,
    text: Callable[[ChatRequest], str] | None = None,
) -> Callable[[ChatRequest], str | None]:
    """An answer function for requests about a built-in problem (lcb/builtin): its reference
    program when ``is_solved(request, problem_id)``, else its real but wrong program; None for
    requests about no built-in problem. ``text`` picks where to look (default: every message)."""
    from lcb.builtin import load_solutions
    from lcb.data import load_problems

    solutions = load_solutions()
    # The statement's opening identifies the problem and survives every team's prompt layout.
    keys = {problem.id: problem.statement[:80] for problem in load_problems("builtin").problems}
    read = text or (lambda request: request.all_text)

    def answer(request: ChatRequest) -> str | None:
        body = read(request)
        for problem_id, key in keys.items():
            if key in body:
                return fenced_python(solutions[problem_id]["correct" if is_solved(request, problem_id) else "wrong"])
        return None

    return answer


# --------------------------------------------------------------------------------------------
# File form (YAML or JSON)

_MATCH_KEYS = frozenset(Match.__dataclass_fields__) - {"_regexes", "_calls"}
_RULE_KEYS = frozenset({"name", "when", "reply", "faults", "latency_s", "solutions", "where", "prefix"})
_REPLY_KEYS = frozenset({"content", "tool_calls", "finish_reason", "template"})
_FAULT_KEYS = frozenset({"kind", "status", "first", "pattern", "message"})
_SCRIPT_KEYS = frozenset({"rules", "default", "faults", "latency_s"})


def _check_keys(data: Any, allowed: frozenset[str], where: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ScriptError(f"{where}: expected a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ScriptError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
    return data


def _reply_from_dict(data: Any, where: str) -> Reply:
    if isinstance(data, str):
        return Reply(content=data)
    data = _check_keys(data, _REPLY_KEYS, where)
    calls = []
    for index, call in enumerate(data.get("tool_calls") or []):
        call = _check_keys(call, frozenset({"name", "arguments"}), f"{where}.tool_calls[{index}]")
        if not isinstance(call.get("name"), str):
            raise ScriptError(f"{where}.tool_calls[{index}]: 'name' (a string) is required")
        calls.append(ToolCall(call["name"], call.get("arguments") or {}))
    return Reply(
        content=data.get("content", "" if not calls else None),
        tool_calls=tuple(calls),
        finish_reason=data.get("finish_reason"),
        template=bool(data.get("template", True)),
    )


def _fault_from_dict(data: Any, where: str) -> Fault:
    data = _check_keys(data, _FAULT_KEYS, where)
    try:
        return Fault(**data)
    except ValueError as exc:
        raise ScriptError(f"{where}: {exc}") from None


def _rule_from_dict(data: Any, position: int) -> AnyRule:
    where = f"rules[{position}]"
    data = _check_keys(data, _RULE_KEYS, where)
    name = str(data.get("name") or f"rule{position + 1}")
    faults = tuple(_fault_from_dict(f, f"{where}.faults[{i}]") for i, f in enumerate(data.get("faults") or []))
    latency = float(data.get("latency_s", 0.0))
    if "solutions" in data:
        built = solve_builtin(
            data["solutions"], name=name, where=data.get("where", "any"), prefix=data.get("prefix", "")
        )
        return FunctionRule(built.name, built.function, faults, latency)
    when = _check_keys(data.get("when") or {}, _MATCH_KEYS, f"{where}.when")
    return Rule(
        name=name,
        match=Match(**when),
        reply=_reply_from_dict(data.get("reply", {}), f"{where}.reply"),
        faults=faults,
        latency_s=latency,
    )


def script_from_dict(data: Any) -> Script:
    data = _check_keys(data, _SCRIPT_KEYS, "script")
    rules = [_rule_from_dict(rule, i) for i, rule in enumerate(data.get("rules") or [])]
    default_data = data.get("default", {})
    default = None if default_data is None else _reply_from_dict(default_data, "default")
    faults = [_fault_from_dict(f, f"faults[{i}]") for i, f in enumerate(data.get("faults") or [])]
    return Script(rules, default=default, faults=faults, latency_s=float(data.get("latency_s", 0.0)))


def load_script(path: str | Path) -> Script:
    """Read a script from a ``.yaml``/``.yml`` or ``.json`` file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScriptError(f"cannot read script {path}: {exc.strerror or exc}") from None
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except (ValueError, ImportError) as exc:  # yaml.YAMLError subclasses Exception only
        raise ScriptError(f"cannot parse script {path}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - yaml errors; report them in one line
        raise ScriptError(f"cannot parse script {path}: {' '.join(str(exc).split())}") from None
    return script_from_dict(data or {})
