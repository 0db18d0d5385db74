"""optimizers.surfaces: requests are told apart by their system text and a phrase of their prompt
(what the scripted server and the gym answer by)."""

from __future__ import annotations

from optimizers.judge import JUDGE_SYSTEM
from optimizers.reflection import REFLECTION_SYSTEM
from optimizers.surfaces import (
    MAPRO_BLAME_SYSTEM,
    MAPRO_JUDGE_SYSTEM,
    MAPRO_REWRITER_SYSTEM,
    NO_SYSTEM,
    identify,
)


def test_each_request_is_identified_and_a_team_turn_is_not() -> None:
    assert identify(f"{REFLECTION_SYSTEM} Task: gepa/propose.", "anything") == ("gepa", "propose")
    assert identify(f"{JUDGE_SYSTEM} Task: mapro/judge.", "x") == ("mapro", "judge")
    assert identify(MAPRO_JUDGE_SYSTEM, "Agent role: coder ...") == ("mapro", "judge")
    assert identify(MAPRO_REWRITER_SYSTEM, "Write 4 alternative versions of this role prompt.") == ("mapro", "pool")
    assert identify(MAPRO_REWRITER_SYSTEM, 'Current role prompt:\n"""x"""') == ("mapro", "mutate")
    assert identify(MAPRO_BLAME_SYSTEM, "BLAME lines") == ("mapro", "blame")
    assert identify(NO_SYSTEM, "Current prompt:\n<reference_prompt>\nx\n</reference_prompt>") == ("maspo", "propose")
    assert identify(NO_SYSTEM, "=== OUTPUT A ===\na\n\n=== OUTPUT B ===\nb") == ("maspo", "judge")
    # Positive controls: a team agent's turn, a probe (a candidate role prompt as system), a bare
    # user message that is neither of MASPO's, and a reflection prompt without its tag.
    assert identify("You are the coder of a programming team.", "### Question: ...") is None
    assert identify(NO_SYSTEM, "Solve this problem.") is None
    assert identify(REFLECTION_SYSTEM, "no tag") is None
    assert identify(MAPRO_REWRITER_SYSTEM, "neither phrase") is None
