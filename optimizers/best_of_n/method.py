"""Best-of-N by the agent's own checks: each program is run on the statement's examples, as
the agent could with ``python_exec``, and the one passing most of them is submitted
(``lcb.vote.examples_check``)."""

from __future__ import annotations

from optimizers.matched import MatchedSingleAgent
from optimizers.registry import register_optimizer


@register_optimizer("best_of_n")
class BestOfNBaseline(MatchedSingleAgent):
    selection_rule = "examples"
    # 2: the examples are checked through the agents' python_exec tool, not the judge;
    # 3: samples at no less than the replica teams' temperature floor (job/matched_test.py).
    version = "3"
