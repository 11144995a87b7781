"""The jobs list: every job this window started, with live progress, state, and cancel."""

from __future__ import annotations

import time

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt, Signal
from PySide6.QtGui import QColor, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QHBoxLayout,
    QHeaderView,
    QPushButton,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionProgressBar,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from workbench.client import JobRecord
from workbench.gui.theme import JOB_STATE_COLOURS

COLUMNS = ("Task", "State", "Progress", "Elapsed", "Details")


def _elapsed(record: JobRecord) -> str:
    seconds = (record.finished or time.time()) - record.submitted
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


class JobsItemModel(QAbstractTableModel):
    def __init__(self, parent=None):
        super().__init__(parent)
        self._records: list[JobRecord] = []
        self._rows: dict[str, int] = {}

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802 (Qt override)
        return 0 if parent.isValid() else len(self._records)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.DisplayRole):  # noqa: N802
        if orientation == Qt.Horizontal and role == Qt.DisplayRole:
            return COLUMNS[section]
        return None

    def record(self, row: int) -> JobRecord:
        return self._records[row]

    def records(self) -> list[JobRecord]:
        return list(self._records)

    def data(self, index, role=Qt.DisplayRole):
        if not index.isValid():
            return None
        record, column = self._records[index.row()], COLUMNS[index.column()]
        if role == Qt.DisplayRole:
            if column == "Task":
                return record.task
            if column == "State":
                return record.state
            if column == "Progress":
                return "" if record.fraction is None else f"{record.fraction:.0%}"
            if column == "Elapsed":
                return _elapsed(record)
            if column == "Details":
                return record.error_message or record.text or (record.run_dir or "")
        if role == Qt.UserRole and column == "Progress":
            return record.fraction
        if role == Qt.ForegroundRole and column == "State":
            return QColor(JOB_STATE_COLOURS.get(record.state, "#888888"))
        if role == Qt.ToolTipRole:
            lines = [f"{record.task}: {record.state}", f"job id {record.job_id}"]
            if record.run_dir:
                lines.append(f"run folder {record.run_dir}")
            if record.error:
                lines.append(f"{record.error.get('type', 'Error')}: {record.error_message}")
            return "\n".join(lines)
        return None

    def upsert(self, record: JobRecord) -> None:
        row = self._rows.get(record.job_id)
        if row is None:
            self.beginInsertRows(QModelIndex(), 0, 0)  # newest on top
            self._records.insert(0, record)
            self._rows = {r.job_id: i for i, r in enumerate(self._records)}
            self.endInsertRows()
            return
        self._records[row] = record
        self.dataChanged.emit(self.index(row, 0), self.index(row, len(COLUMNS) - 1))

    def clear_finished(self) -> None:
        self.beginResetModel()
        self._records = [r for r in self._records if r.active]
        self._rows = {r.job_id: i for i, r in enumerate(self._records)}
        self.endResetModel()

    def refresh_elapsed(self) -> None:
        active = [i for i, r in enumerate(self._records) if r.active]
        if active:
            col = COLUMNS.index("Elapsed")
            self.dataChanged.emit(self.index(min(active), col), self.index(max(active), col))


class ProgressDelegate(QStyledItemDelegate):
    """Draws a real progress bar in the Progress column; busy (indeterminate) when no fraction is known."""

    def paint(self, painter, option, index: QModelIndex | QPersistentModelIndex) -> None:
        fraction = index.data(Qt.UserRole)
        bar = QStyleOptionProgressBar()
        bar.rect = option.rect.adjusted(4, 4, -4, -4)
        bar.minimum, bar.maximum = 0, 1000
        bar.progress = int((fraction or 0.0) * 1000)
        bar.text = "" if fraction is None else f"{fraction:.0%}"
        bar.textVisible = fraction is not None
        bar.state = option.state
        (option.widget.style() if option.widget else QApplication.style()).drawControl(
            QStyle.CE_ProgressBar, bar, painter)


class JobsPanel(QWidget):
    cancel_requested = Signal(str)  # job_id
    open_run_requested = Signal(str)  # run_dir

    def __init__(self, parent=None):
        super().__init__(parent)
        self.model = JobsItemModel(self)
        self.view = QTableView(self)
        self.view.setModel(self.model)
        self.view.setItemDelegateForColumn(COLUMNS.index("Progress"), ProgressDelegate(self.view))
        self.view.setSelectionBehavior(QTableView.SelectRows)
        self.view.setSelectionMode(QTableView.SingleSelection)
        self.view.verticalHeader().hide()
        self.view.setAlternatingRowColors(True)
        header = self.view.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.Interactive)
        header.setStretchLastSection(True)
        for column, width in zip(COLUMNS, (130, 80, 140, 70)):
            self.view.setColumnWidth(COLUMNS.index(column), width)
        self.cancel_button = QPushButton("Cancel job", self)
        self.cancel_button.setToolTip("Stop the selected job at its next step (Ctrl+.)")
        self.cancel_button.setShortcut(QKeySequence("Ctrl+."))
        self.cancel_button.setEnabled(False)
        self.clear_button = QPushButton("Clear finished", self)
        self.clear_button.setToolTip("Remove finished, failed and cancelled jobs from this list (their runs stay)")
        buttons = QHBoxLayout()
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(self.clear_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(buttons)
        layout.addWidget(self.view)
        self.cancel_button.clicked.connect(self._on_cancel_clicked)
        self.clear_button.clicked.connect(self.model.clear_finished)
        self.view.selectionModel().selectionChanged.connect(self._update_buttons)
        self.model.dataChanged.connect(self._update_buttons)
        self.view.doubleClicked.connect(self._on_view_double_clicked)

    def update_job(self, record: JobRecord) -> None:
        self.model.upsert(record)
        self._update_buttons()

    def selected_record(self) -> JobRecord | None:
        rows = self.view.selectionModel().selectedRows()
        return self.model.record(rows[0].row()) if rows else None

    def _update_buttons(self, *args) -> None:
        record = self.selected_record()
        self.cancel_button.setEnabled(record is not None and record.active)

    def _on_cancel_clicked(self) -> None:
        record = self.selected_record()
        if record is not None and record.active:
            self.cancel_requested.emit(record.job_id)

    def _on_view_double_clicked(self, index: QModelIndex) -> None:
        record = self.model.record(index.row())
        if record.run_dir:
            self.open_run_requested.emit(record.run_dir)
