"""The optimism gap: how much better the incumbent looked on the rows the method searched on than
on the rows keep-or-reject used.

A method that picks its incumbent by a score is biased toward candidates that got lucky on those
rows (the winner's curse); GEPA, MIPRO and TAVO search on validation, others only on train, so
under ``selection=val`` the keep-or-reject step favours the former. Every job reports:

- ``incumbent_search_score``: mean score of the incumbent's usable optimization rollouts (the
  rows the method ran it on, as the method saw them; zero cost, read from the journal);
- ``incumbent_selection_score``: its score on the selection rows (greedy, all hidden tests);
- ``optimism_gap_pp`` = 100 x (search - selection);
- the same two scores for the seed and ``excess_optimism_pp`` = incumbent gap - seed gap, which
  removes what differs between search and selection for every candidate (sampling vs greedy,
  first tests vs all tests, train vs validation difficulty).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from optimizers.budget import Outcome


def search_score(rollouts: Iterable[Mapping[str, Any]], candidate_id: str) -> tuple[float | None, int, int]:
    """(mean score, rollouts, distinct problems) over ``candidate_id``'s usable journal rollouts."""
    total, count, problems = 0.0, 0, set()
    for row in rollouts:
        if row.get("candidate_id") != candidate_id or not Outcome(row["status"]).charged:
            continue
        total += float(row["score"])
        count += 1
        problems.add(row["problem_id"])
    return (total / count if count else None), count, len(problems)


def _gap_pp(search: float | None, selection: float | None) -> float | None:
    if search is None or selection is None:
        return None
    return round(100.0 * (search - selection), 6)


def optimism(
    rollouts: Iterable[Mapping[str, Any]],
    *,
    incumbent_id: str,
    seed_id: str,
    incumbent_selection_score: float | None,
    seed_selection_score: float | None,
) -> dict[str, Any]:
    rows = list(rollouts)
    inc_search, inc_n, inc_rows = search_score(rows, incumbent_id)
    seed_search, seed_n, _ = search_score(rows, seed_id)
    gap = _gap_pp(inc_search, incumbent_selection_score)
    seed_gap = _gap_pp(seed_search, seed_selection_score)
    return {
        "incumbent_search_score": inc_search,
        "incumbent_search_rollouts": inc_n,
        "incumbent_search_problems": inc_rows,
        "incumbent_selection_score": incumbent_selection_score,
        "optimism_gap_pp": gap,
        "seed_search_score": seed_search,
        "seed_search_rollouts": seed_n,
        "seed_selection_score": seed_selection_score,
        "seed_gap_pp": seed_gap,
        "excess_optimism_pp": None if gap is None or seed_gap is None else round(gap - seed_gap, 6),
    }
