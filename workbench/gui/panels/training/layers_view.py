"""The Training tab's Layers view: a layers x steps heatmap of one recorded layer statistic (log colours), a
click on a cell shows that layer's weight, gradient and activation histograms at that step against its first
step, and what looks wrong (vanishing gradients, far-off update ratios, dead layers) is said above it. GUI
side; numpy only.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from workbench.gui.plots import SERIES_COLOURS, make_plot, update_empty_state
from workbench.layer_records import KINDS, SCALARS, findings, read_record, read_records

# statistic, label, log colours by default, the Graph tab's overlay of it
STATISTICS = (
    ("grad_norm", "Gradient norm", True, "layers_grad_norm"),
    ("update_ratio", "Update-to-weight ratio", True, "layers_update_ratio"),
    ("weight_norm", "Weight norm", True, "layers_weight_norm"),
    ("act_std", "Activation std", True, "layers_act_std"),
    ("act_mean", "Activation mean", False, ""),
    ("dead_fraction", "Dead units (share)", False, "layers_dead_fraction"),
)
FIRST_COLOUR = "#9a9a9a"  # the first recorded step, drawn under the one clicked
KIND_TITLES = {"weights": "Weights", "gradients": "Gradients", "activations": "Activations"}
EMPTY = (
    "Layer statistics appear here as a run trains (every layer_stats_every steps, 50 by default, and its "
    "first step)."
)


class LayersView(QWidget):
    """Show one run's recorded layer statistics; `add_record_file` appends a step as it is written."""

    graph_requested = Signal(str, str)  # run id, the overlay to colour the graph by

    def __init__(self, parent=None):
        super().__init__(parent)
        self.run_dir: Path | None = None
        self.records: list[dict] = []
        self.selected: tuple[int, int] | None = None  # (layer row, record column)
        self.title = QLabel(EMPTY)
        self.title.setWordWrap(True)
        self.statistic = QComboBox()
        for key, label, _, _ in STATISTICS:
            self.statistic.addItem(label, key)
        self.statistic.setToolTip(
            "The per-layer value the heatmap colours (rows: layers, columns: recorded steps)"
        )
        self.log_colours = QCheckBox("Log colours")
        self.log_colours.setChecked(True)
        self.log_colours.setToolTip(
            "Colour by the value's order of magnitude (log10): norms and ratios span decades"
        )
        self.graph_button = QPushButton("Show on graph")
        self.graph_button.setToolTip(
            "Paint the latest recorded value of this statistic on the model's graph in the Graph tab"
        )
        self.graph_button.setEnabled(False)
        self.findings = QLabel()
        self.findings.setWordWrap(True)
        self.findings.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.findings.setStyleSheet("color: #b35900")
        self.heatmap = make_plot("", "layer", "step", empty=EMPTY, grid=False)
        self.heatmap.getPlotItem().invertY(True)
        self.heatmap.setMinimumHeight(220)
        self.image = pg.ImageItem()
        self.image.setColorMap(pg.colormap.get("viridis"))
        self.heatmap.addItem(self.image)
        self.colour_bar = pg.ColorBarItem(colorMap=pg.colormap.get("viridis"), interactive=False, width=14)
        self.colour_bar.setImageItem(self.image, insert_in=self.heatmap.getPlotItem())
        self.marker = pg.QtWidgets.QGraphicsRectItem(0, 0, 1, 1)
        self.marker.setPen(pg.mkPen("#ff3030", width=2, cosmetic=True))
        self.marker.setBrush(Qt.NoBrush)
        self.marker.setVisible(False)
        self.heatmap.addItem(self.marker)
        self.readout = QLabel("Click a cell to see that layer's histograms at that step.")
        self.readout.setWordWrap(True)
        self.histograms = {
            kind: make_plot(KIND_TITLES[kind], "count", "value", empty="Click a cell of the heatmap.")
            for kind in KINDS
        }
        for plot in self.histograms.values():
            plot.setMinimumHeight(150)
        bar = QHBoxLayout()
        bar.addWidget(QLabel("Statistic"))
        bar.addWidget(self.statistic)
        bar.addWidget(self.log_colours)
        bar.addStretch(1)
        bar.addWidget(self.graph_button)
        lower = QWidget()
        lower_layout = QHBoxLayout(lower)
        lower_layout.setContentsMargins(0, 0, 0, 0)
        for plot in self.histograms.values():
            lower_layout.addWidget(plot)
        upper = QWidget()
        upper_layout = QVBoxLayout(upper)
        upper_layout.setContentsMargins(0, 0, 0, 0)
        upper_layout.addWidget(self.heatmap, 1)
        upper_layout.addWidget(self.readout)
        split = QSplitter(Qt.Vertical)
        split.addWidget(upper)
        split.addWidget(lower)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.title)
        layout.addLayout(bar)
        layout.addWidget(self.findings)
        layout.addWidget(split, 1)
        self.statistic.currentIndexChanged.connect(self._on_statistic_changed)
        self.log_colours.toggled.connect(self._draw)
        self.graph_button.clicked.connect(self._on_graph_clicked)
        self.heatmap.scene().sigMouseClicked.connect(self._on_clicked)

    # -- data ------------------------------------------------------------------------------------
    def show_run(self, run_dir: str | Path | None) -> None:
        """Every recorded step of a run (none: the empty state)."""
        self.run_dir = Path(run_dir) if run_dir else None
        self.records = read_records(self.run_dir) if self.run_dir else []
        self.selected = None
        self._refresh()

    def add_record_file(self, run_dir: str | Path, path: str | Path) -> bool:
        """A step the run being shown just recorded (the live artifact event); False when it is not shown
        here."""
        if self.run_dir is None or Path(run_dir) != self.run_dir:
            return False
        try:
            record = read_record(path)
        except ValueError:
            return False
        if self.records and record["step"] <= self.records[-1]["step"]:
            return False  # already read (the event came after show_run read the folder)
        if self.records and record["layers"] != self.records[0]["layers"]:
            return False
        self.records.append(record)
        self._refresh()
        return True

    def statistic_key(self) -> str:
        return self.statistic.currentData()

    def matrix(self) -> np.ndarray:
        """layers x recorded steps of the chosen statistic (NaN where it was not measured)."""
        if not self.records:
            return np.zeros((0, 0))
        column = SCALARS.index(self.statistic_key())
        return np.stack([record["scalars"][:, column] for record in self.records], axis=1)

    def current_findings(self) -> list[str]:
        """What the latest recorded step says (each layer and kind once), the latest step's words."""
        if not self.records:
            return []
        return [text for _, _, text in findings(self.records[-1])]

    # -- drawing ---------------------------------------------------------------------------------
    def _refresh(self) -> None:
        if not self.records:
            self.title.setText(EMPTY)
            self.findings.clear()
            self.graph_button.setEnabled(False)
            self.image.clear()
            self.marker.setVisible(False)
            for plot in self.histograms.values():
                plot.clear()
                update_empty_state(plot)
            update_empty_state(self.heatmap)
            return
        latest = self.records[-1]
        self.title.setText(
            f"<b>{self.run_dir.name}</b> · {len(latest['layers'])} layers · {len(self.records)} "
            f"recorded steps (the last at step {latest['step']:,})"
        )
        said = self.current_findings()
        self.findings.setText("⚠ " + "<br>⚠ ".join(said) if said else "")
        self.findings.setVisible(bool(said))
        self.graph_button.setEnabled(bool(self._overlay()))
        self._draw()
        if self.selected is not None:
            self.show_cell(*self.selected)

    def _on_statistic_changed(self) -> None:
        key = self.statistic_key()
        self.log_colours.blockSignals(True)
        self.log_colours.setChecked(next(log for k, _, log, _ in STATISTICS if k == key))
        self.log_colours.blockSignals(False)
        self.graph_button.setEnabled(bool(self.records) and bool(self._overlay()))
        self._draw()

    def colour_values(self) -> np.ndarray:
        """What the heatmap colours: the statistic, or its log10 (zero and below: the lowest colour)."""
        values = self.matrix()
        if self.log_colours.isChecked():
            with np.errstate(divide="ignore", invalid="ignore"):
                values = np.where(values > 0, np.log10(np.where(values > 0, values, 1.0)), np.nan)
        return values

    def _draw(self) -> None:
        if not self.records:
            return
        values = self.colour_values()
        finite = values[np.isfinite(values)]
        low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        if high <= low:
            high = low + 1.0
        # Unmeasured cells (a layer with no ReLU has no dead units) take the lowest colour.
        self.image.setImage(np.nan_to_num(values, nan=low).T, levels=(low, high))
        self.image.setRect(0, 0, values.shape[1], values.shape[0])
        self.colour_bar.setLevels((low, high))
        label = dict((k, text) for k, text, _, _ in STATISTICS)[self.statistic_key()]
        self.colour_bar.axis.setLabel(f"log10 {label}" if self.log_colours.isChecked() else label)
        layers = self.records[-1]["layers"]
        every = max(1, math.ceil(len(layers) / 30))
        self.heatmap.getAxis("left").setTicks([[(i + 0.5, name) for i, name in enumerate(layers)][::every]])
        steps = [record["step"] for record in self.records]
        every = max(1, math.ceil(len(steps) / 12))
        self.heatmap.getAxis("bottom").setTicks([[(i + 0.5, f"{s:,}") for i, s in enumerate(steps)][::every]])
        self.heatmap.getPlotItem().setRange(xRange=(0, len(steps)), yRange=(0, len(layers)), padding=0.02)
        update_empty_state(self.heatmap)

    def _on_clicked(self, event) -> None:
        if not self.records or event.button() != Qt.LeftButton:
            return
        point = self.heatmap.getPlotItem().vb.mapSceneToView(event.scenePos())
        column, row = int(math.floor(point.x())), int(math.floor(point.y()))
        if 0 <= row < len(self.records[-1]["layers"]) and 0 <= column < len(self.records):
            self.show_cell(row, column)

    def show_cell(self, row: int, column: int) -> None:
        """Layer `row`'s histograms at recorded step `column`, each against the layer's first recorded
        step."""
        self.selected = (row, column)
        self.marker.setRect(column, row, 1, 1)
        self.marker.setVisible(True)
        record, first = self.records[column], self.records[0]
        layer = record["layers"][row]
        values = dict(zip(SCALARS, record["scalars"][row]))
        shown = " · ".join(f"{label} {_fmt(values[key])}" for key, label, _, _ in STATISTICS)
        against = (
            f" · histograms: <span style='color:{SERIES_COLOURS[0]}'>■ step {record['step']:,}</span> "
            f"against <span style='color:{FIRST_COLOUR}'>■ step {first['step']:,}</span>"
            if column
            else ""
        )
        self.readout.setText(f"<b>{layer}</b> at step {record['step']:,}: {shown}{against}")
        for index, kind in enumerate(KINDS):
            plot = self.histograms[kind]
            plot.clear()
            drawn = [(record, SERIES_COLOURS[0], f"step {record['step']:,}")]
            if column:
                drawn.insert(0, (first, FIRST_COLOUR, f"step {first['step']:,} (first)"))
            for source, colour, name in drawn:
                counts = source["counts"][row, index]
                low, high = source["ranges"][row, index]
                if not (np.isfinite(low) and np.isfinite(high)) or counts.sum() == 0:
                    continue
                edges = np.linspace(low, high if high > low else low + 1e-12, len(counts) + 1)
                plot.plot(edges, counts, stepMode="center", pen=pg.mkPen(colour, width=1.6), name=name)
            update_empty_state(plot)

    # -- the graph -------------------------------------------------------------------------------
    def _overlay(self) -> str:
        return next(overlay for key, _, _, overlay in STATISTICS if key == self.statistic_key())

    def _on_graph_clicked(self) -> None:
        if self.run_dir is not None and self._overlay():
            self.graph_requested.emit(self.run_dir.name, self._overlay())


def _fmt(value: float) -> str:
    if not math.isfinite(value):
        return "–"
    return f"{value:.3g}" if 1e-3 <= abs(value) < 1e4 or value == 0 else f"{value:.2e}"
