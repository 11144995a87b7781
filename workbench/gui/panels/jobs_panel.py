"""The jobs list: every job this window started, with live progress, state, cancel, and a force stop for a
job that does not answer its cancel (a hung model): that one restarts the worker."""

from __future__ import annotations

import time

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt, Signal
from PySide6.QtGui import QColor
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
from workbench.gui.theme import state_colour

COLUMNS = ("Task", "State", "Progress", "Elapsed", "Details")
# How long a cancel may go unanswered before the row offers "Force stop". A training step is well under
# a second, so ten seconds without reaching a step boundary means the job's own code is stuck.
CANCEL_GRACE_S = 10.0


def _elapsed(record: JobRecord) -> str:
    seconds = (record.finished or time.time()) - record.submitted
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


class JobsItemModel(QAbstractTableModel):
    def __init__(self, parent=None):
        super().__init__(parent)
        self._records: list[JobRecord] = []
        self._rows: dict[str, int] = {}
        self._cancel_requested: dict[str, float] = {}  # job id -> monotonic time of the first cancel
        self.cancel_grace_s = CANCEL_GRACE_S

    def note_cancel_requested(self, job_id: str) -> None:
        self._cancel_requested.setdefault(job_id, time.monotonic())
        self._changed(job_id)

    def cancel_pending_s(self, record: JobRecord) -> float | None:
        """Seconds since this still-active job was asked to cancel, or None."""
        since = self._cancel_requested.get(record.job_id)
        return None if since is None or not record.active else time.monotonic() - since

    def needs_force_stop(self, record: JobRecord) -> bool:
        pending = self.cancel_pending_s(record)
        return pending is not None and pending >= self.cancel_grace_s

    def _changed(self, job_id: str) -> None:
        row = self._rows.get(job_id)
        if row is not None:
            self.dataChanged.emit(self.index(row, 0), self.index(row, len(COLUMNS) - 1))

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
                pending = self.cancel_pending_s(record)
                if pending is not None and pending >= self.cancel_grace_s:
                    return (
                        f"not responding to cancel for {pending:.0f} s (stuck in the model's code?): "
                        "Force stop restarts the worker; the run can be resumed"
                    )
                if pending is not None:
                    return f"stopping at its next step (cancel requested {pending:.0f} s ago)"
                return record.error_message or record.text or (record.run_dir or "")
        if role == Qt.UserRole and column == "Progress":
            return record.fraction
        if role == Qt.ForegroundRole and column == "State":
            return QColor(state_colour(record.state))
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
            # Details too: it counts the seconds a cancel has gone unanswered.
            self.dataChanged.emit(
                self.index(min(active), COLUMNS.index("Elapsed")),
                self.index(max(active), COLUMNS.index("Details")),
            )


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
        # Qt 6 has no orientation field: without State_Horizontal a style fills the bar from the bottom up, by
        # height (56 % drew as a full-width band over the lower half).
        bar.state = option.state | QStyle.StateFlag.State_Horizontal
        (option.widget.style() if option.widget else QApplication.style()).drawControl(
            QStyle.CE_ProgressBar, bar, painter
        )


class JobsPanel(QWidget):
    cancel_requested = Signal(str)  # job_id
    force_stop_requested = Signal(str)  # job_id: the window confirms, then restarts the worker
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
        # Ctrl+. is the Jobs menu's action (window-wide); see WindowChrome._build_task_menus.
        self.cancel_button.setToolTip(
            "Stop the selected job at its next step, or the running job when none "
            "is selected (the newest, if several run) (Ctrl+.)"
        )
        self.cancel_button.setEnabled(False)
        self.force_button = QPushButton("Force stop", self)
        self.force_button.setToolTip(
            f"Offered when a cancelled job has not stopped within {CANCEL_GRACE_S:.0f} s (a model stuck in "
            "its own code). Restarts the worker: the run is marked cancelled and can be resumed from its "
            "last checkpoint; other jobs of the worker stop too."
        )
        self.force_button.setVisible(False)
        self.clear_button = QPushButton("Clear finished", self)
        self.clear_button.setToolTip(
            "Remove finished, failed and cancelled jobs from this list (their runs stay)"
        )
        buttons = QHBoxLayout()
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(self.force_button)
        buttons.addWidget(self.clear_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(buttons)
        layout.addWidget(self.view)
        self.cancel_button.clicked.connect(self._on_cancel_clicked)
        self.force_button.clicked.connect(self._on_force_clicked)
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

    def note_cancel_requested(self, job_id: str) -> None:
        """A cancel went out for this job (from here or another panel): start its grace period."""
        self.model.note_cancel_requested(job_id)
        self._update_buttons()

    def stuck_records(self) -> list[JobRecord]:
        return [r for r in self.model.records() if self.model.needs_force_stop(r)]

    def cancel_target(self) -> JobRecord | None:
        """The job Cancel stops: the selected one if it is active, else the newest active job (newest on top),
        so the button works while a job runs without first selecting its row."""
        record = self.selected_record()
        if record is not None and record.active:
            return record
        return next((r for r in self.model.records() if r.active), None)

    def _update_buttons(self, *args) -> None:
        record = self.selected_record()
        self.cancel_button.setEnabled(self.cancel_target() is not None)
        stuck = self.stuck_records()
        # The selected stuck job, or the only stuck one: the button must not depend on a lucky selection.
        stuck_ids = {r.job_id for r in stuck}
        self._force_target = (
            record
            if record is not None and record.job_id in stuck_ids
            else stuck[0]
            if len(stuck) == 1
            else None
        )
        self.force_button.setVisible(bool(stuck))
        self.force_button.setEnabled(self._force_target is not None)

    def refresh(self) -> None:
        """Called every second by the window: elapsed times, and whether a force stop is due."""
        self.model.refresh_elapsed()
        self._update_buttons()

    def _on_cancel_clicked(self) -> None:
        self.cancel_current()

    def cancel_current(self) -> bool:
        """Cancel the selected job, or the newest active one when none is selected (the button and Ctrl+.)."""
        record = self.cancel_target()
        if record is None:
            return False
        self.cancel_requested.emit(record.job_id)
        return True

    def _on_force_clicked(self) -> None:
        target = getattr(self, "_force_target", None)
        if target is not None:
            self.force_stop_requested.emit(target.job_id)

    def _on_view_double_clicked(self, index: QModelIndex) -> None:
        record = self.model.record(index.row())
        if record.run_dir:
            self.open_run_requested.emit(record.run_dir)
