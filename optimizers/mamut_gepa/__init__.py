"""MAMUT-GEPA on the common optimizer interface (one system-level GEPA over all roles; gepa engine)."""

from __future__ import annotations

from optimizers.mamut_gepa.optimizer import MAMUTGEPAOptimizer, MAMUTGEPAParams

__all__ = ["MAMUTGEPAOptimizer", "MAMUTGEPAParams"]
