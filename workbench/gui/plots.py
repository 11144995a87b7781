"""pyqtgraph plot widgets styled from the application palette, so plots follow the light or dark theme."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QApplication

SERIES_COLOURS = ("#2f6fd6", "#e07b00", "#2e9d4a", "#d0342c", "#8e44ad", "#16a2b8")
CHANNEL_COLOURS = {1: ("#7a7f87",), 3: ("#d0342c", "#2e9d4a", "#2f6fd6")}


def style_plot(plot: pg.PlotWidget) -> pg.PlotWidget:
    """Colour a plot from the current palette; called again for every plot when the theme changes."""
    palette = QApplication.instance().palette() if QApplication.instance() else QPalette()
    plot.setBackground(palette.color(QPalette.Base))
    foreground = palette.color(QPalette.Text)
    for axis in ("left", "bottom"):
        item = plot.getAxis(axis)
        item.setPen(foreground)
        item.setTextPen(foreground)
        item.label.setDefaultTextColor(foreground)
    plot.plotItem.titleLabel.item.setDefaultTextColor(foreground)
    legend = plot.plotItem.legend
    if legend is not None:
        legend.setLabelTextColor(foreground)
    plot.showGrid(x=True, y=True, alpha=0.15)
    return plot


def restyle_plots(root) -> None:
    for plot in root.findChildren(pg.PlotWidget):
        style_plot(plot)


def make_plot(title: str = "", left: str = "", bottom: str = "") -> pg.PlotWidget:
    plot = pg.PlotWidget()
    if title:
        plot.setTitle(title, size="10pt")
    if left:
        plot.setLabel("left", left)
    if bottom:
        plot.setLabel("bottom", bottom)
    style_plot(plot)
    plot.setMenuEnabled(True)  # right-click: export, axis ranges, log scales
    return plot
