"""Tiny inline SVG charts for the report: lines, stacked horizontal bars, histograms. Strings in, a string out;
no JavaScript and no external reference (the page's `<svg>` elements need no namespace attribute)."""
from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# Colours that stay apart for readers with the common colour-vision deficiencies (Okabe-Ito).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
TIER_COLORS = {"easy": "#009E73", "medium": "#E69F00", "hard": "#D55E00"}
FONT = 'font-family="system-ui,sans-serif" font-size="11"'
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 58, 12, 26, 38


def esc(text: object) -> str:
    """HTML-escaped text with `://` written `[:]//`: the page names no address a browser could follow."""
    return html.escape(str(text).replace("://", "[:]//"), quote=True)


def fmt(value: float) -> str:
    """A short label for an axis tick or a bar: 1.2k, 3.4M, 0.002, 12.5."""
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else str(value)
    size = abs(value)
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if size >= limit:
            return f"{value / limit:.3g}{suffix}"
    if size >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About `count` round values (1, 2 or 5 times a power of ten apart) covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(lo / step) * step
    return [round(first + i * step, 12) for i in range(math.ceil((hi - first) / step) + 1)]


def log_ticks(lo: float, hi: float) -> list[float]:
    """Powers of ten covering [lo, hi] (lo > 0), with 2x and 5x in between when the range is narrow."""
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    multiples = (1, 2, 5) if last - first <= 2 else (1,)
    return [m * 10.0 ** e for e in range(first, last + 1) for m in multiples if lo <= m * 10.0 ** e * 1.0001
            and m * 10.0 ** e <= hi * 1.0001] or [lo, hi]


@dataclass
class Axes:
    """Maps data to pixels in a `width` x `height` chart with room for tick labels."""
    width: int
    height: int
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    log_y: bool = False
    parts: list[str] = field(default_factory=list)

    def x(self, value: float) -> float:
        lo, hi = self.x_range
        return MARGIN_LEFT + (value - lo) / ((hi - lo) or 1.0) * (self.width - MARGIN_LEFT - MARGIN_RIGHT)

    def y(self, value: float) -> float:
        lo, hi = self.y_range
        if self.log_y:
            value, lo, hi = (math.log10(max(v, 1e-12)) for v in (value, lo, hi))
        return self.height - MARGIN_BOTTOM - (value - lo) / ((hi - lo) or 1.0) * (
            self.height - MARGIN_TOP - MARGIN_BOTTOM)

    def frame(self, x_ticks: Sequence[float], y_ticks: Sequence[float], x_label: str, y_label: str,
              x_format: Callable[[float], str] = fmt) -> None:
        bottom, right = self.height - MARGIN_BOTTOM, self.width - MARGIN_RIGHT
        for v in y_ticks:
            y = self.y(v)
            self.parts.append(f'<line x1="{MARGIN_LEFT}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e4e4e4"/>'
                              f'<text x="{MARGIN_LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">{esc(fmt(v))}</text>')
        for v in x_ticks:
            x = self.x(v)
            self.parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{bottom}" y2="{bottom + 4}" stroke="#888"/>'
                              f'<text x="{x:.1f}" y="{bottom + 15}" text-anchor="middle">{esc(x_format(v))}</text>')
        self.parts.append(f'<line x1="{MARGIN_LEFT}" x2="{right}" y1="{bottom}" y2="{bottom}" stroke="#888"/>'
                          f'<text x="{(MARGIN_LEFT + right) / 2:.0f}" y="{self.height - 6}" '
                          f'text-anchor="middle">{esc(x_label)}</text>'
                          f'<text x="12" y="{(MARGIN_TOP + bottom) / 2:.0f}" text-anchor="middle" '
                          f'transform="rotate(-90 12 {(MARGIN_TOP + bottom) / 2:.0f})">{esc(y_label)}</text>')

    def legend(self, entries: Sequence[tuple[str, str, bool]]) -> None:
        """Entries (name, colour, dashed) in a row above the plot."""
        x = MARGIN_LEFT
        for name, color, dashed in entries:
            dash = ' stroke-dasharray="5 3"' if dashed else ""
            self.parts.append(f'<line x1="{x}" x2="{x + 16}" y1="12" y2="12" stroke="{color}" stroke-width="3"{dash}/>'
                              f'<text x="{x + 20}" y="16">{esc(name)}</text>')
            x += 28 + 7 * len(name)

    def svg(self, title: str) -> str:
        return (f'<svg role="img" viewBox="0 0 {self.width} {self.height}" width="{self.width}" '
                f'height="{self.height}" {FONT}><title>{esc(title)}</title>{"".join(self.parts)}</svg>')


@dataclass(frozen=True)
class Series:
    name: str
    xs: Sequence[float]
    ys: Sequence[float]
    color: str | None = None
    dashed: bool = False


def line_chart(series: Sequence[Series], title: str, x_label: str, y_label: str, log_y: bool = False,
               width: int = 560, height: int = 230) -> str:
    """One or more lines over a shared x axis; `log_y` for quantities spanning orders of magnitude."""
    points = [(x, y) for s in series for x, y in zip(s.xs, s.ys) if math.isfinite(y) and (y > 0 or not log_y)]
    if not points:
        return f'<p class="empty">{esc(title)}: no data</p>'
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    if log_y:
        y_ticks = log_ticks(min(ys), max(ys))
        y_range = (min(min(ys), y_ticks[0]), max(max(ys), y_ticks[-1]))
    else:
        y_ticks = nice_ticks(min(0.0, min(ys)), max(ys))
        y_range = (y_ticks[0], y_ticks[-1])
    x_ticks = [t for t in nice_ticks(min(xs), max(xs)) if min(xs) <= t <= max(xs)]
    axes = Axes(width, height, (min(xs), max(xs)), y_range, log_y)
    axes.frame(x_ticks, y_ticks, x_label, y_label)
    colors = [s.color or PALETTE[i % len(PALETTE)] for i, s in enumerate(series)]
    for s, color in zip(series, colors):
        path = " ".join(f"{axes.x(x):.1f},{axes.y(y):.1f}" for x, y in zip(s.xs, s.ys)
                        if math.isfinite(y) and (y > 0 or not log_y))
        dash = ' stroke-dasharray="5 3"' if s.dashed else ""
        marker = "".join(f'<circle cx="{axes.x(x):.1f}" cy="{axes.y(y):.1f}" r="2.5" fill="{color}"/>'
                         for x, y in zip(s.xs, s.ys) if len(s.xs) <= 20 and math.isfinite(y))
        axes.parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.5"{dash}/>'
                          + marker)
    if len(series) > 1:
        axes.legend([(s.name, c, s.dashed) for s, c in zip(series, colors)])
    return axes.svg(title)


def stacked_bars(rows: Sequence[tuple[str, dict[str, float]]], keys: Sequence[str], colors: dict[str, str],
                 title: str, width: int = 760, label_width: int = 190, value_format: Callable[[float], str] = fmt) -> str:
    """Horizontal bars, one per row, each split into `keys` (a row without them is one grey bar of its
    "total"); the total is written at the end of the bar."""
    bar, gap, top = 20, 8, 24 if len(keys) > 1 else 4
    height = top + len(rows) * (bar + gap)
    scale_max = max((sum(v.values()) for _, v in rows), default=0) or 1.0
    plot = width - label_width - 70
    parts = []
    if len(keys) > 1:
        x = label_width
        for key in keys:
            parts.append(f'<rect x="{x}" y="4" width="12" height="12" fill="{colors[key]}"/>'
                         f'<text x="{x + 16}" y="14">{esc(key)}</text>')
            x += 30 + 7 * len(key)
    for i, (label, values) in enumerate(rows):
        y = top + i * (bar + gap)
        parts.append(f'<text x="{label_width - 6}" y="{y + 14}" text-anchor="end">{esc(label)}</text>')
        x = float(label_width)
        segments = [(k, values[k]) for k in keys if k in values] or [("total", values.get("total", 0.0))]
        for key, value in segments:
            w = value / scale_max * plot
            color = colors.get(key, "#999")
            parts.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar}" fill="{color}">'
                         f'<title>{esc(label)} {esc(key)}: {esc(value_format(value))}</title></rect>')
            x += w
        total = sum(v for _, v in segments)
        parts.append(f'<text x="{x + 4:.1f}" y="{y + 14}">{esc(value_format(total))}</text>')
    return (f'<svg role="img" viewBox="0 0 {width} {height}" width="{width}" height="{height}" {FONT}>'
            f'<title>{esc(title)}</title>{"".join(parts)}</svg>')


def histogram(bins: Sequence[tuple[float, float, float, str]], colors: dict[str, str],
              markers: Sequence[tuple[float, str]], title: str, x_label: str, y_label: str,
              x_format: Callable[[float], str] = fmt, x_ticks: Sequence[float] | None = None, width: int = 560,
              height: int = 230) -> str:
    """Bars from (low edge, high edge, count, colour key), with vertical marker lines (x, label) whose labels
    alternate between two heights so that close markers stay readable."""
    if not bins:
        return f'<p class="empty">{esc(title)}: no data</p>'
    lo, hi = min(b[0] for b in bins), max(b[1] for b in bins)
    y_ticks = nice_ticks(0.0, max(b[2] for b in bins))
    axes = Axes(width, height, (lo, hi), (0.0, y_ticks[-1]))
    ticks = nice_ticks(lo, hi) if x_ticks is None else x_ticks
    axes.frame([t for t in ticks if lo <= t <= hi], y_ticks, x_label, y_label, x_format)
    for left, right, count, key in bins:
        x0, x1, y = axes.x(left), axes.x(right), axes.y(count)
        axes.parts.append(f'<rect x="{x0:.1f}" y="{y:.1f}" width="{max(x1 - x0 - 0.5, 0.5):.1f}" '
                          f'height="{axes.y(0) - y:.1f}" fill="{colors.get(key, "#999")}"/>')
    for i, (x_value, label) in enumerate(markers):
        x = axes.x(x_value)
        axes.parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{MARGIN_TOP}" y2="{axes.y(0):.1f}" stroke="#333" '
                          f'stroke-dasharray="4 3"/><text x="{x + 3:.1f}" y="{MARGIN_TOP + 10 + 13 * (i % 2)}">'
                          f'{esc(label)}</text>')
    keys = list(dict.fromkeys(b[3] for b in bins))
    axes.legend([(k, colors.get(k, "#999"), False) for k in keys])
    return axes.svg(title)
