"""The regression evaluation view: predicted against true on the test split (a scatter with the y = x line a
perfect model lies on) and the samples with the largest residuals, with their input's values when it is a row
of features, a signal or a token sequence. GUI side; never imports torch."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QSplitter, QVBoxLayout, QWidget

from workbench.gui.panels.training.evaluation_common import WorstTable, number, read_only_table
from workbench.gui.panels.training.evaluation_rows import MAX_CELL, has_rows, input_text
from workbench.gui.plots import SERIES_COLOURS, make_plot

HEADERS = ("split", "index", "true", "predicted", "residual")
INPUT_TABLE_WIDTH = 520  # the worst table's least width when it lists inputs


def _values(value) -> list[float | None]:
    """A target/prediction/residual as stored: one number for one output, a list for several."""
    return list(value) if isinstance(value, list) else [value]


def _cell(value):
    values = _values(value)
    return values[0] if len(values) == 1 else ", ".join(number(v) for v in values)


class RegressionEvaluationView(QWidget):
    sample_requested = Signal(str, int, str)  # split, index, a note (what the model predicted)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.scatter_plot = make_plot(
            "Predicted against true",
            "predicted",
            "true",
            empty="Each test sample's prediction against its true value appears here.",
        )
        self.scatter_plot.setAspectLocked(False)
        self.scatter = pg.ScatterPlotItem(
            size=6,
            pen=None,
            brush=pg.mkBrush(SERIES_COLOURS[0] + "a0"),
            hoverable=True,
            hoverSize=9,
            tip=self._tip,
        )
        self.scatter_plot.addItem(self.scatter)
        # y = x: where a perfect model's points lie; infinite, so it never stretches the auto range.
        self.identity = pg.InfiniteLine(
            pos=(0, 0),
            angle=45,
            movable=False,
            pen=pg.mkPen(SERIES_COLOURS[1], width=1.4, style=Qt.DashLine),
            label="y = x",
            labelOpts={"position": 0.92, "color": SERIES_COLOURS[1]},
        )
        self.scatter_plot.addItem(self.identity)
        self.worst = WorstTable(
            HEADERS,
            "The test samples with the largest absolute residual (predicted − true); "
            "double-click one to open it in the Data tab",
        )
        self.worst.sample_activated.connect(self.sample_requested)
        self.worst_title = QLabel("Worst residuals (predicted − true)")
        worst_box = QWidget()
        box = QVBoxLayout(worst_box)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.worst_title)
        box.addWidget(self.worst)
        split = QSplitter(Qt.Horizontal)
        split.addWidget(self.scatter_plot)
        split.addWidget(worst_box)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(split)

    @staticmethod
    def _tip(x: float, y: float, data) -> str:
        where = f"sample #{data}\n" if data is not None else ""
        return f"{where}true {number(x)}\npredicted {number(y)}\nresidual {number(y - x)}"

    def clear(self) -> None:
        self.scatter.clear()
        self.worst.set_rows([], [])

    def show_evaluation(self, evaluation: dict) -> None:
        points = np.asarray(evaluation.get("scatter") or [], dtype=float).reshape(-1, 2)
        indices = evaluation.get("scatter_index") or [None] * len(points)
        # NaN predictions cannot be drawn (the table below still lists them).
        finite = np.isfinite(points).all(axis=1)
        self.scatter.setData(
            x=points[finite, 0], y=points[finite, 1], data=[i for i, keep in zip(indices, finite) if keep]
        )
        outputs = int(evaluation.get("outputs") or 1)
        split = evaluation.get("split") or "test"
        which = f" (the first of {outputs} outputs)" if outputs > 1 else ""
        self.scatter_plot.setTitle(
            f"Predicted against true on the {split} split{which}: {len(points):,} samples", size="10pt"
        )
        self.scatter_plot.getPlotItem().vb.autoRange()
        rows, samples, tooltips = [], [], []
        worst = evaluation.get("worst") or []
        # Rows of features, signals or token sequences carry their input (evaluation.json has it): a column of
        # its values, so a bad prediction can be read against what the model was given.
        with_inputs = has_rows(worst)
        read_only_table([*HEADERS, "input"] if with_inputs else HEADERS, self.worst)
        for info in worst:
            rows.append(
                [
                    info.get("split", split),
                    int(info["index"]),
                    _cell(info.get("target")),
                    _cell(info.get("predicted")),
                    _cell(info.get("residual")),
                ]
            )
            text = input_text(info.get("sample") or {}) if with_inputs else ""
            if with_inputs:
                rows[-1].append(text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…")
            tooltips.append(text)
            samples.append(
                (
                    info.get("split", split),
                    int(info["index"]),
                    f"predicted {_cell_text(info.get('predicted'))} (true {_cell_text(info.get('target'))})",
                )
            )
        self.worst.set_rows(rows, samples, tooltips if with_inputs else None)
        # One line per sample (the tooltip has the whole input), and the scatter keeps its room: the input
        # column is as wide as the splitter leaves it, not as wide as its text.
        self.worst.setWordWrap(not with_inputs)
        if with_inputs:
            self.worst.resizeRowsToContents()
            self.worst.setMinimumWidth(min(self.worst.minimumWidth(), INPUT_TABLE_WIDTH))


def _cell_text(value) -> str:
    cell = _cell(value)
    return number(cell) if not isinstance(cell, str) else cell
