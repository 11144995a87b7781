"""The evaluation view of a custom task (and of any task this window has no picture for): the test metrics as
a table; a custom task's views are its metrics' curves, which the Curves tab draws. GUI side; never imports
torch."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from workbench.gui.panels.training.evaluation_common import fill_metrics_table, read_only_table


class MetricsEvaluationView(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.table = read_only_table(["metric", "value"])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.note)
        layout.addWidget(self.table, 1)

    def clear(self) -> None:
        self.table.setRowCount(0)
        self.note.setText("")

    def show_evaluation(self, evaluation: dict) -> None:
        metrics = evaluation.get("metrics") if isinstance(evaluation.get("metrics"), dict) else {}
        fill_metrics_table(self.table, metrics)
        split = evaluation.get("split") or "test"
        task = evaluation.get("task") or "this task"
        table = (
            f"The metrics on the {split} split are below. "
            if metrics
            else f"This run's evaluation has no metrics table for the {split} split. "
        )
        self.note.setText(
            f"{table}The curves of a {task} task's metrics, epoch by epoch, are in the Curves tab."
        )
