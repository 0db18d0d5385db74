"""What every report panel draws on: the ``Panel`` record, the Agg pyplot, the empty-panel figure and
the method colours (shared by ``plots`` and ``trust_panels``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from optimizers.protocol.report.data import ReportData

DPI = 110


@dataclass(frozen=True, slots=True)
class Panel:
    title: str
    caption: str
    draw: Callable[[ReportData], Any]  # -> matplotlib Figure


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _empty(message: str) -> Any:
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(6, 2.2))
    axes.axis("off")
    axes.text(0.5, 0.5, message, ha="center", va="center", fontsize=11, color="#555555", wrap=True)
    return figure


def _method_colors(methods: Sequence[str]) -> dict[str, Any]:
    plt = _pyplot()
    palette = plt.get_cmap("tab10")
    return {method: palette(i % 10) for i, method in enumerate(methods)}
