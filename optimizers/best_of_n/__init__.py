"""``best_of_n``: the single agent sampled N times, the program passing most statement examples."""

from optimizers.best_of_n.method import BestOfNBaseline

__all__ = ["BestOfNBaseline"]
