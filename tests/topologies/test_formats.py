"""Communication formats: contracts, parsing, re-rendering (code verbatim), metrics."""

from __future__ import annotations

import json

import pytest

from topologies.formats import (
    SUMMARY_CHARS,
    FormatMetrics,
    contract_text,
    parse_report,
    render_handoffs,
    render_message,
    split_code,
)
from topologies.types import CommunicationFormat as F

LONG_PROGRAM = "\n".join(
    ["import sys", "def main():", "    data = sys.stdin.read().split()"]
    + [f"    v{i} = len(data) + {i}  # line {i} keeps indentation" for i in range(400)]
    + ["    print(v0)", "main()"]
)

SEMI_OK = """[STATUS] completed
[SUMMARY] Implemented prefix sums.
[EVIDENCE_OR_TESTS] samples 1 and 2 pass
[CONFIDENCE] high - both samples pass
[NEXT] test large inputs
[COMPLEXITY] O(n)
"""

STRUCTURED_OK = (
    'JSON_REPORT: {"status": "completed", "summary": "prefix sums", "confidence": "medium", '
    '"next": "test it", "payload": {"approach": "prefix sums", "code": "x = 1\\n    y = 2"}}\nEND_JSON_REPORT'
)


def test_freeform_has_no_contract_and_passes_text_unchanged() -> None:
    assert contract_text(F.FREEFORM) == ""
    text = "some reasoning\n```python\nprint(1)\n```"
    assert render_message(F.FREEFORM, sender="coder", text=text) == text


@pytest.mark.parametrize("fmt", [F.SEMI_STRUCTURED, F.STRUCTURED_SOFT])
def test_structured_formats_ask_for_a_report_and_for_code_after_it(fmt: F) -> None:
    contract = contract_text(fmt)
    assert "python block" in contract and "verbatim" in contract


def test_semi_structured_parse_accepts_a_complete_report() -> None:
    result = parse_report(F.SEMI_STRUCTURED, SEMI_OK + "```python\nprint(1)\n```")
    assert result.ok, result.errors
    assert result.fields["COMPLEXITY"] == "O(n)"


@pytest.mark.parametrize(
    "text, error",
    [
        (SEMI_OK.replace("[NEXT] test large inputs\n", ""), "missing or empty [NEXT]"),
        (SEMI_OK.replace("[STATUS] completed", "[STATUS] done"), "invalid [STATUS]"),
        (SEMI_OK.replace("[CONFIDENCE] high", "[CONFIDENCE] sure"), "invalid [CONFIDENCE]"),
        ("just prose", "missing or empty [STATUS]"),
    ],
)
def test_semi_structured_parse_reports_what_is_wrong(text: str, error: str) -> None:
    result = parse_report(F.SEMI_STRUCTURED, text)
    assert not result.ok
    assert any(error in e for e in result.errors)


def test_structured_parse_reads_the_json_report() -> None:
    result = parse_report(F.STRUCTURED_SOFT, "Intro.\n" + STRUCTURED_OK + "\n```python\nprint(1)\n```")
    assert result.ok, result.errors
    assert result.fields["payload"]["approach"] == "prefix sums"


@pytest.mark.parametrize(
    "text, error",
    [
        ("no report here", "no JSON_REPORT"),
        ("JSON_REPORT: {not json", "not valid JSON"),
        ('JSON_REPORT: {"status": "completed"}', "missing key 'summary'"),
        (STRUCTURED_OK.replace('"medium"', '"very"'), "invalid confidence"),
        (STRUCTURED_OK.replace('{"approach": "prefix sums", "code": "x = 1\\n    y = 2"}', '[1]'),
         "payload is not an object"),
    ],
)
def test_structured_parse_reports_what_is_wrong(text: str, error: str) -> None:
    result = parse_report(F.STRUCTURED_SOFT, text)
    assert not result.ok
    assert any(error in e for e in result.errors), result.errors


@pytest.mark.parametrize("fmt", list(F))
@pytest.mark.parametrize("prefix", ["", SEMI_OK, STRUCTURED_OK, "x" * 5000 + "\n"])
def test_rendering_never_truncates_code(fmt: F, prefix: str) -> None:
    """Whatever the format and whether the sender followed it, the program passes intact."""
    text = f"{prefix}\nHere is the program:\n```python\n{LONG_PROGRAM}\n```\nand a test:\n```\n3\n```"
    rendered = render_message(fmt, sender="coder", text=text)
    assert f"```python\n{LONG_PROGRAM}\n```" in rendered
    assert "```\n3\n```" in rendered


@pytest.mark.parametrize("fmt", [F.SEMI_STRUCTURED, F.STRUCTURED_SOFT])
def test_rendering_clips_prose_only(fmt: F) -> None:
    prose = "word " * 3000
    rendered = render_message(fmt, sender="analyzer", text=prose)
    assert len(rendered) < len(prose)
    assert "clipped" in rendered


def test_semi_rendering_of_a_parsed_report_keeps_its_sections() -> None:
    rendered = render_message(F.SEMI_STRUCTURED, sender="tester", text=SEMI_OK)
    assert rendered.startswith("[FROM] tester")
    assert "[SUMMARY] Implemented prefix sums." in rendered
    assert "[COMPLEXITY] O(n)" in rendered
    assert parse_report(F.SEMI_STRUCTURED, rendered).ok


def test_semi_rendering_of_free_text_says_it_did_not_follow_the_format() -> None:
    rendered = render_message(F.SEMI_STRUCTURED, sender="coder", text="I think DP works.")
    assert "did not follow the report format" in rendered
    assert "I think DP works." in rendered


def test_structured_rendering_is_one_json_report_and_keeps_code_payload() -> None:
    rendered = render_message(F.STRUCTURED_SOFT, sender="coder", text=STRUCTURED_OK)
    head = rendered.split("\n", 1)[0]
    report = json.loads(head.removeprefix("JSON_REPORT: "))
    assert report["from"] == "coder"
    assert report["payload"]["code"] == "x = 1\n    y = 2"  # code in the payload is not clipped
    assert parse_report(F.STRUCTURED_SOFT, rendered).ok


def test_structured_rendering_of_free_text_is_marked() -> None:
    rendered = render_message(F.STRUCTURED_SOFT, sender="coder", text="plain words")
    report = json.loads(rendered.split("\n", 1)[0].removeprefix("JSON_REPORT: "))
    assert report["format_ok"] is False and report["summary"] == "plain words"
    assert len(report["summary"]) <= SUMMARY_CHARS


def test_render_handoffs_puts_the_instruction_first_and_names_senders() -> None:
    text = render_handoffs(F.FREEFORM, [("analyzer", "plan A"), ("coder", "")], instruction="Read these.")
    assert text.startswith("Read these.")
    assert "=== From analyzer ===\nplan A" in text
    assert "=== From coder ===\n(no reply)" in text


def test_split_code_leaves_markers() -> None:
    prose, blocks = split_code("a\n```python\nx = 1\n```\nb")
    assert "[code block 1 below]" in prose
    assert blocks[0].language == "python" and blocks[0].body == "x = 1"


def test_metrics_count_parsed_reports() -> None:
    metrics = FormatMetrics(F.SEMI_STRUCTURED)
    metrics.observe("a", SEMI_OK)
    metrics.observe("b", "no report")
    data = metrics.to_dict()
    assert (data["reports"], data["parsed"], data["parse_rate"]) == (2, 1, 0.5)
    assert data["parse_ok"] is True and data["all_parse_ok"] is False
    assert data["parse_errors"] and data["parse_errors"][0].startswith("b:")


def test_metrics_do_not_judge_freeform() -> None:
    metrics = FormatMetrics(F.FREEFORM)
    metrics.observe("a", "anything")
    assert metrics.to_dict()["parse_rate"] is None and metrics.to_dict()["reports"] == 0
