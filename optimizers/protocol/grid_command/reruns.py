"""Jobs to rerun: their optimization failed on infrastructure (``grid --status``'s second table).

Such a job is not lost: it deployed the seed prompts, as the protocol says, and counts in the
aggregate's intent-to-treat estimate. But it says nothing about what the method does when it runs
(the per-protocol estimate leaves it out), so ``grid --status`` lists it with the way to run it
again: remove its phase records (journals stay, so nothing paid for twice is lost) and re-launch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PHASE_RECORDS = ("result.json", "test.json", "selection.json", "optimization.json")


@dataclass(frozen=True, slots=True)
class Rerun:
    path: Path
    method: str
    registry_key: str
    model: str
    seed: int
    error: str


def infrastructure_failed(runs_root: Path) -> list[Rerun]:
    """Finished jobs under ``runs_root`` whose optimization failed on infrastructure."""
    from optimizers.journal import SealError, read_sealed
    from optimizers.protocol.aggregate.summary import find_results
    from optimizers.protocol.grid import cells

    found = []
    for path in find_results([runs_root]):
        try:
            data = read_sealed(path)
        except (SealError, OSError):
            continue
        optimization = data.get("optimization") or {}
        if optimization.get("status") == "completed" or optimization.get("status") is None:
            continue
        cell = data.get("cell") or {}
        found.append(Rerun(path.parent, str(cell.get("method")), str(cell.get("registry_key") or cell.get("topology")),
                           cells.model_key(str(cell.get("model"))), int(data.get("seed", -1)),
                           " ".join(str(optimization.get("error") or optimization.get("failure_kind") or "").split())[:200]))
    return found


def rerun_lines(runs_root: Path) -> Iterator[str]:
    reruns = infrastructure_failed(runs_root)
    if not reruns:
        return
    yield ""
    yield "\t".join(("rerun", "method", "registry_key", "model", "seed", "path", "cause"))
    for job in reruns:
        yield "\t".join(("infrastructure_failed", job.method, job.registry_key, job.model, str(job.seed),
                         str(job.path), job.error or "-"))
    yield (f"{len(reruns)} job(s) deployed the seed prompts because their optimization failed on infrastructure; "
           "they count in the intent-to-treat estimate only. To rerun one: remove "
           f"{', '.join(PHASE_RECORDS)} from its folder (journals stay) and re-launch its sweep")
