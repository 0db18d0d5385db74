"""TAVO on the common optimizer interface (trajectory-aware credit -> verbalized prompt edits)."""

from __future__ import annotations

from optimizers.tavo.optimizer import TAVOOptimizer, TAVOParams

__all__ = ["TAVOOptimizer", "TAVOParams"]
