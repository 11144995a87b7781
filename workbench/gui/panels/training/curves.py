"""Live training curves: loss, accuracy and learning rate for one or more runs, redrawn on a timer from buffers.

Full resolution is kept in the buffers; pyqtgraph down-samples (peak mode) and clips for display only.
Smoothing (EMA), log axes and a crosshair readout are view settings, never applied to stored data.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QSlider, QVBoxLayout, QWidget

from workbench.gui.metric_buffers import RunMetrics, ema
from workbench.gui.plots import SERIES_COLOURS, make_plot, style_plot

# The training engine's metric names (x is the global step; epoch metrics are logged at the epoch's last step).
PLOTS = {
    "loss": ("Loss", [("train/loss", "train", True), ("epoch/train_loss", "train (epoch)", False),
                      ("val/loss", "validation", False)]),
    "accuracy": ("Accuracy", [("train/acc", "train", True), ("epoch/train_acc", "train (epoch)", False),
                              ("val/acc", "validation", False)]),
    "lr": ("Learning rate", [("lr", "lr", False)]),
}
STYLES = {"train": Qt.SolidLine, "train (epoch)": Qt.DashLine, "validation": Qt.SolidLine, "lr": Qt.SolidLine}


class CurvesWidget(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.runs: dict[str, RunMetrics] = {}
        self._drawn: dict[str, int] = {}
        self._items: dict[tuple[str, str], pg.PlotDataItem] = {}
        self._dirty = False
        self.plots = {key: make_plot(title, key, "step") for key, (title, _) in PLOTS.items()}
        for plot in self.plots.values():
            plot.addLegend(offset=(-10, 10), labelTextSize="8pt")
            style_plot(plot)
        self.plots["accuracy"].setXLink(self.plots["loss"])
        self.plots["lr"].setXLink(self.plots["loss"])
        self.smoothing = QSlider(Qt.Horizontal)
        self.smoothing.setRange(0, 99)
        self.smoothing.setValue(60)
        self.smoothing.setFixedWidth(140)
        self.smoothing.setToolTip("Exponential moving average of the per-step curves (display only)")
        self.smoothing_label = QLabel()
        self.log_x = QCheckBox("log x")
        self.log_y = QCheckBox("log y (loss)")
        self.readout = QLabel("Move the mouse over a plot to read values.")
        self.readout.setTextInteractionFlags(Qt.TextSelectableByMouse)
        controls = QHBoxLayout()
        controls.addWidget(QLabel("Smoothing"))
        controls.addWidget(self.smoothing)
        controls.addWidget(self.smoothing_label)
        controls.addWidget(self.log_x)
        controls.addWidget(self.log_y)
        controls.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(controls)
        layout.addWidget(self.plots["loss"], 3)
        layout.addWidget(self.plots["accuracy"], 3)
        layout.addWidget(self.plots["lr"], 2)
        layout.addWidget(self.readout)
        self.crosshairs = {}
        for key, plot in self.plots.items():
            line = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen("#888888", style=Qt.DotLine))
            line.hide()  # until the mouse is over a plot
            plot.addItem(line, ignoreBounds=True)
            self.crosshairs[key] = line
            plot.scene().sigMouseMoved.connect(lambda pos, plot=plot: self._on_plot_mouse_moved(plot, pos))
        self.smoothing.valueChanged.connect(self._on_view_option_changed)
        self.log_x.toggled.connect(self._on_view_option_changed)
        self.log_y.toggled.connect(self._on_view_option_changed)
        self._update_smoothing_label()
        self.timer = QTimer(self)
        self.timer.setInterval(200)  # 5 redraws a second, however fast metrics arrive
        self.timer.timeout.connect(self.redraw_if_needed)
        self.timer.start()

    # -- data ------------------------------------------------------------------------------------
    def run(self, run_id: str) -> RunMetrics:
        if run_id not in self.runs:
            self.runs[run_id] = RunMetrics(run_id)
            self._dirty = True
        return self.runs[run_id]

    def add_columns(self, run_id: str, columns: dict) -> None:
        """A decoded metrics event: {name: (steps, values, times)}."""
        metrics = self.run(run_id)
        for name, (steps, values, _times) in columns.items():
            metrics.add_series(name, steps, values)

    def remove_run(self, run_id: str) -> None:
        self.runs.pop(run_id, None)
        self._drawn.pop(run_id, None)
        for key in [k for k in self._items if k[0] == run_id]:
            item = self._items.pop(key)
            for plot in self.plots.values():
                plot.removeItem(item)
                if plot.plotItem.legend is not None:
                    plot.plotItem.legend.removeItem(item)
        self._dirty = True

    def clear_runs(self) -> None:
        for run_id in list(self.runs):
            self.remove_run(run_id)

    @property
    def smoothing_weight(self) -> float:
        return self.smoothing.value() / 100

    # -- drawing ---------------------------------------------------------------------------------
    def redraw_if_needed(self) -> None:
        changed = [r for r in self.runs.values() if self._drawn.get(r.run_id) != r.version]
        if changed or self._dirty:
            self.redraw(changed if not self._dirty else list(self.runs.values()))

    def redraw(self, runs: list[RunMetrics] | None = None) -> None:
        self._dirty = False
        order = list(self.runs)
        for run in runs if runs is not None else self.runs.values():
            colour_index = order.index(run.run_id)
            for key, (_, series_specs) in PLOTS.items():
                for name, label, smooth in series_specs:
                    series = run.get(name)
                    if series is None or not len(series):
                        continue
                    y = ema(series.y, self.smoothing_weight) if smooth else series.y
                    self._item(run.run_id, key, name, label, colour_index, smooth).setData(series.x, y)
            self._drawn[run.run_id] = run.version
        for key, plot in self.plots.items():
            plot.setLogMode(x=self.log_x.isChecked(), y=self.log_y.isChecked() and key == "loss")

    def _item(self, run_id: str, key: str, name: str, label: str, colour_index: int, smooth: bool) -> pg.PlotDataItem:
        item = self._items.get((run_id, name))
        if item is None:
            colour = SERIES_COLOURS[colour_index % len(SERIES_COLOURS)] if len(self.runs) > 1 else \
                SERIES_COLOURS[{"train": 0, "train (epoch)": 0, "validation": 1, "lr": 2}[label]]
            pen = pg.mkPen(colour, width=2 if not smooth else 1.5, style=STYLES[label])
            symbol = "o" if name.startswith(("val/", "epoch/")) else None
            legend = label if len(self.runs) == 1 else f"{run_id[-13:]} {label}"
            item = self.plots[key].plot(pen=pen, name=legend, symbol=symbol, symbolSize=5,
                                        symbolBrush=colour, symbolPen=None)
            item.setDownsampling(auto=True, method="peak")
            item.setClipToView(True)
            self._items[(run_id, name)] = item
        return item

    def _on_view_option_changed(self, *args) -> None:
        self._update_smoothing_label()
        self._dirty = True
        self.redraw_if_needed()

    def _update_smoothing_label(self) -> None:
        self.smoothing_label.setText(f"{self.smoothing_weight:.2f}")

    # -- crosshair -------------------------------------------------------------------------------
    def _on_plot_mouse_moved(self, plot: pg.PlotWidget, pos) -> None:
        if not plot.sceneBoundingRect().contains(pos):
            return
        x = plot.plotItem.vb.mapSceneToView(pos).x()
        if self.log_x.isChecked():
            x = 10 ** x
        self.show_readout(x)

    def show_readout(self, step: float) -> str:
        for line in self.crosshairs.values():
            line.show()
            line.setPos(np.log10(step) if self.log_x.isChecked() and step > 0 else step)
        parts = [f"step {step:,.0f}"]
        for run in self.runs.values():
            values = []
            for name in ("train/loss", "val/loss", "train/acc", "val/acc", "lr"):
                series = run.get(name)
                point = series.value_at(step) if series is not None else None
                if point is not None:
                    values.append(f"{name} {point[1]:.4g}")
            if values:
                prefix = f"{run.run_id}: " if len(self.runs) > 1 else ""
                parts.append(prefix + "  ".join(values))
        text = "   ".join(parts)
        self.readout.setText(text)
        return text
