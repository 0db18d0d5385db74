"""LiveCodeBench's official stdout comparator, and a helper to say where two outputs differ.

Stdlib only and free of package imports: the sandbox child loads this file directly.

Rule (official ``grade_stdio``): strip the whole text, split on ``"\\n"``, strip every line; the
line counts must be equal; each line pair must be equal as strings, or else both lines split on
whitespace must convert token by token to ``decimal.Decimal`` and the two Decimal lists must be
equal. No tolerance: ``1.50`` equals ``1.5`` and ``1e3`` equals ``1000``, ``0.333`` is not
``0.3333``.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation


def stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(token) for token in line.split()]
    except (InvalidOperation, ValueError):
        return None


def lines_match(got: str, expected: str) -> bool:
    """One stripped line pair: equal text, or equal lists of Decimals."""
    if got == expected:
        return True
    got_numbers = _decimals(got)
    if got_numbers is None:
        return False
    expected_numbers = _decimals(expected)
    if expected_numbers is None:
        return False
    try:
        return got_numbers == expected_numbers
    except InvalidOperation:  # signaling NaN tokens ("sNaN") refuse comparison
        return False


def first_mismatch(got: str, expected: str) -> str | None:
    """None when the outputs match; else a short description of the first difference.

    The description names line numbers and counts only, never content, so it is safe to show
    for hidden tests.
    """
    got_lines = stripped_lines(got)
    expected_lines = stripped_lines(expected)
    if len(got_lines) != len(expected_lines):
        return f"expected {len(expected_lines)} output lines, got {len(got_lines)}"
    for number, (got_line, expected_line) in enumerate(zip(got_lines, expected_lines), start=1):
        if not lines_match(got_line, expected_line):
            return f"line {number} differs"
    return None


def outputs_match(got: str, expected: str) -> bool:
    return first_mismatch(got, expected) is None
