"""Errors of the run protocol. ``JobError`` is what a user can act on: the app exits 2."""

from __future__ import annotations


class JobError(Exception):
    """Bad configuration, unreachable endpoint, a job folder that belongs to another job, ...

    Its message is one line, phrased for the person who ran the command.
    """


class JobMismatch(JobError):
    """The job folder holds a different job (its ``job.json`` disagrees with this config)."""


class VersionMismatch(JobMismatch):
    """The job folder was made by other code versions (scorer, team runtime or method)."""


class PhaseOrderError(JobError):
    """A phase was asked for before the phase it depends on finished."""


class TestLockedError(JobError):
    """Test problems were requested before the deployment decision was sealed."""

    __test__ = False
