"""lcb-grid's submitit launchers (``hydra/launcher=submitit_slurm`` and ``submitit_local``).

They run jobs exactly as hydra-submitit-launcher does (its task function and checkpointing are
reused), and add what a cluster needs (see ``launcher.py``): submit and leave, a readable sweep
manifest for ``python -m optimizers.protocol.grid --status``, a resource check against the
partition's nodes, self-requeue on pre-timeout and preemption signals with bounded counts, and
job-state polling that works without SLURM accounting.

The yaml files in ``conf/hydra/launcher/`` are the only definitions of those two names: the
published plugin's same-named schemas are dropped from Hydra's ConfigStore (Hydra would otherwise
merge them into our files and warn, three times per command, that this is deprecated); our schemas
live under ``lcb_submitit_slurm`` / ``lcb_submitit_local``, named in the files' defaults lists.
"""

from hydra_plugins.lcb_grid_submitit.config import register

register()
