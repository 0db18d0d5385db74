"""GEPA on the common optimizer interface (engine: the ``gepa`` package)."""

from __future__ import annotations

from optimizers.gepa.optimizer import GEPAOptimizer, GEPAParams

__all__ = ["GEPAOptimizer", "GEPAParams"]
