"""Every tab's plots are built here: unit-less axes without SI prefixes, one hue per run, themed legends and
empty states, all following the light or dark palette live. Fix a plot problem here once, not per tab.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QPointF, QRect, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFontMetricsF, QPainter, QPalette, QPen, QTextOption
from PySide6.QtWidgets import (
    QApplication,
    QGraphicsTextItem,
    QHBoxLayout,
    QLabel,
    QLayout,
    QSizePolicy,
    QWidget,
    QWidgetItem,
)

from workbench.gui.run_identity import short_model
from workbench.gui.widgets.layouts import clear_layout

# One hue per run, in the order runs are shown. Mid-tone colours that read on white and on near-black alike;
# ten of them, because comparing more than ten runs in one plot is a table's job. Tableau's categorical
# colours (with Okabe-Ito's bluish green), ordered so the first ones differ the most: an orange and a gold two
# runs apart were mistaken for each other, so no two of the first eight are closer than CIEDE2000 20.
RUN_HUES = (
    "#1f77b4",
    "#ff7f0e",
    "#009e73",
    "#e377c2",
    "#bcbd22",
    "#d62728",
    "#17becf",
    "#7f7f7f",
    "#9467bd",
    "#8c564b",
)
# categories within one plot (splits, channels): the same hues in the same order
SERIES_COLOURS = RUN_HUES[:6]
CHANNEL_COLOURS = {1: ("#7a7f87",), 3: ("#d0342c", "#2e9d4a", "#2f6fd6")}

# What a line means is told by its style, the same for every run (its hue tells which run it is).
SERIES_STYLES = {
    "train": (Qt.SolidLine, None),
    "train (epoch)": (Qt.DotLine, "o"),
    "validation": (Qt.DashLine, "s"),
}

FORMATS = ("plain", "percent", "scientific")
GRID_ALPHA = 0.15


def run_colour(index: int) -> str:
    return RUN_HUES[index % len(RUN_HUES)]


def series_pen(colour: str, role: str = "train", width: float = 1.6) -> QPen:
    style, _symbol = SERIES_STYLES.get(role, (Qt.SolidLine, None))
    pen = pg.mkPen(colour, width=width, style=style)
    pen.setCosmetic(True)
    return pen


def run_label(run_id: str, model: str = "", dataset: str = "") -> str:
    """A short name for a run in legends and readouts: model · dataset · the tail of its id."""
    tail = run_id.rsplit("-", 1)[-1][-6:] if run_id else "?"
    # torchvision:resnet18 -> resnet18, file:/long/path/net.py:Net -> Net (lightning: too), the dataset's as
    # well
    parts = [short_model(p) for p in (model, dataset) if p]
    return " · ".join([*parts, tail]) if parts else f"run {tail}"


# -- numbers on axes and in readouts ------------------------------------------------------------------------
def _decimals(spacing: float) -> int:
    """Decimals that tell ticks `spacing` apart (0.05 -> 2, 2 -> 0)."""
    if not spacing or not math.isfinite(spacing) or spacing <= 0:
        return 3
    return max(0, math.ceil(-math.log10(spacing) - 1e-9))


def _compact_exponent(text: str) -> str:
    mantissa, _, exponent = text.partition("e")
    # numpy keeps the point of a mantissa it rounded to a whole number ("2.e-04" for 2.0000001e-4): drop it.
    mantissa = mantissa.rstrip(".")
    return f"{mantissa}e{int(exponent)}" if exponent else text


def _scientific(value: float, spacing: float | None) -> str:
    if value == 0 or (spacing and abs(value) < spacing * 1e-6):
        return "0"
    exponent = math.floor(math.log10(abs(value)))
    digits = max(0, exponent - math.floor(math.log10(spacing))) if spacing and spacing > 0 else 2
    return _compact_exponent(f"{value:.{min(digits, 6)}e}")


def _plain(value: float, spacing: float | None) -> str:
    if value == 0 or (spacing and abs(value) < spacing * 1e-6):
        return "0"  # never "-0" or "1e-17" for a tick that is zero up to rounding
    magnitude = abs(value)
    if magnitude >= 1e7 or magnitude < 1e-4:
        return _scientific(value, spacing)
    decimals = _decimals(spacing) if spacing else 4
    return f"{value:,.{decimals}f}"


def format_ticks(values: Iterable[float], spacing: float | None, fmt: str = "plain") -> list[str]:
    """Tick labels for a linear axis: plain numbers, percentages of a 0–1 quantity, or scientific notation."""
    if fmt == "percent":
        decimals = _decimals(spacing * 100) if spacing else 1
        return [f"{v * 100:.{decimals}f}%" if abs(v * 100) >= 10 ** -(decimals + 3) else "0%" for v in values]
    if fmt == "scientific":
        return [_scientific(v, spacing) for v in values]
    return [_plain(v, spacing) for v in values]


def format_value(value: float, fmt: str = "plain") -> str:
    """One value for a readout, with more digits than a tick label."""
    if value is None or not math.isfinite(value):
        return str(value)
    if fmt == "percent":
        return f"{value * 100:.2f}%"
    if fmt == "scientific":
        return _compact_exponent(f"{value:.3e}")
    return f"{value:.4g}"


def _log_label(value: float, fmt: str) -> str:
    if fmt == "percent":
        return np.format_float_positional(value * 100, precision=3, fractional=False, trim="-") + "%"
    if fmt == "scientific" or value >= 1e7 or value < 1e-3:
        return _compact_exponent(np.format_float_scientific(value, precision=2, trim="-"))
    return np.format_float_positional(value, precision=3, fractional=False, trim="-")


def _nice_step(raw: float) -> float:
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


class NumberAxis(pg.AxisItem):
    """An axis for unit-less numbers: never an SI prefix ("(x0.001)"), ticks as plain, percent or scientific.

    In log mode the labels are the values themselves (0.05, 0.1, 1), and a range narrower than one 1-2-…-9
    step still gets labelled ticks, where pyqtgraph's log axis would draw none.
    """

    def __init__(self, orientation: str, fmt: str = "plain", **kwargs):
        if fmt not in FORMATS:
            raise ValueError(f"axis format {fmt!r}: expected one of {', '.join(FORMATS)}")
        super().__init__(orientation, **kwargs)
        self.fmt = fmt
        self.values_wanted = True  # False on the upper plots of a linked stack; the empty state respects it
        self.background: QColor | None = None  # set by style_plot: translucent grid lines are blended onto it
        self._log_labelled: set[float] | None = None  # the log ticks that carry a label; None: every one
        self.enableAutoSIPrefix(False)

    def generateDrawSpecs(self, p):
        # The raster engine blends a translucent line several times slower than it draws an opaque one, and a
        # live plot repaints its grid at every update (the x range grows): blend the grid colours here once.
        specs = super().generateDrawSpecs(p)
        if specs is None or self.grid is False or self.background is None:
            return specs
        axis_spec, tick_specs, text_specs = specs
        blended: dict[int, QPen] = {}
        opaque = []
        for pen, start, stop in tick_specs:
            colour = pen.color()
            if colour.alpha() < 255:
                solid = blended.get(colour.rgba())
                if solid is None:
                    a, b = colour.alphaF(), self.background
                    solid = QPen(pen)
                    solid.setColor(
                        QColor.fromRgbF(
                            b.redF() + (colour.redF() - b.redF()) * a,
                            b.greenF() + (colour.greenF() - b.greenF()) * a,
                            b.blueF() + (colour.blueF() - b.blueF()) * a,
                        )
                    )
                    blended[colour.rgba()] = solid
                pen = solid
            opaque.append((pen, start, stop))
        return axis_spec, opaque, text_specs

    def tickStrings(self, values, scale, spacing):
        if self.logMode:
            return self.logTickStrings(values, scale, spacing)
        return format_ticks([v * scale for v in values], spacing * scale if spacing else spacing, self.fmt)

    def logTickStrings(self, values, scale, spacing):
        labelled = self._log_labelled
        return [
            _log_label(10.0**v * scale, self.fmt) if labelled is None or round(v, 9) in labelled else ""
            for v in values
        ]

    def logTickValues(self, minVal, maxVal, size, stdTicks):
        self._log_labelled = None
        if not (math.isfinite(minVal) and math.isfinite(maxVal)) or maxVal <= minVal or size <= 0:
            return super().logTickValues(minVal, maxVal, size, stdTicks)
        decades = maxVal - minVal
        per_decade = size / decades  # pixels
        low, high = math.floor(minVal), math.ceil(maxVal)
        marks = [k + math.log10(m) for k in range(low, high) for m in range(1, 10)]
        marks = [v for v in marks if minVal <= v <= maxVal]
        if len(marks) < 2:
            # Narrower than the gap between two 1…9 marks: linear steps in value space, one per ~60 px.
            lo, hi = 10.0**minVal, 10.0**maxVal
            step = _nice_step((hi - lo) / max(3.0, size / 60))
            values = np.arange(math.ceil(lo / step) * step, hi + step * 1e-6, step)
            if len(values) < 2:  # a nice step can straddle the range: halve it once
                step /= 2
                values = np.arange(math.ceil(lo / step) * step, hi + step * 1e-6, step)
            return [(None, list(np.log10(values[values > 0])))]
        # Label only as many of the 1…9 marks as fit (pyqtgraph labels them all, in a heap under each decade);
        # the others stay as short unlabelled ticks.
        if per_decade > 400:
            mantissas = range(1, 10)
        elif per_decade > 110:
            mantissas = (1, 2, 5)
        elif per_decade > 60 or decades < 2:
            mantissas = (1, 3)
        else:
            mantissas = (1,)
        every = max(1, math.ceil(decades * 22 / size))  # very many decades: every n-th decade
        labelled = [
            k + math.log10(m)
            for k in range(low, high + 1)
            for m in mantissas
            if minVal <= k + math.log10(m) <= maxVal and k % every == 0
        ]
        if len(labelled) < 2:
            labelled = marks[:: max(1, len(marks) // 3)]
        self._log_labelled = {round(v, 9) for v in labelled}
        minor = [v for v in marks if round(v, 9) not in self._log_labelled]
        return [(None, labelled), (None, minor)]


class CategoryAxis(NumberAxis):
    """A bottom axis of named categories (bars at 0, 1, 2…, a heat map's columns) that shows every name and
    overlaps none: side by side where the widest fits between two ticks, else turned upright (reading upwards)
    and, past MAX_UPRIGHT pixels, elided. pyqtgraph centres each name under its tick whatever its width, so
    long names ran into each other, and it drops a name that runs past the axis's end (the first bar's
    "background"). Without ticks set (no data yet) it is a NumberAxis."""

    MAX_UPRIGHT = 110  # pixels: a longer name is elided rather than squeeze the plot above it
    GAP = 6  # pixels between two names side by side

    def __init__(self, fmt: str = "plain", **kwargs):
        super().__init__("bottom", fmt, **kwargs)
        self.upright = False

    def generateDrawSpecs(self, p):
        if not self._tickLevels or not self.style["showValues"]:
            return super().generateDrawSpecs(p)
        # pyqtgraph places the ticks; with its values off it neither places nor measures any text of its own.
        self.style["showValues"] = False
        try:
            specs = super().generateDrawSpecs(p)
        finally:
            self.style["showValues"] = True
        if specs is None:
            return None
        axis_spec, tick_specs, _ = specs
        text_specs, height = self._name_specs(QFontMetricsF(p.font()))
        self._updateMaxTextSize(height)  # the axis grows to the upright names' length
        return axis_spec, tick_specs, text_specs

    def _placed(self) -> list[tuple[float, str]]:
        """(x in the axis's own pixels, name) of each tick inside the range, left to right."""
        low, high = self.range
        if high == low:
            return []
        scale = self.mapRectFromParent(self.geometry()).width() / (high - low)
        return sorted(
            ((value - low) * scale, str(name))
            for value, name in self._tickLevels[0]
            if min(low, high) <= value <= max(low, high)
        )

    def _name_specs(self, metrics: QFontMetricsF) -> tuple[list, float]:
        """pyqtgraph's text specs (rect, flags, text) for the names, and the height they need. An upright
        name's rect is the area it covers on screen; drawPicture turns the text into it."""
        placed = self._placed()
        if not placed:
            return [], 0
        bounds = self.mapRectFromParent(self.geometry())
        xs = [x for x, _ in placed]
        widths = [metrics.horizontalAdvance(name) for _, name in placed]
        line = metrics.height()
        top = bounds.top() + max(0, self.style["tickLength"]) + self.style["tickTextOffset"][1]
        self.upright = not self._side_by_side(xs, widths, bounds.width())
        if not self.upright:
            flags = Qt.AlignHCenter | Qt.AlignTop
            return [
                (QRectF(x - w / 2, top, w, line), flags, name) for (x, name), w in zip(placed, widths)
            ], line
        room = min((b - a for a, b in zip(xs, xs[1:])), default=bounds.width())
        every = max(1, math.ceil(line / room))  # closer than a line apart even upright: every n-th name
        length = min(max(widths), self.MAX_UPRIGHT)
        flags = Qt.AlignRight | Qt.AlignVCenter
        return [
            (QRectF(x - line / 2, top, line, length), flags, metrics.elidedText(name, Qt.ElideRight, length))
            for k, (x, name) in enumerate(placed)
            if k % every == 0
        ], length

    def _side_by_side(self, xs: list[float], widths: list[float], length: float) -> bool:
        """Whether the names fit level, centred under their ticks: GAP apart, and inside the axis (pyqtgraph
        clips the text to it)."""
        inside = all(x - w / 2 >= 0 and x + w / 2 <= length for x, w in zip(xs, widths))
        return inside and all(
            b - a >= (wa + wb) / 2 + self.GAP for a, b, wa, wb in zip(xs, xs[1:], widths, widths[1:])
        )

    def drawPicture(self, p, axisSpec, tickSpecs, textSpecs):
        if not self.upright:
            super().drawPicture(p, axisSpec, tickSpecs, textSpecs)
            return
        # the line and ticks; it leaves the text pen and clip set
        super().drawPicture(p, axisSpec, tickSpecs, [])
        for rect, flags, text in textSpecs:
            p.save()
            # A quarter turn left about the name's top centre: the text reads upwards and ends at the axis.
            p.translate(rect.center().x(), rect.top())
            p.rotate(-90)
            p.drawText(
                QRectF(-rect.height(), -rect.width() / 2, rect.height(), rect.width()), int(flags), text
            )
            p.restore()


# -- the view box: flat data and the empty state -------------------------------------------------------------
class PlotViewBox(pg.ViewBox):
    """A ViewBox that pads flat data relative to its value and shows an empty-state message.

    pyqtgraph pads a flat line by ±0.5 whatever its value, so a constant learning rate of 0.003 sits on a
    −0.5…0.5 axis and reads as zero; here it gets ±50 % of itself.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # A child of the box (not of its data group): placed in pixels, never in data coordinates, and never
        # counted in auto-range.
        self.empty_label = QGraphicsTextItem(self)
        self.empty_label.setZValue(1_000)
        option = QTextOption(Qt.AlignHCenter)
        option.setWrapMode(QTextOption.WordWrap)
        self.empty_label.document().setDefaultTextOption(option)
        self.empty_label.hide()
        self.sigResized.connect(self._place_empty_label)

    def childrenBounds(self, frac=None, orthoRange=(None, None), items=None):
        bounds = super().childrenBounds(frac=frac, orthoRange=orthoRange, items=items)
        for axis in (0, 1):
            span = bounds[axis]
            if span is not None and span[0] == span[1] and math.isfinite(span[0]):
                value = span[0]
                pad = 0.5 if self.state["logMode"][axis] or value == 0 else abs(value) * 0.5
                bounds[axis] = [value - pad, value + pad]
        return bounds

    def set_empty_text(self, text: str) -> None:
        self.empty_label.setPlainText(text)
        self._place_empty_label()

    def _place_empty_label(self, *args) -> None:
        rect = self.boundingRect()
        self.empty_label.setTextWidth(max(80.0, min(rect.width() - 24, 460.0)))
        text_rect = self.empty_label.boundingRect()
        self.empty_label.setPos(rect.center() - QPointF(text_rect.width() / 2, text_rect.height() / 2))


def _has_data(item) -> bool:
    if isinstance(item, pg.PlotDataItem):
        x, _ = item.getOriginalDataset()
        return x is not None and len(x) > 0
    if isinstance(item, (pg.PlotCurveItem, pg.ScatterPlotItem)):
        x = item.getData()[0]
        return x is not None and len(x) > 0
    if isinstance(item, pg.BarGraphItem):
        height = item.opts.get("height")
        return height is not None and np.size(height) > 0
    if isinstance(item, pg.ImageItem):
        return item.image is not None
    return False  # lines, labels, regions: furniture, not data


class PlotItem(pg.PlotItem):
    """A PlotItem that knows when it holds no data and then says what will appear instead of blank axes."""

    def __init__(self, *args, empty_text: str = "", grid: bool = True, **kwargs):
        self.empty_text = empty_text or "Nothing to show yet."
        self.grid_wanted = grid
        self.is_empty: bool | None = None
        if kwargs.get("viewBox") is None:
            kwargs["viewBox"] = PlotViewBox()
        super().__init__(*args, **kwargs)
        self.update_empty_state()

    def addItem(self, item, *args, **kwargs):
        super().addItem(item, *args, **kwargs)
        for signal in ("sigPlotChanged", "sigImageChanged"):
            if hasattr(item, signal):
                getattr(item, signal).connect(self.update_empty_state)
        self.update_empty_state()

    def removeItem(self, item):
        for signal in ("sigPlotChanged", "sigImageChanged"):
            if hasattr(item, signal):
                try:
                    getattr(item, signal).disconnect(self.update_empty_state)
                except (RuntimeError, TypeError):
                    pass  # it was never connected (added before this class saw it)
        super().removeItem(item)
        self.update_empty_state()

    def set_empty_text(self, text: str) -> None:
        self.empty_text = text
        if isinstance(self.vb, PlotViewBox):
            self.vb.set_empty_text(text)

    def update_empty_state(self, *args) -> None:
        empty = not any(_has_data(item) for item in getattr(self, "items", []))
        if empty == self.is_empty or not hasattr(self, "vb"):
            return
        self.is_empty = empty
        if isinstance(self.vb, PlotViewBox):
            self.vb.set_empty_text(self.empty_text)
            self.vb.empty_label.setVisible(empty)
        # Placeholder ranges (0…1 here, −0.5…0.5 there) would disagree between plots: no numbers until data.
        for name in ("left", "bottom", "right", "top"):
            axis = self.getAxis(name)
            axis.setStyle(showValues=not empty and getattr(axis, "values_wanted", True))
        shown = not empty and self.grid_wanted  # a grid over nothing reads as data
        self.showGrid(x=shown, y=shown, alpha=GRID_ALPHA)


class PlotWidget(pg.PlotWidget):
    """A pg.PlotWidget whose colours follow the application palette when it changes (no restart)."""

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if (
            event.type() in (QEvent.PaletteChange, QEvent.ApplicationPaletteChange)
            and self.plotItem is not None
        ):
            style_plot(self)

    @property
    def is_empty(self) -> bool:
        return bool(self.plotItem.is_empty)

    @property
    def empty_text(self) -> str:
        return self.plotItem.vb.empty_label.toPlainText()

    def set_empty_text(self, text: str) -> None:
        self.plotItem.set_empty_text(text)


def make_plot(
    title: str = "",
    left: str = "",
    bottom: str = "",
    *,
    y_format: str = "plain",
    x_format: str = "plain",
    empty: str = "",
    grid: bool = True,
    categories: bool = False,
) -> PlotWidget:
    """A themed plot: unit-less axes without SI prefixes, formatted as asked, and an empty state.

    `empty` says what will appear there ("The loss of each step appears here once a run starts.");
    `grid=False` for an image (a heatmap), where grid lines would cross the cells and run on over the margins;
    `categories` for names along x (setTicks), each shown whole or elided and none overlapping (CategoryAxis).
    """
    bottom_axis = CategoryAxis(x_format) if categories else NumberAxis("bottom", x_format)
    axes = {
        "left": NumberAxis("left", y_format),
        "bottom": bottom_axis,
        "right": NumberAxis("right", y_format),
        "top": NumberAxis("top", x_format),
    }
    item = PlotItem(viewBox=PlotViewBox(), axisItems=axes, empty_text=empty, grid=grid)
    plot = PlotWidget(plotItem=item)
    # given so they too never prefix, but pyqtgraph shows every axis it is given
    for name in ("right", "top"):
        plot.hideAxis(name)
    for axis in axes.values():
        # Under the view box (z −100), not over it: the grid is opaque (see NumberAxis.generateDrawSpecs),
        # and over the data it would cut a 1 px curve into dashes and hide a flat line lying on a tick.
        axis.setZValue(-200)
    if title:
        plot.setTitle(title, size="10pt")
    if left:
        plot.setLabel("left", left)
    if bottom:
        plot.setLabel("bottom", bottom)
    plot.setMenuEnabled(True)  # right-click: export, axis ranges, log scales
    style_plot(plot)
    return plot


def update_empty_state(plot: pg.PlotWidget) -> None:
    """Re-check a plot's empty state after a change no signal reports (e.g. ImageItem.clear())."""
    if isinstance(plot.plotItem, PlotItem):
        plot.plotItem.update_empty_state()


def stack_plots(plots: list[pg.PlotWidget], left_width: int = 64) -> None:
    """Plots stacked over one x axis: x linked to the first, one left-axis width so they line up to the pixel,
    and x tick values only under the bottom plot (the others would repeat them)."""
    for plot in plots:
        plot.getAxis("left").setWidth(left_width)
        if plot is not plots[0]:
            plot.setXLink(plots[0])
    for plot in plots[:-1]:
        axis = plot.getAxis("bottom")
        axis.values_wanted = False
        axis.setStyle(showValues=False)


# -- legends and colours from the palette --------------------------------------------------------------------
def _palette() -> QPalette:
    app = QApplication.instance()
    return app.palette() if app is not None else QPalette()


def add_legend(plot: pg.PlotWidget, columns: int = 1, **kwargs) -> pg.LegendItem:
    """A compact legend in the top-right corner, on a translucent panel, whose text follows the theme."""
    options = {
        "offset": (-8, 8),
        "labelTextSize": "8pt",
        "verSpacing": -6,
        "horSpacing": 12,
        "colCount": columns,
    }
    options.update(kwargs)
    legend = plot.addLegend(**options)
    _style_legend(legend, _palette())
    return legend


def _style_legend(legend: pg.LegendItem, palette: QPalette) -> None:
    text = palette.color(QPalette.Text)
    panel = QColor(palette.color(QPalette.Base))
    panel.setAlpha(215)
    legend.setBrush(pg.mkBrush(panel))
    legend.setPen(pg.mkPen(palette.color(QPalette.Mid)))
    legend.setLabelTextColor(text)
    for _sample, label in legend.items:
        label.setText(label.text)  # LabelItem bakes its colour into HTML; only setText re-renders it


def style_plot(plot: pg.PlotWidget) -> pg.PlotWidget:
    """Colour a plot from the current palette: background, axes, title, legend and empty-state text."""
    palette = _palette()
    background, foreground = palette.color(QPalette.Base), palette.color(QPalette.Text)
    pg.setConfigOptions(background=background, foreground=foreground)  # items created later start right
    plot.setBackground(background)
    for name in ("left", "bottom", "right", "top"):
        axis = plot.getAxis(name)
        axis.setPen(foreground)
        axis.setTextPen(foreground)
        if isinstance(axis, NumberAxis):
            axis.background = QColor(background)
            axis.picture = None  # the grid's blended colours change with the background
    title = plot.plotItem.titleLabel
    if title.text:
        title.setText(title.text, color=foreground)
    legend = plot.plotItem.legend
    if legend is not None:
        _style_legend(legend, palette)
    if isinstance(plot.plotItem.vb, PlotViewBox):
        plot.plotItem.vb.empty_label.setDefaultTextColor(palette.color(QPalette.PlaceholderText))
    shown = not getattr(plot.plotItem, "is_empty", False) and getattr(plot.plotItem, "grid_wanted", True)
    plot.showGrid(x=shown, y=shown, alpha=GRID_ALPHA)
    return plot


def restyle_plots(root) -> None:
    """Restyle every plot under `root` (theme switch); plots made by make_plot also do it on their own."""
    plots = root.findChildren(pg.PlotWidget)
    for plot in [root, *plots] if isinstance(root, pg.PlotWidget) else plots:
        style_plot(plot)


# -- a legend outside the plots, for runs --------------------------------------------------------------------
@dataclass(frozen=True)
class LegendEntry:
    text: str
    colour: str | None = None  # None: the palette's text colour (a line-style key, not a run)
    role: str = "train"  # which line style and symbol the sample shows
    tooltip: str = ""
    width: float = 2.0


class LineSample(QWidget):
    """A short stroke drawn with the entry's real pen and symbol, so the legend matches the plot."""

    def __init__(self, entry: LegendEntry, parent=None):
        super().__init__(parent)
        self.entry = entry
        self.setFixedSize(30, 14)

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.Antialiasing)
        colour = QColor(self.entry.colour) if self.entry.colour else self.palette().color(QPalette.Text)
        style, symbol = SERIES_STYLES.get(self.entry.role, (Qt.SolidLine, None))
        pen = QPen(colour, self.entry.width, style)
        painter.setPen(pen)
        y = self.height() / 2
        painter.drawLine(QPointF(1, y), QPointF(self.width() - 1, y))
        if symbol:
            painter.setPen(Qt.NoPen)
            painter.setBrush(colour)
            centre = QPointF(self.width() / 2, y)
            if symbol == "s":
                painter.drawRect(QRect(int(centre.x()) - 3, int(y) - 3, 7, 7))
            else:
                painter.drawEllipse(centre, 3.5, 3.5)
        painter.end()


class FlowLayout(QLayout):
    """Lays items left to right and wraps them onto new lines (Qt's flow layout example)."""

    def __init__(self, parent=None, spacing: int = 14, line_spacing: int = 2):
        super().__init__(parent)
        self._items: list = []
        self._spacing, self._line_spacing = spacing, line_spacing
        self.setContentsMargins(0, 0, 0, 0)

    def addItem(self, item) -> None:
        self._items.append(item)

    def count(self) -> int:
        return len(self._items)

    def itemAt(self, index: int):
        return self._items[index] if 0 <= index < len(self._items) else None

    def takeAt(self, index: int):
        return self._items.pop(index) if 0 <= index < len(self._items) else None

    def expandingDirections(self):
        return Qt.Orientation(0)

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        return self._arrange(QRect(0, 0, width, 0), move=False)

    def setGeometry(self, rect: QRect) -> None:
        super().setGeometry(rect)
        self._arrange(rect, move=True)

    def sizeHint(self) -> QSize:
        return self.minimumSize()

    def minimumSize(self) -> QSize:
        size = QSize()
        for item in self._items:
            size = size.expandedTo(item.minimumSize())
        return size

    def _arrange(self, rect: QRect, move: bool) -> int:
        x, y, line_height = rect.x(), rect.y(), 0
        for item in self._items:
            hint = item.sizeHint()
            if x + hint.width() > rect.right() and line_height > 0:
                x, y = rect.x(), y + line_height + self._line_spacing
                line_height = 0
            if move:
                item.setGeometry(QRect(x, y, hint.width(), hint.height()))
            x += hint.width() + self._spacing
            line_height = max(line_height, hint.height())
        return y + line_height - rect.y()


class RunLegend(QWidget):
    """One legend for a stack of plots: a sample and a short name per run, then what each line style means.

    It sits outside the plots, so it never covers a curve, and wraps onto more lines as runs are added (ten
    runs take two or three lines). Text is a QLabel, so it follows the palette like any widget.
    """

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Preferred, QSizePolicy.Minimum)
        self._layout = FlowLayout(self)
        self.entries: list[LegendEntry] = []
        self.labels: list[QLabel] = []

    def set_entries(self, entries: list[LegendEntry]) -> None:
        if entries == self.entries:
            return
        clear_layout(self._layout)
        self.entries, self.labels = list(entries), []
        for entry in entries:
            box = QWidget(self)
            row = QHBoxLayout(box)
            row.setContentsMargins(0, 0, 0, 0)
            row.setSpacing(4)
            label = QLabel(entry.text, box)
            row.addWidget(LineSample(entry, box))
            row.addWidget(label)
            box.setToolTip(entry.tooltip or entry.text)
            self._layout.addItem(QWidgetItem(box))
            box.show()
            self.labels.append(label)
        self.setVisible(bool(entries))
        self.updateGeometry()

    def texts(self) -> list[str]:
        return [entry.text for entry in self.entries]
