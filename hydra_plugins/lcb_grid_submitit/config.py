"""The launchers' schemas (typed, so a wrong value is a one-line config error)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra_plugins.hydra_submitit_launcher.config import LocalQueueConf, SlurmQueueConf

GROUP = "hydra/launcher"
# The names our yaml files own; the published plugin registers schemas under them.
SHADOWED = ("submitit_slurm", "submitit_local")


@dataclass
class LcbLocalConf(LocalQueueConf):
    _target_: str = "hydra_plugins.lcb_grid_submitit.launcher.LocalLauncher"
    # Wait for the jobs and return their results (false: return once they are submitted).
    wait: bool = True


@dataclass
class LcbSlurmConf(SlurmQueueConf):
    _target_: str = "hydra_plugins.lcb_grid_submitit.launcher.SlurmLauncher"
    wait: bool = False
    # Requeues after a preemption signal (timeouts are bounded by max_num_timeout).
    max_num_preemption: int = 10
    # Refuse requests no node of the partition can satisfy (instead of pending forever).
    check_resources: bool = True
    additional_parameters: dict[str, Any] = field(default_factory=dict)


def drop_shadowed_schemas() -> None:
    """Remove the published plugin's schemas for the names our yaml files own. Hydra's plugin scan
    executes every plugin module (again), in path order, so the published plugin may register
    after us: the app calls this once the scan is done (``optimizers.protocol.run.app``)."""
    group: dict[str, Any] = ConfigStore.instance().repo
    for part in GROUP.split("/"):
        group = group.get(part, {})
    for name in SHADOWED:
        group.pop(f"{name}.yaml", None)


def register() -> None:
    store = ConfigStore.instance()
    drop_shadowed_schemas()
    store.store(group=GROUP, name="lcb_submitit_local", node=LcbLocalConf, provider="lcb-grid")
    store.store(group=GROUP, name="lcb_submitit_slurm", node=LcbSlurmConf, provider="lcb-grid")
