"""Which layer hurts: per layer, the accuracy (or a task's monitor, "val mIoU ↑") with only that layer
quantized and with every layer but it quantized, as horizontal bars against the FP32 and the fully quantized
values. The legend stands beside the chart, so the layers' rows take its whole height and no bar or value
hides under it."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontMetrics

from workbench.gui.panels.quant.metric import Measure
from workbench.gui.panels.quant.plot_panel import FP32, PlotPanel, brush, finite, pen
from workbench.gui.plots import SERIES_COLOURS

EMPTY = (
    "How much each layer costs when quantized alone, and what is left when every other layer is, appears "
    "here."
)
SERIES = (
    ("only_this", "only this layer quantized", SERIES_COLOURS[0]),
    ("all_but_this", "all but this layer quantized", SERIES_COLOURS[1]),
)
QUANTIZED = "#9c5bd0"
# The value labels' font: the largest of these whose text fits inside a bar (a rendered line may overrun the
# bar by a pixel or so); with none, the labels hide and the axis reads the values.
LABEL_SIZES = (8.0, 7.0)
LABEL_FONTS = tuple(QFont() for _ in LABEL_SIZES)
for _font, _size in zip(LABEL_FONTS, LABEL_SIZES):
    _font.setPointSizeF(_size)
LABEL_FONT = LABEL_FONTS[0]
ROW_PIXELS = 26  # the least height a layer's row keeps, so its name stays readable with many layers
GROUP = 0.8  # of a layer's row, its bars' share; each bar takes its part of it less a gap
BAR = GROUP / len(SERIES) * 0.9


class SensitivityChart(PlotPanel):
    """`set_rows(rows, fp32_accuracy, quantized_accuracy, metric)` draws one bar per layer per series (`bars`
    by series key: "only_this", "all_but_this"); layers run top to bottom in the order given, named on the
    left axis. `metric` (a result's metric block; None: accuracy) names what the values are."""

    def __init__(self, parent=None):
        super().__init__("", "accuracy", empty=EMPTY, x_format="percent", legend="beside", parent=parent)
        self.bars: dict[str, pg.BarGraphItem] = {}
        self.references: dict[str, pg.InfiniteLine] = {}
        self.labels: list[pg.TextItem] = []
        self.rows = 0
        self.measure = Measure()
        self._fitting = False  # until the user zooms or pans, a resize refits the rows to the height
        view = self.plot.getViewBox()
        view.invertY(True)  # the first layer on top, as in the network and the layer table
        view.sigResized.connect(self._fit_rows)
        view.sigRangeChangedManually.connect(self._stop_fitting)

    def clear(self, message: str = "") -> None:
        super().clear(message)
        self.bars.clear()
        self.references.clear()
        self.labels.clear()
        self.rows = 0
        self._fitting = False
        self.plot.getAxis("left").setWidth(None)

    def set_rows(
        self,
        rows: list[dict],
        fp32_accuracy: float | None,
        quantized_accuracy: float | None,
        metric: dict | None = None,
    ) -> None:
        self.clear()
        self.measure = measure = Measure.of(metric)
        self.set_axis("bottom", measure.axis, measure.fmt)
        rows = [r for r in rows if r.get("layer") is not None]
        if not rows:
            self.clear("No per-layer sensitivity was measured in this run.")
            return
        self.set_title(f"{measure.title} per layer: quantized alone, and everything but it quantized")
        y = np.arange(len(rows), dtype=float)
        thickness = GROUP / len(SERIES)
        for i, (key, name, colour) in enumerate(SERIES):
            values = np.array([_number(r.get(key)) for r in rows], dtype=float)
            shown = np.isfinite(values)  # a layer that was not measured gets no bar, not a zero one
            if not shown.any():
                continue
            offset = (i - (len(SERIES) - 1) / 2) * thickness
            bar = pg.BarGraphItem(
                x0=0.0,
                width=values[shown],
                y=y[shown] + offset,
                height=BAR,
                brush=brush(colour, 220),
                pen=None,
            )
            self.plot.addItem(bar)
            self.bars[key] = bar
            self.add_legend_bars(name, brush(colour, 220))
            for value, row in zip(values[shown], y[shown] + offset):
                # Inside the bar's end, white on the bar's hue: the same on either theme.
                label = pg.TextItem(measure.text(value), color="#ffffff", anchor=(1.0, 0.5))
                label.setFont(LABEL_FONT)
                label.setPos(value, row)
                self.plot.addItem(label)
                self.labels.append(label)
        for key, value, colour, style, text in (
            ("fp32", fp32_accuracy, FP32, Qt.DashLine, "FP32"),
            ("quantized", quantized_accuracy, QUANTIZED, Qt.DotLine, "quantized"),
        ):
            if value is None or not math.isfinite(value):
                continue
            line_pen = pen(colour, 1.8, style)
            line = pg.InfiniteLine(value, angle=90, movable=False, pen=line_pen)
            self.plot.addItem(line, ignoreBounds=True)
            self.references[key] = line
            self.add_legend_line(f"{text} {measure.text(value)}", line_pen)
        names = [str(r["layer"]) for r in rows]
        axis = self.plot.getAxis("left")
        axis.setTicks([list(enumerate(names))])
        # Wide enough for the longest name from the start (pyqtgraph widens it only after a first paint).
        axis.setWidth(max(QFontMetrics(axis.font()).horizontalAdvance(n) for n in names) + 14)
        self.finish()
        self._fit_view(rows, [fp32_accuracy, quantized_accuracy])
        self.setMinimumHeight(min(600, 90 + ROW_PIXELS * len(rows)))

    def _fit_view(self, rows: list[dict], references: list[float | None]) -> None:
        """Accuracies of quantized layers differ by tenths of a percent: bars from 0 would all look alike, so
        the axis starts just under the lowest value (the bars run off its left edge)."""
        values = finite(
            [_number(r.get(key)) for r in rows for key, _, _ in SERIES] + [_number(v) for v in references]
        )
        low, high = float(values.min()), float(values.max())
        if self.measure.accuracy:
            span = max(high - low, 0.01)
            self.plot.setXRange(
                max(0.0, low - span * 0.25), min(1.0, high + span * 0.1) + span * 0.02, padding=0
            )
        else:  # another metric has its own scale: a floor for the span relative to it, no 100 % ceiling
            span = max(high - low, abs(high) * 0.02, 1e-12)
            left = low - span * 0.25
            self.plot.setXRange(max(0.0, left) if low >= 0 else left, high + span * 0.12, padding=0)
        self.rows, self._fitting = len(rows), True
        self._fit_rows()

    def _fit_rows(self, *args) -> None:
        """The layer rows fill the view's height (the legend stands beside it); the value labels take the
        largest font a bar is tall enough for, or hide where none fits, measured in pixels, since a row's
        height in pixels changes with the panel's."""
        if not self._fitting or not self.rows:
            return
        height = self.plot.getViewBox().height()
        if height <= 0:
            return
        self.plot.getViewBox().setYRange(-0.5, self.rows - 0.5, padding=0)
        font = self.label_font()
        for label in self.labels:
            if font is not None and label.textItem.font() != font:
                label.setFont(font)
            label.setVisible(font is not None)

    def label_font(self) -> QFont | None:
        """The largest label font whose text fits inside a bar at its height now, or None if none does."""
        bar = self.bar_pixels()
        return next((font for font in LABEL_FONTS if bar >= QFontMetrics(font).height() - 2), None)

    def bar_pixels(self) -> float:
        """How tall a bar is on screen, in pixels."""
        view = self.plot.getViewBox()
        low, high = view.viewRange()[1]
        return view.height() / max(high - low, 1e-9) * BAR

    def _stop_fitting(self, *args) -> None:
        self._fitting = False


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
