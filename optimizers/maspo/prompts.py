"""MASPO's texts: what the proposer sees of a run, its rewrite request, and the forced A/B
comparison the judge answers. Contents follow the reference's role-aware templates (written
here in our own words): the proposer gets each sampled run's problem, the role's context and
the role's output, never a score or verdict; the judge gets the task, the team's output
contract, the dataset's checks and the two outputs, and must answer ``A`` or ``B``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from optimizers.evaluator import Rollout
from optimizers.surfaces import MASPO_COMPARE_PHRASE, MASPO_PROPOSE_PHRASE

Trace = Sequence[Mapping[str, Any]]

NO_OUTPUT = "(role produced no output in this rollout)"
PROBLEM_CHARS = 2000
OUTPUT_CHARS = 4500
CONTEXT_MESSAGES = 8
CONTEXT_MESSAGE_CHARS = 400
CONTEXT_CHARS = 5000
QUESTION_CHARS = 8000
DATASET = "livecodebench"
CONTRACT = (
    "The team's final answer is one complete Python 3 program in a ```python fenced block: it reads "
    "stdin and writes stdout, or implements the given starter code's class and method; it is graded "
    "by hidden tests."
)
CODE_CHECKS = (
    "Check algorithmic correctness, coverage of the constraints, time complexity, edge cases and "
    "actionable collaboration. Only a role that produces code is judged on code completeness; whether "
    "the program uses stdin/stdout or a callable depends on the task."
)


def task_of(trace: Trace) -> str:
    return next((str(m.get("content", "")) for m in trace if m.get("kind") == "user"), "")


def role_replies(trace: Trace, role: str) -> str:
    """The role's own contribution: its last three replies, then the empty ones among them dropped
    (as the reference: a role whose last reply was empty shows two, not an older third)."""
    said = [str(m.get("content") or "") for m in trace if m.get("kind") == "ai" and m.get("source") == role]
    return "\n---\n".join(text for text in said[-3:] if text).strip()


def role_context(trace: Trace, role: str) -> str:
    """The task plus the last messages from everyone else (the reference's node context)."""
    parts = [f"Task: {task_of(trace)[:PROBLEM_CHARS]}"]
    others = [(str(m.get("source", "?")), str(m.get("content", ""))) for m in trace
              if m.get("kind") != "system" and m.get("source") != role and m.get("content")]
    parts += [f"[{source}] {content[:CONTEXT_MESSAGE_CHARS]}" for source, content in others[-CONTEXT_MESSAGES:]]
    return "\n".join(parts)[:CONTEXT_CHARS]


def proposer_sample(runs: Sequence[Rollout], role: str) -> str:
    """The runs as the proposer sees them: problem, the role's context and its output (a problem
    that appears twice is shown once, with its last run)."""
    by_problem: dict[str, tuple[str, str]] = {}
    for run in runs:
        by_problem[task_of(run.trace)] = (role_context(run.trace, role), role_replies(run.trace, role) or NO_OUTPUT)
    return "\n\n".join(
        f"Problem {i + 1}:\n{problem.strip()[:PROBLEM_CHARS]}\n\nContext:\n{context.strip() or '(no context)'}\n\n"
        f"Agent Output:\n{output.strip()[:OUTPUT_CHARS]}"
        for i, (problem, (context, output)) in enumerate(by_problem.items()))


SYSTEM_KIND = {"star": "centralized manager/worker", "chain": "sequential", "shared": "shared-prompt"}


def _scope(kind: str, terminal: bool, shared: bool) -> str:
    if kind == "star":
        scope = ("This is the manager, which gives the team's final answer: keep to the final-output contract "
                 "exactly." if terminal else
                 "This is a worker that reports to the manager: keep its report format; the final-output contract "
                 "below describes the team, not this role's output.")
    else:
        scope = ("This prompt produces the team's final output: keep its output contract." if terminal else
                 "This is an intermediate stage: keep its output format and what the next stage expects as input.")
    if shared:
        scope += " Every agent of the team shares this prompt: keep their rules for combining and exchanging answers."
    return scope


def proposal_prompt(role: str, prompt: str, samples: str, *, kind: str, terminal: bool, shared: bool) -> str:
    requirements = ("Keep the agent's role, responsibilities and input format consistent. "
                    f"{_scope(kind, terminal, shared)}\n{CONTRACT}")
    return (
        f"You are improving the prompt of one role in a {SYSTEM_KIND.get(kind, kind)} multi-agent system. The "
        "role and the system's interfaces (delegation, tools, formats) are fixed and must be kept.\n\n"
        f"Dataset: {DATASET}\nAgent role: {role}\n\n"
        f"Sample runs (problem, the role's context, the role's output):\n<traces>\n{samples}\n</traces>\n\n"
        f"Requirements:\n<requirements>\n{requirements}\n</requirements>\n\n"
        f"Current prompt:\n{MASPO_PROPOSE_PHRASE}\n{prompt}\n</reference_prompt>\n\n"
        "Judge the role's outputs only against this role's job and their use to the agents after it. Keep role "
        "names, tool names, schemas and output formats exactly. Do not make an intermediate role give the final "
        "answer, and do not assume every role writes Python.\n\n"
        "Answer in exactly this form:\n<analyse>The concrete defects in the runs and how the prompt should fix "
        "them.</analyse>\n<modification>One sentence naming the main change.</modification>\n"
        "<prompt>The complete improved prompt, role and interfaces kept.</prompt>"
    )


def extract_prompt(reply: str | None) -> str | None:
    """The text after the reply's first ``<prompt>`` up to ``</prompt>`` (or the end); None when
    there is no tag or nothing in it."""
    if reply is None or "<prompt>" not in reply:
        return None
    text = reply.split("<prompt>", 1)[1].split("</prompt>", 1)[0].strip()
    return text or None


def compare_prompt(role: str, question: str, output_a: str, output_b: str) -> str:
    return (
        "You compare two outputs of the same role in a multi-agent system.\n\n"
        f"Dataset: {DATASET}\nAgent role: {role}\n\n"
        f"=== TASK ===\n{question.strip()[:QUESTION_CHARS]}\n\n"
        f"=== TEAM OUTPUT CONTRACT (context: an intermediate role is not penalised for reporting in its own "
        f"format) ===\n{CONTRACT}\n\n=== CHECKS ===\n{CODE_CHECKS}\n\n"
        f"=== OUTPUT A ===\n{output_a.strip() or '(empty)'}\n\n"
        f"{MASPO_COMPARE_PHRASE}\n{output_b.strip() or '(empty)'}\n\n"
        "=== QUESTION ===\nWhich output is more correct for this role, more faithful to the task's constraints and "
        "more useful to the agents after it? Prefer grounded, complete detail without invention. "
        'Respond ONLY with "A" or "B".'
    )
