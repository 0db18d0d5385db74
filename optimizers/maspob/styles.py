"""The style of each pool variant, built as upstream MASPOB builds it (our wording).

Upstream (``scripts/prompts/prompt.py``) describes a style along ten dimensions with ten options
each; a style is one option per dimension, written as one sentence per dimension. Ten named
presets fix the option of every dimension; a role's slots take the presets in their listed order,
and after the presets every further style draws each dimension's option at random.

Preset order: the reference (MAS-PromptBench) means to put ``CODE_RIGOROUS``, ``SYSTEMATIC``
and ``PATTERN_BASED`` first for LiveCodeBench, but its lookup misses: its priority table
(``native._PRIORITY_PRESETS``) is keyed ``"lcb"``, while the task name it passes is
``GENERATION_TASK_NAMES["lcb"] == "livecodebench"`` (``regime.py``, used in ``integration.py``),
so ``.get(dataset, [])`` finds nothing and every reference run uses the listed order. Upstream
MASPOB itself only reorders for ``humaneval``/``mbpp``. We do what the reference runs:
``REFERENCE_PRIORITY`` is empty; ``style_sequence(priority=...)`` still takes another order.
The options below say what upstream's say, in our words, at the same positions, so a preset's
index map means the same instructions.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

DIMENSIONS: dict[str, tuple[str, ...]] = {
    "reasoning_style": (
        "Reason one step at a time.",
        "Take the problem apart in an orderly way.",
        "Look closely at every part of the problem.",
        "Follow a logical line of thought.",
        "Weigh every aspect before you answer.",
        "Go through the problem methodically.",
        "Study the details closely.",
        "Handle the information step by step.",
        "Use sound logical reasoning.",
        "Assess everything in a systematic order.",
    ),
    "output_format": (
        "Give just the final answer, without explanation.",
        "Finish with the answer on a line of its own.",
        "Write the final answer after 'Answer:'.",
        "State the answer plainly and briefly.",
        "Close with the answer alone.",
        "Make the last line nothing but the answer.",
        "Reason first, then give the answer in one line.",
        "Give the answer in its simplest form.",
        "Give the answer with no extra words.",
        "Finish with: 'The answer is [your answer]'.",
    ),
    "reasoning_depth": (
        "Think each step through before you answer.",
        "Weigh more than one approach before choosing.",
        "Check the reasoning at every step.",
        "Look for edge cases and special conditions.",
        "Make sure the logic holds before concluding.",
        "Ask what could go wrong with the approach.",
        "Try the answer out in your head before replying.",
        "Ask whether the answer is plausible.",
        "Recheck the computations and the logic.",
        "Keep the reasoning consistent throughout.",
    ),
    "verification": (
        "Check the answer again before replying.",
        "Confirm that the answer is right.",
        "Go over the reasoning before answering.",
        "Make certain the answer is accurate.",
        "Review the work before replying.",
        "Validate the conclusion.",
        "Be sure the answer is correct.",
        "Cross-check the reasoning.",
        "Make sure the answer holds.",
        "Check the logic before answering.",
    ),
    "task_understanding": (
        "Read the question closely before answering.",
        "Understand the whole question first.",
        "Work out what is being asked.",
        "Pin down the key requirements.",
        "Parse the question carefully.",
        "Understand the question completely.",
        "Understand the task before replying.",
        "Grasp what the question requires.",
        "Look at the question carefully.",
        "Think about what is being asked.",
    ),
    "decomposition": (
        "Split the problem into smaller pieces.",
        "Find the key components first.",
        "Write down what is known and what must be found.",
        "Divide the problem into steps.",
        "Find the central question to answer.",
        "Pin down the constraints and requirements.",
        "Establish what information is given.",
        "Work out what the question really asks.",
        "Name the main goal and its sub-goals.",
        "Clarify the problem before solving it.",
    ),
    "error_handling": (
        "Beware of the usual mistakes.",
        "Take care with edge cases.",
        "Look out for off-by-one errors.",
        "Think about boundary conditions.",
        "Assume nothing the problem does not state.",
        "Treat special cases properly.",
        "Do not forget negative numbers or zeros.",
        "Think about what happens at the limits.",
        "Mind the order of operations.",
        "Look out for division by zero and overflow.",
    ),
    "answer_validation": (
        "Check that the answer makes sense.",
        "Verify it by substituting it back.",
        "Try it on a small example.",
        "Check that the units are right.",
        "Check that the answer's size is reasonable.",
        "Check that the answer meets every condition.",
        "Recheck the critical computations.",
        "Make sure the answer's type is the one asked for.",
        "Make sure the answer is complete.",
        "Check for arithmetic slips.",
    ),
    "solving_strategy": (
        "Try reasoning backwards from the goal.",
        "Look for patterns in the problem.",
        "Recall similar problems you have solved.",
        "Solve a simpler version first.",
        "Let examples guide your thinking.",
        "Ask which method fits here.",
        "Consider several ways to solve it.",
        "Narrow the options down by elimination.",
        "Sketch a diagram if it helps.",
        "Organize the information systematically.",
    ),
    "output_length": (
        "Be complete but brief.",
        "Include only what is essential.",
        "Be thorough without being verbose.",
        "Answer what is asked and leave out the rest.",
        "Give enough detail to be clear.",
        "Keep explanations short.",
        "Show the key steps only.",
        "Be precise rather than wordy.",
        "Answer fully but economically.",
        "Give the least that makes a complete answer.",
    ),
}

# Preset name -> option index per dimension (in DIMENSIONS order), as upstream's QUALITY_PRESETS.
PRESETS: dict[str, tuple[int, ...]] = {
    "concise-direct": (3, 0, 7, 0, 2, 4, 4, 0, 7, 3),
    "detailed-reasoning": (0, 6, 2, 5, 0, 0, 8, 1, 0, 0),
    "code-rigorous": (1, 3, 3, 4, 3, 5, 1, 5, 2, 6),
    "systematic": (5, 2, 0, 2, 5, 3, 0, 6, 9, 2),
    "pattern-based": (2, 5, 1, 7, 6, 1, 5, 2, 1, 4),
    "verify-first": (4, 9, 8, 1, 1, 2, 2, 4, 4, 1),
    "quick-concise": (8, 8, 6, 8, 8, 7, 3, 7, 5, 9),
    "comprehensive": (6, 1, 4, 3, 4, 8, 6, 3, 6, 5),
    "simplify-first": (7, 4, 5, 6, 7, 6, 7, 8, 3, 7),
    "visual-approach": (9, 7, 9, 9, 9, 9, 9, 9, 8, 8),
}
# What the reference runs for LiveCodeBench: no priority (its "lcb" lookup misses; module docstring).
REFERENCE_PRIORITY: tuple[str, ...] = ()
# What it meant to run (upstream's code-benchmark priority); not used by default.
CODE_PRIORITY: tuple[str, ...] = ("code-rigorous", "systematic", "pattern-based")
RANDOM_PREFIX = "random"


@dataclass(frozen=True, slots=True)
class Style:
    name: str  # a preset's name, or random-<n>
    choices: tuple[int, ...]  # option index per dimension

    @property
    def text(self) -> str:
        return " ".join(options[i] for options, i in zip(DIMENSIONS.values(), self.choices, strict=True))


def preset_order(priority: tuple[str, ...] = REFERENCE_PRIORITY) -> list[str]:
    return [*priority, *(name for name in PRESETS if name not in priority)]


def style_sequence(count: int, rng: random.Random, *, priority: tuple[str, ...] = REFERENCE_PRIORITY,
                   presets: Mapping[str, tuple[int, ...]] = PRESETS) -> list[Style]:
    """The styles of a role's slots 1..count: the priority presets, the other presets in their
    listed order, then random styles."""
    order = preset_order(priority)
    styles = [Style(name, tuple(presets[name])) for name in order[:count]]
    for n in range(len(styles), count):
        choices = tuple(rng.randrange(len(options)) for options in DIMENSIONS.values())
        styles.append(Style(f"{RANDOM_PREFIX}-{n + 1 - len(order)}", choices))
    return styles
