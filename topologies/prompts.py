"""Seed role prompts (benchmarks/lcb/prompts/<topology>/<role>.md) and default team specs.

The seed files are the editable starting point of every optimizer. Facts that depend on the team
size (pipeline order, worker list, tools, budgets) are not in them: the teams state those at run
time (``topologies.teams.notes``), so one prompt per role holds at every size. Hand-off
instructions live in ``<topology>/protocol/handoff.md`` and become ``TeamSpec.protocol``.
"""

from __future__ import annotations

from pathlib import Path

from topologies.teams.layouts import HANDOFF_TOPOLOGIES, LayoutError, all_role_names, default_max_turns, role_names
from topologies.types import CommunicationFormat, TeamSpec

PROMPTS_DIR = Path(__file__).resolve().parents[1] / "benchmarks" / "lcb" / "prompts"
PROTOCOL_PARTS: tuple[str, ...] = ("handoff",)


class SeedPromptError(LayoutError):
    """A seed prompt file is missing or empty."""


def _read(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise SeedPromptError(f"seed prompt file missing: {path}") from None
    if not text:
        raise SeedPromptError(f"seed prompt file is empty: {path}")
    return text


def seed_prompt_path(topology: str, role: str, prompts_dir: Path | None = None) -> Path:
    return (prompts_dir or PROMPTS_DIR) / topology / f"{role}.md"


def load_seed_roles(topology: str, team_size: int = 4, *, prompts_dir: Path | None = None) -> dict[str, str]:
    """``{role: prompt}`` for the roles of ``topology`` at ``team_size``, in acting order."""
    return {role: _read(seed_prompt_path(topology, role, prompts_dir))
            for role in role_names(topology, team_size)}


def load_seed_protocol(topology: str, *, prompts_dir: Path | None = None) -> dict[str, str]:
    """Editable protocol texts (``{"handoff": ...}``) for topologies with hand-offs, else ``{}``."""
    if topology not in HANDOFF_TOPOLOGIES:
        return {}
    base = (prompts_dir or PROMPTS_DIR) / topology / "protocol"
    return {part: _read(base / f"{part}.md") for part in PROTOCOL_PARTS}


def all_seed_files(prompts_dir: Path | None = None) -> list[Path]:
    """Every seed file the teams can need (for checks)."""
    from topologies.teams.layouts import TOPOLOGIES

    files = [seed_prompt_path(t, r, prompts_dir) for t in TOPOLOGIES for r in all_role_names(t)]
    base = prompts_dir or PROMPTS_DIR
    files += [base / t / "protocol" / f"{p}.md" for t in HANDOFF_TOPOLOGIES for p in PROTOCOL_PARTS]
    return files


def default_team_spec(
    topology: str,
    *,
    team_size: int | None = None,
    communication: CommunicationFormat | str = CommunicationFormat.FREEFORM,
    rounds: int = 2,
    max_turns: int | None = None,
    prompts_dir: Path | None = None,
) -> TeamSpec:
    """The seed team: seed prompts, the reference's defaults (size 4, 2 rounds, 26/13 turns).

    ``single`` always has size 1.
    """
    size = 1 if topology == "single" else (4 if team_size is None else team_size)
    return TeamSpec(
        topology=topology,
        roles=load_seed_roles(topology, size, prompts_dir=prompts_dir),
        communication=CommunicationFormat(communication),
        team_size=size,
        rounds=rounds,
        max_turns=max_turns if max_turns is not None else (
            default_max_turns(size) if topology == "centralized" else default_max_turns(4)),
        protocol=load_seed_protocol(topology, prompts_dir=prompts_dir),
    )
