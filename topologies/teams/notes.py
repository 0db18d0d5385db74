"""Facts about the team that the runtime states to each agent, outside the editable prompts.

The seed role prompts are written to hold at every team size; the exact facts (pipeline order,
worker list, tools, budgets) are injected here so they can never be wrong, and optimizers cannot
edit them away. ``compose`` assembles a system prompt: editable role prompt, team note,
communication-format contract, output contract (last, so it is the final instruction).
"""

from __future__ import annotations

from collections.abc import Sequence

from topologies.teams.layouts import Stage, Worker

_PYTHON_EXEC = ("python_exec(code, stdin) — runs a Python program in a fresh sandboxed subprocess "
                "and returns its exit status, stdout and stderr")


def tools_line(has_python_exec: bool, extra: Sequence[str] = ()) -> str:
    tools = ([_PYTHON_EXEC] if has_python_exec else []) + list(extra)
    if not tools:
        return "Tools: none. You cannot run code in this step; reason carefully instead."
    return "Tools:\n" + "\n".join(f"- {tool}" for tool in tools)


def single_note(max_calls: int) -> str:
    return "\n".join([
        "## Your situation",
        "You work alone. You receive the problem statement and reply with your solution.",
        tools_line(True),
        f"You can make at most {max_calls} model calls (tool rounds) in total.",
    ])


def independent_note(team_size: int, max_calls: int) -> str:
    return "\n".join([
        "## Your situation",
        f"You are one of {team_size} coders who solve the same problem independently; you cannot "
        "see or contact the others. The team submits the program written by the most coders "
        "(compared after normalizing whitespace); ties go to the lowest-numbered coder.",
        tools_line(True),
        f"You can make at most {max_calls} model calls (tool rounds).",
    ])


def sequential_note(stages: Sequence[Stage], index: int, max_calls: int) -> str:
    stage = stages[index]
    order = " → ".join(s.role for s in stages)
    before = ", ".join(s.role for s in stages[:index]) or "none (you are first)"
    after = ", ".join(s.role for s in stages[index + 1:]) or "none (you are last)"
    lines = [
        "## Your place in the team",
        f"This is a sequential pipeline: {order}. You are stage {index + 1} of {len(stages)} "
        f"({stage.role}); each stage runs once.",
        f"You receive the problem statement and the hand-offs of the earlier stages: {before}.",
        f"Your reply is handed to the later stages: {after}.",
        tools_line(stage.has_tools),
    ]
    if stage.has_tools:
        lines.append(f"You can make at most {max_calls} model calls (tool rounds).")
    return "\n".join(lines)


def manager_note(workers: Sequence[Worker], max_turns: int) -> str:
    if not workers:  # a masked run without workers: the manager is on its own
        team = ["## Your team", "No workers are available in this run: you solve the problem yourself."]
    else:
        roster = "\n".join(f"- {w.tool_name}(instructions, code=\"\"): {w.role} — {w.job}" for w in workers)
        team = [
            "## Your team",
            "You lead these workers; you reach each one only by calling its tool:",
            roster,
            "A worker sees only the problem statement and what you put in the call (instructions and "
            "optional code, passed verbatim) — not this conversation. Its reply comes back to you as "
            "the tool result. You can call several tools in one reply; they run concurrently.",
        ]
    return "\n".join([
        *team,
        tools_line(True),
        f"You have at most {max_turns} turns (model calls). The run ends when you reply without "
        "calling a tool; that reply is your final answer.",
    ])


def worker_note(worker: Worker, max_calls: int) -> str:
    return "\n".join([
        "## Your place in the team",
        f"You are {worker.role}, a worker under a manager. You receive only the problem statement "
        "and the manager's instructions (with any code it passed); you do not see the manager's "
        "conversation or other workers. Your final reply goes back to the manager as the result.",
        tools_line(True),
        f"You can make at most {max_calls} model calls (tool rounds) for this task.",
    ])


def debater_note(team_size: int, rounds: int, max_calls: int) -> str:
    return "\n".join([
        "## Your situation",
        f"You are one of {team_size} peers in a debate of {rounds} round(s). In the first round "
        "every peer solves the problem alone. In each later round you receive the other peers' "
        "previous answers and give your revised answer. After the last round the team submits "
        "the program most peers gave (compared after normalizing whitespace); ties go to the "
        "lowest-numbered peer.",
        tools_line(True),
        f"You can make at most {max_calls} model calls (tool rounds) per round.",
    ])


def compose(role_prompt: str, note: str, format_contract: str, output_contract: str) -> str:
    parts = [role_prompt.strip(), note.strip(), format_contract.strip(), output_contract.strip()]
    return "\n\n".join(part for part in parts if part)
