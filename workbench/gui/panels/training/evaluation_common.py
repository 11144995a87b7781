"""Parts the task evaluation views share: the header line with the monitor metric and its direction, readable
metric names and numbers, a metrics table, a table of worst samples, and hover tooltips over bar charts.

GUI side: Qt, pyqtgraph and numpy only, never torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem

from workbench.results import Evaluation

# How each objective's metric keys read on screen (evaluation.json stores the keys).
METRIC_LABELS = {
    "acc": "accuracy",
    "top5": "top-5 accuracy",
    "mae": "MAE",
    "rmse": "RMSE",
    "mse": "MSE",
    "r2": "R²",
    "map": "mean AP",
    "f1": "F1 (mean over labels)",
    "f1_micro": "F1 (micro)",
    "miou": "mIoU",
    "pixel_acc": "pixel accuracy",
}


MAX_TABLE_WIDTH = 560  # pixels a worst-samples table may claim from the plot beside it


def metric_label(name: str) -> str:
    return METRIC_LABELS.get(name, name)


def number(value) -> str:
    """A metric value as people read it: four significant digits, a dash where it is undefined (None, NaN)."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return "—" if value is None else str(value)
    if not math.isfinite(value):
        return "—"
    return f"{value:.4g}"


def monitor_text(evaluation: dict) -> str:
    """ "test mIoU ↑ 0.93": the split, the monitor metric, which way is better, its value."""
    read = Evaluation.from_dict(evaluation)
    monitor = read.monitor
    name = monitor.label or metric_label(monitor.name)
    if not name:
        return ""
    arrow = {True: "↑", False: "↓"}.get(monitor.higher_is_better, "")
    return f"{read.split or 'test'} {name} {arrow} <b>{number(monitor.value)}</b>".replace("  ", " ")


def checkpoint_text(evaluation: dict) -> str:
    """ "with best.pt (epoch 3)": the weights the test split was evaluated with (quantize, export and Try it
    load the same file); empty for an evaluation.json that does not say."""
    checkpoint = evaluation.get("checkpoint") or {}
    if not isinstance(checkpoint, dict) or not checkpoint.get("file"):
        return ""
    epoch = checkpoint.get("epoch")
    return f"with {checkpoint['file']}" + (f" (epoch {epoch})" if epoch else "")


def header_html(evaluation: dict, run_id: str, samples: str = "") -> str:
    """The view's title: the run, the monitor metric first and the task's other metrics after it, then the
    checkpoint they were measured with."""
    monitor = Evaluation.from_dict(evaluation).monitor.name
    parts = [f"<b>{run_id}</b>"] if run_id else []
    text = monitor_text(evaluation)
    if text:
        parts.append(text)
    for name, value in Evaluation.from_dict(evaluation).metrics.items():
        if name != monitor:
            parts.append(f"{metric_label(name)} {number(value)}")
    if samples:
        parts.append(samples)
    if checkpoint_text(evaluation):
        parts.append(checkpoint_text(evaluation))
    return " · ".join(parts)


def read_only_table(headers: Sequence[str], table: QTableWidget | None = None) -> QTableWidget:
    """`table` (a new one by default) with these columns, read-only, selecting whole rows."""
    table = table if table is not None else QTableWidget(0, len(headers))
    table.setColumnCount(len(headers))
    table.setHorizontalHeaderLabels(list(headers))
    table.setEditTriggers(QAbstractItemView.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectRows)
    table.setSelectionMode(QAbstractItemView.SingleSelection)
    table.verticalHeader().setVisible(False)
    table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
    table.horizontalHeader().setStretchLastSection(True)
    return table


def table_item(value, tooltip: str = "") -> QTableWidgetItem:
    """A cell that shows `value` readably: numbers right-aligned with four significant digits."""
    item = QTableWidgetItem()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        item.setText(number(value) if isinstance(value, float) else str(value))
        item.setTextAlignment(Qt.AlignRight | Qt.AlignVCenter)
    else:
        item.setText("—" if value is None else str(value))
    if tooltip:
        item.setToolTip(tooltip)
    return item


def fill_metrics_table(table: QTableWidget, metrics: dict) -> None:
    table.setRowCount(0)
    for name, value in metrics.items():
        row = table.rowCount()
        table.insertRow(row)
        table.setItem(row, 0, table_item(metric_label(name), name))
        table.setItem(row, 1, table_item(value if isinstance(value, (int, float)) else None))


class WorstTable(QTableWidget):
    """The worst samples, one per row; double-clicking (or Enter on) a row asks to open that sample."""

    sample_activated = Signal(str, int, str)  # split, index within it, a note on what the model got wrong

    def __init__(self, headers: Sequence[str], tooltip: str, parent=None):
        super().__init__(0, len(headers), parent)
        read_only_table(headers, self)
        self.setToolTip(tooltip)
        self._notes: list[tuple[str, int, str]] = []
        self.itemActivated.connect(self._on_item_activated)
        self.cellDoubleClicked.connect(lambda row, _column: self._emit(row))

    def set_rows(
        self, rows: list[list], samples: list[tuple[str, int, str]], tooltips: list[str] | None = None
    ):
        """rows: the cells; samples: (split, index, note) per row, what a double-click opens."""
        self.setRowCount(0)
        self._notes = list(samples)
        for r, cells in enumerate(rows):
            self.insertRow(r)
            for c, value in enumerate(cells):
                self.setItem(r, c, table_item(value, tooltips[r] if tooltips else ""))
        # Wide enough for its columns (a splitter gives a table only its small size hint), within reason.
        self.resizeColumnsToContents()
        width = sum(self.columnWidth(c) for c in range(self.columnCount()))
        self.setMinimumWidth(
            min(
                width + self.verticalScrollBar().sizeHint().width() + 2 * self.frameWidth() + 4,
                MAX_TABLE_WIDTH,
            )
        )

    def _on_item_activated(self, item: QTableWidgetItem) -> None:
        self._emit(item.row())

    def _emit(self, row: int) -> None:
        if 0 <= row < len(self._notes):
            split, index, note = self._notes[row]
            self.sample_activated.emit(split, index, note)


class BarTooltips:
    """Hovering over a bar chart shows the text of the category under the mouse (bars at x = 0, 1, 2, ...)."""

    def __init__(self, plot: pg.PlotWidget):
        self.plot = plot
        self.texts: list[str] = []
        plot.scene().sigMouseMoved.connect(self._on_mouse_moved)

    def text_at(self, x: float) -> str:
        i = int(round(x))
        return self.texts[i] if 0 <= i < len(self.texts) and abs(x - i) <= 0.5 else ""

    def _on_mouse_moved(self, position) -> None:
        vb = self.plot.getPlotItem().vb
        if not vb.sceneBoundingRect().contains(position):
            return
        self.plot.setToolTip(self.text_at(vb.mapSceneToView(position).x()))


def category_ticks(plot: pg.PlotWidget, names: Sequence[str], most: int = 24) -> None:
    """Category names under bars at 0, 1, 2, ...; every k-th one when there are more than `most`."""
    step = max(1, math.ceil(len(names) / most))
    plot.getAxis("bottom").setTicks([[(i, str(n)) for i, n in enumerate(names)][::step]])


def link_plots(plots: Sequence[pg.PlotWidget]) -> None:
    """Zoom and pan one and the others follow (the same image seen three ways)."""
    for plot in plots[1:]:
        plot.setXLink(plots[0])
        plot.setYLink(plots[0])
