"""MASPO: per-role coordinate ascent with an evolutionary beam, judged locally, one step ahead
and globally, with misalignment cases fed to the following roles' minibatches."""

from optimizers.maspo.optimizer import MASPOOptimizer, MASPOParams

__all__ = ["MASPOOptimizer", "MASPOParams"]
