"""The identity method: no search. It returns the seed and spends nothing.

It measures the seed prompts of a runtime condition (its validation/test evaluations are the
shared baselines of every other method) and is the smallest example of the interface.
"""

from __future__ import annotations

from collections.abc import Sequence

from optimizers.base import OptimizationResult, OptimizeContext, Optimizer
from optimizers.candidate import Candidate
from optimizers.registry import register_optimizer


@register_optimizer("identity")
class IdentityOptimizer(Optimizer):
    needs_reflection = False

    async def optimize(
        self, seed: Candidate, *, train: Sequence[str], val: Sequence[str], ctx: OptimizeContext
    ) -> OptimizationResult:
        return OptimizationResult(best=seed, stop_reason="identity", metadata={"searched": False})
