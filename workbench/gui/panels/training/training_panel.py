"""The Training tab: start runs with the wizard, watch live curves, stop and resume, overlay and compare runs,
and read a finished run's evaluation and profile.

Live runs stream their metrics over the protocol; stored runs are read from their metrics.db. Either way the
curves hold every point; only the plot down-samples.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QCheckBox,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from workbench.client import JobRecord
from workbench.errors import WorkbenchError
from workbench.gui.panels.run_tab import RunTab
from workbench.gui.panels.training.curves import CurvesWidget
from workbench.gui.panels.training.evaluation import TASK_VIEWS, EvaluationView, load_evaluation
from workbench.gui.panels.training.layers_view import LayersView
from workbench.gui.panels.training.profiler import ProfilerView
from workbench.gui.run_identity import format_metric, short_model
from workbench.gui.widgets import run_table
from workbench.gui.widgets.empty_state import EmptyState
from workbench.gui.widgets.spec_form import ERROR_COLOUR, canonical
from workbench.protocol import Message, ProtocolError
from workbench.protocol.metrics import decode_metrics
from workbench.results import TrainResult, dig
from workbench.task_ids import TRAIN_TASK

# The first-run demo: about ten seconds of training on two CPU cores, to ~97 % test accuracy.
QUICK_START_SPEC = {"dataset": {"name": "digits"}, "model": {"name": "cnn"}, "epochs": 5}
QUICK_START_LABEL = "Train a CNN on the bundled digits (about 10 s)"
QUICK_START_SUMMARY = "model cnn · dataset digits · 5 epochs · the device picked in the toolbar"
RESUME_TIP = "Continue the selected stopped run from its last checkpoint"
RETRY_TIP = (
    "The selected run failed before it wrote a checkpoint, so there is nothing to resume: open the wizard "
    "on its spec to fix what failed (a model file, a setting) and start it again as a new run"
)
RUN_COLUMNS = ("Show", "Run", "Status", "Model · dataset", "Epochs", "Val metric")
VAL_METRIC_TIP = (
    "The last validation accuracy, or for another task its monitor (MAE, mIoU, mean AP, or a "
    "LightningModule's own)"
)


def _flatten(data: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and key != "normalize":
            flat.update(_flatten(value, path + "."))
        else:
            flat[path] = value
    return flat


# what workbench.worker.predict answers
TRY_IT_TASKS = ("classification", "multilabel", "regression", "segmentation")
TRY_IT_TIP = (
    "Try the selected finished run's model on an image file (drop one) or a sample of its dataset: its "
    "most likely classes with their probabilities, or its predicted mask over the image"
)


def _monitor_text(report: dict, last: dict) -> str:
    """ "MAE 0.5237", "mIoU 92.4 %": a finished run's monitor, its last validation value (else its best)."""
    monitor = report.get("monitor") if isinstance(report.get("monitor"), dict) else {}
    name = str(monitor.get("name") or "")
    if not name:
        return ""
    point = last.get(f"val/{name}")
    text = format_metric(name, point[1] if point else monitor.get("best_val"))
    label = str(monitor.get("label") or name)
    return f"{label}{text[len(name) :]}" if text.startswith(name) else f"{label} {text}" if text else ""


def _has_checkpoint(entry: dict) -> bool:
    checkpoints = Path(entry["run_dir"]) / "checkpoints"
    return checkpoints.is_dir() and any(checkpoints.glob("*.pt"))


class TrainingPanel(RunTab):
    TASKS = (TRAIN_TASK,)
    EARLY_TYPES = ("metrics", "artifact")  # a job's first events can overtake the record that names its run
    new_run_requested = Signal()
    quick_start_requested = Signal()  # the first-run button: a CNN on the bundled digits
    resume_requested = Signal(str, dict)  # run_dir, spec
    train_again_requested = Signal(dict)  # spec: the wizard opens on it ("Train again with changes…")
    graph_requested = Signal(str)  # run id: show the run's model graph in the Graph tab
    layers_graph_requested = Signal(str, str)  # run id, overlay: its layer statistics painted on its graph
    quantize_requested = Signal(str)  # run id: open the quantization wizard on the run
    try_it_requested = Signal(str)  # run id: Try it, the run's model on an image file or a dataset sample
    sample_requested = Signal(dict, str, int, str)  # dataset spec, split, index, a note (the prediction)

    def __init__(self, workspace, queries, parent=None):
        # live: job id -> the run id it trains (the curves hold its points)
        super().__init__(workspace, parent)
        self.queries = queries
        self._build()
        self.refresh()

    # -- construction ----------------------------------------------------------------------------
    def _build(self) -> None:
        buttons = self._build_buttons()
        self._build_runs_table()
        details = self._build_details()
        self._build_empty_state()
        # 440: room for the full run ids and the short model names.
        self.build_frame(buttons, self.table, details, self.empty_state, (440, 900))
        self._connect()
        self._update_buttons()

    def _build_buttons(self) -> tuple[QPushButton, ...]:
        """The buttons above the runs, in the order they are laid out, and the specs' Only differences box."""
        self.new_button = QPushButton("New training…")
        # Ctrl+T lives on the Training menu's action, so it works from every tab (a button's own shortcut
        # only fires while the button is visible, and the two together would be an ambiguous shortcut).
        self.new_button.setToolTip("Open the training wizard (Ctrl+T)")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip(
            "Stop the selected run at its next step; a checkpoint is written so it can resume"
        )
        self.resume_button = QPushButton("Resume")
        self.resume_button.setToolTip(RESUME_TIP)
        self.open_button = QPushButton("Open folder")
        self.again_button = QPushButton("Train again…")
        self.again_button.setToolTip(
            "Open the wizard on the selected run's spec, to change what you like and start a new run"
        )
        self.graph_button = QPushButton("Graph")
        self.graph_button.setToolTip(
            "Show the selected run's model graph, with parameters and FLOPs per layer, in the Graph tab"
        )
        self.quantize_button = QPushButton("Quantize…")
        self.quantize_button.setToolTip("Open the quantization wizard on the selected finished run")
        self.try_it_button = QPushButton("Try it…")
        self.try_it_button.setToolTip(TRY_IT_TIP)
        self.delete_button = QPushButton("Delete…")
        self.only_differences = QCheckBox("Only differences")
        self.only_differences.setChecked(True)
        self.only_differences.setToolTip(
            "In the spec comparison, hide fields that are the same in every shown run"
        )
        buttons = (
            self.new_button,
            self.stop_button,
            self.resume_button,
            self.again_button,
            self.graph_button,
            self.quantize_button,
            self.try_it_button,
            self.open_button,
            self.delete_button,
        )
        return buttons

    def _build_runs_table(self) -> None:
        self.table = run_table.make_run_table(RUN_COLUMNS)
        header = self.table.horizontalHeader()
        # The id is sized to its text and never wrapped (a stretched Run column lost to a long model name, and
        # wrapped or truncated ids after a relaunch). The model is shown last, taking what is left, elided in
        # the middle; moved on screen only, so the columns keep their indexes.
        self.table.setWordWrap(False)
        self.table.setTextElideMode(Qt.ElideMiddle)
        for column in (0, 1, 2, 4, 5):
            header.setSectionResizeMode(column, QHeaderView.ResizeToContents)
        header.moveSection(3, 5)
        header.setSectionResizeMode(3, QHeaderView.Interactive)
        header.resizeSection(3, 110)
        header.setStretchLastSection(True)
        self.table.horizontalHeaderItem(5).setToolTip(VAL_METRIC_TIP)
        # Ctrl+click and Shift+click tick and untick runs: the Show ticks are the one selection that overlays
        # curves and compares specs; a plain click selects the run whose details the other tabs show.
        self.table.setSelectionMode(QTableWidget.ExtendedSelection)
        self.table.setToolTip(
            "Tick runs (or Ctrl+click them) to overlay their curves and compare their specs"
        )
        self._click_modifiers = Qt.NoModifier
        self.table.viewport().installEventFilter(self)

    def _build_details(self) -> QWidget:
        """The selected runs' panes (curves, evaluation, layers, profiler, specs) under the failure line."""
        self.curves = CurvesWidget()
        self.curves.show_new_runs = False  # a live run is drawn only while its Show box is ticked
        # The legend and readout name runs "model · dataset · id tail" from their specs.
        self.curves.spec_of = lambda run_id: dig(self.runs, run_id, "spec")
        self.evaluation = EvaluationView(self.queries)
        self.profiler = ProfilerView()
        self.layers = LayersView()
        self.layers.graph_requested.connect(self.layers_graph_requested)
        self.spec_table = QTableWidget(0, 0)
        self.spec_table.setEditTriggers(QTableWidget.NoEditTriggers)
        spec_box = QWidget()
        spec_layout = QVBoxLayout(spec_box)
        spec_layout.setContentsMargins(6, 6, 6, 6)
        spec_layout.addWidget(self.only_differences)
        spec_layout.addWidget(self.spec_table)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.curves, "Curves")
        self.tabs.addTab(self.evaluation, "Evaluation")
        self.tabs.addTab(self.layers, "Layers")
        self.tabs.setTabToolTip(
            self.tabs.count() - 1,
            "Per-layer weight, gradient and activation statistics as the "
            "run trains: a heatmap over steps and histograms per step",
        )
        self.tabs.addTab(self.profiler, "Profiler")
        self.tabs.addTab(spec_box, "Compare specs")
        # Why the selected run failed, above every pane: a run that failed before its first step has no curve,
        # evaluation or profile to show it by.
        self.failure = QLabel()
        self.failure.setWordWrap(True)
        self.failure.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.failure.setStyleSheet(f"QLabel {{ color: {ERROR_COLOUR}; padding: 4px 2px; }}")
        self.failure.hide()
        details = QWidget()
        details_layout = QVBoxLayout(details)
        details_layout.setContentsMargins(0, 0, 0, 0)
        details_layout.addWidget(self.failure)
        details_layout.addWidget(self.tabs, 1)
        return details

    def _build_empty_state(self) -> None:
        # First run: no training run exists yet, so the table and curves would only be empty boxes.
        self.quick_start_button = QPushButton(QUICK_START_LABEL)
        self.quick_start_button.setToolTip(f"Starts: {QUICK_START_SUMMARY}")
        self.quick_start_button.setMinimumHeight(40)
        self.quick_start_button.setDefault(True)
        wizard_button = QPushButton("Open the training wizard…")
        wizard_button.clicked.connect(self.new_run_requested)
        self.empty_state = EmptyState(
            "No training runs yet",
            [self.quick_start_button, wizard_button],
            width=600,
            text="Train a small CNN on scikit-learn's bundled digits (1,797 images of 8×8, ten classes): "
            "live loss and accuracy curves appear here as it trains, and the run is kept in your workspace. "
            "Or open the wizard (Ctrl+T) to pick your own dataset and model.",
        )

    def _connect(self) -> None:
        self.quick_start_button.clicked.connect(self.quick_start_requested)
        self.new_button.clicked.connect(self.new_run_requested)
        self.connect_stop(self.stop_button)
        self.resume_button.clicked.connect(self._on_resume_clicked)
        self.again_button.clicked.connect(self._on_again_clicked)
        self.graph_button.clicked.connect(lambda: self.graph_requested.emit(self.selected_run_id() or ""))
        self.quantize_button.clicked.connect(
            lambda: self.quantize_requested.emit(self.selected_run_id() or "")
        )
        self.try_it_button.clicked.connect(lambda: self.try_it_requested.emit(self.selected_run_id() or ""))
        self.open_button.clicked.connect(self.open_selected_folder)
        self.delete_button.clicked.connect(self.delete_selected)
        self.table.itemSelectionChanged.connect(self._on_table_selection_changed)
        self.table.selectionModel().selectionChanged.connect(self._on_table_rows_selected)
        self.table.itemChanged.connect(self._on_table_item_changed)
        self.only_differences.toggled.connect(self.update_spec_comparison)
        self.evaluation.sample_requested.connect(self.sample_requested)

    # -- the runs list ---------------------------------------------------------------------------
    def forget(self, run_id: str | None) -> None:
        if run_id is None:  # another workspace
            self.curves.clear_runs()
        else:
            self.curves.remove_run(run_id)

    def refresh(self) -> None:
        """Re-read the training runs of the workspace (live state wins over what the store says)."""
        shown = set(self.shown_runs())
        selected = self.selected_run_id()
        entries, _ = self.list_runs()
        run_table.set_rows(
            self.table,
            [
                [
                    self._show_item(entry["id"], entry["id"] in shown),
                    run_table.id_item(entry),
                    run_table.status_item(entry),
                    self._model_item(entry),
                    *(QTableWidgetItem(str(entry.get(key, ""))) for key in ("epochs", "val_acc")),
                ]
                for entry in entries
            ],
        )
        self._show_page()
        # the rows were set with signals blocked: draw what is ticked now
        for run_id in list(self.curves.runs):
            if run_id not in self.runs and run_id not in self.job_of_run:
                self.curves.remove_run(run_id)
            else:
                self.curves.set_shown(run_id, run_id in shown)
        if selected:
            self.select_run(selected)
        self._update_buttons()

    @staticmethod
    def _model_item(entry: dict) -> QTableWidgetItem:
        """The model's short name (Net, not file:/long/path/net.py:Net) and dataset; the full names as
        tooltip."""
        dataset = dig(entry, "spec", "dataset", "name", default="")
        model = entry.get("model", "")
        item = QTableWidgetItem(" · ".join(short_model(p) for p in (model, dataset) if p))
        item.setToolTip(
            "\n".join(
                p for p in (f"model {model}" if model else "", f"dataset {dataset}" if dataset else "") if p
            )
        )
        return item

    @staticmethod
    def _show_item(run_id: str, shown: bool) -> QTableWidgetItem:
        """The Show tick that overlays the run's curves; it holds the run id, as column 0 does in every runs
        table."""
        check = QTableWidgetItem()
        check.setFlags(Qt.ItemIsUserCheckable | Qt.ItemIsEnabled | Qt.ItemIsSelectable)
        check.setCheckState(Qt.Checked if shown else Qt.Unchecked)
        check.setData(Qt.UserRole, run_id)
        return check

    def _show_page(self) -> None:
        self.pages.setCurrentWidget(
            self.empty_state if not self.runs and not self.job_of_run else self.pages.widget(1)
        )

    @property
    def showing_empty_state(self) -> bool:
        return self.pages.currentWidget() is self.empty_state

    def run_summary(self, entry: dict) -> dict:
        summary = {}
        try:
            with self.store.open_run(entry["id"]) as run:
                spec = run.read_spec()
                report = run.read_report() or {}
                last = run.last_metrics()
        except WorkbenchError:
            return summary
        summary["model"] = dig(spec, "model", "name", default="")
        summary["spec"] = spec
        planned = spec.get("epochs", "")
        done = report.get("epochs_completed") or (int(last["epoch"][1]) if "epoch" in last else 0)
        summary["epochs"] = f"{done}/{planned}"
        # The measured task (task=auto resolved); "task" is the run's own kind (train.model).
        summary["objective_task"] = report.get("task") or spec.get("task") or ""
        if "val/acc" in last:
            summary["val_acc"] = f"{last['val/acc'][1]:.2%}"
        # regression, segmentation, multi-label: the monitor the report names, as the run logged it last
        else:
            summary["val_acc"] = _monitor_text(report, last)
        return summary

    def shown_runs(self) -> list[str]:
        ids = []
        for row in range(self.table.rowCount()):
            item = self.table.item(row, 0)
            if item is not None and item.checkState() == Qt.Checked:
                ids.append(item.data(Qt.UserRole))
        return ids

    def set_shown(self, run_id: str, shown: bool = True) -> None:
        for row in range(self.table.rowCount()):
            item = self.table.item(row, 0)
            if item.data(Qt.UserRole) == run_id:
                item.setCheckState(Qt.Checked if shown else Qt.Unchecked)

    def _on_table_item_changed(self, item: QTableWidgetItem) -> None:
        if item.column() != 0:
            return
        run_id = item.data(Qt.UserRole)
        if item.checkState() == Qt.Checked:
            self._load_stored_metrics(run_id)
            self.curves.set_shown(run_id, True)
        elif run_id in self.job_of_run:
            # still streaming: keep its points for when it is ticked again
            self.curves.set_shown(run_id, False)
        else:
            self.curves.remove_run(run_id)
        self.update_spec_comparison()

    def eventFilter(self, watched, event) -> bool:
        if watched is self.table.viewport() and event.type() == QEvent.MouseButtonPress:
            # A click on the Show box toggles the tick itself; syncing the selection too would undo it.
            on_tick = self.table.columnAt(int(event.position().x())) == 0
            self._click_modifiers = Qt.NoModifier if on_tick else event.modifiers()
        return super().eventFilter(watched, event)

    def _on_table_rows_selected(self, selected, deselected) -> None:
        """Ctrl+click or Shift+click: the rows it selects are ticked, the rows Ctrl+click deselects
        unticked."""
        modifiers, self._click_modifiers = self._click_modifiers, Qt.NoModifier
        if not modifiers & (Qt.ControlModifier | Qt.ShiftModifier):
            return
        for indexes, shown in ((deselected.indexes(), False), (selected.indexes(), True)):
            for row in sorted({index.row() for index in indexes}):
                item = self.table.item(row, 0)
                if item is not None:
                    item.setCheckState(Qt.Checked if shown else Qt.Unchecked)

    def _load_stored_metrics(self, run_id: str, force: bool = False) -> None:
        if run_id in self.curves.runs and run_id not in self.job_of_run and not force:
            return
        metrics = self.curves.run(run_id)
        try:
            with self.store.open_run(run_id) as run:
                for name, (steps, values) in run.read_metrics().items():
                    metrics.add_series(name, steps, values)
        except WorkbenchError as exc:
            self.curves.readout.setText(f"Cannot read {run_id}: {exc}")

    def _on_table_selection_changed(self) -> None:
        self._update_buttons()
        run_id = self.selected_run_id()
        if run_id is None:
            return
        if not self.shown_runs():
            # A click selects; it shows the run only when nothing is shown, and never unticks the runs a
            # person ticked to overlay (a click used to reset every Show tick).
            self.set_shown(run_id, True)
        self.show_details(run_id)

    def show_details(self, run_id: str) -> None:
        entry = self.runs.get(run_id)
        if entry is None:
            return
        evaluation = load_evaluation(entry["run_dir"])
        failed = entry.get("status") == "failed"
        if evaluation is None and entry.get("status") == "done":
            evaluation = self._evaluation_from_report(run_id)
        if evaluation is not None:
            self.evaluation.show_evaluation(evaluation, dig(entry, "spec", "dataset", default={}), run_id)
        elif entry.get("status") == "done":
            self.evaluation.clear(
                "No evaluation: the run finished without a test evaluation (a LightningModule "
                "without test_step or test data, say). Its curves are in the Curves tab."
            )
        else:
            self.evaluation.clear(
                "No evaluation: the run failed (the reason is above)."
                if failed
                else "No evaluation yet: it is written when the run finishes."
            )
        self._show_failure(entry)
        self.profiler.show_run(entry["run_dir"])
        self.layers.show_run(entry["run_dir"])

    def _evaluation_from_report(self, run_id: str) -> dict | None:
        """A finished run with no evaluation.json but test metrics in its report (a LightningModule's run:
        Lightning's own trainer.test gives them) as the metrics view reads an evaluation: its monitor's test
        value first."""
        read = run_table.read_spec_and_report(self.store, run_id)
        report = read[1] if read else {}
        metrics = TrainResult.from_dict(report).final.test_metrics
        if not isinstance(metrics, dict) or not metrics:
            return None
        task = report.get("task") or "custom"
        # A task with a view of its own needs what only its evaluation.json holds: these metrics go in a
        # table.
        evaluation = {
            "task": "custom" if task == "classification" or task in TASK_VIEWS else task,
            "split": "test",
            "metrics": dict(metrics),
        }
        monitor = report.get("monitor") if isinstance(report.get("monitor"), dict) else {}
        name = str(monitor.get("name") or "")
        stem = name.removeprefix("val_")
        test_name = next((n for n in (f"test_{stem}", name) if n and n in metrics), None)
        if test_name is not None:
            evaluation["monitor"] = {
                "name": test_name,
                "label": test_name.removeprefix("test_"),
                "higher_is_better": monitor.get("higher_is_better"),
                "value": metrics[test_name],
            }
        return evaluation

    def update_spec_comparison(self, *args) -> None:
        ids = [run_id for run_id in self.shown_runs() if run_id in self.runs]
        flats = [_flatten(self.runs[run_id].get("spec") or {}) for run_id in ids]
        keys = sorted(set().union(*flats)) if flats else []
        if self.only_differences.isChecked() and len(flats) > 1:
            keys = [k for k in keys if len({canonical(f.get(k)) for f in flats}) > 1]
        self.spec_table.clear()
        self.spec_table.setColumnCount(len(ids))
        self.spec_table.setRowCount(len(keys))
        self.spec_table.setHorizontalHeaderLabels(ids)
        self.spec_table.setVerticalHeaderLabels(keys)
        for row, key in enumerate(keys):
            values = [f.get(key) for f in flats]
            differs = len({canonical(v) for v in values}) > 1
            for column, value in enumerate(values):
                item = QTableWidgetItem("" if value is None else str(value))
                if differs:
                    item.setBackground(QColor(255, 200, 0, 60))
                self.spec_table.setItem(row, column, item)
        self.spec_table.resizeColumnsToContents()

    def _show_failure(self, entry: dict) -> None:
        if entry.get("status") != "failed":
            self.failure.hide()
            return
        metrics = self.curves.runs.get(entry["id"])
        early = not _has_checkpoint(entry) and not (metrics is not None and metrics.series)
        when = " before its first step" if early else ""
        text = f"This run failed{when}: {entry.get('message') or 'no reason was recorded'}"
        if self._retry_only(entry):
            text += "\nFix the cause, then Edit and retry… opens the wizard on its spec to start it again."
        self.failure.setText(text)
        self.failure.show()

    @staticmethod
    def _retry_only(entry: dict | None) -> bool:
        """A failed run with no checkpoint has nothing to resume from: it is edited and started again."""
        return bool(entry) and entry["status"] == "failed" and not _has_checkpoint(entry)

    def _update_buttons(self) -> None:
        run_id = self.selected_run_id()
        entry = self.runs.get(run_id or "")
        live = run_id in self.job_of_run
        self.stop_button.setEnabled(live)
        # "interrupted": the store found its owner gone (killed, crashed), so its last checkpoint can go on.
        self.resume_button.setEnabled(
            bool(entry) and not live and entry["status"] in ("cancelled", "failed", "interrupted")
        )
        retry = self._retry_only(entry) and not live
        self.resume_button.setText("Edit and retry…" if retry else "Resume")
        self.resume_button.setToolTip(RETRY_TIP if retry else RESUME_TIP)
        if retry:
            self.resume_button.setEnabled(bool(entry.get("spec")))
        self.open_button.setEnabled(bool(entry))
        self.again_button.setEnabled(bool(entry and entry.get("spec")))
        self.graph_button.setEnabled(bool(entry))
        self.quantize_button.setEnabled(bool(entry) and not live and entry["status"] == "done")
        # Try it predicts classes, labels, values and masks; a run of another task (a custom objective's)
        # would only be refused by the worker, so the button says so rather than inviting the click.
        task = dig(entry, "objective_task", default="")
        tried = task in TRY_IT_TASKS or task in ("", "auto")
        self.try_it_button.setEnabled(bool(entry) and not live and entry["status"] == "done" and tried)
        self.try_it_button.setToolTip(
            TRY_IT_TIP
            if tried
            else f"Try it shows classification, multilabel, regression and segmentation "
            f"predictions; this "
            f"{task} run's predictions are in its Evaluation view"
        )
        self.delete_button.setEnabled(bool(entry) and not live)

    # -- live runs -------------------------------------------------------------------------------
    def job_started(self, record: JobRecord, run_id: str | None) -> str | None:
        """Tracked once its record names its run; the tab keeps the run id (the curves hold its points)."""
        if not run_id:
            return None
        self.name_run(record.job_id, run_id)  # before the refresh, which then lists the run as running
        self.refresh()
        # A run started now is what the person wants to watch: ticked beside the runs already ticked, or the
        # pane would keep drawing only those (a live run is drawn only while its Show box is ticked).
        self.set_shown(run_id, True)
        # A resumed run's earlier curve comes from the store; rows that are both there and in the live
        # stream are dropped as duplicates by RunMetrics. The events that came first follow it.
        self._load_stored_metrics(run_id)
        self.start_tracking(record.job_id, None, run_id, take=lambda _run, msg: self.on_message(msg))
        self.select_run(run_id)
        return run_id

    def job_finished(self, record: JobRecord, kept, run_id: str | None, showing: bool) -> None:
        if not run_id:
            return
        if kept is None and run_id not in self.curves.runs:
            # A short job on a busy machine can end before its start reached this tab: it was never tracked,
            # so its run is shown and ticked from the store, as a live one would have been.
            self.set_shown(run_id, True)
            self._load_stored_metrics(run_id, force=True)
        elif run_id in self.curves.runs:
            # The reply (shell channel) can overtake the last metrics (event channel); the store already
            # holds them all, so read it once more.
            self._load_stored_metrics(run_id, force=True)
        if run_id == self.selected_run_id():
            self.show_details(run_id)

    def on_message(self, msg: Message) -> None:
        if msg.msg_type not in self.EARLY_TYPES:
            return
        run_id = self.live_of(msg)  # None: held until the job's record names its run, or another tab's job
        if run_id is None:
            return
        if msg.msg_type == "artifact":
            entry = self.runs.get(run_id)
            if (
                msg.content.get("kind") == "layer_stats"
                and entry is not None
                and isinstance(msg.content.get("path"), str)
            ):
                # shown only if it is this run
                self.layers.add_record_file(entry["run_dir"], msg.content["path"])
            return
        try:
            columns = decode_metrics(msg.content, msg.buffers)
        except (ProtocolError, KeyError, TypeError):
            return  # not a metrics event of ours
        self.curves.add_columns(run_id, columns)
        if "epoch" in columns:
            self._update_live_row(run_id)

    def _update_live_row(self, run_id: str) -> None:
        """Epochs done and validation accuracy of a running run, from its live curves (no store read)."""
        entry, metrics = self.runs.get(run_id), self.curves.runs.get(run_id)
        if entry is None or metrics is None:
            return
        epoch, val_acc = metrics.get("epoch"), metrics.get("val/acc")
        planned = dig(entry, "spec", "epochs", default="")
        if epoch is not None and len(epoch):
            entry["epochs"] = f"{int(epoch.y[-1])}/{planned}"
        if val_acc is not None and len(val_acc):
            entry["val_acc"] = f"{val_acc.y[-1]:.2%}"
        for row in range(self.table.rowCount()):
            if self.table.item(row, 0).data(Qt.UserRole) == run_id:
                self.table.item(row, 4).setText(str(entry.get("epochs", "")))
                self.table.item(row, 5).setText(str(entry.get("val_acc", "")))

    # -- buttons ---------------------------------------------------------------------------------
    def _on_resume_clicked(self) -> None:
        entry = self.runs.get(self.selected_run_id() or "")
        if entry and self._retry_only(entry):
            self.train_again_requested.emit(dict(entry.get("spec") or {}))
        elif entry:
            self.resume_requested.emit(entry["run_dir"], entry.get("spec") or {})

    def resume_selected(self) -> bool:
        if not self.resume_button.isEnabled() or self._retry_only(
            self.runs.get(self.selected_run_id() or "")
        ):
            return False
        self._on_resume_clicked()
        return True

    def _on_again_clicked(self) -> None:
        entry = self.runs.get(self.selected_run_id() or "")
        if entry and entry.get("spec"):
            self.train_again_requested.emit(dict(entry["spec"]))
