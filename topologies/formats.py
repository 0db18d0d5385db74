"""Communication formats: what agents are asked to write, and how hand-offs are re-rendered.

Three formats (reference spec §5.1): ``freeform`` (control: raw text passes unchanged),
``semi_structured`` (tagged sections) and ``structured_soft`` (a ``JSON_REPORT:`` object). For the
two structured formats a contract text is appended to every agent's system prompt and every
hand-off is re-rendered into the format before the receiver sees it.

Unlike the reference, re-rendering never truncates code: every fenced code block of the sender's
text is carried verbatim; only prose is clipped. So a format study measures the format, not
information loss. Parse metrics (did agents follow the format?) are collected per run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from topologies.types import CommunicationFormat

SUMMARY_CHARS = 600
SECTION_CHARS = 1500
PROSE_CHARS = 3000

STATUSES = ("not_started", "in_progress", "completed", "blocked")
CONFIDENCES = ("low", "medium", "high")
SEMI_REQUIRED = ("STATUS", "SUMMARY", "EVIDENCE_OR_TESTS", "CONFIDENCE", "NEXT")
SEMI_OPTIONAL = ("APPROACH", "COMPLEXITY", "EDGE_CASES", "CODE_STATUS")
JSON_REQUIRED = ("status", "summary", "confidence", "next", "payload")
# Payload keys whose string values are programs: never clipped.
CODE_KEYS = frozenset({"code", "program", "solution", "final_code"})

_FENCE = re.compile(r"```([\w+#.-]*)[ \t]*\n(.*?)\n?[ \t]*```", re.DOTALL)
_SEMI_TAG = re.compile(r"^[ \t]*\[([A-Z_]+)\][ \t]*(.*)$")
_MARKER = re.compile(r"\[code block \d+ below\]")

_SEMI_CONTRACT = """## Report format (semi-structured)
Whenever your reply is passed to a teammate, start it with a tagged report, each tag at the start
of its own line followed by its content:
[STATUS] one of not_started | in_progress | completed | blocked
[SUMMARY] what you did or concluded, in one or two sentences
[EVIDENCE_OR_TESTS] what you ran or checked, with the observed results
[CONFIDENCE] low | medium | high, with a short reason
[NEXT] what the next teammate should do
Optional tags when relevant: [APPROACH] [COMPLEXITY] [EDGE_CASES] [CODE_STATUS].
Put any program after the report, in a fenced python block; it is passed on verbatim."""

_STRUCTURED_CONTRACT = """## Report format (structured)
Whenever your reply is passed to a teammate, start it with a line `JSON_REPORT:` followed by one
JSON object (no code fence) and then a line `END_JSON_REPORT`. Required keys:
"status" (not_started | in_progress | completed | blocked), "summary" (one or two sentences),
"confidence" (low | medium | high), "next" (what the next teammate should do), "payload" (an object;
useful fields: "approach", "complexity", "edge_cases", "tests" as a list of
{"input", "expected", "observed", "passed"}, "code_status").
Put any program after END_JSON_REPORT, in a fenced python block; it is passed on verbatim."""

_CONTRACTS: Mapping[CommunicationFormat, str] = {
    CommunicationFormat.FREEFORM: "",
    CommunicationFormat.SEMI_STRUCTURED: _SEMI_CONTRACT,
    CommunicationFormat.STRUCTURED_SOFT: _STRUCTURED_CONTRACT,
}


def contract_text(fmt: CommunicationFormat | str) -> str:
    """Text appended to every agent's system prompt (empty for freeform)."""
    return _CONTRACTS[CommunicationFormat(fmt)]


# --------------------------------------------------------------------------- splitting


@dataclass(frozen=True, slots=True)
class CodeBlock:
    language: str
    body: str

    def fenced(self) -> str:
        return f"```{self.language}\n{self.body}\n```"


def split_code(text: str) -> tuple[str, tuple[CodeBlock, ...]]:
    """Separate prose from fenced code blocks; each block leaves a marker in the prose."""
    blocks: list[CodeBlock] = []

    def keep(match: re.Match[str]) -> str:
        blocks.append(CodeBlock(match.group(1).strip(), match.group(2)))
        return f"[code block {len(blocks)} below]"

    prose = _FENCE.sub(keep, text)
    return prose, tuple(blocks)


def clip(text: str, limit: int) -> str:
    """Clip prose to ``limit`` characters, saying how much was dropped."""
    text = text.strip()
    if len(text) <= limit:
        return text
    return f"{text[:limit].rstrip()} …[{len(text) - limit} more characters clipped]"


def collapse(text: str) -> str:
    return " ".join(text.split())


# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True, slots=True)
class ReportParse:
    """Whether a text follows the format; ``fields`` holds what was read."""

    ok: bool
    fields: Mapping[str, Any] = field(default_factory=dict)
    errors: tuple[str, ...] = ()


def _parse_semi(text: str) -> ReportParse:
    prose, _ = split_code(text)
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in prose.splitlines():
        match = _SEMI_TAG.match(line)
        if match and match.group(1) in SEMI_REQUIRED + SEMI_OPTIONAL:
            current = match.group(1)
            sections[current] = [match.group(2)]
        elif current is not None:
            sections[current].append(line)
    fields = {tag: _MARKER.sub("", "\n".join(lines)).strip() for tag, lines in sections.items()}
    errors = [f"missing or empty [{tag}]" for tag in SEMI_REQUIRED if not fields.get(tag)]
    status = fields.get("STATUS", "").split()
    if status and status[0].lower() not in STATUSES:
        errors.append(f"invalid [STATUS] {status[0]!r}")
    confidence = fields.get("CONFIDENCE", "").split()
    if confidence and confidence[0].lower().strip(",.:;") not in CONFIDENCES:
        errors.append(f"invalid [CONFIDENCE] {confidence[0]!r}")
    return ReportParse(not errors, fields, tuple(errors))


def _find_json_object(text: str) -> tuple[dict[str, Any] | None, str]:
    """The first JSON object after ``JSON_REPORT:`` (or a json fence, or a leading ``{``)."""
    decoder = json.JSONDecoder()
    starts: list[int] = []
    marker = text.find("JSON_REPORT:")
    if marker >= 0:
        brace = text.find("{", marker)
        if brace >= 0:
            starts.append(brace)
    for match in _FENCE.finditer(text):
        if match.group(1).lower() == "json":
            starts.append(match.start(2))
    if text.lstrip().startswith("{"):
        starts.append(len(text) - len(text.lstrip()))
    for start in starts:
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value, ""
    return None, "no JSON_REPORT object found" if not starts else "JSON_REPORT is not valid JSON"


def _parse_structured(text: str) -> ReportParse:
    report, problem = _find_json_object(text)
    if report is None:
        return ReportParse(False, {}, (problem,))
    errors = [f"missing key {key!r}" for key in JSON_REQUIRED if key not in report]
    if str(report.get("status", "")).lower() not in STATUSES and "status" in report:
        errors.append(f"invalid status {report.get('status')!r}")
    confidence = str(report.get("confidence", "")).split()
    if "confidence" in report and (not confidence or confidence[0].lower() not in CONFIDENCES):
        errors.append(f"invalid confidence {report.get('confidence')!r}")
    if "payload" in report and not isinstance(report["payload"], dict):
        errors.append("payload is not an object")
    return ReportParse(not errors, report, tuple(errors))


_PARSERS: Mapping[CommunicationFormat, Callable[[str], ReportParse]] = {
    CommunicationFormat.SEMI_STRUCTURED: _parse_semi,
    CommunicationFormat.STRUCTURED_SOFT: _parse_structured,
}


def parse_report(fmt: CommunicationFormat | str, text: str) -> ReportParse:
    """Does ``text`` follow format ``fmt``? Freeform text always does."""
    parser = _PARSERS.get(CommunicationFormat(fmt))
    return parser(text) if parser else ReportParse(True)


# --------------------------------------------------------------------------- rendering


def _code_tail(blocks: Iterable[CodeBlock], skip_json: bool = False) -> str:
    kept = [b.fenced() for b in blocks if not (skip_json and b.language.lower() == "json")]
    return "\n\n".join(kept)


def _join(*parts: str) -> str:
    return "\n\n".join(part for part in parts if part.strip())


def _render_freeform(sender: str, text: str) -> str:
    return text.strip()


def _render_semi(sender: str, text: str) -> str:
    parsed = _parse_semi(text)
    prose, blocks = split_code(text)
    if parsed.ok:
        lines = [f"[FROM] {sender}"]
        for tag in SEMI_REQUIRED + SEMI_OPTIONAL:
            if tag in parsed.fields and parsed.fields[tag]:
                limit = SUMMARY_CHARS if tag == "SUMMARY" else SECTION_CHARS
                lines.append(f"[{tag}] {clip(parsed.fields[tag], limit)}")
        header = "\n".join(lines)
    else:
        header = "\n".join([
            f"[FROM] {sender}",
            "[FORMAT] the sender's reply did not follow the report format; its text follows",
            f"[SUMMARY] {clip(collapse(prose), SUMMARY_CHARS)}",
            f"[EVIDENCE_OR_TESTS] {clip(prose, PROSE_CHARS)}",
        ])
    return _join(header, _code_tail(blocks))


def _clip_value(key: str, value: Any) -> Any:
    if key in CODE_KEYS:
        return value
    if isinstance(value, str):
        return clip(value, SECTION_CHARS)
    if isinstance(value, dict):
        return {k: _clip_value(k, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clip_value(key, v) for v in value]
    return value


def _render_structured(sender: str, text: str) -> str:
    parsed = _parse_structured(text)
    prose, blocks = split_code(text)
    if parsed.ok:
        report: dict[str, Any] = {"from": sender}
        for key, value in parsed.fields.items():
            limit = SUMMARY_CHARS if key == "summary" else SECTION_CHARS
            report[key] = clip(value, limit) if isinstance(value, str) else _clip_value(key, value)
    else:
        before_report = prose.split("JSON_REPORT:")[0] if "JSON_REPORT:" in prose else prose
        report = {
            "from": sender,
            "format_ok": False,
            "summary": clip(collapse(before_report), SUMMARY_CHARS),
            "text": clip(prose, PROSE_CHARS),
        }
    body = f"JSON_REPORT: {json.dumps(report, ensure_ascii=False)}\nEND_JSON_REPORT"
    return _join(body, _code_tail(blocks, skip_json=parsed.ok))


_RENDERERS: Mapping[CommunicationFormat, Callable[[str, str], str]] = {
    CommunicationFormat.FREEFORM: _render_freeform,
    CommunicationFormat.SEMI_STRUCTURED: _render_semi,
    CommunicationFormat.STRUCTURED_SOFT: _render_structured,
}


def render_message(fmt: CommunicationFormat | str, *, sender: str, text: str) -> str:
    """One hand-off as the receiver sees it. Code blocks always pass verbatim."""
    return _RENDERERS[CommunicationFormat(fmt)](sender, text)


def render_handoffs(
    fmt: CommunicationFormat | str,
    items: Iterable[tuple[str, str]],
    *,
    instruction: str = "",
) -> str:
    """Several hand-offs (``(sender, text)`` pairs) under the editable hand-off instruction."""
    sections = [
        f"=== From {sender} ===\n{render_message(fmt, sender=sender, text=text) or '(no reply)'}"
        for sender, text in items
    ]
    return _join(instruction.strip(), *sections)


# --------------------------------------------------------------------------- metrics


@dataclass(slots=True)
class FormatMetrics:
    """Counts how many of the agents' own replies followed the format (one per run)."""

    fmt: CommunicationFormat
    reports: int = 0
    parsed: int = 0
    handoffs: int = 0
    errors: list[str] = field(default_factory=list)

    def observe(self, agent: str, text: str) -> None:
        """Check one reply an agent wrote (freeform is not checked)."""
        if self.fmt is CommunicationFormat.FREEFORM:
            return
        result = parse_report(self.fmt, text)
        self.reports += 1
        if result.ok:
            self.parsed += 1
        elif len(self.errors) < 20:
            self.errors.append(f"{agent}: {'; '.join(result.errors)}")

    def to_dict(self) -> dict[str, Any]:
        checked = self.fmt is not CommunicationFormat.FREEFORM
        return {
            "communication_format": self.fmt.value,
            "reports": self.reports,
            "parsed": self.parsed,
            "parse_rate": (self.parsed / self.reports) if checked and self.reports else None,
            "parse_ok": (self.parsed > 0) if checked else None,
            "all_parse_ok": (self.reports > 0 and self.parsed == self.reports) if checked else None,
            "handoffs": self.handoffs,
            "parse_errors": list(self.errors),
        }
