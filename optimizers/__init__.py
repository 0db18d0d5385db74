"""Prompt/protocol optimizers for multi-agent teams, behind one seam.

The core (this package's top-level modules) knows nothing of LCB, LangGraph or W&B: a method sees
a ``Candidate``, an ``Evaluator`` that spends a ``Budget``, and an ``OptimizeContext``.
``optimizers.protocol`` runs jobs on LCB with it.
"""

from __future__ import annotations

from optimizers.base import (
    JsonlTracker,
    NullTracker,
    OptimizationResult,
    OptimizeContext,
    Optimizer,
    OptimizerInfrastructureError,
    Tracker,
)
from optimizers.budget import Budget, BudgetExhausted, Outcome
from optimizers.candidate import Candidate
from optimizers.evaluator import AttemptResult, BudgetedEvaluator, Evaluator, Rollout, System
from optimizers.registry import (
    MethodUnavailable,
    UnknownMethod,
    available_methods,
    create_optimizer,
    get_optimizer_class,
    register_optimizer,
)

__all__ = [
    "AttemptResult",
    "Budget",
    "BudgetExhausted",
    "BudgetedEvaluator",
    "Candidate",
    "Evaluator",
    "JsonlTracker",
    "MethodUnavailable",
    "NullTracker",
    "OptimizationResult",
    "OptimizeContext",
    "Optimizer",
    "OptimizerInfrastructureError",
    "Outcome",
    "Rollout",
    "System",
    "Tracker",
    "UnknownMethod",
    "available_methods",
    "create_optimizer",
    "get_optimizer_class",
    "register_optimizer",
]
