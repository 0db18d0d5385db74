"""The sensitivity sweep's bookkeeping: one setting's gym run split per kind, and Kendall's tau of
each setting's ranking against the same kind's cleanest setting (hand-made summaries)."""

from __future__ import annotations

import pytest

from benchmarks.gym.sweep import REFERENCE, kind_rows, settings, with_taus

TAG = "~decoy_rate=0,fix_rate=0.9,symptom_rate=0.8"


def summary(ranks: dict[str, dict[str, float]]) -> dict:
    return {"cells": [{"kind": kind + TAG, "budget": 150, "blocks": 5, "average_ranks": r, "friedman": None}
                      for kind, r in ranks.items()],
            "rows": [{"kind": kind + TAG, "method": m, "budget": 150, "regret": {"mean": v / 10}}
                     for kind, r in ranks.items() for m, v in r.items()]}


def test_a_settings_run_is_split_per_kind_and_ranked_against_its_own_kind() -> None:
    clean = {"credit": {"a": 1.0, "b": 2.0, "c": 3.0}, "joint": {"a": 3.0, "b": 2.0, "c": 1.0}}
    other = {"credit": {"a": 3.0, "b": 2.0, "c": 1.0}, "joint": {"a": 3.0, "b": 2.0, "c": 1.0}}
    noisy_setting = {"symptom_rate": 0.4, "decoy_rate": 0.4, "fix_rate": 0.3}
    first = kind_rows(summary(clean), REFERENCE, ["credit", "joint"])
    second = kind_rows(summary(other), noisy_setting, ["credit", "joint"])
    assert first["joint"]["mean_regret"] == {"a": 0.3, "b": 0.2, "c": 0.1} and first["credit"]["blocks"] == 5
    taus = {kind: [r["tau"] for r in with_taus([first[kind], second[kind]])] for kind in ("credit", "joint")}
    # credit's ranking flips against credit's own clean setting; joint's matches joint's (not credit's).
    assert taus == {"credit": [pytest.approx(1.0), pytest.approx(-1.0)], "joint": [pytest.approx(1.0)] * 2}
    assert len(settings()) == 8 and REFERENCE in settings()
