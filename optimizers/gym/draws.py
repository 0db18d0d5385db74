"""What the world and the scripted models share besides the language: reproducible draws and
the reflector's channel knobs (neither says anything about a world's table)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

# Field metadata: left out of a world's digest while at its default (knobs added after results
# were recorded, so those results stay valid).
OMIT_DEFAULT = {"omit_default": True}


def unit_draw(*parts: object) -> float:
    """A reproducible uniform number in [0, 1) from any parts (the request seed among them)."""
    digest = hashlib.sha256("\x00".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass(frozen=True, slots=True)
class Channel:
    """What the scripted reflector is told: knobs of its noise, never the world's table.

    ``fix_rate``: the chance it acts on a symptom it reads; ``garble_rate``: the chance it then
    misreads the concept (writes a random one of the lexicon); ``paraphrase``: it writes a random
    instruction form (else the first); ``blind``: the concept keys blind edits draw from (empty:
    the whole lexicon; the legacy corner lists the world's own, as the first gym did);
    ``legacy_reading``: it lists the sentences it reads in its vocabulary's order (the first
    gym's reading) instead of their order of appearance (off by default).
    """

    fix_rate: float = 0.6
    garble_rate: float = 0.1
    paraphrase: bool = True
    blind: tuple[str, ...] = ()
    legacy_reading: bool = field(default=False, metadata=OMIT_DEFAULT)
