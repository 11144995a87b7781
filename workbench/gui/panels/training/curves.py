"""Live training curves: loss, accuracy and learning rate for one or more runs, redrawn on a timer from
buffers; any other metric a run logs (a task's MAE or mIoU, a custom task's own metrics) gets a plot of its
own.

Full resolution is kept in the buffers. What is drawn is the visible window, peak down-sampled to about two
buckets per pixel from a min/max pyramid that, like the EMA smoothing, is extended as points arrive rather
than recomputed, so a live update costs about the same at a million points as at a thousand.
Smoothing, log axes and a crosshair readout are view settings, never applied to stored data. Each run has
one hue; train, train (epoch) and validation have one line style each.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from html import escape

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt, QTimer
from PySide6.QtWidgets import (
    QCheckBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QSlider,
    QVBoxLayout,
    QWidget,
)

from workbench.gui.metric_buffers import MAX_WEIGHT, IncrementalEma, PeakPyramid, RunMetrics
from workbench.gui.plots import (
    SERIES_STYLES,
    LegendEntry,
    RunLegend,
    format_value,
    make_plot,
    run_colour,
    run_label,
    series_pen,
    stack_plots,
)
from workbench.results import dig


@dataclass
class _Curve:
    """One drawn series: its plot item, display smoothing and peak pyramid, and the window last drawn."""

    item: pg.PlotDataItem
    plot: str
    pyramid: PeakPyramid
    smoother: IncrementalEma | None = None
    window: tuple | None = None


@dataclass(frozen=True)
class PlotSpec:
    title: str
    axis: str
    fmt: str  # how the y axis and the readout write values: plain, percent or scientific
    empty: str
    series: tuple[tuple[str, str, bool], ...]  # (metric name, role, smoothed)


# The training engine's metric names (x is the global step; epoch metrics are logged at the epoch's last
# step).
PLOTS = {
    "loss": PlotSpec(
        "Loss",
        "loss",
        "plain",
        "The loss of each step appears here: start a run with New training… or tick runs in the list.",
        (
            ("train/loss", "train", True),
            ("epoch/train_loss", "train (epoch)", False),
            ("val/loss", "validation", False),
        ),
    ),
    "accuracy": PlotSpec(
        "Accuracy",
        "accuracy",
        "percent",
        "Training and validation accuracy appear here.",
        (
            ("train/acc", "train", True),
            ("epoch/train_acc", "train (epoch)", False),
            ("val/acc", "validation", False),
        ),
    ),
    "lr": PlotSpec(
        "Learning rate",
        "learning rate",
        "scientific",
        "The learning-rate schedule appears here.",
        (("lr", "train", False),),
    ),
}
READOUT = (
    ("train/loss", "plain"),
    ("val/loss", "plain"),
    ("train/acc", "percent"),
    ("val/acc", "percent"),
    ("lr", "scientific"),
)
READOUT_HINT = "Move the mouse over a plot to read every shown run's values at that step."
# The engine logs a metric <m> as train/<m> (per interval), epoch/train_<m> and val/<m>; names the fixed plots
# show, and the throughput, are not metrics of their own plot.
_SERIES_OF_METRIC = (
    ("train/{}", "train", True),
    ("epoch/train_{}", "train (epoch)", False),
    ("val/{}", "validation", False),
)
_PLOTTED = {name for spec in PLOTS.values() for name, _role, _smooth in spec.series} | {"train/samples_per_s"}


def metric_names(series_names) -> list[str]:
    """The metrics among a run's series names that no fixed plot shows, in the order they first appear."""
    found: dict[str, None] = {}
    for name in series_names:
        if name in _PLOTTED:
            continue
        for prefix in ("val/", "epoch/train_", "train/"):
            if name.startswith(prefix) and len(name) > len(prefix):
                found.setdefault(name[len(prefix) :])
                break
    return list(found)


class CurvesWidget(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.runs: dict[str, RunMetrics] = {}
        # Set by the owner to name runs by model and dataset: run id -> its spec dict (or None).
        self.spec_of: Callable[[str], dict | None] | None = None
        self._hues: dict[str, int] = {}  # shown run id -> palette index, kept while the run stays shown
        # Runs held but not drawn (a live run whose Show box is unticked keeps streaming into its buffers, so
        # ticking it later shows its whole curve). The owner decides what a newly added run does.
        self._hidden: set[str] = set()
        self.show_new_runs = True
        self._drawn: dict[str, int] = {}  # run id -> RunMetrics.version drawn
        self._items: dict[tuple[str, str], pg.PlotDataItem] = {}
        self._curves: dict[tuple[str, str], _Curve] = {}
        self._dirty = False
        # No titles: the left labels name the plots, and three title rows would cost the learning rate its
        # room.
        self.plots = {
            key: make_plot("", spec.axis, "step" if key == "lr" else "", y_format=spec.fmt, empty=spec.empty)
            for key, spec in PLOTS.items()
        }
        stack_plots(list(self.plots.values()), left_width=72)
        self.plots["lr"].setMinimumHeight(110)
        self.legend = RunLegend()
        self.smoothing = QSlider(Qt.Horizontal)
        self.smoothing.setRange(0, 99)
        self.smoothing.setValue(60)
        self.smoothing.setFixedWidth(140)
        self.smoothing.setToolTip("Exponential moving average of the per-step curves (display only)")
        self.smoothing_label = QLabel()
        self.log_x = QCheckBox("log x")
        self.log_y = QCheckBox("log y (loss)")
        self.readout = QLabel(READOUT_HINT)
        self.readout.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.readout.setAlignment(Qt.AlignLeft | Qt.AlignTop)
        controls = QHBoxLayout()
        controls.addWidget(QLabel("Smoothing"))
        controls.addWidget(self.smoothing)
        controls.addWidget(self.smoothing_label)
        controls.addWidget(self.log_x)
        controls.addWidget(self.log_y)
        controls.addStretch(1)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addLayout(controls)
        outer.addWidget(self.legend)
        # The plots scroll when the tab is shorter than they need: a task that logs four metrics (regression:
        # MAE, MSE, RMSE, R²) adds four plots, whose minimum heights made the window taller than a 900-pixel
        # screen.
        plots_box = QWidget()
        self._layout = layout = QVBoxLayout(plots_box)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plots["loss"], 3)
        layout.addWidget(self.plots["accuracy"], 3)
        layout.addWidget(self.plots["lr"], 2)
        self.plots_area = QScrollArea()
        self.plots_area.setWidgetResizable(True)
        self.plots_area.setFrameShape(QFrame.NoFrame)
        self.plots_area.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.plots_area.setWidget(plots_box)
        outer.addWidget(self.plots_area, 1)
        outer.addWidget(self.readout)
        self.crosshairs = {}
        # the fixed plots, then one per other metric as runs log it
        self.specs: dict[str, PlotSpec] = dict(PLOTS)
        self.readout_series: list[tuple[str, str]] = list(READOUT)
        for key, plot in self.plots.items():
            self._wire_crosshair(key, plot)
        self.smoothing.valueChanged.connect(self._on_view_option_changed)
        self.log_x.toggled.connect(self._on_log_option_changed)
        self.log_y.toggled.connect(self._on_log_option_changed)
        self._update_smoothing_label()
        self._reserve_readout_lines()
        self.timer = QTimer(self)
        self.timer.setInterval(200)  # 5 redraws a second, however fast metrics arrive
        self.timer.timeout.connect(self.redraw_if_needed)
        self.timer.start()
        # A zoom, pan or resize needs another window of the data: once per burst of range changes.
        self._window_timer = QTimer(self)
        self._window_timer.setSingleShot(True)
        self._window_timer.setInterval(0)
        self._window_timer.timeout.connect(self.redraw_windows)
        for plot in self.plots.values():
            self._wire_window(plot)

    def _wire_crosshair(self, key: str, plot: pg.PlotWidget) -> None:
        line = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen("#888888", style=Qt.DotLine))
        line.hide()  # until the mouse is over a plot
        plot.addItem(line, ignoreBounds=True)
        self.crosshairs[key] = line
        plot.scene().sigMouseMoved.connect(lambda pos, plot=plot: self._on_plot_mouse_moved(plot, pos))
        # Leaving a plot clears the readout; the view and its viewport both see the Leave.
        plot.installEventFilter(self)
        plot.viewport().installEventFilter(self)

    def _wire_window(self, plot: pg.PlotWidget) -> None:
        plot.plotItem.vb.sigXRangeChanged.connect(self._window_timer.start)
        plot.plotItem.vb.sigResized.connect(self._window_timer.start)
        # Auto-range switched back on (the "A" button) need not move the range: it changes the window.
        plot.plotItem.vb.sigStateChanged.connect(self._window_timer.start)

    def _add_metric_plots(self, run: RunMetrics) -> None:
        """A plot for each metric of `run` that no plot shows yet (e.g. val/mae, a custom task's val/dice),
        above the learning rate, its x axis linked to the loss plot's like the others."""
        for metric in metric_names(run.series):
            key = f"metric:{metric}"
            if key in self.plots:
                continue
            series = tuple(
                (pattern.format(metric), role, smooth) for pattern, role, smooth in _SERIES_OF_METRIC
            )
            spec = PlotSpec(metric, metric, "plain", f"The {metric} of each run appears here.", series)
            plot = make_plot("", metric, "", y_format="plain", empty=spec.empty)
            plot.getAxis("left").setWidth(72)
            plot.setXLink(self.plots["loss"])
            axis = plot.getAxis("bottom")  # step values only under the bottom plot, the learning rate
            axis.values_wanted = False
            axis.setStyle(showValues=False)
            plot.setMinimumHeight(90)
            plot.setLogMode(x=self.log_x.isChecked(), y=False)
            self.specs[key], self.plots[key] = spec, plot
            self._layout.insertWidget(self._layout.indexOf(self.plots["lr"]), plot, 2)
            self._wire_crosshair(key, plot)
            self._wire_window(plot)
            self.readout_series.append((f"val/{metric}", "plain"))

    # -- data ------------------------------------------------------------------------------------
    def run(self, run_id: str) -> RunMetrics:
        if run_id not in self.runs:
            self.runs[run_id] = RunMetrics(run_id)
            if not self.show_new_runs:
                self._hidden.add(run_id)
            self._dirty = True
            self._reserve_readout_lines()
        return self.runs[run_id]

    def _assign_hue(self, run_id: str) -> None:
        # The lowest palette index no drawn run holds: the palette's first colours differ the most, and a
        # drawn run's hue stays put while others come and go. Given at the first point drawn, so a ticked run
        # with no points (failed before its first step) takes no colour from the runs that are drawn.
        if run_id in self._hidden or run_id in self._hues:
            return
        used = set(self._hues.values())
        self._hues[run_id] = next(i for i in range(len(used) + 1) if i not in used)

    def is_shown(self, run_id: str) -> bool:
        return run_id in self.runs and run_id not in self._hidden

    def shown_run_ids(self) -> list[str]:
        return [run_id for run_id in self.runs if run_id not in self._hidden]

    def set_shown(self, run_id: str, shown: bool) -> None:
        """Draw a held run or stop drawing it; its points stay in the buffers either way."""
        if shown == (run_id not in self._hidden):
            return
        if shown:
            self._hidden.discard(run_id)
        else:
            self._hidden.add(run_id)
            self._hues.pop(run_id, None)
            self._remove_items(run_id)
        self._drawn.pop(run_id, None)
        self._dirty = True
        self._reserve_readout_lines()
        self.redraw_if_needed()

    def add_columns(self, run_id: str, columns: dict) -> None:
        """A decoded metrics event: {name: (steps, values, times)}."""
        metrics = self.run(run_id)
        for name, (steps, values, _times) in columns.items():
            metrics.add_series(name, steps, values)

    def remove_run(self, run_id: str) -> None:
        self.runs.pop(run_id, None)
        self._drawn.pop(run_id, None)
        self._hues.pop(run_id, None)
        self._hidden.discard(run_id)
        self._remove_items(run_id)
        self._dirty = True
        self._reserve_readout_lines()

    def _remove_items(self, run_id: str) -> None:
        for key in [k for k in self._items if k[0] == run_id]:
            item = self._items.pop(key)
            curve = self._curves.pop(key)
            self.plots[curve.plot].removeItem(item)

    def clear_runs(self) -> None:
        for run_id in list(self.runs):
            self.remove_run(run_id)

    @property
    def smoothing_weight(self) -> float:
        return self.smoothing.value() / 100

    def hue(self, run_id: str) -> str:
        return run_colour(self._hues.get(run_id, 0))

    def label(self, run_id: str) -> str:
        spec = (self.spec_of(run_id) if self.spec_of is not None else None) or {}
        return run_label(
            run_id, dig(spec, "model", "name", default=""), dig(spec, "dataset", "name", default="")
        )

    # -- drawing ---------------------------------------------------------------------------------
    def redraw_if_needed(self) -> None:
        shown = [self.runs[run_id] for run_id in self.shown_run_ids()]
        changed = [r for r in shown if self._drawn.get(r.run_id) != r.version]
        if changed or self._dirty:
            self.redraw(changed if not self._dirty else shown)

    def redraw(self, runs: list[RunMetrics] | None = None) -> None:
        """Hand new points to the plots: smoothing and the peak pyramid are extended, series that did not grow
        (and windows that did not move) are left alone."""
        self._dirty = False
        weight = min(self.smoothing_weight, MAX_WEIGHT)
        for run in runs if runs is not None else self.runs.values():
            if run.run_id in self._hidden:
                continue
            if run.series:
                self._assign_hue(run.run_id)
            self._add_metric_plots(run)
            for key, spec in self.specs.items():
                for name, role, smooth in spec.series:
                    series = run.get(name)
                    if series is None or not len(series):
                        continue
                    curve = self._curve(run.run_id, key, name, role)
                    y = series.y
                    if smooth and weight > 0:
                        if curve.smoother is None or curve.smoother.weight != weight:
                            curve.smoother = IncrementalEma(weight, capacity=len(series))
                            curve.pyramid.reset()  # it holds the old weight's curve
                            curve.window = None
                        curve.smoother.extend(series.y[len(curve.smoother) :])
                        y = curve.smoother.values
                    elif curve.smoother is not None:  # smoothing was turned off: back to the raw points
                        curve.smoother = None
                        curve.pyramid.reset()
                        curve.window = None
                    curve.pyramid.extend(y)
                    self._draw(curve, series.x, y)
            self._drawn[run.run_id] = run.version
        self._update_legend()
        self._update_accuracy_plot()

    def _update_accuracy_plot(self) -> None:
        """Hide the accuracy plot while every shown run with points logs no accuracy (segmentation,
        regression:
        their own metrics get plots of their own), rather than leave an empty plot titled accuracy."""
        names = [name for name, _role, _smooth in PLOTS["accuracy"].series]
        shown = [run for run_id, run in self.runs.items() if run_id not in self._hidden and run.series]
        needed = not shown or any(
            run.get(name) is not None and len(run.get(name)) for run in shown for name in names
        )
        self.plots["accuracy"].setVisible(needed)

    def redraw_windows(self) -> None:
        """After a zoom, pan or resize: give each item the points of its new window (only where it moved)."""
        for (run_id, name), curve in self._curves.items():
            run = self.runs.get(run_id)
            series = run.get(name) if run is not None else None
            if series is not None and len(curve.pyramid):
                y = curve.smoother.values if curve.smoother is not None else series.y
                self._draw(curve, series.x, y)

    def _draw(self, curve: _Curve, x, y) -> None:
        # Only what the pyramid holds: a zoom can come between new points arriving and the redraw that takes
        # them.
        n = len(curve.pyramid)
        x, y = x[:n], y[:n]
        i0, i1, buckets = self._visible(curve.plot, x)
        # A window short of the newest point does not change when points arrive beyond it.
        window = (i0, min(i1, n), buckets, n if i1 >= n else -1)
        if window == curve.window:
            return
        curve.item.setData(*curve.pyramid.window(x, y, i0, i1, buckets))
        curve.window = window

    def _visible(self, key: str, x) -> tuple[int, int, int]:
        """Index range of the points in view, and how many buckets fit its width (about two per pixel)."""
        # The x axes are linked to the loss plot's: it alone follows the data (auto-range), the others follow
        # it a moment later, so its range is the one to cut windows by.
        view = self.plots["loss"].plotItem.vb
        buckets = max(256, 2 * int(self.plots[key].plotItem.vb.width()))
        if view.state["autoRange"][0] is not False:
            return 0, len(x), buckets  # following the data: all of it is in view
        x0, x1 = view.viewRange()[0]
        if self.log_x.isChecked():
            x0, x1 = 10.0**x0, 10.0**x1
        return int(np.searchsorted(x, x0)) - 1, int(np.searchsorted(x, x1, side="right")) + 1, buckets

    def _curve(self, run_id: str, key: str, name: str, role: str) -> _Curve:
        curve = self._curves.get((run_id, name))
        if curve is None:
            colour = self.hue(run_id)
            _style, symbol = SERIES_STYLES[role]
            # No pyqtgraph down-sampling or clipping: the window handed over is already both.
            # Per-step series are drawn 1 px wide: the raster engine draws wider lines as separate segments,
            # several times slower (and a wide dashed line over thousands of points takes a second).
            per_step = role == "train"
            item = self.plots[key].plot(
                pen=series_pen(colour, role, width=1.0 if per_step else 1.6),
                symbol=symbol,
                symbolSize=5,
                symbolBrush=colour,
                symbolPen=None,
            )
            curve = self._curves[(run_id, name)] = _Curve(item, key, PeakPyramid())
            self._items[(run_id, name)] = item
        return curve

    def _update_legend(self) -> None:
        # Only the runs drawn: a hidden run, or a shown one with no point yet (it failed before its first
        # step), would name a line that is not there.
        entries = [
            LegendEntry(self.label(run_id), self.hue(run_id), "train", tooltip=run_id, width=3)
            for run_id in self.shown_run_ids()
            if self.runs[run_id].series
        ]
        if entries:
            entries += [LegendEntry(role, None, role) for role in SERIES_STYLES]
        self.legend.set_entries(entries)

    def _on_view_option_changed(self, *args) -> None:
        self._update_smoothing_label()
        self._dirty = True
        self.redraw_if_needed()

    def _on_log_option_changed(self, *args) -> None:
        # Only on a change: setLogMode re-enables auto-range, which would undo the user's zoom at every
        # redraw.
        for key, plot in self.plots.items():
            plot.setLogMode(x=self.log_x.isChecked(), y=self.log_y.isChecked() and key == "loss")
        self.clear_readout()

    def _update_smoothing_label(self) -> None:
        self.smoothing_label.setText(f"{self.smoothing_weight:.2f}")

    # -- crosshair and readout -----------------------------------------------------------------------
    def eventFilter(self, watched, event) -> bool:
        if event.type() == QEvent.Leave:
            self.clear_readout()
        return super().eventFilter(watched, event)

    def _on_plot_mouse_moved(self, plot: pg.PlotWidget, pos) -> None:
        view = plot.plotItem.vb
        if not view.sceneBoundingRect().contains(pos) or not self.shown_run_ids():
            self.clear_readout()  # over an axis or the title: nothing to read
            return
        x = view.mapSceneToView(pos).x()
        if self.log_x.isChecked():
            x = 10**x
        self.show_readout(x)

    def show_readout(self, step: float) -> str:
        """Every shown run's values nearest to `step`, a row per run in its hue; returns the plain text."""
        for line in self.crosshairs.values():
            line.show()
            line.setPos(np.log10(step) if self.log_x.isChecked() and step > 0 else step)
        lines = [f"step {step:,.0f}"]
        cell = "<td style='padding: 0 10px 0 0' align='{}'>{}</td>"
        rows = [
            "<tr>"
            + cell.format("left", f"<b>step {step:,.0f}</b>")
            + "".join(cell.format("right", f"<b>{escape(name)}</b>") for name, _ in self.readout_series)
            + "</tr>"
        ]
        for run_id in self.shown_run_ids():
            run = self.runs[run_id]
            values, texts = [], []
            for name, fmt in self.readout_series:
                series = run.get(name)
                point = series.value_at(step) if series is not None else None
                text = format_value(point[1], fmt) if point is not None else ""
                texts.append(text)
                if text:
                    values.append(f"{name} {text}")
            if values:
                label = self.label(run_id)
                lines.append(f"{label}: " + "  ".join(values))
                rows.append(
                    "<tr>"
                    + cell.format("left", f"<span style='color:{self.hue(run_id)}'>■</span> {escape(label)}")
                    + "".join(cell.format("right", t or "–") for t in texts)
                    + "</tr>"
                )
        self.readout.setText("<table cellspacing='0'>" + "".join(rows) + "</table>")
        return "\n".join(lines)

    def clear_readout(self) -> None:
        for line in self.crosshairs.values():
            line.hide()
        self.readout.setText(READOUT_HINT)

    def _reserve_readout_lines(self) -> None:
        # Room for a line per run up front, so the plots do not jump as the mouse moves in and out.
        lines = 1 + len(self.shown_run_ids())
        self.readout.setMinimumHeight(self.readout.fontMetrics().lineSpacing() * lines + 4)
