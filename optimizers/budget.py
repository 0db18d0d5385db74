"""The rollout budget: how many usable team rollouts an optimization may spend.

A slot is *reserved* before a rollout starts and then either *committed* (the rollout was usable,
right or wrong: charged) or *cancelled* (an infrastructure failure after its retries, or a
cancelled task: not charged). Because reservations count against what is left, ``charged`` can
never exceed ``maximum``, however many rollouts run at once. All methods take a lock and never
block, so the budget is safe from threads and from coroutines alike.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Outcome(StrEnum):
    """How one rollout request ended, as the budget counts it."""

    SUCCESS = "success"  # usable, score > 0: charged
    SEMANTIC_FAILURE = "semantic_failure"  # usable, score 0 (wrong, no code, ...): charged
    INFRASTRUCTURE_FAILURE = "infrastructure_failure"  # transport failed after retries: free
    BUDGET_EXHAUSTED = "budget_exhausted"  # never executed: free

    @property
    def charged(self) -> bool:
        return self in (Outcome.SUCCESS, Outcome.SEMANTIC_FAILURE)


class BudgetExhausted(RuntimeError):
    """Raised by ``Budget.reserve_or_raise`` when no slot is left."""


@dataclass(frozen=True, slots=True)
class Reservation:
    """One reserved slot; ``token`` makes double commits/cancels detectable."""

    token: int


class Budget:
    """A thread- and coroutine-safe rollout budget with exact accounting."""

    def __init__(self, maximum: int) -> None:
        if maximum < 0:
            raise ValueError("budget maximum must be >= 0")
        self._lock = threading.Lock()
        self._maximum = maximum
        self._charged = 0
        self._open: set[int] = set()
        self._next_token = 0
        self._successful = 0
        self._semantic_failures = 0
        self._infrastructure_failures = 0
        self._retries = 0
        self._unusable = 0
        self._exhausted_requests = 0

    # ---------------------------------------------------------------- reservations

    def reserve(self) -> Reservation | None:
        """One slot, or None when charged + reserved already reach the maximum."""
        with self._lock:
            if self._charged + len(self._open) >= self._maximum:
                self._exhausted_requests += 1
                return None
            self._next_token += 1
            self._open.add(self._next_token)
            return Reservation(self._next_token)

    def reserve_or_raise(self) -> Reservation:
        reservation = self.reserve()
        if reservation is None:
            raise BudgetExhausted(f"rollout budget exhausted ({self._maximum} charged)")
        return reservation

    def commit(self, reservation: Reservation, outcome: Outcome) -> None:
        """Close a reservation with the rollout's final outcome (charging it if usable)."""
        with self._lock:
            self._close(reservation)
            if outcome is Outcome.SUCCESS:
                self._successful += 1
            elif outcome is Outcome.SEMANTIC_FAILURE:
                self._semantic_failures += 1
            elif outcome is Outcome.INFRASTRUCTURE_FAILURE:
                self._unusable += 1
                return
            else:
                raise ValueError(f"cannot commit outcome {outcome}")
            self._charged += 1
            if self._charged > self._maximum:  # unreachable by construction; guard the invariant
                raise AssertionError("budget overspent")

    def cancel(self, reservation: Reservation) -> None:
        """Give a slot back unused (the rollout never produced an outcome)."""
        with self._lock:
            self._close(reservation)

    def note_infrastructure_failure(self, *, will_retry: bool) -> None:
        """One failed attempt (free, but counted); ``will_retry`` when it is attempted again."""
        with self._lock:
            self._infrastructure_failures += 1
            if will_retry:
                self._retries += 1

    def _close(self, reservation: Reservation) -> None:
        if reservation.token not in self._open:
            raise ValueError("reservation already closed")
        self._open.remove(reservation.token)

    # ---------------------------------------------------------------- views

    @property
    def maximum(self) -> int:
        return self._maximum

    @property
    def charged(self) -> int:
        with self._lock:
            return self._charged

    @property
    def reserved(self) -> int:
        with self._lock:
            return len(self._open)

    @property
    def remaining(self) -> int:
        """Slots not charged and not reserved: what a new request could still get."""
        with self._lock:
            return self._maximum - self._charged - len(self._open)

    @property
    def exhausted(self) -> bool:
        return self.remaining <= 0

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "maximum": self._maximum,
                "charged": self._charged,
                "reserved": len(self._open),
                "remaining": self._maximum - self._charged - len(self._open),
                "successful": self._successful,
                "semantic_failures": self._semantic_failures,
                "infrastructure_failures": self._infrastructure_failures,
                "retries": self._retries,
                "unusable_rollouts": self._unusable,
                "exhausted_requests": self._exhausted_requests,
            }
