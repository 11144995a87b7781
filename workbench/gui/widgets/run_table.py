"""The runs tables of the Training, Quantization and Export tabs: a QTableWidget whose first column's item holds
each row's run id (Qt.UserRole); which run is selected, and selecting one by id."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QTableWidget


def selected_run_id(table: QTableWidget) -> str | None:
    rows = table.selectionModel().selectedRows()
    if not rows:
        return None
    item = table.item(rows[0].row(), 0)
    return item.data(Qt.UserRole) if item else None


def select_run(table: QTableWidget, run_id: str) -> bool:
    for row in range(table.rowCount()):
        item = table.item(row, 0)
        if item is not None and item.data(Qt.UserRole) == run_id:
            table.selectRow(row)
            return True
    return False


def make_run_table(columns) -> QTableWidget:
    """A runs table: one run a row, whole rows selected one at a time, nothing edited in place."""
    table = QTableWidget(0, len(columns))
    table.setHorizontalHeaderLabels(columns)
    table.verticalHeader().hide()
    table.setSelectionBehavior(QTableWidget.SelectRows)
    table.setSelectionMode(QTableWidget.SingleSelection)
    table.setEditTriggers(QTableWidget.NoEditTriggers)
    return table
