"""Reply shapes: where each method's reflection prompt expects its edit.

The gym does not keep its own copy of every method's reply format. It reuses the one table the
methods' own tests keep in sync with their prompts (``tests/optimizers/scripted_world.py``:
``reflection_reply``), loaded by path, and puts the gym reflector's edit where that table puts its
marker line. So when a method changes its prompt or parser (and its tests), the gym follows.
This needs a repository checkout (the gym is a development benchmark, like the test suite).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from types import ModuleType

TABLE = Path(__file__).resolve().parents[2] / "tests" / "optimizers" / "scripted_world.py"
_STYLE = re.compile(r"Style of the new prompt: ([a-z\-]+) -")
_VARIANT = re.compile(r"^VARIANT:$", re.MULTILINE)


class ShapesUnavailable(RuntimeError):
    """The reply-shape table is not in this checkout."""


@lru_cache(maxsize=1)
def table() -> ModuleType:
    if not TABLE.exists():
        raise ShapesUnavailable(f"the gym needs the reply-shape table {TABLE} (a repository checkout)")
    spec = importlib.util.spec_from_file_location("_gym_reply_shapes", TABLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def reply(method: str, purpose: str, prompt: str, edit: Callable[[int], str]) -> str | None:
    """The reply to one reflection request with ``edit(i)`` as the i-th proposed edit (None: no
    shape is known for this method/purpose)."""
    shapes = table()
    style = _STYLE.search(prompt)
    marked = (None, style.group(1) if style else "pattern-based")  # every style gets an edit
    raw = shapes.reflection_reply(method, purpose, prompt, useful=True, marked=marked)
    if raw is None:
        return None
    variants = len(_VARIANT.findall(raw))
    if variants > 1:  # a pool of reworded prompts: each one its own independent edit
        return "\n".join(f"VARIANT:\n{edit(i)}" for i in range(variants))
    return raw.replace(shapes.MARKER, edit(0))
