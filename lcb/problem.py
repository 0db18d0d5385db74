"""The LiveCodeBench problem as our code sees it: immutable, decoded, mode-aware."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class TestKind(StrEnum):
    """How a test feeds the program: a whole stdin text, or JSON arguments to a method."""

    __test__ = False  # not a pytest class (dunder names never become enum members)
    STDIN = "stdin"
    FUNCTIONAL = "functional"


class TestSelection(StrEnum):
    """Which of a problem's tests a grading run uses.

    Hidden (the private tests) is the default, as the mission scores; ``all`` matches the
    official harness (public followed by private); ``public`` serves parity studies.
    """

    HIDDEN = "hidden"
    PUBLIC = "public"
    ALL = "all"


@dataclass(frozen=True, slots=True)
class TestCase:
    """One LCB test: for functional tests ``input`` holds one JSON value per line per argument."""

    __test__ = False  # not a pytest class

    input: str
    output: str
    kind: TestKind

    def to_dict(self) -> dict[str, str]:
        return {"input": self.input, "output": self.output, "testtype": self.kind.value}


@dataclass(frozen=True, slots=True)
class Problem:
    """One decoded LCB row. ``fn_name`` comes from the row's ``metadata.func_name``."""

    id: str
    title: str
    statement: str
    platform: str
    difficulty: str
    contest_date: str
    starter_code: str
    fn_name: str | None
    public_tests: tuple[TestCase, ...]
    private_tests: tuple[TestCase, ...]

    @property
    def is_functional(self) -> bool:
        """LiveCodeBench's rule: a row is functional (LeetCode style) iff it has starter code."""
        return bool(self.starter_code.strip())

    @property
    def mode(self) -> TestKind:
        return TestKind.FUNCTIONAL if self.is_functional else TestKind.STDIN

    def tests(self, which: TestSelection | str = TestSelection.HIDDEN) -> tuple[TestCase, ...]:
        which = TestSelection(which)
        if which is TestSelection.PUBLIC:
            return self.public_tests
        if which is TestSelection.ALL:
            return self.public_tests + self.private_tests
        return self.private_tests
