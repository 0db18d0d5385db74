"""MIPROv2 on the common optimizer interface (instructions + demos per role, Optuna TPE)."""

from __future__ import annotations

from optimizers.mipro.optimizer import MIPROOptimizer, MIPROParams

__all__ = ["MIPROOptimizer", "MIPROParams"]
