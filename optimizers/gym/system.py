"""The gym's ``System``: the real team runtime on a world's scripted model, with scripted grading.

Per rollout the world draws the outcome from the request seed and the candidate's configuration
(as the acting agents see it), then the real team (``run_team`` via the LCB team system) runs on a
``RolloutModel`` that answers every turn with that outcome's program and the roles' symptoms.
``probe`` is the same environment answering one agent's probe (MAPRO): a rollout of the seed team
with the probed prompt in place, whose outcome and symptoms are drawn the same way (with the
world's ``legacy_probe``: the first gym's noise-free read of the optimum instead).

Grading is scripted for speed (the one shortcut of the gym): the submission passes iff it is the
problem's reference program; the verdict has the real grader's shape and feedback wording (counts
and outcome kinds only). Everything else (team runtime, masks, evaluator, budget, journals) is real.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from lcb.problem import Problem
from lcb.verdict import Outcome, Verdict
from optimizers.candidate import Candidate
from optimizers.evaluator import AttemptResult
from optimizers.gym.models import RolloutModel, reference_programs
from optimizers.gym.slots import GymProblems, base_problem
from optimizers.gym.world import PROTOCOL_PREFIX, Configuration, World
from topologies.types import Decoding, TeamRoster, TeamSpec

TASK_MODEL_ID = "gym/scripted-team-model"
OPTIMIZE_TESTS = 3  # hidden tests an optimization rollout is graded on (as in the LCB system)


async def scripted_grade(problem: Problem, code: str | None, *, tests: Any = "hidden",
                         max_tests: int | None = None, **_: Any) -> Verdict:
    """Pass iff ``code`` is the reference program; a wrong program fails its first test."""
    total = len(problem.private_tests) or 1
    total = min(total, max_tests) if max_tests else total
    if code is None or not code.strip():
        return Verdict(problem.id, Outcome.NO_CODE, 0, total, (), f"no code to grade; passed 0/{total} hidden tests")
    if code.strip() == reference_programs()[base_problem(problem.id)]["correct"].strip():
        return Verdict(problem.id, Outcome.PASSED, total, total, (), f"passed {total}/{total} hidden tests")
    return Verdict(problem.id, Outcome.WRONG_ANSWER, 0, total, (),
                   f"passed 0/{total} hidden tests; first failure: wrong_answer on test 1 (stdin)")


def load_builtin_problems() -> Mapping[str, Problem]:
    """Built-in problems and the synthetic cases of generated instances (made on first use)."""
    return GymProblems()


@dataclass(frozen=True, slots=True)
class GymSystem:
    """Runs one candidate on one problem in ``world`` (the evaluator's ``System``)."""

    world: World
    base_spec: TeamSpec
    roster: TeamRoster
    problems: Mapping[str, Problem] = field(default_factory=load_builtin_problems)
    supports_masks: ClassVar[bool] = True

    def acting_roles(self, active: Collection[str] | None) -> set[str] | None:
        if active is None:
            return None
        names = set(active) | set(self.roster.always_active)
        return {self.roster.role_of(name) for name in names}

    def configuration(self, candidate: Candidate, active: Collection[str] | None = None) -> Configuration:
        return self.world.configuration(candidate.components, active_roles=self.acting_roles(active))

    def draw(self, components: Mapping[str, str], problem_id: str, seed: int,
             active: Collection[str] | None = None) -> tuple[bool, dict[str, list[str]]]:
        """One rollout's outcome and, when it fails, each component's symptom lines."""
        roles = self.acting_roles(active)
        config = self.world.configuration(components, active_roles=roles)
        solved = self.world.solved(config, problem_id, seed)
        if solved:
            return True, {}
        return False, self.world.symptoms(components, config, seed, problem_id, active_roles=roles)

    def rollout_model(self, candidate: Candidate, problem_id: str, seed: int,
                      active: Collection[str] | None) -> RolloutModel:
        solved, placed = self.draw(candidate.components, problem_id, seed, active)
        by_role: dict[str, list[str]] = {}
        shared: list[str] = []
        for key, lines in placed.items():
            if key.startswith(PROTOCOL_PREFIX):
                shared.extend(lines)
            else:
                by_role.setdefault(key.partition("/")[2], []).extend(lines)
        return RolloutModel(model_id=TASK_MODEL_ID, problem_id=problem_id, solved=solved, symptoms=by_role,
                            shared_symptoms=shared)

    def probe(self, seed_components: Mapping[str, str], role_prompt: str, context: str, seed: int) -> str:
        """An agent's answer under a candidate role prompt (MAPRO's probes): the seed team with
        that prompt in place of the components whose role it names (the main one when it names
        none) runs once; the reply is what those components' agents said and the program."""
        from optimizers.gym.models import problem_in, program

        named = [k for k in self.world.components if f"`{k.partition('/')[2]}`" in role_prompt
                 or k.partition("/")[2] in role_prompt]
        replaced = named or [self.world.main]
        problem_id = problem_in(context)
        if self.world.legacy_probe:  # the first gym's probe: read from the optimum, no rollout
            lines, correct = self.world.probe_from_optimum(role_prompt)
            answer = program(problem_id, correct) if problem_id else "I would start by restating the task."
            return "\n".join([*lines, answer])
        if problem_id is None:
            return "I would start by restating the task."
        components = {**seed_components, **{k: role_prompt for k in replaced}}
        solved, placed = self.draw(components, problem_id, seed)
        lines = [line for k in replaced for line in placed.get(k, ())]
        return "\n".join([*lines, program(problem_id, solved)])

    async def run(self, candidate: Candidate, problem_id: str, *, seed: int, mode: str,
                  active: Collection[str] | None = None) -> AttemptResult:
        from optimizers.protocol.job.lcb_system import LcbTeamSystem

        system = LcbTeamSystem(
            base_spec=self.base_spec,
            client=self.rollout_model(candidate, problem_id, seed, active),
            problem=self.problems.__getitem__,
            optimize_decoding=Decoding(temperature=0.7, top_p=0.95, max_tokens=4096),
            eval_decoding=Decoding(temperature=0.0, max_tokens=4096),
            optimize_max_tests=OPTIMIZE_TESTS,
            grade=scripted_grade,
        )
        masked = {"active": active} if active is not None else {}
        return await system.run(candidate, problem_id, seed=seed, mode=mode, **masked)


def seed_candidate(world: World) -> tuple[Candidate, TeamSpec, TeamRoster]:
    """The world's seed: the topology's real seed prompts plus the facts the world says the seed
    already carries (each appended to its home component, in its canonical form) and its seed
    distractors (in the main component)."""
    from optimizers.protocol.job.lcb_system import seed_candidate as team_seed
    from topologies.prompts import default_team_spec
    from topologies.teams.layouts import team_roster

    spec = default_team_spec(world.topology, team_size=world.team_size)
    seed = team_seed(spec)
    additions: dict[str, str] = {}
    placed = [(f.home, f.concept) for f in world.facts if f.id in world.seed_facts]
    placed += [(world.main, d.concept) for d in world.distractors if d.id in world.seed_distractors]
    for home, concept in placed:
        base = additions.get(home, seed.components[home])
        additions[home] = f"{base}\n{world.text(concept)}"
    if additions:
        seed = type(seed)({**seed.components, **additions}, seed.settings, seed.demos)
    return seed, spec, team_roster(world.topology, world.team_size)
