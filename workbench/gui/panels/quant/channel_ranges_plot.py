"""Per output channel, the weight range as a bar from min to max: before and after cross-layer equalization
side by side (the CLE paper's Figure 6), or else each channel's quantization range. The legend stands beside
the plot, so the bars take its whole height and none hides under it."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from workbench.gui.panels.quant.plot_panel import (
    CLIPPING,
    IN_USE,
    NEUTRAL,
    PlotPanel,
    brush,
    pen,
)
from workbench.gui.panels.quant.results import TensorArrays

EMPTY = "Each output channel's weight range appears here, before and after cross-layer equalization."
NO_CHANNELS = "per-tensor weights: no per-channel ranges"
BEFORE, AFTER = "#e8710a", IN_USE
TICK_PIXELS = 36  # at least this far apart, channel numbers never run into each other
TIPS = {
    "before CLE": "Each channel's weights from their min to their max, before cross-layer equalization",
    "after CLE": "Each channel's weights from their min to their max after cross-layer equalization rescaled "
    "the channels, which evens their ranges out",
    "quantizer range": "Each channel's clipping range as the quantizer uses it",
}
MARGIN = 0.04  # of the values' span, above the highest bar and under the lowest (the legend stands beside)


class ChannelRangesPlot(PlotPanel):
    """`set_ranges(arrays)` draws one bar per output channel per series; `bars` holds them by series name
    ("before CLE", "after CLE", or "quantizer range")."""

    def __init__(self, parent=None):
        super().__init__("weight", "output channel", empty=EMPTY, legend="beside", parent=parent)
        self.bars: dict[str, pg.BarGraphItem] = {}
        self.marks: pg.ScatterPlotItem | None = None
        self.channels = 0
        self.plot.getViewBox().sigResized.connect(self._set_ticks)
        self.plot.getViewBox().sigXRangeChanged.connect(self._set_ticks)

    def clear(self, message: str = "") -> None:
        super().clear(message)
        self.bars.clear()
        self.marks = None
        self.channels = 0

    def set_ranges(self, arrays: TensorArrays) -> None:
        self.clear()
        if arrays.cle_ranges is not None and np.ndim(arrays.cle_ranges) == 3 and len(arrays.cle_ranges) >= 2:
            series = [
                ("before CLE", np.asarray(arrays.cle_ranges[0], dtype=float), BEFORE),
                ("after CLE", np.asarray(arrays.cle_ranges[1], dtype=float), AFTER),
            ]
            title = (
                f"{arrays.layer} weight range per output channel, before and after cross-layer equalization"
            )
        elif (
            arrays.channel_ranges is not None
            and np.ndim(arrays.channel_ranges) == 3
            and len(arrays.channel_ranges)
        ):
            method = f" ({arrays.chosen})" if arrays.chosen else ""
            series = [(f"quantizer range{method}", np.asarray(arrays.channel_ranges[0], dtype=float), IN_USE)]
            title = f"{arrays.layer} quantization range per output channel"
        else:
            self.clear(NO_CHANNELS)
            return
        channels = series[0][1].shape[0]
        self.set_title(title)
        width = 0.8 / len(series)
        x = np.arange(channels, dtype=float)
        for i, (name, ranges, colour) in enumerate(series):
            low, high = ranges[:, 0], ranges[:, 1]
            offset = (i - (len(series) - 1) / 2) * width  # side by side, centred on the channel
            bar = pg.BarGraphItem(
                x=x + offset, y0=low, height=high - low, width=width * 0.9, brush=brush(colour, 200), pen=None
            )
            self.plot.addItem(bar)
            self.bars[name] = bar
            self.add_legend_bars(name, brush(colour, 200), tooltip=TIPS.get(name.split(" (")[0], ""))
        if arrays.cle_ranges is not None and arrays.channel_ranges is not None:
            self._mark_quantizer_range(arrays, x + (len(series) - 1) / 2 * width)
        zero = pg.InfiniteLine(0.0, angle=0, movable=False, pen=pen(NEUTRAL, 1.0))
        self.plot.addItem(zero, ignoreBounds=True)
        self.channels = channels
        self.plot.setXRange(-0.6, channels - 0.4, padding=0)
        self._set_ticks()
        # Every bar and mark in view with a little air: the legend beside the plot needs no room above them.
        low = min(float(np.nanmin(r[:, 0])) for _, r, _ in series)
        high = max(float(np.nanmax(r[:, 1])) for _, r, _ in series)
        if self.marks is not None:
            marks = self.marks.getData()[1]
            low, high = min(low, float(np.nanmin(marks))), max(high, float(np.nanmax(marks)))
        span = max(high - low, 1e-12)
        self.plot.setYRange(low - span * MARGIN, high + span * MARGIN, padding=0)
        self.finish()

    def _set_ticks(self, *args) -> None:
        """Whole channel numbers only (never 2.5), every 1, 2, 5, 10, … channels as the width allows."""
        if not self.channels:
            return
        view = self.plot.getViewBox()
        x0, x1 = view.viewRange()[0]
        per_channel = view.width() / max(x1 - x0, 1e-9)
        needed = TICK_PIXELS / per_channel if per_channel > 0 else self.channels
        step = next(m * 10**e for e in range(7) for m in (1, 2, 5) if m * 10**e >= needed)
        self.plot.getAxis("bottom").setTicks([[(float(c), str(c)) for c in range(0, self.channels, step)]])

    def _mark_quantizer_range(self, arrays: TensorArrays, x: np.ndarray) -> None:
        """The quantizer's per-channel clipping points on the after-CLE bars (CLE comes before the ranges are
        set): a tick where a channel's range cuts into its weights."""
        ranges = np.asarray(arrays.channel_ranges[0], dtype=float)
        if ranges.shape[0] != len(x):
            return
        tick = pen(CLIPPING, 1.6)
        points = pg.ScatterPlotItem(
            x=np.concatenate([x, x]),
            y=np.concatenate([ranges[:, 0], ranges[:, 1]]),
            symbol="_",
            size=10,
            pen=tick,
            brush=brush(CLIPPING),
        )
        self.plot.addItem(points)
        self.marks = points
        self.add_legend_marker(
            f"quantizer range ({arrays.chosen or 'in use'})",
            "_",
            10,
            tick,
            brush(CLIPPING),
            "Where the quantizer clips each channel: its range's lo and hi",
        )
