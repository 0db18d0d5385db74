"""MAMUT-GEPA's side of the gepa seam: team-level reflective records and its own proposer.

It reuses GEPA's adapter for evaluation (budgeted rollouts, candidate book, validation
bookkeeping) with ``every_call_charged``: as in the reference (``cache_evaluation=False``) every
engine call is a fresh, charged rollout with a new seed, never served from the rollout cache.
It changes the two things the method is about:

- ``make_reflective_dataset``: for each role to update, one record per row in which that role
  acted, as the reference builds it: ``Inputs`` is JSON of the task, the component and the
  *whole* source-tagged team trajectory (every message, uncut); ``Generated Outputs`` is JSON of
  that role's own messages; the feedback is only the team's global score and status
  (``Global team score=1.000000; status=success``): every role is judged by the team's
  trajectory-level score. ``rich_feedback`` adds the submitted program and our verdict
  (outcome, passed k/n; never hidden-test content);
- ``propose_new_texts``: renders gepa's instruction-proposal prompt with MAMUT's template (keep
  the role self-contained, its responsibilities in the topology and its output contract), asks
  the reflection model at the method's temperature and reads the text between the BEGIN/END
  markers. A component whose proposal changes nothing is dropped; when nothing changed at all
  the proposal is empty and gepa skips it without evaluating a child.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from optimizers.evaluator import Rollout
from optimizers.gepa.adapter import LcbGEPAAdapter, NoUsableProposal, ask_for_proposal
from optimizers.reflection import ReflectionModel, agents_in_trace, outcome_line, team_description, team_trajectory

BEGIN = "BEGIN_PROMPT"
END = "END_PROMPT"
_FENCED = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)
_MARKED = re.compile(rf"^[ \t]*{BEGIN}[ \t]*\n(.*?)\n[ \t]*{END}[ \t]*$", re.DOTALL | re.MULTILINE)


def task_of(trace: Sequence[Mapping[str, Any]]) -> str:
    """The problem as the team got it: the first user message, whole."""
    return next((str(m.get("content", "")) for m in trace if m.get("kind") == "user"), "")


def global_feedback(rollout: Rollout) -> str:
    """The reference's feedback text: the team's score and status, nothing else."""
    return f"Global team score={rollout.score:.6f}; status={rollout.status.value}"


@dataclass
class ProposalTally:
    """What came of the proposals (reported in the method's metadata)."""

    asked: int = 0  # reflection calls for a component
    changed: int = 0  # components that got a new text
    unchanged: int = 0  # the model returned the current text: nothing to evaluate
    unreadable: int = 0  # no text between the markers (nor in a fenced block)
    no_reply: int = 0  # the reflection call gave nothing usable (empty, failed, cut off)
    skipped_proposals: int = 0  # proposals in which no component changed (gepa evaluates nothing)
    by_component: dict[str, dict[str, int]] = field(default_factory=dict)

    def note(self, key: str, outcome: str) -> None:
        setattr(self, outcome, getattr(self, outcome) + 1)
        table = self.by_component.setdefault(key, {})
        table[outcome] = table.get(outcome, 0) + 1

    def as_dict(self) -> dict[str, Any]:
        return {"asked": self.asked, "changed": self.changed, "unchanged": self.unchanged,
                "unreadable": self.unreadable, "no_reply": self.no_reply, "skipped_proposals": self.skipped_proposals,
                "by_component": {k: dict(v) for k, v in sorted(self.by_component.items())}}


def component_label(key: str) -> str:
    if key.startswith("role/"):
        return f"the system prompt of the `{key[len('role/'):]}` role"
    return f"the team protocol text `{key[len('protocol/'):]}` (every agent reads it when work is handed over)"


def engine_placeholders() -> tuple[str, str]:
    """The (current text, records) placeholders of the installed gepa's proposal renderer.

    gepa 0.0.27 (the reference's pin) names them ``<curr_instructions>`` and
    ``<inputs_outputs_feedback>``, 0.1.x ``<curr_param>`` and ``<side_info>``; the rendering is
    otherwise the same, so naming them as the engine does gives the same prompt on both."""
    from gepa.strategies.instruction_proposal import InstructionProposalSignature

    try:
        InstructionProposalSignature.validate_prompt_template("<curr_param>\n<side_info>")
    except ValueError:
        return "<curr_instructions>", "<inputs_outputs_feedback>"
    return "<curr_param>", "<side_info>"


class NoOpProposal(RuntimeError):
    """No component changed: the engine must skip this proposal without evaluating a child."""


def engine_skips_empty_proposals() -> bool:
    """Whether the installed gepa skips an empty proposal by itself (0.1.x does, without
    evaluating a child). 0.0.27 would evaluate a copy of the parent; there, as in the reference,
    the proposer raises and the engine catches it and skips. (Raising under 0.1.x would instead
    make it retry the proposal once more, a second reflection call.)"""
    from importlib import metadata

    try:
        major, minor = (int(part) for part in metadata.version("gepa").split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        return True
    return (major, minor) >= (0, 1)


def proposal_template(key: str, team: str, placeholders: tuple[str, str] = ("<curr_param>", "<side_info>")) -> str:
    """gepa template for one component of a jointly optimized team (``placeholders``: the engine's
    names for the current text and the records, see ``engine_placeholders``)."""
    current, records = placeholders
    what = component_label(key)
    return (
        f"You are improving {what} in {team}. The agents solve competitive programming problems "
        "(standard-input programs or LeetCode-style class methods) together. The team is scored as a "
        "whole by hidden tests, and all of its prompts are optimized jointly, one at a time.\n\n"
        f"The current text of {what}, between the markers:\n{BEGIN}\n{current}\n{END}\n\n"
        "Runs of the whole team with the current prompts. Each gives, as JSON, the task and the whole team "
        "trajectory (every message with its source role, agent and kind), then the messages of this "
        "component's own role, and the team's global feedback (score 1 means every graded hidden test passed; "
        f"the hidden tests themselves are never shown):\n\n{records}\n\n"
        f"Write an improved version of {what}.\n"
        "- Keep it self-contained: it must make sense on its own, without referring to these runs, to "
        "the other prompts or to this revision.\n"
        "- Keep the responsibilities it has in the team (what it receives, what it does, whom it hands "
        "work to) and its output contract (answer format, markers, tool use) exactly as the current "
        "text states them.\n"
        "- Correct the behaviours that led to failures and add concrete, general strategies (never "
        "solutions to these particular problems).\n"
        f"Reply with the complete new text between a line {BEGIN} and a line {END}."
    )


def read_proposal(reply: str) -> str | None:
    """The proposed text, read as the reference reads it: the first marked block (BEGIN/END)
    if it is non-empty, else the last fenced block, else everything after a BEGIN line whose END
    is missing; None when there is none of these (the component then stays as it is)."""
    first = _MARKED.search(reply)
    if first is not None and first.group(1).strip():
        return first.group(1).strip()
    fenced = [block.strip() for block in _FENCED.findall(reply) if block.strip()]
    if fenced:
        return fenced[-1]
    opened = re.search(rf"^[ \t]*{BEGIN}[ \t]*$", reply, flags=re.MULTILINE)
    if opened is not None:
        tail = reply[opened.end():].replace(END, "").strip()
        return tail or None
    return None


class MAMUTAdapter(LcbGEPAAdapter):
    """GEPA's evaluation seam with MAMUT's reflective records and proposer."""

    every_call_charged = True  # the reference's cache_evaluation=False

    def __init__(self, *, reflection: ReflectionModel, role_names: Sequence[str], rich_feedback: bool,
                 temperature: float, top_p: float, **adapter_options: Any) -> None:
        super().__init__(**adapter_options)
        self.reflection = reflection
        self.role_names = list(role_names)
        self.agents_seen = 0  # several agents may share one role prompt (independent, decentralized)
        self.rich_feedback = rich_feedback
        self.temperature = temperature
        self.top_p = top_p
        self.tally = ProposalTally()
        self.placeholders = engine_placeholders()
        self.skip_by_empty_reply = engine_skips_empty_proposals()

    # -- reflective dataset ---------------------------------------------------------------------

    def _record(self, key: str, rollout: Rollout) -> dict[str, Any] | None:
        trace = rollout.trace
        self.agents_seen = max(self.agents_seen, agents_in_trace(trace))
        trajectory = team_trajectory(trace)
        if key.startswith("role/"):
            role = key[len("role/"):]
            own = [m for m in trajectory if m["source"] == role and m["kind"] == "ai"]
            if not own:
                return None  # as in the reference, a row where the role never acted is left out
        else:
            own = []  # a protocol text has no turns of its own: the trajectory shows its effect
        inputs: dict[str, Any] = {"task": task_of(trace), "target_component": key,
                                  "source_tagged_trajectory": trajectory}
        feedback = global_feedback(rollout)
        if self.rich_feedback:
            inputs["submitted_program"] = rollout.answer or "(no program was extracted)"
            feedback += "\n" + outcome_line(rollout)
        return {"Inputs": json.dumps(inputs, ensure_ascii=False, default=str),
                "Generated Outputs": json.dumps({"component": key, "invocations": own}, ensure_ascii=False,
                                                default=str),
                "Feedback": feedback}

    # -- proposer (gepa calls this instead of its own reflective proposer) -----------------------

    def propose_new_texts(self, candidate: dict[str, str],
                          reflective_dataset: Mapping[str, Sequence[Mapping[str, Any]]],
                          components_to_update: list[str]) -> dict[str, str]:
        from gepa.strategies.instruction_proposal import InstructionProposalSignature

        if self.watch.fatal is not None:
            raise self.watch.fatal  # a dead reflection model: ask nothing more (the stopper ends the run)
        new_texts: dict[str, str] = {}
        for key in components_to_update:
            records = list(reflective_dataset.get(key) or ())
            if not records:
                continue
            prompt = InstructionProposalSignature.prompt_renderer({
                "current_instruction_doc": candidate[key],
                "dataset_with_feedback": records,
                "prompt_template": proposal_template(key, team_description(self.role_names, self.agents_seen),
                                                     self.placeholders),
            })
            self.tally.asked += 1
            try:
                reply = ask_for_proposal(self.reflection, self.bridge, str(prompt),
                                         temperature=self.temperature, top_p=self.top_p)
            except NoUsableProposal:
                # This component stays as it is. Handled here rather than raised: gepa 0.1.x
                # would ask the proposer a second time for a raised proposal.
                self.tally.note(key, "no_reply")
                continue
            text = read_proposal(reply)
            if text is None:
                self.tally.note(key, "unreadable")
            elif text == candidate[key].strip():
                self.tally.note(key, "unchanged")
            else:
                self.tally.note(key, "changed")
                new_texts[key] = text
        if not new_texts:
            # Nothing changed: the engine skips the proposal, so no rollout is spent on a copy.
            self.tally.skipped_proposals += 1
            if not self.skip_by_empty_reply:
                raise NoOpProposal("MAMUT-GEPA: the proposal changed no component")
        return new_texts
