"""HiveMind on the common optimizer interface (Shapley credit over masked team runs -> lessons)."""

from __future__ import annotations

from optimizers.hivemind.optimizer import HiveMindOptimizer, HiveMindParams

__all__ = ["HiveMindOptimizer", "HiveMindParams"]
