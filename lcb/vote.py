"""Pick one program out of N samples by what the programs *do*, not by how they read.

Two selection rules for the matched-compute single-agent baselines:

* ``behavioural_vote``: run every sampled program on the problem's example inputs (the
  statement's samples: ``public_tests`` inputs, never their expected outputs) in the grading
  sandbox, group programs whose outputs agree on every input, and submit a program of the
  largest group. Two programs that differ only in names, comments or layout land in one group;
  two identical-looking programs that print different things do not.
* ``examples_check``: the check an agent makes itself with its ``python_exec`` tool
  (``lcb.tools.python_exec``: same sandbox, guard off, prelude on, exactly what the agents call):
  run each program on each of the statement's examples and compare what it prints with the
  expected output shown there (stdin problems: the official line comparator; LeetCode-style
  problems: a driver that feeds the example's JSON arguments to ``Solution().<fn_name>`` and
  prints the JSON of what it returns, compared as JSON values, as an agent would); submit a
  program that passes the most examples (ties: the larger behavioural group, then the earlier
  sample).

Programs are run once per distinct text. No hidden test is ever touched here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import json

from lcb import tools
from lcb.compare import outputs_match, stripped_lines
from lcb.problem import Problem, TestCase, TestKind
from lcb.sandbox import SandboxJob, memory_limit_bytes, run_in_sandbox

VOTE_TIMEOUT_S = 6.0
# An expected output no program prints or returns: the judge then reports what the program
# produced ("got") for every input, which is all a blind run needs.
_STDIN_SENTINEL = "\u0000lcb-vote-sentinel\u0000"
_FUNCTIONAL_SENTINEL = '{"__lcb_vote_sentinel__": "\\u0000"}'
_GOT_CHARS = 20000
NO_PROGRAM = ("no-program",)


@dataclass(frozen=True, slots=True)
class VoteResult:
    """The chosen sample (None when no sample had a program) and how the samples grouped."""

    chosen: int | None
    groups: tuple[tuple[int, ...], ...]  # sample indices per behaviour, largest group first
    runnable: tuple[bool, ...]  # per sample: ran cleanly on at least one example input
    examples_passed: tuple[int, ...] = ()  # per sample (examples_check only)
    examples_total: int = 0

    def as_dict(self) -> dict[str, object]:
        return {"chosen": self.chosen, "groups": [list(g) for g in self.groups],
                "runnable": list(self.runnable), "examples_passed": list(self.examples_passed),
                "examples_total": self.examples_total}


def _text_key(code: str) -> str:
    return hashlib.sha256(code.encode("utf-8")).hexdigest()


def example_inputs(problem: Problem) -> tuple[str, ...]:
    """The statement's sample inputs (public tests), in order."""
    return tuple(case.input for case in problem.public_tests)


def behaviour(problem: Problem, code: str | None, *, timeout_s: float = VOTE_TIMEOUT_S) -> tuple[str, ...]:
    """What ``code`` does on each example input: its normalised output, or the kind of failure."""
    inputs = example_inputs(problem)
    if code is None or not code.strip():
        return NO_PROGRAM
    if not inputs:
        return ("no-examples",)
    functional = problem.mode is TestKind.FUNCTIONAL
    sentinel = _FUNCTIONAL_SENTINEL if functional else _STDIN_SENTINEL
    job = SandboxJob(
        mode=problem.mode.value, code=code, tests=tuple((text, sentinel) for text in inputs),
        fn_name=problem.fn_name if functional else None, timeout_s=timeout_s,
        memory_bytes=memory_limit_bytes(), got_preview_chars=_GOT_CHARS,
    )
    run = run_in_sandbox(job)
    if run.of_kind("compile_error"):
        return ("compile_error",) * len(inputs)
    by_index = {int(e["index"]): e for e in run.of_kind("test")}
    signature = []
    for index in range(len(inputs)):
        event = by_index.get(index)
        if event is None:
            signature.append("missing")
        elif event.get("outcome") == "passed":  # printed the sentinel itself: still one behaviour
            signature.append("out:" + sentinel)
        elif event.get("outcome") == "wrong_answer" and "got" in event:
            got = str(event["got"])
            signature.append("out:" + (got if functional else "\n".join(stripped_lines(got))))
        else:
            signature.append(f"fail:{event.get('outcome')}")
    return tuple(signature)


def _ran(signature: tuple[str, ...]) -> bool:
    return any(part.startswith("out:") for part in signature)


def _group(signatures: Sequence[tuple[str, ...]]) -> tuple[tuple[int, ...], ...]:
    """Samples with equal behaviour, largest group first (ties: the group seen first); samples
    without a program form no group."""
    members: dict[tuple[str, ...], list[int]] = {}
    for index, signature in enumerate(signatures):
        if signature != NO_PROGRAM:
            members.setdefault(signature, []).append(index)
    ordered = sorted(members.items(), key=lambda item: (not _ran(item[0]), -len(item[1]), item[1][0]))
    return tuple(tuple(group) for _, group in ordered)


def _signatures(problem: Problem, programs: Sequence[str | None], timeout_s: float) -> list[tuple[str, ...]]:
    seen: dict[str, tuple[str, ...]] = {}
    out = []
    for code in programs:
        if code is None or not code.strip():
            out.append(NO_PROGRAM)
            continue
        key = _text_key(code)
        if key not in seen:
            seen[key] = behaviour(problem, code, timeout_s=timeout_s)
        out.append(seen[key])
    return out


def behavioural_vote(problem: Problem, programs: Sequence[str | None], *,
                     timeout_s: float = VOTE_TIMEOUT_S) -> VoteResult:
    """Self-consistency over programs: the earliest sample of the largest behaviour group.

    Programs that ran cleanly on no example input rank after every group that did, so a crowd
    of crashing samples never outvotes a working minority."""
    signatures = _signatures(problem, programs, timeout_s)
    groups = _group(signatures)
    chosen = groups[0][0] if groups else None
    return VoteResult(chosen, groups, tuple(_ran(s) for s in signatures))


# Appended to a LeetCode-style program so python_exec can run it on one example: the example's
# input is one JSON value per line per argument (LCB's functional format).
_FUNCTIONAL_DRIVER = """

import json as _lcb_json, sys as _lcb_sys
_lcb_args = [_lcb_json.loads(_l) for _l in _lcb_sys.stdin.read().split("\\n") if _l.strip()]
print(_lcb_json.dumps(getattr(Solution(), {fn_name!r})(*_lcb_args)))
"""


def _json_equal(got: str, expected: str) -> bool:
    try:
        return json.loads(got) == json.loads(expected)
    except ValueError:
        return False


def example_passes(problem: Problem, code: str, case: TestCase, *, timeout_s: float = VOTE_TIMEOUT_S) -> bool:
    """One example checked the way an agent does it: one ``python_exec`` call, then compare."""
    functional = problem.mode is TestKind.FUNCTIONAL
    program = code + _FUNCTIONAL_DRIVER.format(fn_name=problem.fn_name) if functional else code
    result = tools.python_exec(program, case.input, timeout_s)
    if result.exit_code != 0 or result.timed_out or result.truncated:
        return False
    return _json_equal(result.stdout, case.output) if functional else outputs_match(result.stdout, case.output)


def examples_passed(problem: Problem, code: str | None, *, timeout_s: float = VOTE_TIMEOUT_S) -> int:
    """How many of the statement's examples ``code`` passes under the agent's own checks."""
    if code is None or not code.strip():
        return 0
    return sum(example_passes(problem, code, case, timeout_s=timeout_s) for case in problem.public_tests)


def examples_check(problem: Problem, programs: Sequence[str | None], *,
                   timeout_s: float = VOTE_TIMEOUT_S) -> VoteResult:
    """Best-of-N by the agent's own ``python_exec`` checks on the statement's examples: most
    examples passed, then the larger behaviour group, then the earlier sample."""
    vote = behavioural_vote(problem, programs, timeout_s=timeout_s)
    total = len(problem.public_tests)
    passed_by_text: dict[str, int] = {}
    passed: list[int] = []
    for code in programs:
        if code is None or not code.strip() or not total:
            passed.append(0)
            continue
        key = _text_key(code)
        if key not in passed_by_text:
            passed_by_text[key] = examples_passed(problem, code, timeout_s=timeout_s)
        passed.append(passed_by_text[key])
    rank_of_group = {index: rank for rank, group in enumerate(vote.groups) for index in group}
    candidates = [i for i in range(len(programs)) if i in rank_of_group]
    chosen = min(candidates, key=lambda i: (-passed[i], rank_of_group[i], i)) if candidates else None
    return VoteResult(chosen, vote.groups, vote.runnable, tuple(passed), total)


SELECTION_RULES = {"vote": behavioural_vote, "examples": examples_check}
