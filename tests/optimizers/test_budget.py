from __future__ import annotations

import threading

import pytest

from optimizers.budget import Budget, BudgetExhausted, Outcome


def test_reserve_commit_cancel_accounting() -> None:
    budget = Budget(3)
    a, b, c = budget.reserve(), budget.reserve(), budget.reserve()
    assert a and b and c
    assert budget.reserve() is None and budget.remaining == 0
    budget.commit(a, Outcome.SUCCESS)
    budget.commit(b, Outcome.SEMANTIC_FAILURE)
    budget.note_infrastructure_failure(will_retry=True)
    budget.note_infrastructure_failure(will_retry=False)
    budget.commit(c, Outcome.INFRASTRUCTURE_FAILURE)  # freed, not charged
    snap = budget.snapshot()
    assert snap["charged"] == 2 and snap["remaining"] == 1 and snap["reserved"] == 0
    assert snap["successful"] == 1 and snap["semantic_failures"] == 1
    assert snap["infrastructure_failures"] == 2 and snap["retries"] == 1 and snap["unusable_rollouts"] == 1
    d = budget.reserve_or_raise()
    budget.cancel(d)
    assert budget.charged == 2
    with pytest.raises(ValueError):
        budget.cancel(d)


def test_exhausted_raises() -> None:
    budget = Budget(1)
    budget.commit(budget.reserve_or_raise(), Outcome.SUCCESS)
    with pytest.raises(BudgetExhausted):
        budget.reserve_or_raise()
    assert budget.exhausted


def test_never_overspent_under_threads() -> None:
    budget = Budget(100)

    def worker() -> None:
        for _ in range(200):
            reservation = budget.reserve()
            if reservation is not None:
                budget.commit(reservation, Outcome.SUCCESS)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert budget.charged == 100
    assert budget.snapshot()["exhausted_requests"] == 8 * 200 - 100
