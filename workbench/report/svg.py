"""Small inline-SVG charts for the model report: lines (training curves, latency against batch size on log-log
axes), horizontal bars (the accuracy ladder) and grouped bars (throughput).

Pure Python and stdlib only: no numpy, no torch, no Qt. Every piece of text goes through html.escape, since
run names, layer names and metric names are user data. The SVG is meant to sit inside an HTML page (no xmlns,
no external references) and scales down with its container through its viewBox.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# Okabe-Ito, which colour-blind readers can tell apart, then a few more.
PALETTE = (
    "#0072B2",
    "#D55E00",
    "#009E73",
    "#CC79A7",
    "#E69F00",
    "#56B4E9",
    "#000000",
    "#F0E442",
    "#7F3C8D",
    "#11A579",
)
INK = "#222"
MUTED = "#666"
GRID = "#e4e4e4"
FONT = "font-family:system-ui,-apple-system,'Segoe UI',Roboto,'Helvetica Neue',Arial,sans-serif"
MAX_POINTS = 800  # per series: a 100,000-step curve is drawn from its per-bucket extremes


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def color(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def fmt_number(value: float, digits: int = 3) -> str:
    """A short, readable number: 0.981, 12.5, 1.2e-05, 13,400."""
    if not finite(value):
        return "–"
    magnitude = abs(value)
    if magnitude == 0:
        return "0"
    if magnitude >= 10_000:
        return f"{value:,.0f}"
    if magnitude < 1e-3:
        return f"{value:.{max(digits - 1, 1)}e}"
    text = f"{value:.{digits}g}"
    return text if "e" not in text else f"{value:,.0f}"


def _text_width(text: str, size: float) -> float:
    return 0.62 * size * len(text)


# --- scales and ticks ------------------------------------------------------------------------------


def nice_ticks(lo: float, hi: float, count: int = 5) -> tuple[float, float, list[float]]:
    """(domain low, domain high, ticks) with round steps (1, 2, 2.5, 5 times a power of ten) covering
    lo..hi."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = 0.0, 1.0
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = magnitude * 10
    for multiple in (1, 2, 2.5, 5, 10):
        if multiple * magnitude >= raw:
            step = multiple * magnitude
            break
    start = math.floor(lo / step + 1e-9) * step
    stop = math.ceil(hi / step - 1e-9) * step
    ticks = []
    value = start
    while value <= stop + step * 1e-6 and len(ticks) < 50:
        ticks.append(round(value, 12))
        value += step
    return start, stop, ticks


def log_ticks(lo: float, hi: float) -> tuple[float, float, list[float]]:
    """(domain low, domain high, ticks) for a log axis: whole decades, with 2 and 5 between when few."""
    lo = max(lo, 1e-300)
    hi = max(hi, lo)
    low_exp, high_exp = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    if high_exp == low_exp:
        high_exp += 1
    ticks = []
    steps = (1, 2, 5) if high_exp - low_exp <= 3 else (1,)
    for exp in range(low_exp, high_exp + 1):
        for multiple in steps:
            tick = multiple * 10.0**exp
            if 10.0**low_exp <= tick <= 10.0**high_exp:
                ticks.append(tick)
    # Tighten the domain to the ticks around the data, so two points a decade apart are not squeezed.
    below = [t for t in ticks if t <= lo * (1 + 1e-9)]
    above = [t for t in ticks if t >= hi * (1 - 1e-9)]
    d_lo = below[-1] if below else ticks[0]
    d_hi = above[0] if above else ticks[-1]
    if d_hi <= d_lo:
        d_hi = d_lo * 10
    return d_lo, d_hi, [t for t in ticks if d_lo <= t <= d_hi]


class _Scale:
    def __init__(self, lo: float, hi: float, start: float, end: float, log: bool = False):
        self.log = log
        self.lo, self.hi = (math.log10(lo), math.log10(hi)) if log else (lo, hi)
        self.start, self.end = start, end

    def __call__(self, value: float) -> float:
        v = math.log10(value) if self.log else value
        span = self.hi - self.lo or 1.0
        return self.start + (v - self.lo) / span * (self.end - self.start)


# --- series ---------------------------------------------------------------------------------------


@dataclass
class Series:
    """One line: x and y of equal length; NaN or infinite y breaks the line there."""

    name: str
    x: Sequence[float]
    y: Sequence[float]
    color: str | None = None
    dashed: bool = False
    markers: bool = False
    labels: Sequence[str] = field(default_factory=tuple)  # hover text per point (optional)


def thin(x: Sequence[float], y: Sequence[float], limit: int = MAX_POINTS) -> tuple[list[float], list[float]]:
    """At most about `limit` points that keep each bucket's first, lowest and highest value (spikes
    survive)."""
    n = min(len(x), len(y))
    if n <= limit:
        return list(x[:n]), list(y[:n])
    buckets = max(limit // 3, 1)
    out_x: list[float] = []
    out_y: list[float] = []
    for b in range(buckets):
        i0, i1 = b * n // buckets, (b + 1) * n // buckets
        if i1 <= i0:
            continue
        keep = {i0}
        values = [(y[i], i) for i in range(i0, i1) if finite(y[i])]
        if values:
            keep.add(min(values)[1])
            keep.add(max(values)[1])
        nan_at = next((i for i in range(i0, i1) if not finite(y[i])), None)
        if nan_at is not None:
            keep.add(nan_at)  # a gap in the data stays a gap in the line
        for i in sorted(keep):
            out_x.append(x[i])
            out_y.append(y[i])
    return out_x, out_y


def _legend(
    items: list[tuple[str, str, bool]], x0: float, y0: float, width: float, size: float
) -> tuple[str, float]:
    """Legend entries (name, colour, dashed) laid out in rows from (x0, y0); returns (svg, height used)."""
    if not items:
        return "", 0.0
    parts = []
    x, y, row_h = x0, y0, size + 6
    for name, col, dashed in items:
        label = name if len(name) <= 40 else name[:39] + "…"
        item_w = 22 + _text_width(label, size) + 14
        if x > x0 and x + item_w > x0 + width:
            x, y = x0, y + row_h
        dash = ' stroke-dasharray="5 3"' if dashed else ""
        parts.append(
            f'<line x1="{x:.1f}" y1="{y + size / 2 - 1:.1f}" x2="{x + 16:.1f}" y2="{y + size / 2 - 1:.1f}" '
            f'stroke="{col}" stroke-width="2.5"{dash}/>'
            f'<text x="{x + 21:.1f}" y="{y + size - 2:.1f}" font-size="{size}" fill="{INK}">{esc(label)}'
            f"<title>{esc(name)}</title></text>"
        )
        x += item_w
    return "".join(parts), (y - y0) + row_h


def _svg_open(width: float, height: float, label: str) -> str:
    return (
        f'<svg class="chart" viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" '
        f'height="{height:.0f}" role="img" aria-label="{esc(label)}" style="{FONT}">'
    )


def _value_grid(ticks, labels, sy, left: float, right: float, font: int) -> str:
    """A horizontal grid line from `left` to `right` at each value tick, its label right-aligned left of the
    axis."""
    return "".join(
        f'<line x1="{left:.1f}" y1="{sy(tick):.1f}" x2="{right:.1f}" y2="{sy(tick):.1f}" stroke="{GRID}"/>'
        f'<text x="{left - 6:.1f}" y="{sy(tick) + 4:.1f}" text-anchor="end" font-size="{font}" '
        f'fill="{MUTED}">{esc(label)}</text>'
        for tick, label in zip(ticks, labels)
    )


def _title(text: str, width: float) -> str:
    return (
        f'<text x="{width / 2:.1f}" y="16" text-anchor="middle" font-size="13" font-weight="600" '
        f'fill="{INK}">{esc(text)}</text>'
    )


def _clean_series(
    series: Sequence[Series], log_x: bool, log_y: bool
) -> list[tuple[Series, list[float], list[float], str]]:
    """Each series thinned, with its colour; a point whose x cannot be drawn is dropped, a y that cannot
    becomes a gap (NaN); a series left with no point is dropped."""
    cleaned: list[tuple[Series, list[float], list[float], str]] = []
    for index, s in enumerate(series):
        xs, ys = thin(list(s.x), list(s.y))
        pairs = [(a, b) for a, b in zip(xs, ys) if finite(a) and (not log_x or a > 0)]
        xs = [a for a, _ in pairs]
        ys = [b if finite(b) and (not log_y or b > 0) else math.nan for _, b in pairs]
        if xs:
            cleaned.append((s, xs, ys, s.color or color(index)))
    return cleaned


def _y_axis(
    all_y: list[float], y_range: tuple[float | None, float | None], log_y: bool
) -> tuple[float, float, list[float]]:
    """The y axis's bounds and ticks: the data's, or y_range's where given."""
    y_lo, y_hi = min(all_y), max(all_y)
    if y_range[0] is not None:
        y_lo = y_range[0]
    if y_range[1] is not None:
        y_hi = y_range[1]
    if log_y:
        return log_ticks(y_lo, y_hi)
    return nice_ticks(y_lo, y_hi)


def _x_axis(
    all_x: list[float], x_ticks: Sequence[float] | None, log_x: bool
) -> tuple[float, float, list[float]]:
    """The x axis's bounds and ticks: the given ticks widen the data's range; a single x gets room either
    side."""
    x_lo, x_hi = min(all_x), max(all_x)
    if log_x:
        if x_ticks:
            x_lo, x_hi = min(x_lo, *x_ticks), max(x_hi, *x_ticks)
            if x_hi == x_lo:
                x_lo, x_hi = x_lo / 2, x_hi * 2
            x_ticks_v = sorted(t for t in x_ticks if t > 0)
            pad = (math.log10(x_hi) - math.log10(x_lo)) * 0.04
            x_lo, x_hi = 10 ** (math.log10(x_lo) - pad), 10 ** (math.log10(x_hi) + pad)
        else:
            x_lo, x_hi, x_ticks_v = log_ticks(x_lo, x_hi)
    elif x_ticks:
        x_ticks_v = sorted(x_ticks)
        x_lo, x_hi = min(x_lo, *x_ticks_v), max(x_hi, *x_ticks_v)
        if x_hi == x_lo:
            x_lo, x_hi = x_lo - 1, x_hi + 1
    else:
        if x_hi == x_lo:
            x_lo, x_hi = x_lo - 1, x_hi + 1
        _, _, x_ticks_v = nice_ticks(x_lo, x_hi, 6)
        x_ticks_v = [t for t in x_ticks_v if x_lo - 1e-9 <= t <= x_hi + 1e-9]
    return x_lo, x_hi, x_ticks_v


def _x_grid(
    ticks: list[float],
    sx: _Scale,
    top: float,
    plot_bottom: float,
    font: int,
    x_format: Callable[[float], str],
) -> str:
    """A vertical grid line per x tick, and its label unless it would overlap the one before."""
    out = []
    last_right = -1e9
    for tick in ticks:
        x = sx(tick)
        label = x_format(tick)
        out.append(f'<line x1="{x:.1f}" y1="{top:.1f}" x2="{x:.1f}" y2="{plot_bottom:.1f}" stroke="{GRID}"/>')
        half = _text_width(label, font) / 2
        if x - half > last_right + 4:  # drop a tick label that would overlap the one before
            out.append(
                f'<text x="{x:.1f}" y="{plot_bottom + 15:.1f}" text-anchor="middle" font-size="{font}" '
                f'fill="{MUTED}">{esc(label)}</text>'
            )
            last_right = x + half
    return "".join(out)


def _axes(
    left: float,
    right: float,
    top: float,
    plot_bottom: float,
    height: float,
    font: int,
    x_label: str,
    y_label: str,
) -> str:
    """The two axis lines and their labels (the y label turned upright along its axis)."""
    out = [
        f'<line x1="{left:.1f}" y1="{plot_bottom:.1f}" x2="{right:.1f}" y2="{plot_bottom:.1f}" '
        f'stroke="{MUTED}"/><line x1="{left:.1f}" y1="{top:.1f}" x2="{left:.1f}" y2="{plot_bottom:.1f}" '
        f'stroke="{MUTED}"/>'
    ]
    if x_label:
        out.append(
            f'<text x="{(left + right) / 2:.1f}" y="{height - 6:.1f}" text-anchor="middle" '
            f'font-size="{font}" fill="{INK}">{esc(x_label)}</text>'
        )
    if y_label:
        cy = (top + plot_bottom) / 2
        out.append(
            f'<text x="12" y="{cy:.1f}" text-anchor="middle" font-size="{font}" fill="{INK}" '
            f'transform="rotate(-90 12 {cy:.1f})">{esc(y_label)}</text>'
        )
    return "".join(out)


def _series_line(
    s: Series,
    xs: list[float],
    ys: list[float],
    col: str,
    sx: _Scale,
    sy: _Scale,
    y_lo: float,
    y_hi: float,
    x_format: Callable[[float], str],
    y_format: Callable[[float], str],
) -> str:
    """One series's line, broken at its gaps and clamped to the y range; its markers, or a dot where a point
    stands alone between gaps (a line of one point draws nothing)."""
    out = []
    segments: list[list[tuple[float, float]]] = [[]]
    for a, b in zip(xs, ys):
        if finite(b):
            segments[-1].append((sx(a), sy(min(max(b, y_lo), y_hi))))
        elif segments[-1]:
            segments.append([])
    path = " ".join("M" + " L".join(f"{px:.1f},{py:.1f}" for px, py in seg) for seg in segments if seg)
    dash = ' stroke-dasharray="6 4"' if s.dashed else ""
    if path:
        out.append(
            f'<path d="{path}" fill="none" stroke="{col}" stroke-width="1.8" stroke-linejoin="round"'
            f"{dash}><title>{esc(s.name)}</title></path>"
        )
    lonely = {i for i, seg in enumerate(segments) if len(seg) == 1}
    if s.markers or lonely:
        labels = list(s.labels)
        for i, (a, b) in enumerate(zip(xs, ys)):
            if not finite(b):
                continue
            hover = labels[i] if i < len(labels) else f"{s.name}: {x_format(a)}, {y_format(b)}"
            out.append(
                f'<circle cx="{sx(a):.1f}" cy="{sy(min(max(b, y_lo), y_hi)):.1f}" r="3.2" fill="{col}" '
                f'stroke="#fff" stroke-width="1"><title>{esc(hover)}</title></circle>'
            )
    return "".join(out)


def line_chart(
    series: Sequence[Series],
    *,
    title: str = "",
    x_label: str = "",
    y_label: str = "",
    width: int = 520,
    height: int = 300,
    log_x: bool = False,
    log_y: bool = False,
    y_range: tuple[float | None, float | None] = (None, None),
    x_ticks: Sequence[float] | None = None,
    x_format: Callable[[float], str] = fmt_number,
    y_format: Callable[[float], str] = fmt_number,
) -> str:
    """Lines (and optional markers) of several series on shared axes; log axes drop non-positive values."""
    cleaned = _clean_series(series, log_x, log_y)
    all_x = [a for _, xs, _, _ in cleaned for a in xs]
    all_y = [b for _, _, ys, _ in cleaned for b in ys if finite(b)]
    legend_items = (
        [(s.name, col, s.dashed) for s, _, _, col in cleaned]
        if len(cleaned) > 1 or (cleaned and cleaned[0][0].name)
        else []
    )
    font = 11
    top = 26 if title else 8
    legend_svg, legend_h = _legend(legend_items, 56, top, width - 70, font)
    top += legend_h + (6 if legend_h else 0)
    if not all_x or not all_y:
        body = (
            f'<text x="{width / 2:.1f}" y="{(top + height) / 2:.1f}" text-anchor="middle" font-size="12" '
            f'fill="{MUTED}">no data</text>'
        )
        return (
            _svg_open(width, height, title or "chart")
            + (_title(title, width) if title else "")
            + body
            + "</svg>"
        )

    y_lo, y_hi, y_ticks = _y_axis(all_y, y_range, log_y)
    x_lo, x_hi, x_ticks_v = _x_axis(all_x, x_ticks, log_x)
    y_tick_labels = [y_format(t) for t in y_ticks]
    left = max(40.0, 14 + max(_text_width(t, font) for t in y_tick_labels)) + (16 if y_label else 0)
    right, bottom = 14.0, 34.0 + (14 if x_label else 0)
    plot_bottom = height - bottom
    sx = _Scale(x_lo, x_hi, left, width - right, log_x)
    sy = _Scale(y_lo, y_hi, plot_bottom, top, log_y)

    out = [_svg_open(width, height, title or y_label or "chart")]
    if title:
        out.append(_title(title, width))
    out.append(legend_svg)
    out.append(_value_grid(y_ticks, y_tick_labels, sy, left, width - right, font))
    out.append(_x_grid(x_ticks_v, sx, top, plot_bottom, font, x_format))
    out.append(_axes(left, width - right, top, plot_bottom, height, font, x_label, y_label))
    for s, xs, ys, col in cleaned:
        out.append(_series_line(s, xs, ys, col, sx, sy, y_lo, y_hi, x_format, y_format))
    out.append("</svg>")
    return "".join(out)


def bar_chart(
    labels: Sequence[str],
    values: Sequence[float],
    *,
    title: str = "",
    value_label: str = "",
    width: int = 520,
    bar_height: int = 20,
    domain: tuple[float | None, float | None] = (0.0, None),
    colors: Sequence[str] | None = None,
    value_format: Callable[[float], str] = fmt_number,
    tick_format: Callable[[float], str] | None = None,
    reference: tuple[float, str] | None = None,
) -> str:
    """Horizontal bars, one per label, each with its value written at its end. `domain` (low, high) fixes the
    axis; a low above zero is drawn as a broken axis start (so small differences stay visible and honest)."""
    labels = [str(label) for label in labels]
    values = list(values)
    font = 11
    shown_labels = [label if len(label) <= 34 else label[:33] + "…" for label in labels]
    left = 16 + max((_text_width(label, font) for label in shown_labels), default=20)
    left = min(left, width * 0.45)
    right = 12 + max((_text_width(value_format(v), font) for v in values if finite(v)), default=20)
    top = 26 if title else 8
    gap = 6
    plot_h = len(labels) * (bar_height + gap)
    bottom = 34 + (14 if value_label else 0)
    height = top + plot_h + bottom
    good = [v for v in values if finite(v)]
    if reference is not None and finite(reference[0]):
        good.append(reference[0])
    lo = domain[0] if domain[0] is not None else (min(good) if good else 0.0)
    hi = domain[1] if domain[1] is not None else (max(good) if good else 1.0)
    lo, hi, ticks = nice_ticks(lo, hi, 5)
    if domain[0] is not None:
        lo = domain[0]
        ticks = [t for t in ticks if t >= lo - 1e-12]
    scale = _Scale(lo, hi, left, width - right)
    out = [_svg_open(width, height, title or value_label or "bar chart")]
    if title:
        out.append(_title(title, width))
    plot_bottom = top + plot_h
    for tick in ticks:
        x = scale(tick)
        out.append(
            f'<line x1="{x:.1f}" y1="{top:.1f}" x2="{x:.1f}" y2="{plot_bottom:.1f}" stroke="{GRID}"/>'
            f'<text x="{x:.1f}" y="{plot_bottom + 15:.1f}" text-anchor="middle" font-size="{font}" '
            f'fill="{MUTED}">{esc((tick_format or value_format)(tick))}</text>'
        )
    if value_label:
        out.append(
            f'<text x="{(left + width - right) / 2:.1f}" y="{height - 6:.1f}" text-anchor="middle" '
            f'font-size="{font}" fill="{INK}">{esc(value_label)}</text>'
        )
    for i, (label, shown, value) in enumerate(zip(labels, shown_labels, values)):
        y = top + i * (bar_height + gap) + gap / 2
        col = colors[i % len(colors)] if colors else PALETTE[0]
        out.append(
            f'<text x="{left - 6:.1f}" y="{y + bar_height / 2 + 4:.1f}" text-anchor="end" font-size="{font}" '
            f'fill="{INK}">{esc(shown)}<title>{esc(label)}</title></text>'
        )
        if not finite(value):
            out.append(
                f'<text x="{left + 4:.1f}" y="{y + bar_height / 2 + 4:.1f}" font-size="{font}" '
                f'fill="{MUTED}">no value</text>'
            )
            continue
        end = scale(min(max(value, lo), hi))
        out.append(
            f'<rect x="{left:.1f}" y="{y:.1f}" width="{max(end - left, 1):.1f}" height="{bar_height}" '
            f'fill="{col}" rx="1.5"><title>{esc(label)}: {esc(value_format(value))}</title></rect>'
            f'<text x="{end + 4:.1f}" y="{y + bar_height / 2 + 4:.1f}" font-size="{font}" '
            f'fill="{INK}">{esc(value_format(value))}</text>'
        )
    out.append(
        f'<line x1="{left:.1f}" y1="{top:.1f}" x2="{left:.1f}" y2="{plot_bottom:.1f}" stroke="{MUTED}"/>'
    )
    if lo > 0:  # the axis does not start at zero: say so with a break mark
        out.append(
            f'<path d="M{left - 4:.1f},{plot_bottom + 2:.1f} l4,-4 M{left - 4:.1f},{plot_bottom + 6:.1f} '
            f'l8,-8" stroke="{MUTED}" fill="none"/>'
        )
    if reference is not None and finite(reference[0]) and lo <= reference[0] <= hi:
        x = scale(reference[0])
        out.append(
            f'<line x1="{x:.1f}" y1="{top - 2:.1f}" x2="{x:.1f}" y2="{plot_bottom:.1f}" stroke="{INK}" '
            f'stroke-dasharray="4 3"><title>{esc(reference[1])}</title></line>'
        )
    out.append("</svg>")
    return "".join(out)


def grouped_bar_chart(
    groups: Sequence[str],
    series: Sequence[tuple[str, Sequence[float]]],
    *,
    title: str = "",
    x_label: str = "",
    y_label: str = "",
    width: int = 520,
    height: int = 280,
    value_format: Callable[[float], str] = fmt_number,
) -> str:
    """Vertical bars: one cluster per group (e.g. batch size), one coloured bar per series (e.g. backend)."""
    font = 11
    top = 26 if title else 8
    legend_svg, legend_h = _legend(
        [(name, color(i), False) for i, (name, _) in enumerate(series)], 56, top, width - 70, font
    )
    top += legend_h + (6 if legend_h else 0)
    values = [v for _, vs in series for v in vs if finite(v)]
    _, hi, ticks = nice_ticks(0.0, max(values) if values else 1.0, 5)
    labels = [value_format(t) for t in ticks]
    left = max(40.0, 14 + max(_text_width(t, font) for t in labels)) + (16 if y_label else 0)
    right, bottom = 10.0, 34.0 + (14 if x_label else 0)
    plot_bottom = height - bottom
    sy = _Scale(0.0, hi, plot_bottom, top)
    out = [_svg_open(width, height, title or y_label or "bar chart")]
    if title:
        out.append(_title(title, width))
    out.append(legend_svg)
    out.append(_value_grid(ticks, labels, sy, left, width - right, font))
    n_groups, n_series = max(len(groups), 1), max(len(series), 1)
    group_w = (width - right - left) / n_groups
    bar_w = min(group_w * 0.8 / n_series, 46)
    for g, group in enumerate(groups):
        cluster = bar_w * n_series
        x0 = left + g * group_w + (group_w - cluster) / 2
        out.append(
            f'<text x="{left + (g + 0.5) * group_w:.1f}" y="{plot_bottom + 15:.1f}" text-anchor="middle" '
            f'font-size="{font}" fill="{MUTED}">{esc(group)}</text>'
        )
        for s, (name, vs) in enumerate(series):
            value = vs[g] if g < len(vs) else math.nan
            if not finite(value):
                continue
            y = sy(value)
            out.append(
                f'<rect x="{x0 + s * bar_w:.1f}" y="{y:.1f}" width="{max(bar_w - 2, 1):.1f}" '
                f'height="{max(plot_bottom - y, 0.5):.1f}" fill="{color(s)}">'
                f"<title>{esc(name)}, {esc(group)}: {esc(value_format(value))}</title></rect>"
            )
    out.append(
        f'<line x1="{left:.1f}" y1="{plot_bottom:.1f}" x2="{width - right:.1f}" y2="{plot_bottom:.1f}" '
        f'stroke="{MUTED}"/>'
    )
    if x_label:
        out.append(
            f'<text x="{(left + width - right) / 2:.1f}" y="{height - 6:.1f}" text-anchor="middle" '
            f'font-size="{font}" fill="{INK}">{esc(x_label)}</text>'
        )
    if y_label:
        cy = (top + plot_bottom) / 2
        out.append(
            f'<text x="12" y="{cy:.1f}" text-anchor="middle" font-size="{font}" fill="{INK}" '
            f'transform="rotate(-90 12 {cy:.1f})">{esc(y_label)}</text>'
        )
    out.append("</svg>")
    return "".join(out)
