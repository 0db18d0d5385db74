"""The optimizer gym: scripted worlds with a known optimum, to measure how well methods search.

``lexicon`` (concepts and their sentences), ``world`` (the success model, documented there),
``generators`` (random instances per kind), ``worlds`` (names, kinds, the first gym's worlds),
``models`` (scripted team model, judge and reflector: they read only their requests), ``system``
(the real team runtime on a world), ``runner`` (one job through the common optimizer seam),
``stats`` (ranks, critical differences, ECDFs). The CLI is ``python -m benchmarks.gym``.
"""

from __future__ import annotations

from optimizers.gym.runner import GymJob, run_job
from optimizers.gym.world import Configuration, Distractor, Fact, Synergy, World, brute_force_optimum
from optimizers.gym.worlds import DEFAULT_SUITE, KINDS, make_world

__all__ = [
    "DEFAULT_SUITE",
    "KINDS",
    "Configuration",
    "Distractor",
    "Fact",
    "GymJob",
    "Synergy",
    "World",
    "brute_force_optimum",
    "make_world",
    "run_job",
]
