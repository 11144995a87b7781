"""What the Quantization tab's plots share: a themed plot (workbench.gui.plots) in a widget that clears to a
message, a title that follows the theme, and the colours and number formats their legends use."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from workbench.gui.plots import PlotWidget, add_legend, make_plot

# Mid-tone colours (like plots.RUN_HUES) that read on the light and the dark background alike, so nothing drawn
# here has to be recoloured on a theme switch. Red is kept for clipping, in every plot of the tab.
IN_USE = "#3b78d8"
CLIPPING = "#d93a3a"
ROUNDING = "#12a4b6"
NEUTRAL = "#8a8f98"
FP32 = "#2e9d4a"
# One colour per range estimator, by name, so "mse" is the same green in every layer's histogram.
ESTIMATOR_COLOURS = {"minmax": "#e8710a", "mse": "#2e9d4a", "percentile": "#9c5bd0", "cross_entropy": "#c49a00",
                     "bn": "#e05aa8"}
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


class PlotPanel(QWidget):
    """A QWidget holding one plot with a legend; `clear(message)` empties it and shows the message in its place."""

    def __init__(self, left: str, bottom: str, *, empty: str, y_format: str = "plain", x_format: str = "plain",
                 parent=None):
        super().__init__(parent)
        self.empty = empty
        self.title_label = TitleLabel()
        self.plot: PlotWidget = make_plot("", left, bottom, y_format=y_format, x_format=x_format, empty=empty)
        self.legend = add_legend(self.plot)
        self.layout_ = QVBoxLayout(self)
        self.layout_.setContentsMargins(0, 0, 0, 0)
        self.layout_.setSpacing(0)
        self.layout_.addWidget(self.title_label)
        self.layout_.addWidget(self.plot, 1)

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

    def clear(self, message: str = "") -> None:
        reset_plot(self.plot, self.legend)
        self.title_label.set_title("")
        self.plot.set_empty_text(message or self.empty)

    def set_axis(self, side: str, label: str, fmt: str) -> None:
        """Rename an axis and change its tick format ("percent", "plain"): a chart that shows accuracy for one run
        and another task's metric (metric.Measure) for the next."""
        axis = self.plot.getAxis(side)
        if axis.fmt != fmt:
            axis.fmt = fmt
            axis.picture = None  # pyqtgraph keeps the drawn ticks until told they are stale
            axis.update()
        if axis.labelText != label:
            self.plot.setLabel(side, label)

    def finish(self) -> None:
        """Call after drawing: the legend shows only when it has rows."""
        show_legend(self.legend)

    def add_legend_line(self, text: str, line_pen) -> None:
        """A legend row for something the legend cannot sample itself (an InfiniteLine, a region)."""
        self.legend.addItem(pg.PlotDataItem(pen=line_pen), text)

    def height_under_legend(self, least_share: float) -> tuple[float, float] | None:
        """(the view's height, the pixels of it below the legend), or None before the view has a size; at least
        `least_share` of the height, so that a tall legend in a short panel may cover the top rather than crowd
        the data into nothing. For plots that fit their data under a legend drawn over them."""
        height = self.plot.getViewBox().height()
        if height <= 0:
            return None
        legend = self.legend.boundingRect().height() + 12 if self.legend.isVisible() else 0.0
        return height, max(height - legend, height * least_share)


class TitleLabel(QLabel):
    """A plot's title above it, wrapping onto a second line in a narrow panel. The plot's own title (a pyqtgraph
    LabelItem) cannot wrap and makes the plot as wide as the text: titles here name layers and channels, long."""

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
