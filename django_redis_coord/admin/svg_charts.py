"""Small charts drawn as inline SVG on the server (no JavaScript, no chart library) for the admin's
contention page: a line chart of durations on a logarithmic axis, and a bar chart of counts, one
point or bar per minute.  Colours are the admin's CSS variables, so the charts follow its light
and dark themes.  Every text is escaped; the numbers are formatted here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Optional

__all__ = ["Line", "line_chart", "bar_chart", "format_seconds"]

WIDTH, HEIGHT = 280, 150
LEFT, RIGHT, TOP, BOTTOM = 50, 8, 22, 20
#: The shortest duration the axis shows (a percentile inside the first bucket may be smaller).
FLOOR_SECONDS = 1e-4


@dataclass
class Line:
    """One series: a value per minute (``None``: no data that minute)."""

    name: str
    values: Sequence[Optional[float]]
    colour: str
    dashed: bool = False


def format_seconds(seconds: float) -> str:
    """``0.0123`` -> ``"12.3 ms"``, ``2.5`` -> ``"2.5 s"``, ``100`` -> ``"100 s"``, ``900`` -> ``"15 min"``."""
    if seconds < 1:
        return f"{seconds * 1000:.3g} ms"
    if seconds < 600:
        return f"{seconds:.3g} s"
    return f"{seconds / 60:.3g} min"


def _x(index: int, count: int) -> float:
    span = WIDTH - LEFT - RIGHT
    return LEFT + (span * index / (count - 1) if count > 1 else span / 2)


def _frame(title: str, label: str, body: list[str], count: int) -> str:
    """The chart's box: title, x-axis labels (minutes ago), then ``body``."""
    bottom = HEIGHT - BOTTOM
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="dcoord-chart" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(label)}">',
        f"<title>{escape(label)}</title>",
        f'<text x="{LEFT}" y="14" class="chart-title" style="fill: var(--body-fg, #333); font-size: 12px; '
        f'font-weight: 600">{escape(title)}</text>',
        f'<line x1="{LEFT}" y1="{bottom}" x2="{WIDTH - RIGHT}" y2="{bottom}" '
        'style="stroke: var(--border-color, #ccc)"/>',
    ]
    for index, text in ((0, f"-{count - 1} min"), ((count - 1) // 2, f"-{count - 1 - (count - 1) // 2} min"),
                        (count - 1, "now")):
        anchor = "start" if index == 0 else "end" if index == count - 1 else "middle"
        parts.append(f'<text x="{_x(index, count):.1f}" y="{HEIGHT - 5}" text-anchor="{anchor}" '
                     f'style="fill: var(--body-quiet-color, #666); font-size: 10px">{escape(text)}</text>')
    return "".join(parts + body + ["</svg>"])


def _no_data(body: list[str], text: str = "no data") -> None:
    body.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2:.1f}" y="{(TOP + HEIGHT - BOTTOM) / 2 + 4:.1f}" '
                'text-anchor="middle" class="no-data" style="fill: var(--body-quiet-color, #666); '
                f'font-size: 11px">{escape(text)}</text>')


def line_chart(title: str, lines: Sequence[Line], count: int) -> str:
    """Durations (seconds) over ``count`` minutes on a log axis from a power of ten to a power of ten."""
    values = [v for line in lines for v in line.values if v is not None]
    body: list[str] = []
    label = f"{title} over the last {count} minutes"
    if not values:
        _no_data(body)
        return _frame(title, label, body, count)
    low = 10 ** math.floor(math.log10(max(FLOOR_SECONDS, min(values))))
    high = 10 ** math.ceil(math.log10(max(FLOOR_SECONDS, max(values))))
    if high <= low:
        high = low * 10
    top, bottom = TOP, HEIGHT - BOTTOM

    def y(value: float) -> float:
        share = (math.log10(max(value, low)) - math.log10(low)) / (math.log10(high) - math.log10(low))
        return bottom - share * (bottom - top)

    power = low
    while power <= high * 1.0001:
        body.append(f'<line x1="{LEFT}" y1="{y(power):.1f}" x2="{WIDTH - RIGHT}" y2="{y(power):.1f}" '
                    'style="stroke: var(--hairline-color, #e8e8e8)"/>')
        body.append(f'<text x="{LEFT - 4}" y="{y(power) + 3:.1f}" text-anchor="end" class="tick" '
                    'style="fill: var(--body-quiet-color, #666); font-size: 10px">'
                    f"{escape(format_seconds(power))}</text>")
        power *= 10
    for position, line in enumerate(lines):
        dash = ' stroke-dasharray="4 3"' if line.dashed else ""
        style = f"stroke: {line.colour}; fill: none; stroke-width: 1.6"
        for run in _runs(line.values):
            if len(run) == 1:
                index, value = run[0]
                body.append(f'<circle cx="{_x(index, count):.1f}" cy="{y(value):.1f}" r="2" '
                            f'style="fill: {line.colour}"><title>{escape(line.name)}: '
                            f'{escape(format_seconds(value))}</title></circle>')
            else:
                points = " ".join(f"{_x(i, count):.1f},{y(v):.1f}" for i, v in run)
                body.append(f'<polyline class="series" data-series="{escape(line.name)}" points="{points}"'
                            f'{dash} style="{style}"/>')
        legend_x = WIDTH - RIGHT - 110 + position * 58
        body.append(f'<line x1="{legend_x}" y1="10" x2="{legend_x + 14}" y2="10"{dash} style="{style}"/>'
                    f'<text x="{legend_x + 17}" y="14" style="fill: var(--body-quiet-color, #666); font-size: 10px">'
                    f"{escape(line.name)}</text>")
    return _frame(title, label, body, count)


def _runs(values: Sequence[Optional[float]]) -> list[list[tuple[int, float]]]:
    """The stretches of consecutive minutes with a value."""
    runs: list[list[tuple[int, float]]] = []
    current: list[tuple[int, float]] = []
    for index, value in enumerate(values):
        if value is None:
            if current:
                runs.append(current)
            current = []
        else:
            current.append((index, value))
    if current:
        runs.append(current)
    return runs


def bar_chart(title: str, values: Sequence[int], count: int, *, colour: str, unit: str,
              marks: Optional[Sequence[int]] = None, marks_unit: str = "") -> str:
    """Counts per minute as bars (``marks``: a second count, drawn as a red tick above its bar)."""
    body: list[str] = []
    label = f"{title} over the last {count} minutes"
    peak = max([*values, *(marks or [])], default=0)
    if peak <= 0:
        _no_data(body, f"no {unit}")
        return _frame(title, label, body, count)
    top, bottom = TOP, HEIGHT - BOTTOM
    scale = _nice(peak)
    step = (WIDTH - LEFT - RIGHT) / count
    for tick in (0, scale / 2, scale):
        ty = bottom - (bottom - top) * tick / scale
        body.append(f'<line x1="{LEFT}" y1="{ty:.1f}" x2="{WIDTH - RIGHT}" y2="{ty:.1f}" '
                    'style="stroke: var(--hairline-color, #e8e8e8)"/>'
                    f'<text x="{LEFT - 4}" y="{ty + 3:.1f}" text-anchor="end" class="tick" '
                    f'style="fill: var(--body-quiet-color, #666); font-size: 10px">{tick:g}</text>')
    for index, value in enumerate(values):
        if value <= 0:
            continue
        height = (bottom - top) * value / scale
        body.append(f'<rect class="bar" x="{LEFT + index * step + 0.5:.1f}" y="{bottom - height:.1f}" '
                    f'width="{max(step - 1, 1):.1f}" height="{height:.1f}" style="fill: {colour}">'
                    f"<title>{count - 1 - index} min ago: {value} {escape(unit)}</title></rect>")
    if any(value > 0 for value in marks or ()):
        body.append(f'<rect x="{WIDTH - RIGHT - 62}" y="8" width="12" height="2" '
                    'style="fill: var(--error-fg, #ba2121)"/>'
                    f'<text x="{WIDTH - RIGHT - 47}" y="14" '
                    f'style="fill: var(--body-quiet-color, #666); font-size: 10px">{escape(marks_unit)}</text>')
    for index, value in enumerate(marks or ()):
        if value > 0:
            my = bottom - (bottom - top) * value / scale
            body.append(f'<rect class="mark" x="{LEFT + index * step:.1f}" y="{my - 1:.1f}" width="{max(step, 2):.1f}" '
                        f'height="2" style="fill: var(--error-fg, #ba2121)"><title>{count - 1 - index} min ago: '
                        f"{value} {escape(marks_unit)}</title></rect>")
    return _frame(title, label, body, count)


def _nice(peak: float) -> float:
    """The smallest of 1, 2, 5 x 10^n at least ``peak``."""
    power = 10 ** math.floor(math.log10(peak))
    for factor in (1, 2, 5, 10):
        if factor * power >= peak:
            return float(factor * power)
    return float(10 * power)
