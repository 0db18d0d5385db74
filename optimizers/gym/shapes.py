"""Reply shapes: where each method's reflection prompt expects its edit.

The gym does not keep its own copy of every method's reply format. It reuses the one table the
methods' own tests keep in sync with their prompts (``topologies.scripted.reply_shapes``:
``reflection_reply``) and puts the gym reflector's edit where that table puts its marker line.
So when a method changes its prompt or parser (and its tests), the gym follows.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from topologies.scripted import reply_shapes

_STYLE = re.compile(r"Style of the new prompt: ([a-z\-]+) -")
_VARIANT = re.compile(r"^VARIANT:$", re.MULTILINE)


def reply(method: str, purpose: str, prompt: str, edit: Callable[[int], str]) -> str | None:
    """The reply to one reflection request with ``edit(i)`` as the i-th proposed edit (None: no
    shape is known for this method/purpose)."""
    style = _STYLE.search(prompt)
    marked = (None, style.group(1) if style else "pattern-based")  # every style gets an edit
    raw = reply_shapes.reflection_reply(method, purpose, prompt, useful=True, marked=marked)
    if raw is None:
        return None
    variants = len(_VARIANT.findall(raw))
    if variants > 1:  # a pool of reworded prompts: each one its own independent edit
        return "\n".join(f"VARIANT:\n{edit(i)}" for i in range(variants))
    return raw.replace(reply_shapes.MARKER, edit(0))
