"""The quantization error q(x) − x of one quantizer against x: a sawtooth within ±scale/2 inside the range,
and the clipping error growing linearly outside it. Computed here from the report's scale and zero point. The
legend stands beside the plot, so it hides none of the sawtooth."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt

from workbench.gui.panels.quant.plot_panel import (
    CLIPPING,
    IN_USE,
    NEUTRAL,
    PlotPanel,
    brush,
    decimals_for,
    pen,
)

EMPTY = "The error q(x) − x of the selected quantizer appears here."
TEETH_POINTS = 24  # samples per quantization step: enough for the sawtooth's ramps to read as straight
MAX_POINTS = 200_000
EXACT_JUMPS = 4096  # up to this many levels, each jump is drawn vertical (two points either side of it)


def quantize(x: np.ndarray, scale: float, zero_point: float, qmin: int, qmax: int) -> np.ndarray:
    """Uniform affine fake quantization: s · (clamp(round(x / s) + z, qmin, qmax) − z)."""
    x_int = np.clip(np.round(x / scale) + zero_point, qmin, qmax)
    return scale * (x_int - zero_point)


def channel_values(entry: dict, channel: int | None) -> tuple[float, float, float, float, int | None]:
    """scale, zero point, min and max of the entry (of `channel`, by default the largest scale's, when it is
    per-channel), and which channel that was (None per-tensor)."""
    scale, zero_point = entry["scale"], entry.get("zero_point", 0)
    if isinstance(scale, (list, tuple, np.ndarray)):
        scales = np.asarray(scale, dtype=float)
        index = int(np.argmax(scales)) if channel is None else int(channel)
        if not 0 <= index < len(scales):
            raise IndexError(f"channel {index} of {len(scales)}")

        def pick(value, default: float) -> float:
            if isinstance(value, (list, tuple, np.ndarray)):
                return float(value[index])
            return default if value is None else float(value)

        s = float(scales[index])
        z = pick(zero_point, 0.0)
        low = pick(entry.get("min"), s * (entry["qmin"] - z))
        high = pick(entry.get("max"), s * (entry["qmax"] - z))
        return s, z, low, high, index
    s, z = float(scale), float(zero_point or 0)
    low = float(entry["min"]) if entry.get("min") is not None else s * (entry["qmin"] - z)
    high = float(entry["max"]) if entry.get("max") is not None else s * (entry["qmax"] - z)
    return s, z, low, high, None


def error_curve(
    scale: float, zero_point: float, qmin: int, qmax: int, low: float, high: float, margin: float
) -> tuple[np.ndarray, np.ndarray]:
    """x over [low − margin, high + margin] and q(x) − x there, with each rounding jump drawn vertical."""
    x0, x1 = low - margin, high + margin
    n = int(np.clip((x1 - x0) / scale * TEETH_POINTS, 2000, MAX_POINTS))
    x = np.linspace(x0, x1, n)
    levels = qmax - qmin
    if levels <= EXACT_JUMPS:
        # Rounding jumps halfway between levels; a point just either side makes the jump a vertical line.
        jumps = scale * (np.arange(qmin, qmax) - zero_point + 0.5)
        nudge = scale * 1e-6
        x = np.unique(np.concatenate([x, jumps - nudge, jumps + nudge]))
    return x, quantize(x, scale, zero_point, qmin, qmax) - x


class ErrorPlot(PlotPanel):
    """`set_quantizer(entry, channel=None)` draws q(x) − x for a report layer entry; per-channel entries show
    one channel, by default the one with the largest scale (its `channel` attribute says which)."""

    def __init__(self, parent=None):
        super().__init__("q(x) − x", "x", empty=EMPTY, legend="beside", parent=parent)
        self.curve: pg.PlotDataItem | None = None
        self.edges: tuple[pg.InfiniteLine, pg.InfiniteLine] | None = None
        self.channel: int | None = None
        self.scale: float | None = None

    def set_quantizer(self, entry: dict, channel: int | None = None) -> None:
        self.clear()
        try:
            scale, zero_point, low, high, self.channel = channel_values(entry, channel)
            qmin, qmax = int(entry["qmin"]), int(entry["qmax"])
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            self.clear(f"This quantizer's parameters cannot be drawn ({exc}).")
            return
        if not scale > 0 or qmax <= qmin:
            self.clear(f"This quantizer's scale ({scale}) or grid ({qmin}…{qmax}) cannot be drawn.")
            return
        self.scale = scale
        # Wide enough to see the clipping error grow, at least two steps; the y range below keeps the sawtooth
        # readable however far the linear part goes.
        margin = max(2 * scale, 0.1 * (high - low))
        x, y = error_curve(scale, zero_point, qmin, qmax, low, high, margin)
        self.set_title(self._title(entry, scale, zero_point))
        for start, stop in ((x[0], low), (high, x[-1])):
            region = pg.LinearRegionItem(
                (start, stop), movable=False, brush=brush(CLIPPING, 28), pen=pen(CLIPPING, 0.0, Qt.NoPen)
            )
            region.setZValue(-10)
            self.plot.addItem(region, ignoreBounds=True)
        decimals = decimals_for(high - low)
        edge_pen = pen(CLIPPING, 1.6, Qt.DashLine)
        self.edges = (
            pg.InfiniteLine(low, angle=90, movable=False, pen=edge_pen),
            pg.InfiniteLine(high, angle=90, movable=False, pen=edge_pen),
        )
        half_pen = pen(NEUTRAL, 1.0, Qt.DotLine)
        for line in (
            *self.edges,
            pg.InfiniteLine(scale / 2, angle=0, movable=False, pen=half_pen),
            pg.InfiniteLine(-scale / 2, angle=0, movable=False, pen=half_pen),
        ):
            self.plot.addItem(line, ignoreBounds=True)
        self.curve = self.plot.plot(x, y, pen=pen(IN_USE, 1.4))
        self.add_legend_line(
            "q(x) − x",
            pen(IN_USE, 1.4),
            "The quantization error: within ±scale/2 inside the range, growing beyond it",
        )
        self.add_legend_line(f"clipping range [{low:.{decimals}f}, {high:.{decimals}f}]", edge_pen)
        self.add_legend_line(f"±scale/2 = ±{scale / 2:.3g}", half_pen)
        self.plot.setXRange(x[0], x[-1], padding=0.02)
        # At 8 bits the clipping error beyond a 10 % margin is ~25 steps: shown whole, the ±½-step sawtooth
        # would be a flat line. Cap the view at 4 steps (the lines leave it, rising); zoom out for the rest.
        limit = min(float(np.abs(y).max()), 4 * scale) * 1.15
        self.plot.setYRange(-limit, limit, padding=0)
        self.finish()

    def _title(self, entry: dict, scale: float, zero_point: float) -> str:
        parts = [str(entry.get("name", "")), str(entry.get("tensor", ""))]
        if entry.get("bits"):
            parts.append(f"{entry['bits']}-bit")
        if self.channel is not None:
            count = len(entry["scale"])
            largest = self.channel == int(np.argmax(entry["scale"]))
            parts.append(f"channel {self.channel} of {count}" + (" (largest scale)" if largest else ""))
        parts.append(f"scale {scale:.3g}, zero point {zero_point:g}")
        return " · ".join(p for p in parts if p)
