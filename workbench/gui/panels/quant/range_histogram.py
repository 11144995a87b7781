"""One quantizer's values as a histogram, with the range in use and every estimator's alternative drawn over it,
the clipped tails shaded, and below it how much each bin adds to the clipping and the rounding error."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QVBoxLayout, QWidget

from workbench.gui.panels.quant.plot_panel import (
    CLIPPING,
    IN_USE,
    NEUTRAL,
    ROUNDING,
    TitleLabel,
    brush,
    decimals_for,
    estimator_colour,
    pen,
    reset_plot,
    show_legend,
)
from workbench.gui.panels.quant.results import TensorArrays
from workbench.gui.plots import add_legend, make_plot, stack_plots

EMPTY = "The values of the selected layer's weight or activation appear here, with the range each estimator picks."
ERROR_EMPTY = "How much each bin adds to the clipping and the rounding error appears here."
# Room above the tallest bar for the legend (top right), in linear counts and in decades on a log axis.
HEADROOM = 1.45
ERROR_HEADROOM = 1.6  # the error plot is short: its one-row legend needs a larger share of its height
LOG_FLOOR = 0.5  # on a log axis empty bins sit here, under a bin of one value, instead of at log(0)


def range_label(name: str, lo: float, hi: float, sqnr_db: float, decimals: int) -> str:
    """A legend row: "mse  [-0.57, 0.59]  19.0 dB"."""
    sqnr = f"{sqnr_db:.1f} dB" if math.isfinite(sqnr_db) else "– dB"
    return f"{name}  [{lo:.{decimals}f}, {hi:.{decimals}f}]  {sqnr}"


def histogram_title(arrays: TensorArrays, entry: dict | None) -> str:
    parts = [arrays.layer, arrays.tensor]
    entry = entry or {}
    if entry.get("bits"):
        parts.append(f"{entry['bits']}-bit")
    if entry.get("granularity") == "per_channel":
        parts.append("per-channel (lines: widest channel)")  # the rows hold the channels' outermost lo and hi
    method = entry.get("range_method") or arrays.chosen
    if method:
        parts.append(method)
    title = " · ".join(parts)
    if arrays.sampled:
        title += f" (sampled: {arrays.values:,} values)" if arrays.values else " (sampled)"
    return title


class RangeHistogram(QWidget):
    """`set_tensor(arrays, entry)` draws one quantizer; `set_log_counts(bool)` switches the count axis to log.

    `lines` holds each estimator's (lo, hi) InfiniteLine pair by name ("chosen" is the range in use); the legend
    names each with its SQNR.
    """

    def __init__(self, parent=None):
        super().__init__(parent)
        self.arrays: TensorArrays | None = None
        self.lines: dict[str, tuple[pg.InfiniteLine, pg.InfiniteLine]] = {}
        self.regions: list[pg.LinearRegionItem] = []
        self.histogram: pg.PlotDataItem | None = None
        self.clipped: pg.PlotDataItem | None = None
        self.error_curves: dict[str, pg.PlotDataItem] = {}
        self.title_label = TitleLabel()
        self.log_counts = QCheckBox("Log counts")
        self.log_counts.setToolTip("A log count axis shows the sparse tails that get clipped")
        self.plot = make_plot("", "count", "", empty=EMPTY)
        self.error_plot = make_plot("", "MSE share", "value", y_format="scientific", empty=ERROR_EMPTY)
        # One x axis for both: zooming into a tail zooms its error too.
        stack_plots([self.plot, self.error_plot], left_width=64)
        self.legend = add_legend(self.plot)
        # Side by side: one row, which the error plot's y range leaves room for (ERROR_HEADROOM).
        self.error_legend = add_legend(self.error_plot, columns=2)
        controls = QHBoxLayout()
        controls.addWidget(self.log_counts)
        controls.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addLayout(controls)
        layout.addWidget(self.title_label)
        layout.addWidget(self.plot, 3)
        layout.addWidget(self.error_plot, 2)
        self.log_counts.toggled.connect(self._on_log_toggled)

    # -- input ----------------------------------------------------------------------------------------------
    def set_tensor(self, arrays: TensorArrays, entry: dict | None = None) -> None:
        self._reset()
        self.arrays = arrays
        counts = np.asarray(arrays.counts, dtype=float)
        edges = np.asarray(arrays.edges, dtype=float)
        ranges = np.asarray(arrays.ranges, dtype=float).reshape(-1, 5)
        if not len(counts) or len(edges) != len(counts) + 1 or not len(ranges):
            self.clear("No histogram was recorded for this quantizer.")
            return
        self.title_label.set_title(histogram_title(arrays, entry))
        lo, hi = float(ranges[0, 0]), float(ranges[0, 1])
        self.histogram = pg.PlotDataItem(pen=pen(NEUTRAL, 1.0), brush=brush(NEUTRAL, 110),
                                         name=f"values ({int(counts.sum()):,})")
        # The clipped bins again in red, so the tails that lose their values stand out (also on a log axis).
        self.clipped = pg.PlotDataItem(pen=None, brush=brush(CLIPPING, 150), name=self._clipped_label())
        self._set_counts()
        self.plot.addItem(self.histogram)
        self.plot.addItem(self.clipped)
        self.error_plot.show()
        self._shade_clipped(edges, lo, hi)
        self._draw_ranges(arrays.estimators, ranges, edges)
        self._draw_error(arrays, edges)
        self._fit_view()
        show_legend(self.legend)
        show_legend(self.error_legend)

    def set_log_counts(self, on: bool) -> None:
        self.log_counts.setChecked(on)

    def clear(self, message: str = "") -> None:
        self._reset()
        self.arrays = None
        self.plot.set_empty_text(message or EMPTY)
        self.error_plot.setVisible(not message)  # the message is said once, above

    @property
    def title(self) -> str:
        return self.title_label.text()

    @property
    def legend_texts(self) -> list[str]:
        return [label.text for _sample, label in self.legend.items]

    # -- drawing --------------------------------------------------------------------------------------------
    def _reset(self) -> None:
        reset_plot(self.plot, self.legend)
        reset_plot(self.error_plot, self.error_legend)
        self.title_label.set_title("")
        self.lines.clear()
        self.regions.clear()
        self.error_curves.clear()
        self.histogram = self.clipped = None

    def _shade_clipped(self, edges: np.ndarray, lo: float, hi: float) -> None:
        for start, stop in ((edges[0], lo), (hi, edges[-1])):
            if stop <= start:
                continue  # nothing of the data lies beyond this side of the range
            for plot in (self.plot, self.error_plot):
                region = pg.LinearRegionItem((start, stop), movable=False, brush=brush(CLIPPING, 28),
                                             pen=pen(CLIPPING, 0.0, Qt.NoPen))
                region.setZValue(-10)  # under the bars
                plot.addItem(region, ignoreBounds=True)
                self.regions.append(region)

    def _draw_ranges(self, names: list[str], ranges: np.ndarray, edges: np.ndarray) -> None:
        decimals = decimals_for(float(edges[-1] - edges[0]))
        chosen = self.arrays.chosen if self.arrays is not None else ""
        if self.arrays is not None and self.arrays.rounding != "nearest":
            # The same range as the estimator's row below, but learned rounding: a lower SQNR of the weights
            # themselves, chosen for the layer's output.
            chosen = f"{chosen}, {self.arrays.rounding} rounding" if chosen else f"{self.arrays.rounding} rounding"
        for index, row in enumerate(ranges):
            name = names[index] if index < len(names) else f"range {index}"
            lo, hi, sqnr = float(row[0]), float(row[1]), float(row[2])
            if index == 0:
                line_pen, text = pen(IN_USE, 2.6), range_label(f"in use ({chosen})" if chosen else "in use",
                                                               lo, hi, sqnr, decimals)
            else:
                line_pen = pen(estimator_colour(name, index), 1.4, Qt.DashLine)
                text = range_label(name, lo, hi, sqnr, decimals)
            pair = tuple(pg.InfiniteLine(value, angle=90, movable=False, pen=line_pen) for value in (lo, hi))
            for line in pair:
                line.setZValue(20 if index == 0 else 10)  # the range in use on top of an equal alternative
                self.plot.addItem(line, ignoreBounds=True)
            self.lines[name] = pair
            self.legend.addItem(pg.PlotDataItem(pen=line_pen), text)
            if index == 0:  # the error plot shows where the range in use ends, for reading its clipping
                for value in (lo, hi):
                    self.error_plot.addItem(pg.InfiniteLine(value, angle=90, movable=False,
                                                            pen=pen(IN_USE, 1.2)), ignoreBounds=True)

    def _draw_error(self, arrays: TensorArrays, edges: np.ndarray) -> None:
        error = None if arrays.error is None else np.asarray(arrays.error, dtype=float)
        if error is None or error.shape != (2, len(edges) - 1):
            self.error_plot.set_empty_text("No per-bin error was recorded for this quantizer.")
            return
        # Summed squared errors over the values counted: per bin, its share of the MSE (the bins add up to it).
        share = error / arrays.values if arrays.values else error
        for row, (name, colour, alpha) in enumerate((("rounding", ROUNDING, 90), ("clipping", CLIPPING, 120))):
            values = share[1 if name == "rounding" else 0]
            curve = pg.PlotDataItem(edges, values, stepMode="center", fillLevel=0, pen=pen(colour, 1.2),
                                    brush=brush(colour, alpha),
                                    name=f"{name} error  (MSE {values.sum():.3g})")
            curve.setZValue(row)  # clipping over rounding: it is the thinner one, out in the tails
            self.error_plot.addItem(curve)
            self.error_curves[name] = curve

    def _fit_view(self) -> None:
        """x: the data and every estimator's lines (a range wider than the data is worth seeing); y: the counts with
        room for the legend."""
        if self.arrays is None or self.histogram is None:
            return
        edges = np.asarray(self.arrays.edges, dtype=float)
        ends = [v for pair in self.lines.values() for v in (pair[0].value(), pair[1].value()) if math.isfinite(v)]
        x0, x1 = min([edges[0], *ends]), max([edges[-1], *ends])
        self.plot.setXRange(x0, x1, padding=0.03)
        counts = np.asarray(self.arrays.counts, dtype=float)
        top = float(counts.max()) if len(counts) else 0.0
        if top <= 0:
            return
        if self.log_counts.isChecked():
            low, high = math.log10(LOG_FLOOR), math.log10(top)
            self.plot.setYRange(low, high + (high - low) * (HEADROOM - 1), padding=0)
        else:
            self.plot.setYRange(0, top * HEADROOM, padding=0)
        shares = [float(np.nanmax(curve.yData)) for curve in self.error_curves.values()
                  if curve.yData is not None and len(curve.yData)]
        if shares and max(shares) > 0:
            self.error_plot.setYRange(0, max(shares) * ERROR_HEADROOM, padding=0)

    def _clipped_label(self) -> str:
        counts = np.asarray(self.arrays.counts, dtype=float)
        clipped, total = counts[self._outside()].sum(), counts.sum()
        share = f"{clipped / total * 100:.2g}%" if total else "–"
        return f"clipped ({int(clipped):,} value{'s' * (int(clipped) != 1)}, {share})"

    def _outside(self) -> np.ndarray:
        """Which bins lie outside the range in use (their centre does)."""
        edges = np.asarray(self.arrays.edges, dtype=float)
        lo, hi = float(self.arrays.ranges[0][0]), float(self.arrays.ranges[0][1])
        centres = (edges[:-1] + edges[1:]) / 2
        return (centres < lo) | (centres > hi)

    def _set_counts(self) -> None:
        """The bars' data for the count axis in use: log10(0) has no place on a log axis, so there empty bins go
        to a floor under one value and the bars grow up from it."""
        counts = np.asarray(self.arrays.counts, dtype=float)
        edges = np.asarray(self.arrays.edges, dtype=float)
        clipped = np.where(self._outside(), counts, 0.0)
        log = self.log_counts.isChecked()
        level = math.log10(LOG_FLOOR) if log else 0.0  # fill levels are in the axis' own (log) coordinates
        for item, values in ((self.histogram, counts), (self.clipped, clipped)):
            item.setData(edges, np.maximum(values, LOG_FLOOR) if log else values, stepMode="center")
            item.setFillLevel(level)

    def _on_log_toggled(self, on: bool) -> None:
        self.plot.setLogMode(y=on)
        if self.arrays is not None and self.histogram is not None:
            self._set_counts()
            self._fit_view()
