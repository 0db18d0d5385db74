"""The LCB system behind the evaluator: Candidate -> TeamSpec -> team run -> grade.

Optimization rollouts use sampled decoding and the first ``optimize_max_tests`` hidden tests;
validation and test use greedy decoding and all hidden tests. The score is 1.0 iff the program
passes every test it was graded on. Feedback is the grader's safe text (counts and outcome kinds,
never hidden-test content) plus what the team itself reported (no code, a team error).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from lcb.problem import Problem
from lcb.verdict import Outcome as TestOutcome
from lcb.verdict import Verdict
from optimizers.candidate import Candidate
from optimizers.evaluator import MODE_EVALUATE, MODE_OPTIMIZE, AttemptResult
from topologies.types import CommunicationFormat, Decoding, ErrorKind, TeamSpec, Trajectory

TeamRunner = Callable[..., Awaitable[Trajectory]]
Grader = Callable[..., Awaitable[Verdict]]

# Settings a candidate may carry, by topology: only knobs the topology actually reads, so no
# method wastes budget searching a setting that changes nothing.
SEARCHABLE_SETTINGS: Mapping[str, tuple[str, ...]] = {"decentralized": ("rounds",)}
_SETTING_FIELDS = {"rounds": int, "max_turns": int}


def seed_candidate(spec: TeamSpec) -> Candidate:
    """The seed candidate of a team: its role prompts, editable protocol parts and settings."""
    components = {f"role/{name}": text for name, text in spec.roles.items()}
    components.update({f"protocol/{part}": text for part, text in spec.protocol.items()})
    settings = {name: getattr(spec, name) for name in SEARCHABLE_SETTINGS.get(spec.topology, ())}
    return Candidate(components, settings)


def apply_candidate(base: TeamSpec, candidate: Candidate) -> TeamSpec:
    """The team ``candidate`` describes; the role set must be exactly the base team's."""
    roles = candidate.roles()
    if set(roles) != set(base.roles):
        raise ValueError(
            f"candidate roles {sorted(roles)} do not match the team's roles {sorted(base.roles)}"
        )
    protocol = candidate.protocol()
    unknown = set(protocol) - set(base.protocol)
    if unknown:
        raise ValueError(f"candidate has protocol parts the team does not use: {sorted(unknown)}")
    updates: dict[str, Any] = {"roles": {name: roles[name] for name in base.roles},
                               "protocol": {**base.protocol, **protocol}}
    for name, value in candidate.settings.items():
        kind = _SETTING_FIELDS.get(name)
        if kind is None:
            raise ValueError(f"candidate setting {name!r} is not a team setting")
        updates[name] = kind(value)
    return replace(base, **updates)


def _trace(trajectory: Trajectory) -> tuple[dict[str, Any], ...]:
    return tuple(
        {
            "source": m.source,
            "agent": m.agent,
            "kind": m.kind,
            "content": m.content,
            **({"tool_calls": [c.get("name", "") for c in m.tool_calls]} if m.tool_calls else {}),
            **({"finish_reason": m.finish_reason} if m.finish_reason else {}),
        }
        for m in trajectory.messages
    )


def replies_by_role(trajectory: Trajectory) -> dict[str, dict[str, int]]:
    """Per role: model replies and how many of them were cut at the token limit."""
    counts: dict[str, dict[str, int]] = {}
    for message in trajectory.messages:
        if message.kind != "ai":
            continue
        row = counts.setdefault(message.source, {"replies": 0, "truncated": 0})
        row["replies"] += 1
        row["truncated"] += int(message.truncated)
    return counts


def _usage(trajectory: Trajectory) -> dict[str, int]:
    total = trajectory.usage
    return {
        "calls": total.calls,
        "prompt_tokens": total.prompt_tokens,
        "completion_tokens": total.completion_tokens,
        "tool_calls": total.tool_calls,
    }


@dataclass(frozen=True, slots=True)
class LcbTeamSystem:
    """Runs one candidate on one LCB problem with a team and grades the submission."""

    base_spec: TeamSpec
    client: Any  # ChatClient
    problem: Callable[[str], Problem]
    optimize_decoding: Decoding
    eval_decoding: Decoding
    optimize_max_tests: int | None = 3
    run_team: TeamRunner | None = None  # default: topologies.teams.run_team
    grade: Grader | None = None  # default: lcb.grading.agrade
    supports_masks: ClassVar[bool] = True  # run_team runs masked teams (``active=``)

    def _decoding(self, mode: str, seed: int) -> Decoding:
        base = self.optimize_decoding if mode == MODE_OPTIMIZE else self.eval_decoding
        return replace(base, seed=seed)

    def _max_tests(self, mode: str) -> int | None:
        return self.optimize_max_tests if mode == MODE_OPTIMIZE else None

    async def run(
        self, candidate: Candidate, problem_id: str, *, seed: int, mode: str, active: Collection[str] | None = None
    ) -> AttemptResult:
        if mode not in (MODE_OPTIMIZE, MODE_EVALUATE):
            raise ValueError(f"unknown mode {mode!r}")
        problem = self.problem(problem_id)
        spec = apply_candidate(self.base_spec, candidate)
        run_team = self.run_team or _default_run_team()
        masked = {"active": active} if active is not None else {}
        trajectory = await run_team(spec, problem, self.client, decoding=self._decoding(mode, seed), seed=seed,
                                    **masked)
        usage = _usage(trajectory)
        details: dict[str, Any] = {
            "extraction_rule": trajectory.extraction_rule,
            "usage_by_role": {role: _usage_dict(u) for role, u in trajectory.usage_by_role.items()},
            "replies_by_role": replies_by_role(trajectory),
        }
        if "active_agents" in trajectory.extras:  # the team's own record of who acted
            details["active_agents"] = list(trajectory.extras["active_agents"])
        if trajectory.error_kind is ErrorKind.INFRASTRUCTURE:
            return AttemptResult(
                score=0.0,
                feedback="",
                usage=usage,
                details=details,
                infrastructure_error=trajectory.error or "infrastructure failure",
            )
        grade = self.grade or _default_grade()
        # The grader turns a missing program into a NO_CODE verdict (usable, score 0).
        verdict = await grade(problem, trajectory.code, tests="hidden", max_tests=self._max_tests(mode))
        if verdict.outcome is TestOutcome.SANDBOX_ERROR:
            # Our harness failed, not the team: retry like any infrastructure failure.
            return AttemptResult(
                score=0.0, feedback="", usage=usage, details=details,
                infrastructure_error=f"sandbox error while grading: {verdict.feedback}",
            )
        feedback = verdict.feedback
        if trajectory.error:
            feedback = f"{feedback}\nteam error: {trajectory.error}"
        return AttemptResult(
            score=1.0 if verdict.solved else 0.0,
            feedback=feedback,
            verdict={
                "outcome": verdict.outcome.value,
                "passed": verdict.passed,
                "total": verdict.total,
            },
            answer=trajectory.code,
            trace=_trace(trajectory),
            usage=usage,
            details={**details, **({"team_error": trajectory.error} if trajectory.error else {})},
        )


def _usage_dict(usage: Any) -> dict[str, int]:
    return {
        "calls": usage.calls,
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "tool_calls": usage.tool_calls,
    }


def _default_run_team() -> TeamRunner:
    from topologies.teams import run_team

    return run_team


def _default_grade() -> Grader:
    from lcb.grading import agrade

    return agrade


def base_team_spec(
    topology: str, *, team_size: int, communication: str, rounds: int, max_turns: int | None = None
) -> TeamSpec:
    """The seed team of a condition (seed role prompts from benchmarks/lcb/prompts)."""
    from topologies.prompts import default_team_spec

    return default_team_spec(
        topology,
        team_size=team_size,
        communication=CommunicationFormat(communication),
        rounds=rounds,
        max_turns=max_turns,
    )


# ------------------------------------------------------------------------------------ model clients


def task_client(
    model: Any, *, max_retries: int | None = None, backoff_s: float | None = None, probe: bool = True,
    route_salt: int | str | None = None,
) -> Any:
    """The task model's ChatClient for a ``ModelSpec``; a ``JobError`` when it cannot be used.
    ``route_salt`` (the job id) seeds where the client's endpoint rotation starts."""
    from lcb.errors import LcbError
    from optimizers.protocol.job.errors import JobError
    from topologies.models import MODEL_ALIASES, make_client, resolve_model

    name = model.alias if model.alias in MODEL_ALIASES else model.id
    options: dict[str, Any] = {}
    if max_retries is not None:
        options["max_retries"] = max_retries
    if backoff_s is not None:
        options["backoff_s"] = backoff_s
    try:
        config = resolve_model(name, task_endpoints=list(model.endpoints) or None, **options)
    except LcbError as exc:
        raise JobError(str(exc)) from None
    if config.id != model.id:
        raise JobError(f"model {name!r} resolves to {config.id!r}, but the job is configured for {model.id!r}")
    if probe:
        probe_endpoints(config.endpoints, api_key=config.api_key)
    return make_client(config, route_salt=route_salt)


def reflection_client(model: Any, *, probe: bool = True) -> Any:
    """The optimizers' reflection model client (built only for methods that reflect)."""
    from lcb.errors import LcbError
    from optimizers.protocol.job.errors import JobError
    from topologies.models import make_client, resolve_reflection_model

    try:
        config = resolve_reflection_model(model.id, list(model.endpoints) or None)
    except LcbError as exc:
        raise JobError(str(exc)) from None
    if probe:
        probe_endpoints(config.endpoints, api_key=config.api_key)
    return make_client(config)


def probe_endpoints(endpoints: tuple[str, ...], *, api_key: str = "EMPTY", timeout_s: float = 10.0) -> None:
    """Fail fast (``JobError``) when none of the endpoints answers ``GET /models``."""
    import httpx

    failures = []
    for url in endpoints:
        try:
            response = httpx.get(f"{url.rstrip('/')}/models", timeout=timeout_s,
                                 headers={"Authorization": f"Bearer {api_key}"})
        except httpx.HTTPError as exc:
            failures.append(f"{url} ({type(exc).__name__})")
            continue
        if response.status_code < 500:
            return  # reachable (even a 404 means a server is there)
        failures.append(f"{url} (HTTP {response.status_code})")
    from optimizers.protocol.job.errors import JobError

    raise JobError(f"no model endpoint is reachable: {', '.join(failures)}")


