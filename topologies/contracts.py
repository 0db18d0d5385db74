"""The protected output contract of the answering roles.

It is appended to a role's system prompt at run time, after the editable role prompt
(``TeamSpec.roles``), so no prompt edit by an optimizer can remove it. Submissions are extracted
from the last fenced python block of an answering role's own reply, which is what it asks for.
"""

from __future__ import annotations

from lcb.problem import Problem

_STDIN_SHAPE = (
    "a complete Python 3 program that reads the input from standard input and writes the answer "
    "to standard output"
)
_FUNCTIONAL_SHAPE = (
    "the complete `class Solution` with the method signature from the starter code unchanged "
    "(add any imports it needs; do not read stdin or print the answer)"
)


def program_shape(problem: Problem) -> str:
    return _FUNCTIONAL_SHAPE if problem.is_functional else _STDIN_SHAPE


def output_contract(problem: Problem, *, finishing_note: str = "") -> str:
    """The contract text for an answering role on ``problem``.

    ``finishing_note`` adds a topology-specific sentence (e.g. how the manager ends the run).
    """
    lines = [
        "## Required final output",
        f"End your reply with exactly one fenced code block labelled `python` that contains "
        f"{program_shape(problem)}. Nothing may follow that block.",
        "The block must hold the whole program, not a fragment or a diff. If you are not sure it "
        "is correct, still give your best complete program; keep your reasoning short enough that "
        "you reach this block.",
    ]
    if finishing_note:
        lines.append(finishing_note)
    return "\n".join(lines)


def program_handoff_contract(problem: Problem) -> str:
    """For roles that hand a program to a teammate (not the submission, but extracted the same way)."""
    return (
        "## Required program hand-off\n"
        f"When you hand over code, put {program_shape(problem)} in one fenced code block labelled "
        "`python`, complete and unabridged, as the last block of your reply."
    )
