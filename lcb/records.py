"""Per-problem records, the pass@1 summary, a human table, and atomic file writes."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lcb.problem import Problem
from lcb.verdict import Outcome, Verdict

DETAIL_CHARS = 300  # first-failure detail kept in a record; hidden tests can be huge


def write_text_atomic(path: Path | str, text: str) -> None:
    """Write ``text`` so readers see the old file or the new one, never a partial one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_jsonl_atomic(path: Path | str, rows: Iterable[Mapping[str, Any]]) -> None:
    write_text_atomic(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def _first_failure(verdict: Verdict) -> dict[str, Any] | None:
    for test in verdict.tests:
        if test.outcome is not Outcome.PASSED:
            return {
                "index": test.index,
                "outcome": test.outcome.value,
                "detail": test.detail[:DETAIL_CHARS],
                "cpu_s": round(test.cpu_s, 3),
                "wall_s": round(test.duration_s, 3),
            }
    return None


def make_record(
    problem: Problem,
    *,
    code: str | None,
    verdict: Verdict,
    latency_s: float,
    extraction_rule: str | None = None,
    **extras: Any,
) -> dict[str, Any]:
    """One JSON-ready line per graded problem. ``em`` is 1 iff code was given and all tests pass."""
    has_code = bool(code and code.strip())
    record: dict[str, Any] = {
        "id": problem.id,
        "predicted_code": code,
        "pass": verdict.passed,
        "total": verdict.total,
        "pass_rate": round(verdict.pass_rate, 6),
        "em": int(has_code and verdict.solved),
        "outcome": verdict.outcome.value,
        "difficulty": problem.difficulty,
        "platform": problem.platform,
        "latency_s": round(float(latency_s), 3),
    }
    if extraction_rule is not None:
        record["extraction_rule"] = extraction_rule
    if verdict.isolation:
        record["isolation"] = " ".join(verdict.isolation)
    record["first_failure"] = _first_failure(verdict)
    record.update(extras)
    return record


def _pass_at_1(records: Sequence[Mapping[str, Any]]) -> float:
    return sum(int(r.get("em", 0)) for r in records) / len(records) if records else 0.0


def _grouped(records: Sequence[Mapping[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for record in records:
        groups.setdefault(str(record.get(key) or "unknown"), []).append(record)
    return {
        name: {"n": len(group), "pass@1": _pass_at_1(group)}
        for name, group in sorted(groups.items())
    }


def isolation_line(records: Sequence[Mapping[str, Any]]) -> str:
    """One line: the sandbox layers the graded programs ran under (each distinct set, if they
    differed: a layer can degrade for one program, e.g. when the kernel runs out of namespaces)."""
    layer_sets = sorted({str(r["isolation"]) for r in records if r.get("isolation")})
    return " | ".join(layer_sets) or "none (no program ran)"


def summarize(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """pass@1 over all problems (a problem without code counts as failed) and its breakdowns."""
    records = list(records)
    with_code = [r for r in records if r.get("predicted_code")]
    return {
        "pass@1": _pass_at_1(records),
        "n": len(records),
        "solved": sum(int(r.get("em", 0)) for r in records),
        "n_with_code": len(with_code),
        "pass@1_with_code": _pass_at_1(with_code),
        "by_difficulty": _grouped(records, "difficulty"),
        "by_platform": _grouped(records, "platform"),
    }


_MARKS = {1: "ok", 0: "--"}


def format_table(records: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]) -> str:
    """A plain-text table for stderr: one line per problem, then the pass@1 lines."""
    header = f"{'id':<28} {'diff':<7} {'platform':<11} {'tests':>9}  {'outcome':<14} em"
    lines = [header, "-" * len(header)]
    for r in records:
        tests = f"{r.get('pass', 0)}/{r.get('total', 0)}"
        outcome = r.get("outcome", "") if r.get("predicted_code") else "no_code"
        lines.append(
            f"{str(r.get('id', ''))[:28]:<28} {str(r.get('difficulty', ''))[:7]:<7} "
            f"{str(r.get('platform', ''))[:11]:<11} {tests:>9}  {outcome:<14} "
            f"{_MARKS.get(int(r.get('em', 0)), '--')}"
        )
    lines.append("-" * len(header))
    lines.append(
        f"pass@1 {summary['pass@1']:.4f} ({summary['solved']}/{summary['n']}); "
        f"with code {summary['pass@1_with_code']:.4f} over {summary['n_with_code']}"
    )
    for title, key in (("difficulty", "by_difficulty"), ("platform", "by_platform")):
        parts = [f"{name} {g['pass@1']:.3f} (n={g['n']})" for name, g in summary[key].items()]
        lines.append(f"by {title}: " + ", ".join(parts))
    if "isolation" in summary:
        lines.append(f"sandbox: {summary['isolation']}")
    return "\n".join(lines)
