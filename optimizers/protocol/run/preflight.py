"""Pre-flight checks of one job, without any model call: everything that could stop it at start.

``preflight(job)`` runs the checks the app runs before a job folder exists (``check_job``) and
what the engine does before its first model call: the config's own checks, the team and its seed
candidate, the split and selection rows, the job identity (which loads the method and its code
version). ``grid --check`` runs it for every job of every ``lcb_grid*`` sweep.
"""

from __future__ import annotations

from optimizers.protocol.grid.config import JobConfig


class PreflightError(ValueError):
    """A job that would fail at start; the message is one line."""


class MethodNotLoadable(PreflightError):
    """The job's method cannot be loaded in this build (module or config missing)."""


def preflight(job: JobConfig, *, grid_job: bool = True) -> None:
    """Raise ``PreflightError`` when ``job`` would fail before its first model call (or, for a
    grid job, run non-conformant)."""
    from optimizers.protocol.grid import cells
    from optimizers.protocol.job.errors import JobError
    from optimizers.protocol.run.hydra_config import ConfigError, check_job
    from optimizers.protocol.job.jobspec import JobIdentity, validate_config
    from optimizers.protocol.job.lcb_system import apply_candidate, base_team_spec, seed_candidate
    from optimizers.protocol.job.splits import selection_split, split_ids_for
    from optimizers.registry import MethodUnavailable, UnknownMethod, get_optimizer_class

    try:
        get_optimizer_class(job.method)
    except (MethodUnavailable, UnknownMethod) as exc:
        raise MethodNotLoadable(str(exc)) from None
    try:
        check_job(job)
        validate_config(job)
        base = base_team_spec(job.topology, team_size=job.team_size, communication=job.communication,
                              rounds=job.rounds, max_turns=job.max_turns)
        seed = seed_candidate(base)
        apply_candidate(base, seed)
        split_ids = split_ids_for(job.data, job.splits)
        selection_split(split_ids, job.selection, job.selection_size)
        identity = JobIdentity.build(job, base_spec=base, seed_candidate=seed, split_ids=split_ids)
    except (ConfigError, JobError, ValueError, OSError) as exc:
        raise PreflightError(" ".join(str(exc).split())) from None
    if grid_job:
        standing = cells.conformance(job)
        if not identity.in_grid or not standing.conformant:
            raise PreflightError("not a conformant grid job: " + "; ".join(standing.reasons))
