"""LiveCodeBench's implicit-import prelude (stdlib only; the sandbox child loads this file).

Same modules in the same order as the official harness: star-imports first (later ones win, so
``builtins.pow`` replaces ``math.pow`` and typing's names come last), then plain imports, then
the recursion limit.
"""

from __future__ import annotations

PRELUDE_MODULES = ("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math",
                   "random", "statistics", "itertools", "functools", "operator", "io", "sys",
                   "json", "builtins", "typing")
PRELUDE_SOURCE = (
    "".join(f"from {name} import *\n" for name in PRELUDE_MODULES)
    + "".join(f"import {name}\n" for name in PRELUDE_MODULES if name not in ("builtins", "typing"))
    + "sys.setrecursionlimit(50000)\n"
)
