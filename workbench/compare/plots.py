"""The figure of compare.html: each timing metric over the runs compared, regressions marked.

Drawn as inline SVG by hand rather than with matplotlib: a panel is a handful of points, and
laying out forty matplotlib panels and rasterising them took half of `workbench compare`'s time
(and importing matplotlib another tenth). The markup is text in the page: nothing is fetched,
nothing runs, and every name in it is escaped.
"""

from __future__ import annotations

import html

from workbench.compare.records import IMPROVEMENT, REGRESSION, Change, Comparison

# Seconds read better as milliseconds at step scale; other units are shown as recorded.
_SCALE = {"s": (1e3, "ms")}
_MARK = {REGRESSION: "#c62828", IMPROVEMENT: "#2e8b3a"}
_LINE = "#4a6fa5"
# One panel's box and its plotting area inside it, in pixels.
WIDTH, HEIGHT = 250, 130
_LEFT, _RIGHT, _TOP, _BOTTOM = 46, 240, 34, 104


def _number(value: float) -> str:
    return f"{value:.3g}"


def _panel(change: Change, runs: int) -> str:
    factor, unit = _SCALE.get(change.unit, (1.0, change.unit))
    points = [(i, v * factor) for i, v in enumerate(change.series) if v is not None]
    top = max(v for _, v in points) * 1.1 or 1.0  # from zero, as the eye reads a change
    step = (_RIGHT - _LEFT) / max(runs - 1, 1)

    def xy(i: int, v: float) -> tuple[float, float]:
        return _LEFT + i * step, _BOTTOM - (_BOTTOM - _TOP) * v / top

    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(i, v) for i, v in points))
    dots = "".join(
        f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{_LINE}"/>'
        for x, y in (xy(i, v) for i, v in points)
    )
    mark = ""
    colour = _MARK.get(change.status)
    if colour and change.series[-1] is not None:
        x, y = xy(runs - 1, change.series[-1] * factor)
        ring = f'fill="none" stroke="{colour}" stroke-width="2.5"'
        mark = f'<circle cx="{x:.1f}" cy="{y:.1f}" r="6" {ring}/>'
    ticks = "".join(
        f'<text x="{_LEFT + i * step:.1f}" y="{_BOTTOM + 12}" text-anchor="middle">{i + 1}</text>'
        for i in range(runs)
    )
    name, status = html.escape(change.name), html.escape(change.status)
    return (
        f'<svg class="wb-panel" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'role="img" aria-label="{name} ({status})" font-size="9" font-family="sans-serif">'
        f'<text class="wb-panel-title" x="4" y="11" font-size="10">{name}</text>'
        f'<text x="4" y="23" fill="{colour or "#57606a"}">{status}; {html.escape(unit)}</text>'
        f'<path d="M{_LEFT} {_TOP}V{_BOTTOM}H{_RIGHT}" fill="none" stroke="#8c959f"/>'
        f'<text x="{_LEFT - 3}" y="{_TOP + 3}" text-anchor="end">{_number(top)}</text>'
        f'<text x="{_LEFT - 3}" y="{_BOTTOM}" text-anchor="end">0</text>{ticks}'
        f'<polyline points="{line}" fill="none" stroke="{_LINE}" stroke-width="1.5"/>'
        f"{dots}{mark}</svg>"
    )


def timing_series(comparison: Comparison) -> str | None:
    """One small panel per timing metric (steady median and p99, throughput, first call, peak
    host and device memory) of each step, runs left to right (numbered as the runs table, oldest
    first), from zero; the newest run's point is ringed in red for a regression, green for an
    improvement. A panel needs two runs with the metric; None when no metric has two."""
    shown = [
        c
        for c in comparison.changes
        if c.area == "timing" and sum(v is not None for v in c.series) >= 2
    ]
    if not shown:
        return None
    panels = "".join(_panel(change, len(change.series)) for change in shown)
    return f'<div style="display: flex; flex-wrap: wrap; gap: 4px">{panels}</div>'
