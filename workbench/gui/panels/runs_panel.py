"""The runs browser: every run in the workspace with its status, spec and report, read from the run store."""

from __future__ import annotations

import json

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QSortFilterProxyModel, Qt, QUrl, Signal
from PySide6.QtGui import QColor, QDesktopServices, QFont, QKeySequence
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from workbench.errors import WorkbenchError
from workbench.gui.theme import JOB_STATE_COLOURS
from workbench.runs import RunStore

COLUMNS = (("id", "Run"), ("kind", "Kind"), ("task", "Task"), ("status", "Status"), ("created", "Created"))


def confirm_delete_run(parent, run_id: str) -> bool:
    """Ask before deleting a run folder; the one place that wording lives."""
    answer = QMessageBox.question(parent, "Delete run", f"Delete run {run_id} and everything in its folder "
                                  "(checkpoints too)?\nThis cannot be undone.", QMessageBox.Yes | QMessageBox.No,
                                  QMessageBox.No)
    return answer == QMessageBox.Yes


def delete_run_action(parent, store: RunStore, run_id: str) -> bool:
    """The one delete-run action of every panel: ask, delete, and say plainly why not (a live run is refused)."""
    if not confirm_delete_run(parent, run_id):
        return False
    try:
        store.delete_run(run_id)
    except WorkbenchError as exc:
        QMessageBox.warning(parent, "Run not deleted", str(exc))
        return False
    return True


class RunsItemModel(QAbstractTableModel):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.runs: list[dict] = []

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802 (Qt override)
        return 0 if parent.isValid() else len(self.runs)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.DisplayRole):  # noqa: N802
        if orientation == Qt.Horizontal and role == Qt.DisplayRole:
            return COLUMNS[section][1]
        return None

    def data(self, index, role=Qt.DisplayRole):
        if not index.isValid():
            return None
        run, key = self.runs[index.row()], COLUMNS[index.column()][0]
        if role == Qt.DisplayRole:
            value = run.get(key) or ""
            return value.replace("T", " ")[:19] if key == "created" else str(value)
        if role == Qt.ForegroundRole and key == "status":
            return QColor(JOB_STATE_COLOURS.get(run.get("status"), "#888888"))
        if role == Qt.ToolTipRole:
            return f"{run.get('run_dir')}\n{run.get('message') or ''}".strip()
        return None

    def set_runs(self, runs: list[dict]) -> None:
        self.beginResetModel()
        self.runs = runs
        self.endResetModel()


class RunsPanel(QWidget):
    status_message = Signal(str)

    def __init__(self, workspace, parent=None):
        super().__init__(parent)
        self.store = RunStore(workspace)
        self.model = RunsItemModel(self)
        self.proxy = QSortFilterProxyModel(self)
        self.proxy.setSourceModel(self.model)
        self.proxy.setFilterCaseSensitivity(Qt.CaseInsensitive)
        self.proxy.setFilterKeyColumn(-1)  # match any column
        self.filter_edit = QLineEdit(self)
        self.filter_edit.setPlaceholderText("Filter runs by id, kind, task or status…")
        self.filter_edit.setClearButtonEnabled(True)
        self.filter_edit.textChanged.connect(self.proxy.setFilterFixedString)
        self.refresh_button = QPushButton("Refresh", self)
        self.refresh_button.setToolTip("Read the workspace again (F5)")
        self.refresh_button.setShortcut(QKeySequence("F5"))
        self.open_button = QPushButton("Open folder", self)
        self.open_button.setToolTip("Open the selected run's folder in the file manager")
        self.delete_button = QPushButton("Delete…", self)
        self.delete_button.setToolTip("Delete the selected run's folder, after asking")
        self.view = QTableView(self)
        self.view.setModel(self.proxy)
        self.view.setSortingEnabled(True)
        self.view.sortByColumn(4, Qt.DescendingOrder)
        self.view.setSelectionBehavior(QTableView.SelectRows)
        self.view.setSelectionMode(QTableView.SingleSelection)
        self.view.verticalHeader().hide()
        self.view.setAlternatingRowColors(True)
        self.view.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeToContents)
        self.view.horizontalHeader().setStretchLastSection(True)
        self.details = QPlainTextEdit(self)
        self.details.setReadOnly(True)
        self.details.setFont(QFont("monospace"))
        self.details.setPlaceholderText("Select a run to see its spec, status, last metrics and report.")
        self.empty_label = QLabel(self)
        self.empty_label.setWordWrap(True)
        bar = QHBoxLayout()
        bar.addWidget(self.filter_edit, 1)
        for button in (self.refresh_button, self.open_button, self.delete_button):
            bar.addWidget(button)
        left = QWidget(self)
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addLayout(bar)
        left_layout.addWidget(self.view)
        left_layout.addWidget(self.empty_label)
        splitter = QSplitter(Qt.Horizontal, self)
        splitter.addWidget(left)
        splitter.addWidget(self.details)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(splitter)
        self.refresh_button.clicked.connect(self.refresh)
        self.open_button.clicked.connect(self._on_open_clicked)
        self.delete_button.clicked.connect(self._on_delete_clicked)
        self.view.selectionModel().selectionChanged.connect(self._on_selection_changed)
        self.refresh()

    def set_workspace(self, workspace) -> None:
        self.store = RunStore(workspace)
        self.refresh()

    def refresh(self) -> None:
        selected = self.selected_run_id()
        self.model.set_runs(self.store.list_runs())
        count = len(self.model.runs)
        self.empty_label.setVisible(count == 0)
        self.empty_label.setText(f"No runs yet in {self.store.workspace}. Jobs you start (or run with the "
                                 "`workbench` command and the same workspace) appear here.")
        if selected:
            self.select_run(selected)
        self._update_buttons()

    def selected_run_id(self) -> str | None:
        rows = self.view.selectionModel().selectedRows()
        if not rows:
            return None
        return self.model.runs[self.proxy.mapToSource(rows[0]).row()]["id"]

    def select_run(self, run_id: str) -> bool:
        for row, run in enumerate(self.model.runs):
            if run["id"] == run_id:
                self.view.selectRow(self.proxy.mapFromSource(self.model.index(row, 0)).row())
                return True
        return False

    def _update_buttons(self) -> None:
        has = self.selected_run_id() is not None
        self.open_button.setEnabled(has)
        self.delete_button.setEnabled(has)

    def _on_selection_changed(self, *args) -> None:
        self._update_buttons()
        run_id = self.selected_run_id()
        if run_id is None:
            self.details.clear()
            return
        try:
            with self.store.open_run(run_id) as run:
                summary = run.summary()
        except WorkbenchError as exc:
            self.details.setPlainText(f"This run cannot be read: {exc}")
            return
        self.details.setPlainText(self.describe(summary))

    @staticmethod
    def describe(summary: dict) -> str:
        lines = [f"Run      {summary['id']}", f"Status   {summary['status']}  {summary.get('message') or ''}".rstrip(),
                 f"Task     {summary['task']}", f"Folder   {summary['run_dir']}", ""]
        if summary.get("last_metrics"):
            lines.append("Last metrics")
            for name, (step, value) in sorted(summary["last_metrics"].items()):
                lines.append(f"  {name:<24} {value:.6g}  (step {step})")
            lines.append("")
        lines += ["Spec", json.dumps(summary.get("spec") or {}, indent=2), ""]
        if summary.get("report") is not None:
            lines += ["Report", json.dumps(summary["report"], indent=2)]
        return "\n".join(lines)

    def _on_open_clicked(self) -> None:
        run_id = self.selected_run_id()
        if run_id:
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(self.store.resolve(run_id))))

    def _on_delete_clicked(self) -> None:
        run_id = self.selected_run_id()
        if not run_id:
            return
        if delete_run_action(self, self.store, run_id):
            self.status_message.emit(f"Deleted run {run_id}")
        self.refresh()
