"""The runs tables of the Training, Quantization and Export tabs: a QTableWidget whose first column's item
holds each row's run id (Qt.UserRole); listing a tab's runs, filling the rows, which run is selected,
selecting one by id."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QTableWidget, QTableWidgetItem

from workbench.errors import WorkbenchError
from workbench.gui.theme import state_colour
from workbench.task_ids import with_aliases


def task_runs(
    listed: Iterable[dict],
    tasks: Iterable[str],
    live_run_ids: Iterable[str],
    summarize: Callable[[dict], dict],
) -> list[dict]:
    """The listed runs of `tasks`, each with its summary; a run a job of this window is still running shows as
    running whatever its folder says (the worker writes the final state last)."""
    tasks, live = with_aliases(tasks), set(live_run_ids)  # a run recorded under a job's old id is listed too
    entries = [entry for entry in listed if entry.get("task") in tasks]
    for entry in entries:
        if entry["id"] in live:
            entry["status"] = "running"
        entry.update(summarize(entry))
    return entries


def read_spec_and_report(store, run_id: str) -> tuple[dict, dict] | None:
    """A run's spec and report ({} before it has one), or None when the run cannot be read (a summary is then
    left out rather than the whole list failing)."""
    try:
        with store.open_run(run_id) as run:
            return run.read_spec(), run.read_report() or {}
    except WorkbenchError:
        return None


def id_item(entry: dict) -> QTableWidgetItem:
    """The run id cell: the id in Qt.UserRole, the folder and the run's last message as its tooltip."""
    item = QTableWidgetItem(entry["id"])
    item.setData(Qt.UserRole, entry["id"])
    item.setToolTip(f"{entry['run_dir']}\n{entry.get('message') or ''}".strip())
    return item


def status_item(entry: dict) -> QTableWidgetItem:
    item = QTableWidgetItem(entry["status"])
    item.setForeground(QColor(state_colour(entry["status"])))
    return item


def set_rows(table: QTableWidget, rows: list[list[QTableWidgetItem]]) -> None:
    """Replace the table's rows without a selection signal per cell (the caller re-selects afterwards)."""
    table.blockSignals(True)
    table.setRowCount(len(rows))
    for row, items in enumerate(rows):
        for column, item in enumerate(items):
            table.setItem(row, column, item)
    table.blockSignals(False)


def selected_run_id(table: QTableWidget) -> str | None:
    """The selected run; of several selected rows (Ctrl+click), the one clicked last."""
    rows = table.selectionModel().selectedRows()
    if not rows:
        return None
    current = table.currentRow()
    row = current if any(index.row() == current for index in rows) else rows[0].row()
    item = table.item(row, 0)
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
