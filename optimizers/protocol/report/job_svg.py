"""A job's learning curve as inline SVG: a step line of the committed incumbent's score against
charged rollouts, with a dot at both ends and wherever the score changes (so a one-point curve is
a visible dot).

Drawn by hand rather than with matplotlib: a report of hundreds of jobs draws one curve per job
page, and an SVG string costs microseconds where a matplotlib PNG costs a tenth of a second; it is
also part of the page itself (self-contained, selectable text, sharp at any zoom).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

WIDTH, HEIGHT = 560, 220
LEFT, RIGHT, TOP, BOTTOM = 48, 16, 14, 36  # plot margins (px)
LINE = "#1f77b4"


def _ticks(maximum: int, count: int = 5) -> list[int]:
    if maximum <= 0:
        return [0]
    step = max(1, -(-maximum // count))
    return list(range(0, maximum + 1, step))


def curve_svg(points: Sequence[tuple[int, float]], *, budget: int | None = None, title: str = "") -> str:
    """``points``: (charged rollouts, score in [0, 1]) sorted by charge; at least one point."""
    if not points:
        raise ValueError("a curve needs at least one point")
    right_end = max(int(budget or 0), max(x for x, _ in points), 1)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + plot_w * x / right_end

    def py(y: float) -> float:
        return TOP + plot_h * (1.0 - max(0.0, min(1.0, y)))

    parts = [f'<svg class="curve" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{html.escape(title or "learning curve")}">',
             f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="#fafafa" stroke="#ccc"/>']
    for value in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = py(value)
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e4e4e4"/>'
                     f'<text x="{LEFT - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">{value:g}</text>')
    for tick in _ticks(right_end):
        x = px(tick)
        parts.append(f'<text x="{x:.1f}" y="{TOP + plot_h + 16}" font-size="11" text-anchor="middle">{tick}</text>')
    parts.append(f'<text x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 4}" font-size="11" text-anchor="middle">'
                 'charged rollouts</text>')
    if len(points) > 1:
        path = [f"M{px(points[0][0]):.1f},{py(points[0][1]):.1f}"]
        for x, y in points[1:]:
            path.append(f"H{px(x):.1f}V{py(y):.1f}")  # a step: the score holds until the next commit
        parts.append(f'<path d="{"".join(path)}" fill="none" stroke="{LINE}" stroke-width="2"/>')
    # Dots where the committed score changes (and at both ends), not on every sampled grid point.
    marked = [p for i, p in enumerate(points) if i in (0, len(points) - 1) or p[1] != points[i - 1][1]]
    for x, y in marked:
        parts.append(f'<circle class="point" cx="{px(x):.1f}" cy="{py(y):.1f}" r="4" fill="{LINE}">'
                     f'<title>{x} charged: {y:.3f}</title></circle>')
    if budget:
        x = px(budget)
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{TOP + plot_h}" stroke="#999" '
                     'stroke-dasharray="4 3"/>')
    parts.append("</svg>")
    return "".join(parts)
