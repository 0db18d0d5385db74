"""How often replies were cut at their token limit, per role and phase (team) and per purpose
(reflection), for ``result.json``, W&B and the report.

A team reply cut at ``max_tokens`` is kept in the trajectory with ``finish_reason: "length"``
(see ``optimizers.protocol.job.lcb_system.replies_by_role``); a cut reflection reply is a failed
reflection call (``optimizers.reflection``). A high rate means the limits, not the prompts,
decide results, so every job reports it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

ALL_ROLES = "all"
PHASES = ("optimize", "validation", "test")


def _rate(truncated: int, total: int) -> float | None:
    return round(truncated / total, 6) if total else None


def count_replies(rollouts: Iterable[Any]) -> dict[str, dict[str, Any]]:
    """Per role (and ``all``): replies, truncated replies and their rate, over rollouts given as
    ``Rollout`` objects or their journal dicts (both carry ``details.replies_by_role``)."""
    totals: dict[str, dict[str, int]] = {}
    for rollout in rollouts:
        details = rollout.get("details") if isinstance(rollout, Mapping) else getattr(rollout, "details", None)
        for role, row in ((details or {}).get("replies_by_role") or {}).items():
            for name in (role, ALL_ROLES):
                slot = totals.setdefault(name, {"replies": 0, "truncated": 0})
                slot["replies"] += int(row.get("replies", 0))
                slot["truncated"] += int(row.get("truncated", 0))
    return {role: {**row, "rate": _rate(row["truncated"], row["replies"])} for role, row in sorted(totals.items())}


def reflection_truncation(usage: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Per reflection purpose (and ``all``): calls, cut replies and their rate."""
    if not usage:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for purpose, row in sorted((usage.get("by_purpose") or {}).items()):
        calls, cut = int(row.get("calls", 0)), int(row.get("truncated_calls", 0))
        out[purpose] = {"calls": calls, "truncated": cut, "rate": _rate(cut, calls)}
    calls, cut = int(usage.get("calls", 0)), int(usage.get("truncated_calls", 0))
    out[ALL_ROLES] = {"calls": calls, "truncated": cut, "rate": _rate(cut, calls)}
    return out


def job_truncation(
    *, optimize: Mapping[str, Any], validation: Mapping[str, Any], test: Mapping[str, Any],
    reflection: Mapping[str, Any],
) -> dict[str, Any]:
    """The ``truncation`` block of ``result.json``."""
    return {"task": {"optimize": dict(optimize), "validation": dict(validation), "test": dict(test)},
            "reflection": dict(reflection)}


def summary_metrics(truncation: Mapping[str, Any]) -> dict[str, float]:
    """Flat ``truncation/<phase>/<role>`` rates for the W&B summary (rates that exist)."""
    metrics: dict[str, float] = {}
    for phase, roles in (truncation.get("task") or {}).items():
        for role, row in roles.items():
            if row.get("rate") is not None:
                metrics[f"truncation/{phase}/{role}"] = row["rate"]
    for purpose, row in (truncation.get("reflection") or {}).items():
        if row.get("rate") is not None:
            metrics[f"truncation/reflection/{purpose}"] = row["rate"]
    return metrics
