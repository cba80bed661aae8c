"""Training curves as inline SVG, drawn on the server (no JavaScript, no CDN)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import Any

#: metrics drawn first, in this order, when a run logged them (matched by substring)
PREFERRED = ("reward", "success", "staleness", "throughput", "tokens_per_s", "episodes_per_s", "loss", "kl",
             "entropy")
_SKIP = {"step", "time"}


@dataclass(frozen=True)
class Series:
    """One metric over steps."""

    name: str
    steps: list[float]
    values: list[float]


def series_from_metrics(rows: list[dict[str, Any]]) -> list[Series]:
    """Every numeric metric of a run (rows as `TrajectoryStore.metrics` returns them), preferred ones first."""
    names: list[str] = []
    for row in rows:
        for key, value in row.items():
            if key not in _SKIP and key not in names and _is_number(value):
                names.append(key)
    names.sort(key=_rank)
    out = []
    for name in names:
        points = [(float(r["step"]), float(r[name])) for r in rows if _is_number(r.get(name))]
        out.append(Series(name, [p[0] for p in points], [p[1] for p in points]))
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _rank(name: str) -> tuple[int, str]:
    lowered = name.lower()
    for i, word in enumerate(PREFERRED):
        if word in lowered:
            return i, name
    return len(PREFERRED), name


def _ticks(low: float, high: float, integral: bool = False) -> list[float]:
    if high == low:
        return [low]
    ticks = [low + (high - low) * i / 4 for i in range(5)]
    return sorted({round(t) for t in ticks}) if integral else ticks


def _fmt(value: float) -> str:
    """Short tick label: 0.25, 12.5, 1.2k, 3.4M."""
    magnitude = abs(value)
    if magnitude >= 1e6:
        return f"{value / 1e6:.3g}M"
    if magnitude >= 1e4:
        return f"{value / 1e3:.3g}k"
    if magnitude >= 100 or value == int(value):
        return f"{value:.0f}"
    if magnitude < 0.01:
        return f"{value:.1e}"
    return f"{value:.3g}"


def line_chart(series: Series, width: int = 420, height: int = 200) -> str:
    """An SVG line chart of one series with axes, grid lines and min/max labels."""
    left, right, top, bottom = 52, 12, 24, 28
    plot_w, plot_h = width - left - right, height - top - bottom
    xs, ys = series.steps, series.values
    x_lo, x_hi = (min(xs), max(xs)) if xs else (0.0, 1.0)
    y_lo, y_hi = (min(ys), max(ys)) if ys else (0.0, 1.0)
    if y_hi == y_lo:
        y_lo, y_hi = y_lo - 0.5, y_hi + 0.5
    if x_hi == x_lo:
        x_hi = x_lo + 1

    def px(x: float) -> float:
        return left + (x - x_lo) / (x_hi - x_lo) * plot_w

    def py(y: float) -> float:
        return top + (1 - (y - y_lo) / (y_hi - y_lo)) * plot_h

    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
             f'role="img" aria-label="{escape(series.name)} over steps">',
             f'<text class="chart-title" x="{left}" y="15">{escape(series.name)}</text>']
    for tick in _ticks(y_lo, y_hi):
        y = py(tick)
        parts.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(f'<text class="tick" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(tick)}</text>')
    for tick in _ticks(x_lo, x_hi, integral=all(float(x).is_integer() for x in xs)):
        x = px(tick)
        parts.append(f'<text class="tick" x="{x:.1f}" y="{height - 8}" text-anchor="middle">{_fmt(tick)}</text>')
    parts.append(f'<line class="axis" x1="{left}" x2="{left}" y1="{top}" y2="{top + plot_h}"/>')
    parts.append(f'<line class="axis" x1="{left}" x2="{width - right}" y1="{top + plot_h}" y2="{top + plot_h}"/>')
    points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, ys, strict=True))
    if len(xs) > 1:
        parts.append(f'<polyline class="line" points="{points}"/>')
    for x, y in zip(xs, ys, strict=True) if len(xs) <= 60 else ():
        parts.append(f'<circle class="dot" cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5">'
                     f'<title>step {_fmt(x)}: {_fmt(y)}</title></circle>')
    parts.append("</svg>")
    return "".join(parts)
