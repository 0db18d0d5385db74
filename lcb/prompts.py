"""LiveCodeBench's generic code-generation prompt (the chat-model style), in our own words.

Layout as in the official harness: a system message casting the model as an expert Python
programmer, and a user message made of ``### Question:`` (the statement), ``### Format:`` (how to
answer, with a ```python fence holding the starter code or a placeholder) and ``### Answer:``.
A problem is functional (LeetCode style) iff it has starter code.

User text (statements, starter code) is joined by concatenation, never passed through
``str.format``, so braces in it are safe.
"""

from __future__ import annotations

from lcb.problem import Problem

SYSTEM_MESSAGE = (
    "You are an expert Python programmer. You will receive a programming problem specification "
    "and must write a correct Python program that satisfies the specification and passes all "
    "of its tests."
)

STDIN_FORMAT = (
    "Read the input from standard input, solve the problem, and write the answer to standard "
    "output (do not test the program directly on the sample inputs). Put your code between the "
    "delimiters shown below. Make sure that, when the Python program runs, it reads the input, "
    "runs the algorithm and writes the output to STDOUT."
)

STARTER_FORMAT = (
    "Write your solution using the starter code given below, and put your code between the "
    "delimiters."
)

PLACEHOLDER = "# YOUR CODE HERE"

ANSWER_LINE = "### Answer: (use the format given above, with the backticks)"


def _fenced(code: str) -> str:
    return "```python\n" + code + "\n```"


def format_question(problem: Problem) -> str:
    """The user message for one problem."""
    parts = ["### Question:\n" + problem.statement + "\n"]
    if problem.is_functional:
        parts.append("### Format: " + STARTER_FORMAT + "\n" + _fenced(problem.starter_code) + "\n")
    else:
        parts.append("### Format: " + STDIN_FORMAT + "\n" + _fenced(PLACEHOLDER) + "\n")
    parts.append(ANSWER_LINE + "\n")
    return "\n".join(parts)


def build_messages(problem: Problem) -> list[dict[str, str]]:
    """Chat messages (OpenAI style) for a single model answering one problem."""
    return [
        {"role": "system", "content": SYSTEM_MESSAGE},
        {"role": "user", "content": format_question(problem)},
    ]
