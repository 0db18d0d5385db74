"""The Hydra app (``python -m optimizers.protocol.run``): the command line and Hydra's composed
config -> one ``JobConfig`` (``hydra_config``) -> checks (``preflight``) -> the job (``app.run_task``).

May import: every room below it (``grid``, ``job``, ``aggregate``, ``report``); nothing imports it
except the doors.
"""
