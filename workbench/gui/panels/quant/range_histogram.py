"""One quantizer's values as a histogram, with the range in use and every estimator's alternative drawn over
it, the clipped tails shaded, and below it how much each bin adds to the clipping and the rounding error. The
legend stands beside the plots, so it never hides a bar: a row per estimator with its clipping range and
SQNR."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette, QPen
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from workbench.gui.panels.quant.plot_panel import (
    CLIPPING,
    IN_USE,
    NEUTRAL,
    ROUNDING,
    SideLegend,
    Swatch,
    TitleLabel,
    brush,
    decimals_for,
    estimator_colour,
    legend_column,
    pen,
    reset_plot,
)
from workbench.gui.panels.quant.results import TensorArrays
from workbench.gui.plots import make_plot, stack_plots

EMPTY = (
    "The values of the selected layer's weight or activation appear here, with the range each estimator "
    "picks."
)
ERROR_EMPTY = "How much each bin adds to the clipping and the rounding error appears here."
# Room above the tallest bar (the legend stands beside the plot), in linear counts and in decades on a log
# axis.
HEADROOM = 1.08
ERROR_HEADROOM = 1.08
ERROR_TIPS = {
    "rounding": "Per bin: its share of the MSE from rounding the values inside the range to the grid",
    "clipping": "Per bin: its share of the MSE from clipping the values beyond the range to its ends",
}
LOG_FLOOR = 0.5  # on a log axis empty bins sit here, under a bin of one value, instead of at log(0)
MIN_SCALE = 1e-12  # as the worker's quantizer: an all-zero range still gets a positive scale
LEGEND_HEADER = ("clipping range", "SQNR")
LEGEND_TIP = (
    "Each row: the clipping range [lo, hi] an estimator gives on this quantizer's grid (widened to hold 0, "
    "then symmetric about 0 or with its zero point on a whole step, as the range in use is), and the SQNR of "
    "these values quantized with that range, rounding to nearest. Values beyond the range are clipped to "
    "it.\nThe in-use row is the quantizer as the run left it: an estimator row of the same method gives the "
    "same range, and the same SQNR unless the weights' rounding was learned (AdaRound rounds each weight up "
    "or down for the layer's output, not for the weights themselves, so their own SQNR is lower) or QAT "
    "trained the weights after the range was fixed (the estimators measure the trained weights afresh)."
)


def range_label(name: str, lo: float, hi: float, sqnr_db: float, decimals: int) -> str:
    """A legend row: "mse  [-0.57, 0.59]  19.0 dB"."""
    return f"{name}  {range_text(lo, hi, decimals)}  {sqnr_text(sqnr_db)}"


def range_text(lo: float, hi: float, decimals: int) -> str:
    return f"[{lo:.{decimals}f}, {hi:.{decimals}f}]"


def sqnr_text(sqnr_db: float) -> str:
    return f"{sqnr_db:.1f} dB" if math.isfinite(sqnr_db) else "– dB"


def grid_extent(lo, hi, qmin: int, qmax: int, symmetric: bool) -> tuple[np.ndarray, np.ndarray]:
    """What the clipping range [lo, hi] becomes on a grid of codes qmin..qmax, as the worker's
    qparams_from_range and QParams.extent make it: widened to hold 0, then symmetric about 0 (a signed grid's
    bound is the larger of -lo and hi) or with the zero point rounded to a whole code. So an estimator's range
    reads as the range in use does."""
    lo = np.minimum(np.asarray(lo, dtype=float), 0.0)
    hi = np.maximum(np.asarray(hi, dtype=float), 0.0)
    if symmetric:
        bound = np.maximum(-lo, hi) if qmin < 0 else hi
        scale = np.maximum(bound / qmax, MIN_SCALE)
        zero_point = 0.0
    else:
        scale = np.maximum((hi - lo) / (qmax - qmin), MIN_SCALE)
        zero_point = np.clip(np.round(qmin - lo / scale), qmin, qmax)
    return scale * (qmin - zero_point), scale * (qmax - zero_point)


def in_use_name(method: str, rounding: str) -> str:
    """The in-use row's name, saying what makes its SQNR differ from its method's estimator row, if
    anything."""
    why = {"nearest": "", "qat": "range fixed before QAT"}.get(rounding, f"{rounding} rounding")
    inside = ", ".join(part for part in (method, why) if part)
    return f"in use ({inside})" if inside else "in use"


class RangeLegend(SideLegend):
    """The legend beside the histogram (its bars, then a row per range with its clipping range and SQNR in
    columns under a header that names them) or, with `header` None, beside the error plot (its curves)."""

    def __init__(self, header: tuple[str, str] | None = LEGEND_HEADER, parent=None):
        super().__init__(header, LEGEND_TIP if header else "", parent=parent)

    def add_range(
        self, name: str, lo: float, hi: float, sqnr_db: float, decimals: int, line: QPen, tooltip: str = ""
    ) -> None:
        """A row for a range's line pair: its name, clipping range and SQNR, each in its column."""
        cells = [Swatch(line), QLabel(name), QLabel(range_text(lo, hi, decimals)), QLabel(sqnr_text(sqnr_db))]
        cells[3].setAlignment(Qt.AlignRight | Qt.AlignVCenter)
        row = len(self._rows) + bool(self.header)
        self._add(cells, range_label(name, lo, hi, sqnr_db, decimals), tooltip)
        for column, widget in enumerate(cells):
            self.grid.addWidget(widget, row, column)


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

    `lines` holds each estimator's (lo, hi) InfiniteLine pair by name ("chosen" is the range in use), each at
    the clipping range it gives on the quantizer's grid; the legend beside the plot names each with that range
    and its SQNR.
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
        self.legend = RangeLegend()
        self.error_legend = RangeLegend(header=None)
        # The switch in the title's row, on the plot's background: a row of its own took height from the bars.
        heading = QWidget()
        heading.setBackgroundRole(QPalette.Base)
        heading.setAutoFillBackground(True)
        controls = QHBoxLayout(heading)
        controls.setContentsMargins(6, 0, 0, 0)
        controls.addWidget(self.log_counts)
        controls.addWidget(self.title_label, 1)
        plots = QVBoxLayout()
        plots.setSpacing(0)
        plots.addWidget(self.plot, 3)
        plots.addWidget(self.error_plot, 2)
        # The legends beside the plots, each by its own: over a plot they hid its bars and curves, however
        # much room the y range left above them; one column beside both keeps the two plots' x axes lined up.
        body = QHBoxLayout()
        body.setSpacing(0)
        body.addLayout(plots, 1)
        body.addWidget(legend_column(self.legend, self.error_legend))
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(heading)
        layout.addLayout(body, 1)
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
        self.histogram = pg.PlotDataItem(pen=pen(NEUTRAL, 1.0), brush=brush(NEUTRAL, 110))
        # The clipped bins again in red, so the tails that lose their values stand out (also on a log axis).
        self.clipped = pg.PlotDataItem(pen=None, brush=brush(CLIPPING, 150))
        self.legend.add_bars(
            f"values ({int(counts.sum()):,})",
            brush(NEUTRAL, 110),
            pen(NEUTRAL, 1.0),
            "How many of the values fall in each bin",
        )
        self.legend.add_bars(
            self._clipped_label(),
            brush(CLIPPING, 150),
            tooltip="The values outside the range in use: quantized to its nearer end",
        )
        self._set_counts()
        self.plot.addItem(self.histogram)
        self.plot.addItem(self.clipped)
        self.error_plot.show()
        self._shade_clipped(edges, lo, hi)
        self._draw_ranges(arrays.estimators, ranges, edges, entry or {})
        self._draw_error(arrays, edges)
        self._fit_view()
        self.legend.show_rows()
        self.error_legend.show_rows()

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
        return list(self.legend.texts)

    @property
    def error_legend_texts(self) -> list[str]:
        return list(self.error_legend.texts)

    # -- drawing --------------------------------------------------------------------------------------------
    def _reset(self) -> None:
        reset_plot(self.plot, None)
        self.legend.clear()
        self.error_legend.clear()
        reset_plot(self.error_plot, None)
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
                region = pg.LinearRegionItem(
                    (start, stop), movable=False, brush=brush(CLIPPING, 28), pen=pen(CLIPPING, 0.0, Qt.NoPen)
                )
                region.setZValue(-10)  # under the bars
                plot.addItem(region, ignoreBounds=True)
                self.regions.append(region)

    def _draw_ranges(self, names: list[str], ranges: np.ndarray, edges: np.ndarray, entry: dict) -> None:
        decimals = decimals_for(float(edges[-1] - edges[0]))
        arrays = self.arrays
        # The same range as an estimator's row below, but learned rounding (a lower SQNR of the weights
        # themselves, rounded for the layer's output) or a range kept from before QAT trained the weights: the
        # name says which.
        in_use = in_use_name(arrays.chosen, arrays.rounding)
        for index, row in enumerate(ranges):
            name = names[index] if index < len(names) else f"range {index}"
            lo, hi, sqnr = float(row[0]), float(row[1]), float(row[2])
            if index == 0:  # the worker gives the range in use as its grid represents it (QParams.extent)
                line_pen, label, tooltip = pen(IN_USE, 2.6), in_use, self._in_use_tooltip()
            else:
                line_pen, label = pen(estimator_colour(name, index), 1.4, Qt.DashLine), name
                lo, hi, tooltip = self._on_grid(index, lo, hi, entry, decimals)
            pair = tuple(pg.InfiniteLine(value, angle=90, movable=False, pen=line_pen) for value in (lo, hi))
            for line in pair:
                line.setZValue(20 if index == 0 else 10)  # the range in use on top of an equal alternative
                self.plot.addItem(line, ignoreBounds=True)
            self.lines[name] = pair
            self.legend.add_range(label, lo, hi, sqnr, decimals, line_pen, tooltip)
            if index == 0:  # the error plot shows where the range in use ends, for reading its clipping
                for value in (lo, hi):
                    self.error_plot.addItem(
                        pg.InfiniteLine(value, angle=90, movable=False, pen=pen(IN_USE, 1.2)),
                        ignoreBounds=True,
                    )

    def _on_grid(
        self, index: int, lo: float, hi: float, entry: dict, decimals: int
    ) -> tuple[float, float, str]:
        """An estimator's range as the quantizer's grid would hold it, as the range in use is shown (the
        worker gives the estimator's own lo and hi: a symmetric grid widens the smaller side, an asymmetric
        one moves both ends by up to half a step to put the zero point on a whole code), with a tooltip naming
        both."""
        qmin, qmax, symmetric = entry.get("qmin"), entry.get("qmax"), entry.get("symmetric")
        if not isinstance(qmin, int) or not isinstance(qmax, int) or qmax <= qmin or symmetric is None:
            return lo, hi, ""  # no grid known (an old report): the estimator's own range
        channels = self.arrays.channel_ranges
        if channels is not None and index < len(channels):  # per channel: each channel's, then the outermost
            low, high = grid_extent(channels[index][:, 0], channels[index][:, 1], qmin, qmax, bool(symmetric))
            grid_lo, grid_hi = float(np.min(low)), float(np.max(high))
        else:
            low, high = grid_extent(lo, hi, qmin, qmax, bool(symmetric))
            grid_lo, grid_hi = float(low), float(high)
        if not (math.isfinite(grid_lo) and math.isfinite(grid_hi)):
            return lo, hi, ""
        tooltip = f"The estimator picked {range_text(lo, hi, decimals + 1)}"
        if range_text(lo, hi, decimals) != range_text(grid_lo, grid_hi, decimals):
            tooltip += (
                f"; on this {'symmetric' if symmetric else 'asymmetric'} grid that clips at "
                f"{range_text(grid_lo, grid_hi, decimals + 1)}"
            )
        return grid_lo, grid_hi, tooltip + "."

    def _in_use_tooltip(self) -> str:
        rounding = self.arrays.rounding
        if rounding == "qat":
            return (
                "The range was estimated before quantization-aware training and kept fixed while the weights "
                "trained; the estimator rows measure the trained weights afresh, so their ranges and SQNRs "
                "can differ from it."
            )
        if rounding != "nearest":
            return (
                f"The weights round with {rounding}: each weight goes up or down so that the layer's output, "
                "not the weight itself, stays close to FP32. The same range rounded to nearest (the "
                "estimator row of the same method) has a higher SQNR of the weights alone."
            )
        return "The quantizer as the run left it; the estimator row of the same method reads the same."

    def _draw_error(self, arrays: TensorArrays, edges: np.ndarray) -> None:
        error = None if arrays.error is None else np.asarray(arrays.error, dtype=float)
        if error is None or error.shape != (2, len(edges) - 1):
            self.error_plot.set_empty_text("No per-bin error was recorded for this quantizer.")
            return
        # Summed squared errors over the values counted: per bin, its share of the MSE (the bins add up to
        # it).
        share = error / arrays.values if arrays.values else error
        for row, (name, colour, alpha) in enumerate(
            (("rounding", ROUNDING, 90), ("clipping", CLIPPING, 120))
        ):
            values = share[1 if name == "rounding" else 0]
            curve = pg.PlotDataItem(
                edges,
                values,
                stepMode="center",
                fillLevel=0,
                pen=pen(colour, 1.2),
                brush=brush(colour, alpha),
            )
            self.error_legend.add_bars(
                f"{name} error  (MSE {values.sum():.3g})",
                brush(colour, alpha),
                pen(colour, 1.2),
                ERROR_TIPS[name],
            )
            curve.setZValue(row)  # clipping over rounding: it is the thinner one, out in the tails
            self.error_plot.addItem(curve)
            self.error_curves[name] = curve

    def _fit_view(self) -> None:
        """x: the data and every estimator's lines (a range wider than the data is worth seeing); y: the
        counts with room for the legend."""
        if self.arrays is None or self.histogram is None:
            return
        edges = np.asarray(self.arrays.edges, dtype=float)
        ends = [
            v for pair in self.lines.values() for v in (pair[0].value(), pair[1].value()) if math.isfinite(v)
        ]
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
        shares = [
            float(np.nanmax(curve.yData))
            for curve in self.error_curves.values()
            if curve.yData is not None and len(curve.yData)
        ]
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
        """The bars' data for the count axis in use: log10(0) has no place on a log axis, so there empty bins
        go to a floor under one value and the bars grow up from it."""
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
