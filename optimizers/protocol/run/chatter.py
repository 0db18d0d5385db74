"""Third-party chatter on a job's stderr: off unless ``--verbose``.

A job's stderr is for its own progress and notices. W&B prints banners, an advertisement for its
Weave product as soon as it sees LangChain or OpenAI imported, artifact progress and sync hints
(the tracker prints its own one-line sync hint instead); LangChain and LangSmith raise beta and
deprecation warnings about APIs the project pins on purpose. ``quiet_third_parties`` turns those
off for this process before any of them is imported; a variable the user set is left as it is,
so ``WANDB_SILENT=false`` still brings W&B's lines back.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, MutableMapping
from types import MappingProxyType
from typing import Any

QUIET_ENV: Mapping[str, str] = MappingProxyType({
    "WANDB_SILENT": "true",  # W&B's run banners, artifact progress and its multi-line sync hints
    "WANDB_DISABLE_WEAVE": "true",  # W&B's "Use W&B Weave ..." advertisement (we never use Weave)
})
# Warnings whose category comes from these packages are dropped (category.__module__'s top name).
CHATTY_PACKAGES = ("langchain", "langchain_core", "langchain_openai", "langgraph", "langsmith", "wandb")

_original_showwarning = warnings.showwarning


def _from_chatty_package(category: type[Warning]) -> bool:
    return getattr(category, "__module__", "").split(".", 1)[0] in CHATTY_PACKAGES


def _show_our_warnings(message: Any, category: type[Warning], filename: str, lineno: int,
                       file: Any = None, line: str | None = None) -> None:
    if not _from_chatty_package(category):
        _original_showwarning(message, category, filename, lineno, file, line)


def quiet_third_parties(verbose: bool, env: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Silence third-party banners and advertisements unless ``verbose``; returns the variables set."""
    if verbose:
        return {}
    env = os.environ if env is None else env
    chosen = {key: value for key, value in QUIET_ENV.items() if key not in env}
    env.update(chosen)
    warnings.showwarning = _show_our_warnings
    return chosen
