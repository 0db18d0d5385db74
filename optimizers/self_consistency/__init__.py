"""``self_consistency``: the single agent sampled N times, the behavioural majority submitted."""

from optimizers.self_consistency.method import SelfConsistencyBaseline

__all__ = ["SelfConsistencyBaseline"]
