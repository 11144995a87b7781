"""What the Quantization tab's plots share: a themed plot (workbench.gui.plots) in a widget that clears to a
message, a title that follows the theme, a legend beside or above the plot that hides none of its data
(SideLegend), and the colours and number formats their legends use."""

from __future__ import annotations

import html
import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QFont, QPainter, QPalette, QPen
from PySide6.QtWidgets import QGridLayout, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from workbench.gui.plots import PlotWidget, add_legend, make_plot

# Mid-tone colours (like plots.RUN_HUES) that read on the light and the dark background alike, so nothing
# drawn here has to be recoloured on a theme switch. Red is kept for clipping, in every plot of the tab.
IN_USE = "#3b78d8"
CLIPPING = "#d93a3a"
ROUNDING = "#12a4b6"
NEUTRAL = "#8a8f98"
FP32 = "#2e9d4a"
# One colour per range estimator, by name, so "mse" is the same green in every layer's histogram.
ESTIMATOR_COLOURS = {
    "minmax": "#e8710a",
    "mse": "#2e9d4a",
    "percentile": "#9c5bd0",
    "cross_entropy": "#c49a00",
    "bn": "#e05aa8",
}
OTHER_COLOURS = ("#8d6e4b", "#6f8f1f", "#12a4b6")


def estimator_colour(name: str, index: int = 0) -> str:
    return ESTIMATOR_COLOURS.get(name, OTHER_COLOURS[index % len(OTHER_COLOURS)])


def pen(colour: str, width: float = 1.6, style=Qt.SolidLine):
    """A cosmetic pen: the same width in pixels at every zoom."""
    result = pg.mkPen(colour, width=width, style=style)
    result.setCosmetic(True)
    return result


def brush(colour: str, alpha: int = 255):
    colour = pg.mkColor(colour)
    colour.setAlpha(alpha)
    return pg.mkBrush(colour)


def decimals_for(span: float) -> int:
    """Decimals that tell values across `span` apart to about 1 % (span 1.2 -> 2, span 24 -> 1)."""
    if not span or not math.isfinite(span) or span <= 0:
        return 3
    return min(6, max(0, 2 - math.floor(math.log10(span))))


def percent(value: float | None) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value * 100:.1f}%"


def finite(values) -> np.ndarray:
    values = np.asarray(values, dtype=float).ravel()
    return values[np.isfinite(values)]


LEGEND_PLACES = ("over", "beside", "above")


class PlotPanel(QWidget):
    """A QWidget holding one plot with a legend; `clear(message)` empties it and shows the message in its
    place.

    `legend` says where the legend stands: "over" the plot (a pyqtgraph LegendItem in its top-right corner,
    which fills itself from the named items), or "beside" (to the right) or "above" it (a SideLegend, which
    hides no data whatever the plot's height: rows come from add_legend_bars, add_legend_line and
    add_legend_marker)."""

    def __init__(
        self,
        left: str,
        bottom: str,
        *,
        empty: str,
        y_format: str = "plain",
        x_format: str = "plain",
        legend: str = "over",
        parent=None,
    ):
        super().__init__(parent)
        if legend not in LEGEND_PLACES:
            raise ValueError(f"legend {legend!r}: expected one of {', '.join(LEGEND_PLACES)}")
        self.empty = empty
        self.legend_place = legend
        self.title_label = TitleLabel()
        self.plot: PlotWidget = make_plot("", left, bottom, y_format=y_format, x_format=x_format, empty=empty)
        self.layout_ = QVBoxLayout(self)
        self.layout_.setContentsMargins(0, 0, 0, 0)
        self.layout_.setSpacing(0)
        self.layout_.addWidget(self.title_label)
        self.legend: pg.LegendItem | SideLegend
        if legend == "over":
            self.legend = add_legend(self.plot)
            self.layout_.addWidget(self.plot, 1)
        elif legend == "above":  # a narrow panel: a row a series over the plot's full width
            self.legend = SideLegend(margins=(8, 2, 8, 2))
            self.layout_.addWidget(self.legend)
            self.layout_.addWidget(self.plot, 1)
        else:  # as the range histogram's: a column on the plot's background, rows at its top
            self.legend = SideLegend()
            body = QHBoxLayout()
            body.setSpacing(0)
            body.addWidget(self.plot, 1)
            body.addWidget(legend_column(self.legend))
            self.layout_.addLayout(body, 1)

    @property
    def is_empty(self) -> bool:
        return self.plot.is_empty

    @property
    def message(self) -> str:
        return self.plot.empty_text

    @property
    def title(self) -> str:
        return self.title_label.text()

    def set_title(self, text: str) -> None:
        self.title_label.set_title(text)

    @property
    def legend_texts(self) -> list[str]:
        """Each legend row as one line of text, wherever the legend stands."""
        if isinstance(self.legend, SideLegend):
            return list(self.legend.texts)
        return [label.text for _sample, label in self.legend.items]

    def clear(self, message: str = "") -> None:
        if isinstance(self.legend, SideLegend):
            reset_plot(self.plot, None)
            self.legend.clear()
        else:
            reset_plot(self.plot, self.legend)
        self.title_label.set_title("")
        self.plot.set_empty_text(message or self.empty)

    def set_axis(self, side: str, label: str, fmt: str) -> None:
        """Rename an axis and change its tick format ("percent", "plain"): a chart that shows accuracy for one
        run and another task's metric (metric.Measure) for the next."""
        axis = self.plot.getAxis(side)
        if axis.fmt != fmt:
            axis.fmt = fmt
            axis.picture = None  # pyqtgraph keeps the drawn ticks until told they are stale
            axis.update()
        if axis.labelText != label:
            self.plot.setLabel(side, label)

    def finish(self) -> None:
        """Call after drawing: the legend shows only when it has rows."""
        if isinstance(self.legend, SideLegend):
            self.legend.show_rows()
        else:
            show_legend(self.legend)

    def add_legend_line(self, text: str, line_pen, tooltip: str = "") -> None:
        """A legend row for a line, or for something the legend over the plot cannot sample itself (an
        InfiniteLine, a region)."""
        if isinstance(self.legend, SideLegend):
            self.legend.add_line(text, line_pen, tooltip)
        else:
            self.legend.addItem(pg.PlotDataItem(pen=line_pen), text)

    def add_legend_bars(self, text: str, fill, line=None, tooltip: str = "") -> None:
        """A legend row for bars: a filled box (a legend over the plot samples named bars itself)."""
        if isinstance(self.legend, SideLegend):
            self.legend.add_bars(text, fill, line, tooltip)

    def add_legend_marker(
        self, text: str, symbol: str, size: float, marker_pen, fill, tooltip: str = ""
    ) -> None:
        """A legend row for a scatter's markers, drawn as the plot draws them (a legend over the plot samples
        named scatters itself)."""
        if isinstance(self.legend, SideLegend):
            self.legend.add_marker(text, symbol, size, marker_pen, fill, tooltip)

    def height_under_legend(self, least_share: float) -> tuple[float, float] | None:
        """(the view's height, the pixels of it below the legend), or None before the view has a size; at
        least `least_share` of the height, so that a tall legend in a short panel may cover the top rather
        than crowd the data into nothing. For plots that fit their data under a legend drawn over them."""
        height = self.plot.getViewBox().height()
        if height <= 0:
            return None
        over = not isinstance(self.legend, SideLegend) and self.legend.isVisible()
        legend = self.legend.boundingRect().height() + 12 if over else 0.0
        return height, max(height - legend, height * least_share)


def rich_tip(*paragraphs: str) -> str:
    """A tooltip as rich text, which Qt wraps (a plain one runs on as one line as wide as the text)."""
    return "".join(
        f"<p>{html.escape(p, quote=False).replace(chr(10), '</p><p>')}</p>" for p in paragraphs if p
    )


class Swatch(QWidget):
    """A legend row's sample: the line's own pen (colour, width, dashes), a filled box for bars, or a
    scatter's marker (`symbol`, as pyqtgraph draws it, at most the swatch's height)."""

    def __init__(
        self,
        line: QPen | None = None,
        fill: QBrush | None = None,
        symbol: str | None = None,
        size: float = 10.0,
        parent=None,
    ):
        super().__init__(parent)
        self.line, self.fill, self.symbol, self.size = line, fill, symbol, size
        self.setFixedSize(26, 12)

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt override)
        painter = QPainter(self)
        painter.setRenderHint(QPainter.Antialiasing)
        if self.symbol is not None:
            painter.translate(self.width() / 2, self.height() / 2)
            pg.graphicsItems.ScatterPlotItem.drawSymbol(
                painter,
                self.symbol,
                min(self.size, self.height()),
                self.line if self.line is not None else Qt.NoPen,
                self.fill if self.fill is not None else Qt.NoBrush,
            )
        elif self.fill is not None:
            painter.setPen(self.line if self.line is not None else Qt.NoPen)
            painter.setBrush(self.fill)
            painter.drawRect(QRectF(3, 1.5, self.width() - 6, self.height() - 3))
        elif self.line is not None:
            painter.setPen(self.line)
            y = self.height() / 2
            painter.drawLine(QPointF(1, y), QPointF(self.width() - 1, y))
        painter.end()


class SideLegend(QWidget):
    """A legend that stands beside (or above) a plot rather than over it, so it hides none of its data: a row
    a series, each a Swatch and its text, on the plot's background. `header` names columns 2 and up (a
    subclass fills them, as the range histogram's RangeLegend does with each range and its SQNR) and
    `header_tip` explains them, in every row's tooltip too. `texts` gives each row as one line ("only this
    layer quantized"); a text may break onto more lines with "\n" where the legend must stay narrow."""

    def __init__(
        self,
        header: tuple[str, ...] | None = None,
        header_tip: str = "",
        margins: tuple[int, int, int, int] = (6, 4, 8, 4),
        parent=None,
    ):
        super().__init__(parent)
        self.setBackgroundRole(QPalette.Base)  # the plot's background: legend and plot read as one panel
        self.setAutoFillBackground(True)
        font = QFont(self.font())
        font.setPointSizeF(max(7.0, font.pointSizeF() - 1))
        self.setFont(font)
        self.header_tip = header_tip
        self.grid = QGridLayout(self)
        self.grid.setContentsMargins(*margins)
        self.grid.setHorizontalSpacing(8)
        self.grid.setVerticalSpacing(1)
        self.header: list[QLabel] = []
        for column, text in enumerate(header or (), start=2):
            label = QLabel(text)
            label.setForegroundRole(QPalette.PlaceholderText)
            label.setToolTip(rich_tip(header_tip))
            label.setAlignment(
                Qt.AlignRight | Qt.AlignVCenter if column == 3 else Qt.AlignLeft | Qt.AlignVCenter
            )
            self.grid.addWidget(label, 0, column)
            self.header.append(label)
        self.grid.setColumnStretch(1, 1)
        self.texts: list[str] = []
        self.tooltips: list[str] = []
        self._rows: list[list[QWidget]] = []
        self.hide()

    @property
    def header_text(self) -> str:
        return " · ".join(label.text() for label in self.header)

    @property
    def swatches(self) -> list[Swatch]:
        return [row[0] for row in self._rows]

    def clear(self) -> None:
        for widgets in self._rows:
            for widget in widgets:
                self.grid.removeWidget(widget)
                widget.hide()  # at once: deleteLater waits for the event loop
                widget.deleteLater()
        self._rows.clear()
        self.texts.clear()
        self.tooltips.clear()
        self.hide()

    def add_bars(self, text: str, fill: QBrush, line: QPen | None = None, tooltip: str = "") -> None:
        """A row for bars: a filled box and a text across the other columns."""
        self.add_row(Swatch(line, fill), text, tooltip)

    def add_line(self, text: str, line: QPen, tooltip: str = "") -> None:
        """A row for a line (a reference line, a curve): a stroke of its pen and a text."""
        self.add_row(Swatch(line), text, tooltip)

    def add_marker(
        self, text: str, symbol: str, size: float, line: QPen | None, fill: QBrush | None, tooltip: str = ""
    ) -> None:
        """A row for a scatter's markers: one marker as the plot draws it and a text."""
        self.add_row(Swatch(line, fill, symbol=symbol, size=size), text, tooltip)

    def add_row(self, swatch: Swatch, text: str, tooltip: str = "") -> None:
        row, label = len(self._rows) + bool(self.header), QLabel(text)  # row 0 is the header's, if any
        self._add([swatch, label], text.replace("\n", " "), tooltip)
        self.grid.addWidget(swatch, row, 0, Qt.AlignTop if "\n" in text else Qt.Alignment())
        self.grid.addWidget(label, row, 1, 1, max(1, len(self.header) + 1))

    def _add(self, cells: list[QWidget], text: str, tooltip: str) -> None:
        tip = rich_tip(tooltip, self.header_tip)
        for widget in cells:
            widget.setToolTip(tip)
        self._rows.append(cells)
        self.texts.append(text)
        self.tooltips.append(tip)

    def show_rows(self) -> None:
        self.setVisible(bool(self._rows))


def legend_column(top: QWidget, bottom: QWidget | None = None) -> QWidget:
    """A column to stand beside plots, on their background: `top` at its top and `bottom` (the lower plot's
    legend, if any) at its bottom."""
    column = QWidget()
    column.setBackgroundRole(QPalette.Base)
    column.setAutoFillBackground(True)
    layout = QVBoxLayout(column)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.addWidget(top)
    layout.addStretch(1)
    if bottom is not None:
        layout.addWidget(bottom)
    return column


class TitleLabel(QLabel):
    """A plot's title above it, wrapping onto a second line in a narrow panel. The plot's own title (a
    pyqtgraph LabelItem) cannot wrap and makes the plot as wide as the text: titles here name layers and
    channels, long."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setWordWrap(True)
        self.setAlignment(Qt.AlignCenter)
        self.setTextFormat(Qt.PlainText)
        self.setContentsMargins(6, 4, 6, 2)
        # The plot's background, so title and plot read as one panel; palette roles follow a theme switch.
        self.setBackgroundRole(QPalette.Base)
        self.setForegroundRole(QPalette.Text)
        self.setAutoFillBackground(True)
        self.hide()

    def set_title(self, text: str) -> None:
        self.setText(text)
        self.setToolTip(text)
        self.setVisible(bool(text))


def reset_plot(plot: PlotWidget, legend: pg.LegendItem | None) -> None:
    """Everything drawn removed: items, legend rows (some were never items of the plot) and axis names."""
    plot.clear()
    if legend is not None:
        legend.clear()
        legend.hide()  # an empty legend is still drawn, as a small box in the corner
    for name in ("left", "bottom"):
        plot.getAxis(name).setTicks(None)  # no stale layer or step names under an empty plot
    plot.enableAutoRange()


def show_legend(legend: pg.LegendItem) -> None:
    legend.setVisible(bool(legend.items))
