"""The Training tab's live curves on their own: linked and aligned axes, a hue per run, a legend of short run
names, a readout that clears, incremental smoothing and peak windows that match a full recomputation."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QPointF, Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QApplication
from test_plots import tick_strings

from workbench.gui.metric_buffers import IncrementalEma, PeakPyramid, ema
from workbench.gui.panels.training.curves import READOUT_HINT, CurvesWidget
from workbench.gui.theme import _dark_palette, apply_theme

SPECS = {
    "20261122-185213-train-3022eb": {"model": {"name": "cnn"}, "dataset": {"name": "digits"}},
    "20261122-190004-train-20334b": {"model": {"name": "mlp"}, "dataset": {"name": "fashion_mnist"}},
}


def run_columns(steps: int, epochs: int = 4, offset: float = 0.0, lr=0.003) -> dict:
    x = np.arange(1, steps + 1, dtype=np.float64)
    epoch_x = np.linspace(steps / epochs, steps, epochs)
    loss = 2.3 * np.exp(-x / (steps / 4)) + 0.05 + offset
    acc = 1 - 0.85 * np.exp(-x / (steps / 4)) - offset
    return {
        "train/loss": (x, loss, x),
        "train/acc": (x, acc, x),
        "lr": (x, np.full(steps, lr), x),
        "val/loss": (epoch_x, np.interp(epoch_x, x, loss) * 1.1, epoch_x),
        "val/acc": (epoch_x, np.interp(epoch_x, x, acc) - 0.02, epoch_x),
    }


@pytest.fixture
def curves(qtbot):
    widget = CurvesWidget()
    widget.timer.stop()  # tests redraw when they choose
    widget.spec_of = SPECS.get
    qtbot.addWidget(widget)
    widget.resize(900, 700)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def test_x_axes_are_linked_and_line_up(curves, qtbot):
    loss_view = curves.plots["loss"].getViewBox()
    for key in ("accuracy", "lr"):
        assert curves.plots[key].getViewBox().linkedView(loss_view.XAxis) is loss_view
    curves.add_columns("20261122-185213-train-3022eb", run_columns(400))
    curves.redraw()
    qtbot.wait(20)
    ranges = {key: plot.getViewBox().viewRange()[0] for key, plot in curves.plots.items()}
    assert np.allclose(ranges["loss"], ranges["accuracy"]) and np.allclose(ranges["loss"], ranges["lr"])
    # One left-axis width, so the same step sits at the same pixel column in all three plots.
    lefts = {key: plot.getViewBox().sceneBoundingRect().left() for key, plot in curves.plots.items()}
    assert len({round(v) for v in lefts.values()}) == 1, lefts


def test_units_read_as_they_are(curves, qtbot):
    run = "20261122-185213-train-3022eb"
    columns = run_columns(300)
    columns["train/acc"] = (columns["train/acc"][0], np.linspace(0.1, 0.2, 300), columns["train/acc"][0])
    del columns["val/acc"]
    curves.add_columns(run, columns)
    curves.smoothing.setValue(0)
    curves.redraw()
    qtbot.wait(20)
    accuracy = tick_strings(curves.plots["accuracy"])
    assert "15%" in accuracy and "150" not in accuracy
    lr = tick_strings(curves.plots["lr"])
    assert any(label.startswith("3") and "e-3" in label for label in lr), lr  # not −200…200 "(x0.001)"
    for plot in curves.plots.values():
        assert "x0.001" not in plot.getAxis("left").labelString()
    curves.log_y.setChecked(True)
    qtbot.wait(20)
    assert [label for label in tick_strings(curves.plots["loss"]) if label]


def test_two_runs_one_hue_each_and_one_style_per_role(curves):
    first, second = SPECS
    curves.add_columns(first, run_columns(200))
    curves.add_columns(second, run_columns(200, offset=0.1))
    curves.redraw()

    def pen(run_id, name):
        return curves._items[(run_id, name)].opts["pen"]

    assert pen(first, "train/loss").color() != pen(second, "train/loss").color()
    # A run keeps its hue across its series, so validation is not "the other run's colour".
    assert pen(first, "val/loss").color() == pen(first, "train/loss").color() == pen(first, "lr").color()
    assert pen(first, "val/loss").color() != pen(second, "val/loss").color()
    assert pen(first, "train/loss").style() == pen(second, "train/loss").style() == Qt.SolidLine
    assert pen(first, "val/acc").style() == pen(second, "val/acc").style() == Qt.DashLine


def test_legend_names_runs_briefly_and_scales_to_ten(curves, qtbot, qapp):
    first, second = SPECS
    curves.add_columns(first, run_columns(100))
    curves.add_columns(second, run_columns(100))
    curves.redraw()
    assert curves.legend.texts() == [
        "cnn · digits · 3022eb",
        "mlp · fashion_mnist · 20334b",
        "train",
        "train (epoch)",
        "validation",
    ]
    one_line = curves.legend.height()
    for i in range(8):
        curves.add_columns(f"20261122-1900{i:02d}-train-aaaa{i:02d}", run_columns(100))
    curves.redraw()
    qtbot.wait(20)
    assert len(curves.legend.labels) == 13
    assert all(label.isVisible() and label.text() for label in curves.legend.labels)
    assert all(label.width() >= label.sizeHint().width() for label in curves.legend.labels)  # none cut
    assert curves.legend.height() > one_line  # it wraps onto more lines instead of cutting names
    # Remove a run: its hue is free again, the others keep theirs.
    freed, kept = curves.hue(first), curves.hue(second)
    curves.remove_run(first)
    curves.add_columns("20261122-200000-train-bbbbbb", run_columns(100))
    assert curves.hue("20261122-200000-train-bbbbbb") == freed and curves.hue(second) == kept


def test_legend_text_follows_a_theme_switch(curves, qtbot, qapp):
    curves.add_columns(next(iter(SPECS)), run_columns(50))
    curves.redraw()
    label = curves.legend.labels[0]
    before = label.palette().color(QPalette.WindowText)
    apply_theme(qapp, "dark")
    try:
        qtbot.wait(10)
        assert (
            label.palette().color(QPalette.WindowText) == _dark_palette().color(QPalette.WindowText) != before
        )
    finally:
        apply_theme(qapp, "light")


def test_readout_lists_every_run_and_clears_when_the_mouse_leaves(curves, qtbot):
    first, second = SPECS
    curves.add_columns(first, run_columns(200))
    curves.add_columns(second, run_columns(200, offset=0.1, lr=0.001))
    curves.redraw()
    text = curves.show_readout(100)
    assert text.splitlines()[0] == "step 100"
    assert "cnn · digits · 3022eb: train/loss" in text and "mlp · fashion_mnist · 20334b: train/loss" in text
    assert "lr 3.000e-3" in text and "lr 1.000e-3" in text and "%" in text
    assert all(line.isVisible() for line in curves.crosshairs.values())
    QApplication.sendEvent(curves.plots["loss"].viewport(), QEvent(QEvent.Leave))
    assert curves.readout.text() == READOUT_HINT
    assert not any(line.isVisible() for line in curves.crosshairs.values())
    # Moving over the axes (outside the data area) clears it too.
    curves.show_readout(100)
    curves._on_plot_mouse_moved(curves.plots["loss"], QPointF(1, 1))
    assert curves.readout.text() == READOUT_HINT


def test_live_updates_extend_smoothing_and_leave_unchanged_series_alone(curves):
    run = next(iter(SPECS))
    columns = run_columns(1000)
    curves.add_columns(
        run, {k: (x[:600], y[:600], t[:600]) for k, (x, y, t) in columns.items() if k != "val/acc"}
    )
    curves.add_columns(run, {"val/acc": columns["val/acc"]})
    curves.redraw()
    smoother = curves._curves[(run, "train/loss")].smoother
    val_item = curves._items[(run, "val/acc")]
    calls = []
    val_item.sigPlotChanged.connect(lambda *a: calls.append(1))
    curves.add_columns(
        run,
        {
            k: (x[600:], y[600:], t[600:])
            for k, (x, y, t) in columns.items()
            if k.startswith("train/") or k == "lr"
        },
    )
    curves.redraw_if_needed()
    assert curves._curves[(run, "train/loss")].smoother is smoother and len(smoother) == 1000  # extended
    assert not calls  # validation did not grow: its item was not re-set
    x, y = curves._items[(run, "train/loss")].getData()
    assert len(x) == 1000 and np.allclose(
        y, ema(columns["train/loss"][1], curves.smoothing_weight), atol=1e-12
    )
    curves.smoothing.setValue(20)  # a new weight starts the smoothing again
    x, y = curves._items[(run, "train/loss")].getData()
    assert np.allclose(y, ema(columns["train/loss"][1], 0.2), atol=1e-12)


def test_a_million_points_draw_a_window_and_keep_the_peaks(curves, qtbot):
    run = next(iter(SPECS))
    n = 1_000_000
    x = np.arange(1, n + 1, dtype=np.float64)
    loss = 1 + 0.01 * np.sin(x / 1000)
    loss[700_123] = 9.0
    curves.smoothing.setValue(0)
    curves.add_columns(run, {"train/loss": (x, loss, x)})
    curves.redraw()
    item = curves._items[(run, "train/loss")]
    xs, ys = item.getData()
    width = curves.plots["loss"].getViewBox().width()
    assert len(xs) <= 4 * max(256, 2 * width) + 1  # about two buckets a pixel, not a million points
    assert ys.max() == 9.0 and xs[-1] == n  # the spike survives; the newest step is drawn
    curves.plots["loss"].setXRange(700_000, 700_200, padding=0)
    qtbot.waitUntil(lambda: len(item.getData()[0]) < 400, timeout=2000)
    xs, ys = item.getData()
    assert np.array_equal(np.diff(xs), np.ones(len(xs) - 1)) and 9.0 in ys  # raw points when zoomed in
    curves.plots["loss"].enableAutoRange(x=True)
    qtbot.waitUntil(lambda: item.getData()[0][-1] == n, timeout=2000)


@pytest.mark.parametrize("weight", [0.0, 0.01, 0.6, 0.9, 0.99, 0.999])
def test_incremental_ema_equals_a_full_recomputation(weight):
    rng = np.random.default_rng(int(weight * 1000))
    values = rng.normal(size=20_000) * 3 + 1
    values[rng.integers(0, len(values), 30)] = np.nan
    values[5] = np.inf
    smoother = IncrementalEma(weight)
    start = 0
    while start < len(values):
        stop = min(len(values), start + int(rng.integers(1, 3000)))
        smoother.extend(values[start:stop])
        start = stop
    full = ema(values, weight)
    reference = _ema_loop(values, weight)
    assert np.allclose(smoother.values, full, rtol=0, atol=1e-12, equal_nan=True)
    assert np.allclose(full, reference, rtol=0, atol=1e-12, equal_nan=True)


def _ema_loop(values, weight):
    """The recurrence written out (TensorBoard's smoothing): non-finite points pass through unsmoothed."""
    out, state, count = values.copy(), 0.0, 0
    for i, v in enumerate(values):
        if weight <= 0 or not np.isfinite(v):
            continue
        state = weight * state + (1 - weight) * v
        count += 1
        out[i] = state / (1 - weight**count)
    return out


def test_peak_pyramid_extended_equals_built_at_once_and_keeps_extremes():
    rng = np.random.default_rng(3)
    y = rng.normal(size=70_001)
    y[[10, 40_000]] = np.nan
    x = np.arange(1, len(y) + 1, dtype=np.float64)
    grown, whole = PeakPyramid(), PeakPyramid()
    stop = 0
    while stop < len(y):
        stop = min(len(y), stop + int(rng.integers(1, 5000)))
        grown.extend(y[:stop])
    whole.extend(y)
    for a, b in zip(grown._mins + grown._maxs, whole._mins + whole._maxs, strict=True):
        assert np.array_equal(a.values, b.values, equal_nan=True)
    xs, ys = grown.window(x, y, 0, len(y), 500)
    assert len(xs) <= 2 * 500 + 1 and np.nanmax(ys) == np.nanmax(y) and np.nanmin(ys) == np.nanmin(y)
    xs, ys = grown.window(x, y, 1000, 1400, 500)
    assert np.array_equal(xs, x[1000:1400])  # few enough: the raw points
