"""MAPRO: multi-agent prompt optimization as MAP inference over a prompt graph."""

from optimizers.mapro.optimizer import MAPROOptimizer, MAPROParams

__all__ = ["MAPROOptimizer", "MAPROParams"]
