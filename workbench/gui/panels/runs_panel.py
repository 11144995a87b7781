"""The runs browser: every run in the workspace with its status, spec and report, read from the run store.

It refreshes itself while shown, reads runs read-only, and offers each run's actions (open in its tab,
resume, show its folder, delete) from buttons, a double-click and a context menu.
"""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QSortFilterProxyModel, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMenu,
    QMessageBox,
    QPushButton,
    QSplitter,
    QTableView,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from workbench.errors import WorkbenchError
from workbench.gui.panels.run_details import describe_run_html
from workbench.gui.run_identity import RunIdentities
from workbench.gui.theme import state_colour
from workbench.gui.widgets.open_folder import open_folder
from workbench.runs import RunStore

RESUMABLE = ("cancelled", "failed", "interrupted")
LIVE_REFRESH_MS = 2000  # while the tab is shown: runs started elsewhere (the CLI) appear, statuses move on

# Model, dataset and key metric say which run is which without opening it (ids alone told runs apart poorly).
COLUMNS = (
    ("id", "Run"),
    ("kind", "Kind"),
    ("task", "Task"),
    ("status", "Status"),
    ("model", "Model"),
    ("dataset", "Dataset"),
    ("metric", "Key metric"),
    ("created", "Created"),
)
CREATED_COLUMN = [key for key, _title in COLUMNS].index("created")


def confirm_delete_run(parent, run_id: str) -> bool:
    """Ask before deleting a run folder; the one place that wording lives."""
    answer = QMessageBox.question(
        parent,
        "Delete run",
        f"Delete run {run_id} and everything in its folder (checkpoints too)?\nThis cannot be undone.",
        QMessageBox.Yes | QMessageBox.No,
        QMessageBox.No,
    )
    return answer == QMessageBox.Yes


def delete_run_action(parent, store: RunStore, run_id: str) -> bool:
    """The one delete-run action of every panel: ask, delete, and say plainly why not (a live run is
    refused)."""
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
            if key == "task" and run.get("learns"):
                return run["learns"]  # the task id (train.model) is the same for every training run
            value = run.get(key) or ""
            return value.replace("T", " ")[:19] if key == "created" else str(value)
        if role == Qt.ForegroundRole and key == "status":
            return QColor(state_colour(run.get("status")))
        if role == Qt.ToolTipRole:
            if key in ("model", "dataset", "metric") and run.get("identity_tooltip"):
                return run["identity_tooltip"]
            if key == "task" and run.get("learns"):
                return f"{run['learns']} · task id {run.get('task')}"
            return f"{run.get('run_dir')}\n{run.get('message') or ''}".strip()
        return None

    def set_runs(self, runs: list[dict]) -> None:
        self.beginResetModel()
        self.runs = runs
        self.endResetModel()


def _fingerprint(runs: list[dict]) -> list[tuple]:
    return [(r["id"], r.get("status"), r.get("updated"), r.get("message")) for r in runs]


class RunsPanel(QWidget):
    status_message = Signal(str)
    open_requested = Signal(str, str)  # run_dir, task: show the run in the tab that owns its task
    resume_requested = Signal(str, dict)  # run_dir, spec
    graph_requested = Signal(str)  # run id: its model graph in the Graph tab

    def __init__(self, workspace, parent=None):
        super().__init__(parent)
        self.store = RunStore(workspace)
        self.model = RunsItemModel(self)
        self.identities = RunIdentities(self.store)
        self.proxy = QSortFilterProxyModel(self)
        self.proxy.setSourceModel(self.model)
        self.proxy.setFilterCaseSensitivity(Qt.CaseInsensitive)
        self.proxy.setFilterKeyColumn(-1)  # match any column
        self.filter_edit = QLineEdit(self)
        self.filter_edit.setPlaceholderText("Filter runs by id, kind, task, status, model or dataset…")
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
        self.view.sortByColumn(CREATED_COLUMN, Qt.DescendingOrder)
        self.view.setSelectionBehavior(QTableView.SelectRows)
        self.view.setSelectionMode(QTableView.SingleSelection)
        self.view.verticalHeader().hide()
        self.view.setAlternatingRowColors(True)
        self.view.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeToContents)
        self.view.horizontalHeader().setStretchLastSection(True)
        self.details = QTextBrowser(self)
        self.details.setOpenLinks(False)
        self.details.setPlaceholderText("Select a run to see its spec, status, last metrics and report.")
        self._summary: dict | None = None
        self.view.setContextMenuPolicy(Qt.CustomContextMenu)
        self.view.customContextMenuRequested.connect(self._on_view_context_menu)
        self.view.doubleClicked.connect(lambda *_: self._open_selected())
        self.resume_button = QPushButton("Resume", self)
        self.resume_button.setToolTip(
            "Continue the selected stopped, failed or interrupted training run from its last checkpoint"
        )
        self.resume_button.clicked.connect(self._on_resume_clicked)
        self._live_timer = QTimer(self)
        self._live_timer.setInterval(LIVE_REFRESH_MS)
        self._live_timer.timeout.connect(self.refresh_if_changed)
        self.empty_label = QLabel(self)
        self.empty_label.setWordWrap(True)
        bar = QHBoxLayout()
        bar.addWidget(self.filter_edit, 1)
        for button in (self.refresh_button, self.resume_button, self.open_button, self.delete_button):
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
        self.identities = RunIdentities(self.store)
        self.refresh()

    # -- live refresh: only while shown, and only a real change resets the view --------------------------
    def showEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().showEvent(event)
        self.refresh_if_changed()
        self._live_timer.start()

    def hideEvent(self, event) -> None:  # noqa: N802 (Qt override)
        self._live_timer.stop()
        super().hideEvent(event)

    def refresh_if_changed(self) -> bool:
        runs = self.store.list_runs()
        if _fingerprint(runs) == _fingerprint(self.model.runs):
            return False
        self._apply(runs)
        return True

    def refresh(self) -> None:
        self._apply(self.store.list_runs())

    def _apply(self, runs: list[dict]) -> None:
        selected = self.selected_run_id()
        for run in runs:  # read once per change of a run (the identities are cached by its updated time)
            identity = self.identities.of(run)
            run.update(
                model=identity.model,
                dataset=identity.dataset,
                metric=identity.metric,
                identity_tooltip=identity.tooltip,
                learns=identity.learns,
            )
        self.model.set_runs(runs)
        count = len(self.model.runs)
        self.empty_label.setVisible(count == 0)
        self.empty_label.setText(
            f"No runs yet in {self.store.workspace}. Jobs you start (or run with the "
            "`workbench` command and the same workspace) appear here."
        )
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

    def selected_entry(self) -> dict | None:
        run_id = self.selected_run_id()
        return next((r for r in self.model.runs if r["id"] == run_id), None) if run_id else None

    def _update_buttons(self) -> None:
        entry = self.selected_entry()
        self.open_button.setEnabled(entry is not None)
        self.delete_button.setEnabled(entry is not None)
        self.resume_button.setEnabled(self._resumable(entry))

    @staticmethod
    def _resumable(entry: dict | None) -> bool:
        if not (
            bool(entry)
            and (entry.get("task") or "").startswith("train.")
            and entry.get("status") in RESUMABLE
        ):
            return False
        # A run that failed before writing a checkpoint (a model file that does not import) has nothing to
        # resume from: the Training tab offers Edit and retry for it instead.
        checkpoints = Path(entry["run_dir"]) / "checkpoints"
        return entry["status"] != "failed" or (checkpoints.is_dir() and any(checkpoints.glob("*.pt")))

    def _on_selection_changed(self, *args) -> None:
        self._update_buttons()
        run_id = self.selected_run_id()
        self._summary = None
        if run_id is None:
            self.details.clear()
            return
        try:
            with self.store.open_run(run_id) as run:
                self._summary = run.summary()
        except WorkbenchError as exc:
            self.details.setHtml(f"<p><b>This run cannot be read.</b></p><p>{exc}</p>")
            return
        self.details.setHtml(describe_run_html(self._summary))

    @staticmethod
    def describe(summary: dict) -> str:
        """The details pane's text for a summary (HTML): kept for callers that show a run elsewhere."""
        return describe_run_html(summary)

    # -- actions -------------------------------------------------------------------------------------
    def _open_selected(self) -> None:
        entry = self.selected_entry()
        if entry is not None:
            self.open_requested.emit(entry["run_dir"], entry.get("task") or "")

    def _on_open_clicked(self) -> None:
        entry = self.selected_entry()
        if entry is not None:
            open_folder(self, entry["run_dir"])

    def _on_resume_clicked(self) -> None:
        entry = self.selected_entry()
        if not self._resumable(entry):
            return
        try:
            with self.store.open_run(entry["id"]) as run:
                spec = run.read_spec()
        except WorkbenchError as exc:
            QMessageBox.warning(self, "Cannot resume", str(exc))
            return
        self.resume_requested.emit(entry["run_dir"], spec)

    def _on_delete_clicked(self) -> None:
        run_id = self.selected_run_id()
        if not run_id:
            return
        if delete_run_action(self, self.store, run_id):
            self.status_message.emit(f"Deleted run {run_id}")
        self.refresh()

    def _copy_summary(self) -> None:
        if self._summary is not None:
            QGuiApplication.clipboard().setText(json.dumps(self._summary, indent=2, default=str))
            self.status_message.emit("Copied the run's summary as JSON")

    def context_menu(self) -> QMenu:
        """The selected run's actions; built fresh each time, so tests and the menu agree on what is there."""
        entry = self.selected_entry()
        menu = QMenu(self)
        opened = menu.addAction("Open in its tab", self._open_selected)
        opened.setEnabled(entry is not None and (entry.get("task") or "").startswith("train."))
        resume = menu.addAction("Resume from last checkpoint", self._on_resume_clicked)
        resume.setEnabled(self._resumable(entry))
        graph = menu.addAction("Show graph", lambda: self.graph_requested.emit(entry["id"]))
        graph.setEnabled(entry is not None and (entry.get("task") or "").startswith("train."))
        menu.addSeparator()
        menu.addAction("Show folder", self._on_open_clicked).setEnabled(entry is not None)
        menu.addAction(
            "Copy folder path", lambda: QGuiApplication.clipboard().setText(entry["run_dir"])
        ).setEnabled(entry is not None)
        menu.addAction("Copy summary as JSON", self._copy_summary).setEnabled(self._summary is not None)
        menu.addSeparator()
        menu.addAction("Delete…", self._on_delete_clicked).setEnabled(entry is not None)
        return menu

    def _on_view_context_menu(self, pos) -> None:
        index = self.view.indexAt(pos)
        if index.isValid():
            self.view.selectRow(index.row())
        self.context_menu().exec(self.view.viewport().mapToGlobal(pos))
