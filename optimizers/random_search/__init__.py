"""``random``: blind random search, the baseline every method is read against at equal budget."""

from optimizers.random_search.optimizer import RandomSearchOptimizer

__all__ = ["RandomSearchOptimizer"]
