"""The shared plot helpers (workbench.gui.plots) and the theme: real tick labels, empty states, legends and
colours after a live theme switch, drawn offscreen."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QImage, QPainter, QPalette
from PySide6.QtWidgets import QCheckBox, QLabel, QStyle, QVBoxLayout, QWidget

from workbench.gui.panels.data.sample_view import SampleView
from workbench.gui.plots import (
    RUN_HUES,
    SERIES_STYLES,
    add_legend,
    format_ticks,
    format_value,
    make_plot,
    restyle_plots,
    run_colour,
    run_label,
    series_pen,
    update_empty_state,
)
from workbench.gui.theme import _dark_palette, apply_theme, refresh_style_sheets


@pytest.fixture
def theme(qapp):
    """Switch themes in a test; the light theme is back afterwards for the tests that follow."""
    yield lambda name: apply_theme(qapp, name)
    apply_theme(qapp, "light")


def shown(qtbot, widget, width=600, height=300):
    qtbot.addWidget(widget)
    widget.resize(width, height)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def tick_strings(plot, axis="left") -> list[str]:
    """The labels the axis would draw now, from pyqtgraph's own draw specs."""
    item = plot.getAxis(axis)
    image = QImage(10, 10, QImage.Format_ARGB32)
    painter = QPainter(image)
    try:
        specs = item.generateDrawSpecs(painter)
    finally:
        painter.end()
    return [text for _rect, _flags, text in specs[2]] if specs else []


def test_accuracy_axis_reads_percent_and_never_an_si_prefix(qtbot):
    plot = shown(qtbot, make_plot("", "accuracy", "step", y_format="percent"))
    plot.plot(np.arange(1, 101.0), np.linspace(0.10, 0.20, 100))
    qtbot.wait(10)
    labels = tick_strings(plot)
    assert "15%" in labels and all(label.endswith("%") for label in labels)
    assert "150" not in labels
    axis = plot.getAxis("left")
    assert axis.autoSIPrefix is False and "x0.001" not in axis.labelString()


def test_constant_learning_rate_gets_its_own_range_in_scientific_notation(qtbot):
    plot = shown(qtbot, make_plot("", "learning rate", "step", y_format="scientific"))
    plot.plot(np.arange(1, 101.0), np.full(100, 0.003))
    qtbot.wait(10)
    low, high = plot.getViewBox().viewRange()[1]
    assert 0.001 < low < 0.003 < high < 0.005  # pyqtgraph alone gives −0.497…0.503: 0.003 reads as zero
    labels = tick_strings(plot)
    assert "3e-3" in labels or "3.0e-3" in labels, labels
    assert "x0.001" not in plot.getAxis("left").labelString()


def test_tick_and_readout_formats():
    assert format_ticks([0.1, 0.15, 0.2], 0.05, "percent") == ["10%", "15%", "20%"]
    assert format_ticks([0.995, 1.0], 0.005, "percent") == ["99.5%", "100.0%"]
    assert format_ticks([0.0015, 0.002, 0.0025], 0.0005, "scientific") == ["1.5e-3", "2.0e-3", "2.5e-3"]
    assert format_ticks([0, 200_000, 400_000], 200_000) == ["0", "200,000", "400,000"]
    assert format_ticks([-1e-17, 0.5], 0.5) == ["0", "0.5"]  # never "-0" or "1e-17" for a zero tick
    assert format_value(0.15, "percent") == "15.00%"
    assert format_value(0.003, "scientific") == "3.000e-3"
    assert format_value(float("nan")) == "nan"


@pytest.mark.parametrize("low, high", [(0.02, 2.3), (0.3, 0.8), (0.0088, 0.0093), (1e-6, 1e3)])
def test_log_axis_always_has_readable_labels(qtbot, low, high):
    plot = shown(qtbot, make_plot("", "loss", "step"), height=160)
    plot.plot(np.arange(1, 501.0), np.geomspace(high, low, 500))
    plot.setLogMode(y=True)
    qtbot.wait(10)
    labels = [label for label in tick_strings(plot) if label]
    assert len(labels) >= 2, labels
    values = [float(label) for label in labels]
    assert all(low * 0.5 <= v <= high * 1.5 for v in values), labels  # the values themselves, not exponents


def test_empty_state_says_what_will_appear_and_hides_placeholder_numbers(qtbot):
    plot = shown(qtbot, make_plot("", "loss", "step", empty="The loss appears here."))
    assert plot.is_empty and plot.empty_text == "The loss appears here."
    assert plot.plotItem.vb.empty_label.isVisible()
    assert tick_strings(plot) == [] and tick_strings(plot, "bottom") == []
    item = plot.plot()
    assert plot.is_empty  # an item with no data is still nothing to look at
    item.setData([1, 2, 3], [0.5, 0.4, 0.3])
    assert not plot.is_empty and not plot.plotItem.vb.empty_label.isVisible()
    qtbot.wait(10)  # the range follows the data at the next paint
    assert tick_strings(plot)
    plot.clear()
    assert plot.is_empty and plot.plotItem.vb.empty_label.isVisible()
    image = pg.ImageItem(np.eye(3))
    plot.addItem(image)
    assert not plot.is_empty
    image.clear()
    update_empty_state(plot)
    assert plot.is_empty


@pytest.mark.parametrize("name", ["light", "dark"])
def test_a_heatmap_plot_keeps_no_grid_through_data_and_a_theme_switch(qtbot, theme, name):
    """A grid over an image crosses its cells and runs on over the margins: make_plot(grid=False) never draws
    one, while an ordinary plot gets its grid once it holds data."""
    heatmap = shown(qtbot, make_plot("confusion", grid=False))
    ordinary = shown(qtbot, make_plot("loss"))
    heatmap.addItem(pg.ImageItem(np.eye(3)))
    ordinary.plot([1, 2, 3], [3, 2, 1])
    theme(name)
    restyle_plots(heatmap)
    restyle_plots(ordinary)
    assert all(heatmap.getAxis(axis).grid is False for axis in ("left", "bottom"))
    assert all(ordinary.getAxis(axis).grid not in (False, 0) for axis in ("left", "bottom"))


def test_legend_and_plot_follow_a_live_theme_switch(qtbot, theme):
    theme("light")
    plot = shown(qtbot, make_plot("Loss", "loss", "step", empty="nothing"))
    legend = add_legend(plot)
    plot.plot([1, 2, 3], [3, 2, 1], name="train")
    _sample, label = legend.items[0]
    assert label.text == "train"  # LabelItem bakes its colour into HTML: that is what must change
    dark_text = _dark_palette().color(QPalette.Text).name()
    assert dark_text not in label.item.toHtml()
    theme("dark")  # no restyle_plots call: the plot hears the palette change itself
    qtbot.wait(10)
    assert dark_text in label.item.toHtml()
    assert plot.backgroundBrush().color() == _dark_palette().color(QPalette.Base)
    assert dark_text in plot.plotItem.titleLabel.item.toHtml()
    assert plot.getAxis("left").textPen().color().name() == dark_text
    theme("light")
    qtbot.wait(10)
    assert dark_text not in label.item.toHtml()
    restyle_plots(plot)  # the explicit path the main window takes stays harmless
    assert dark_text not in label.item.toHtml() and plot.backgroundBrush().color() != QColor("#1e1f22")


def test_runs_get_distinct_hues_and_roles_keep_their_line_style():
    hues = [run_colour(i) for i in range(10)]
    assert len(set(hues)) == 10 and run_colour(10) == run_colour(0) == RUN_HUES[0]
    assert series_pen(hues[0], "train").style() == series_pen(hues[1], "train").style() == Qt.SolidLine
    assert (
        series_pen(hues[0], "validation").style() == series_pen(hues[5], "validation").style() == Qt.DashLine
    )
    assert SERIES_STYLES["train (epoch)"][0] == Qt.DotLine


def test_run_labels_are_short():
    assert run_label("20261122-185213-train-3022eb", "cnn", "digits") == "cnn · digits · 3022eb"
    assert (
        run_label("20261122-185213-train-3022eb", "torchvision:resnet18", "cifar10")
        == "resnet18 · cifar10 · 3022eb"
    )
    assert run_label("r-abc123", "file:/home/me/models/net.py:Net", "") == "Net · abc123"
    assert run_label("20261122-185213-train-3022eb") == "run 3022eb"


def _contrast(image: QImage, points, background: QColor) -> float:
    return max(abs(image.pixelColor(x, y).lightness() - background.lightness()) for x, y in points)


def test_unticked_check_boxes_stay_visible_in_the_dark_theme(qtbot, theme):
    theme("dark")
    box = shown(qtbot, QCheckBox("log x"), 120, 30)
    image = box.grab().toImage()
    indicator = box.style().subElementRect(QStyle.SE_CheckBoxIndicator, _option(box), box)
    background = box.palette().color(QPalette.Window)
    edge = [(indicator.left(), y) for y in range(indicator.top() + 2, indicator.bottom() - 1)]
    assert _contrast(image, edge, background) > 40  # Fusion alone leaves it about 10 apart: invisible


def _option(box):
    from PySide6.QtWidgets import QStyleOptionButton

    option = QStyleOptionButton()
    option.initFrom(box)
    return option


def test_sample_panels_follow_the_theme(qtbot, theme):
    theme("light")
    view = shown(qtbot, SampleView(), 500, 700)
    centre = view.image.rect().center()
    light = view.image.grab().toImage().pixelColor(centre).lightness()
    theme("dark")
    qtbot.wait(10)
    dark = view.image.grab().toImage().pixelColor(centre).lightness()
    assert light > 200 and dark < 80


def test_style_sheets_naming_palette_colours_can_be_refreshed(qtbot, theme):
    theme("light")
    window = QWidget()
    note = QLabel("note", window)
    note.setStyleSheet("QLabel { background: palette(alternate-base); }")
    QVBoxLayout(window).addWidget(note)
    shown(qtbot, window, 200, 60)
    theme("dark")
    stale = note.grab().toImage().pixelColor(2, 2).lightness()
    refresh_style_sheets(window)
    fresh = note.grab().toImage().pixelColor(2, 2).lightness()
    assert stale > 200 and fresh < 80  # Qt kept the light colour until the sheet was set again


def test_log_tick_labels_never_keep_a_bare_point():
    from workbench.gui.plots import _log_label

    # 2.0000001e-4 rounds to a whole mantissa: "2e-4", not numpy's "2.e-04".
    assert _log_label(2.0000001e-4, "auto") == "2e-4"
    assert _log_label(2.5e-4, "auto") == "2.5e-4" and _log_label(0.05, "auto") == "0.05"
