"""Self-consistency (Wang et al., 2023) for programs: N samples, vote by outputs on the
statement's sample inputs (``lcb.vote.behavioural_vote``), never by text."""

from __future__ import annotations

from optimizers.matched import MatchedSingleAgent
from optimizers.registry import register_optimizer


@register_optimizer("self_consistency")
class SelfConsistencyBaseline(MatchedSingleAgent):
    selection_rule = "vote"
    version = "2"  # 2: samples at no less than the replica teams' temperature floor (job/matched_test.py)
