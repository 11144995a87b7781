"""The main window, "Torch Workbench": panels in docks and tabs, the device picker, the worker light, jobs and log.

It holds GUI-side state only and never waits on the worker: everything from the worker arrives as a signal.
"""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QByteArray, QSize, Qt, QTimer, QUrl
from PySide6.QtGui import QAction, QActionGroup, QDesktopServices, QIcon, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMenuBar,
    QMessageBox,
    QPushButton,
    QTabWidget,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from workbench import __version__
from workbench.app_resources import ICON_SIZES, example_specs, icon_path, sample_specs, spec_summary
from workbench.client import JobRecord, WorkerManager
from workbench.errors import SpecError, WorkbenchError
from workbench.gui.panels.jobs_panel import JobsPanel
from workbench.gui.panels.log_panel import LogPanel
from workbench.gui.queries import QueryRunner
from workbench.gui.settings import Settings
from workbench.gui.state import DatasetState
from workbench.gui.theme import THEMES, apply_theme
from workbench.gui.trust_gate import TrustGate
from workbench.gui.widgets.device_picker import DevicePicker
from workbench.gui.widgets.lazy_tab import LazyTab
from workbench.gui.widgets.open_folder import open_folder
from workbench.gui.widgets.status_light import StatusLight
from workbench.gui.worker_bridge import QtWorkerBridge
from workbench.protocol import Message
from workbench.specs import DataSpec, QuantSpec, TrainSpec

WINDOW_TITLE = "Torch Workbench"


class WorkerBanner(QFrame):
    """A plain-words bar over the panels when the worker is gone, with the restart right there."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("workerBanner")
        self.setStyleSheet("#workerBanner { background: #fbe3e1; border: 1px solid #d0342c; border-radius: 4px; }"
                           "#workerBanner QLabel { color: #5c1410; }")
        self.label = QLabel(self)
        self.label.setWordWrap(True)
        self.restart_button = QPushButton("Restart worker", self)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.restart_button)
        self.hide()

    def show_message(self, text: str) -> None:
        self.label.setText(text)
        self.show()


def describe_job(record: JobRecord) -> str:
    """One line naming a job for a question the user must answer: its task, run and progress."""
    where = f" (run {Path(record.run_dir).name})" if record.run_dir else ""
    text = f", {record.text}" if record.text and record.active else ""  # "epoch 3/40": what the Jobs panel shows
    progress = f", {record.fraction:.0%} done" if record.fraction is not None else ""
    return f"{record.task}{where}: {record.state}{text}{progress}"


def _job_lines(jobs: list[JobRecord]) -> str:
    return "\n".join(f"  • {describe_job(r)}" for r in jobs[:8]) + (
        f"\n  … and {len(jobs) - 8} more" if len(jobs) > 8 else "")


def confirm_stop_jobs(parent, title: str, lead: str, jobs: list[JobRecord], action: str) -> bool:
    """Ask before an action that stops `jobs`, naming each; the default answer keeps them running."""
    names = _job_lines(jobs)
    box = QMessageBox(QMessageBox.Warning, title,
                      f"{lead} {'this job' if len(jobs) == 1 else f'these {len(jobs)} jobs'}:\n{names}\n\n"
                      "A stopped run is marked on disk; a training run can be resumed from its last checkpoint.",
                      parent=parent)
    go = box.addButton(action, QMessageBox.DestructiveRole)
    keep = box.addButton("Keep running", QMessageBox.RejectRole)
    box.setDefaultButton(keep)
    box.exec()
    return box.clickedButton() is go


# The answers to the close question.
STOP_AND_CLOSE, LEAVE_RUNNING, CANCEL_CLOSE = "stop", "leave", "cancel"


def close_question(parent, jobs: list[JobRecord], worker_elsewhere: str = "") -> QMessageBox:
    """The question asked before closing with `jobs` unfinished, naming each; Cancel is the default.

    With `worker_elsewhere` (how to name a worker this window attached to rather than launched) it also
    offers "Leave running": close only the window, and leave that worker and its jobs going.
    """
    waiting = any(r.state != "running" for r in jobs)
    verb = "running or waiting" if waiting else "running"
    one = len(jobs) == 1
    count = "1 job is" if one else f"{len(jobs)} jobs are"
    them, they = ("it", "It runs") if one else ("them", "They run")
    text = f"{count} {verb}:\n{_job_lines(jobs)}\n\n"
    if worker_elsewhere:
        text += (f"{they} on {worker_elsewhere}, which this window did not start. \"Leave running\" closes only "
                 f"the window; the worker goes on with {them}. \"Stop jobs and close\" stops {them} and the worker."
                 "\n\nA stopped training run can be resumed from its last checkpoint.")
    else:
        text += f"A stopped training run can be resumed from its last checkpoint.\n\nStop {them} and close?"
    box = QMessageBox(QMessageBox.Warning, f"Close {WINDOW_TITLE}?", text, parent=parent)
    box.addButton("Stop jobs and close", QMessageBox.DestructiveRole).setObjectName(STOP_AND_CLOSE)
    if worker_elsewhere:
        box.addButton("Leave running", QMessageBox.AcceptRole).setObjectName(LEAVE_RUNNING)
    cancel = box.addButton("Cancel", QMessageBox.RejectRole)
    cancel.setObjectName(CANCEL_CLOSE)
    box.setDefaultButton(cancel)
    box.setEscapeButton(cancel)
    return box


def app_icon() -> QIcon:
    """The app icon at every size it ships; Qt picks the nearest for a title bar, a task bar or a dialog."""
    icon = QIcon()
    for size in ICON_SIZES:
        icon.addFile(str(icon_path(size)), QSize(size, size))
    return icon


class MainWindow(QMainWindow):
    def __init__(self, manager: WorkerManager, workspace: str | Path, settings: Settings | None = None):
        super().__init__()
        self.manager = manager
        self.workspace = Path(workspace)
        self.settings = settings or Settings()
        self.bridge = QtWorkerBridge(manager, self)
        self.queries = QueryRunner(self.bridge, self.workspace, self)
        self.trust_gate = TrustGate(lambda: self.workspace, self)
        self.queries.gate = self.trust_gate
        self._quitting = False
        self._close_answer: str | None = None  # how the user answered the close question, once they have
        self.close_question: QMessageBox | None = None  # the question, while it is open
        self.setWindowTitle(WINDOW_TITLE)
        self.setWindowIcon(app_icon())
        self.resize(1280, 800)
        self._build_panels()
        self._build_toolbar()
        self._build_menus()
        self._connect()
        self._restore_settings()
        self.status_light.set_state(manager.state, manager.detail)
        self._elapsed_timer = QTimer(self)
        self._elapsed_timer.setInterval(1000)
        self._elapsed_timer.timeout.connect(self.jobs_panel.refresh)
        self._elapsed_timer.start()
        self.statusBar().showMessage(f"Workspace: {self.workspace}")
        if manager.state == "ready":  # the worker was up before the window (tests, attach mode)
            self._request_devices()

    # -- construction ----------------------------------------------------------------------------
    def _build_panels(self) -> None:
        self.banner = WorkerBanner(self)
        self.tabs = QTabWidget(self)
        self.tabs.setDocumentMode(True)
        self.dataset_state = DatasetState(parent=self)
        # Each tab is built the first time it is shown or needed: the window paints before pyqtgraph and the
        # panels' modules are imported (benchmarks/startup.py), and an unvisited tab costs nothing.
        self.data_tab = LazyTab(self._make_dataset_panel, "Data", self)
        self.training_tab = LazyTab(self._make_training_panel, "Training", self)
        self.runs_tab = LazyTab(self._make_runs_panel, "Runs", self)
        self.graph_tab = LazyTab(self._make_graph_panel, "Graph", self)
        self.quant_tab = LazyTab(self._make_quant_panel, "Quantization", self)
        self.export_tab = LazyTab(self._make_export_panel, "Export & Benchmark", self)
        self.tabs.addTab(self.data_tab, "Data")
        self.tabs.addTab(self.training_tab, "Training")
        self.tabs.addTab(self.graph_tab, "Graph")
        self.tabs.addTab(self.quant_tab, "Quantization")
        self.tabs.addTab(self.export_tab, "Export && Benchmark")  # && shows one & (a single one marks a mnemonic)
        self.tabs.addTab(self.runs_tab, "Runs")
        central = QWidget(self)
        layout = QVBoxLayout(central)
        layout.setContentsMargins(6, 6, 6, 0)
        layout.addWidget(self.banner)
        layout.addWidget(self.tabs, 1)
        self.setCentralWidget(central)
        self.jobs_panel = JobsPanel(self)
        self.log_panel = LogPanel(self)
        self.jobs_dock = self._add_dock("Jobs", "jobsDock", self.jobs_panel, Qt.BottomDockWidgetArea)
        self.log_dock = self._add_dock("Log", "logDock", self.log_panel, Qt.BottomDockWidgetArea)
        self.splitDockWidget(self.jobs_dock, self.log_dock, Qt.Horizontal)

    # -- the tabs' panels, built on first use ------------------------------------------------------
    @property
    def dataset_panel(self):
        return self.data_tab.panel()

    @property
    def training_panel(self):
        return self.training_tab.panel()

    @property
    def runs_panel(self):
        return self.runs_tab.panel()

    @property
    def graph_panel(self):
        return self.graph_tab.panel()

    @property
    def quant_panel(self):
        return self.quant_tab.panel()

    @property
    def export_panel(self):
        return self.export_tab.panel()

    @property
    def _lazy_tabs(self) -> tuple[LazyTab, ...]:
        return (self.data_tab, self.training_tab, self.graph_tab, self.quant_tab, self.export_tab, self.runs_tab)

    def _tab_of(self, panel: QWidget) -> LazyTab:
        # Only a built tab can hold the panel asked for; asking each tab for its panel would build them all.
        return next(tab for tab in self._lazy_tabs if tab.is_built and tab.panel() is panel)

    def show_tab(self, panel: QWidget) -> None:
        """Bring a panel's tab to the front (building the panel if it is not yet)."""
        self.tabs.setCurrentWidget(self._tab_of(panel))

    def current_panel(self) -> QWidget:
        return self.tabs.currentWidget().panel()

    def _make_dataset_panel(self):
        from workbench.gui.panels.data.dataset_panel import DatasetPanel

        panel = DatasetPanel(self.dataset_state, self.queries, self)
        panel.status_message.connect(lambda text: self.statusBar().showMessage(text, 5000))
        panel.zoom.setValue(int(self.settings.get("thumbnail_size") or 64))
        if self.manager.state == "ready":
            panel.ensure_loaded()
        return panel

    def _make_training_panel(self):
        from workbench.gui.panels.training.training_panel import TrainingPanel

        panel = TrainingPanel(self.workspace, self.queries, self)
        panel.new_run_requested.connect(lambda: self.new_training_run())
        panel.train_again_requested.connect(self.new_training_run)
        panel.quick_start_requested.connect(self.quick_start_training)
        panel.resume_requested.connect(self._on_training_resume_requested)
        panel.cancel_requested.connect(self._on_jobs_cancel_requested)
        panel.sample_requested.connect(self._on_training_sample_requested)
        panel.graph_requested.connect(lambda run_id: run_id and self.show_graph_of_run(run_id))
        panel.layers_graph_requested.connect(self.show_graph_of_run)
        panel.quantize_requested.connect(lambda run_id: run_id and self.new_quantization(run_id))
        panel.try_it_requested.connect(self.open_try_it)
        # Jobs that began before the tab was built: their curves come from the store, live from here on.
        for record in self.manager.jobs.all():
            panel.on_job_changed(record)
        return panel

    def _make_runs_panel(self):
        from workbench.gui.panels.runs_panel import RunsPanel

        panel = RunsPanel(self.workspace, self)
        panel.status_message.connect(self.statusBar().showMessage)
        panel.open_requested.connect(self._on_runs_open_requested)
        panel.resume_requested.connect(self._on_training_resume_requested)
        panel.graph_requested.connect(self.show_graph_of_run)
        return panel

    def _make_graph_panel(self):
        from workbench.gui.panels.graph.graph_panel import GraphPanel

        panel = GraphPanel(self.workspace, lambda task, spec: self.submit_job(task, spec), self)
        panel.status_message.connect(lambda text: self.statusBar().showMessage(text, 5000))
        panel.quant_layer_requested.connect(self._on_quant_layer_requested)
        return panel

    def _make_quant_panel(self):
        from workbench.gui.panels.quant.quant_panel import QuantPanel

        panel = QuantPanel(self.workspace, self)
        panel.restore_splitters(self.settings.get("quant_splitters"))
        panel.status_message.connect(lambda text: self.statusBar().showMessage(text, 6000))
        panel.new_run_requested.connect(lambda source, spec: self.new_quantization(source, spec or None))
        panel.start_requested.connect(self._start_quantization_data)
        panel.cancel_requested.connect(self._on_jobs_cancel_requested)
        panel.graph_requested.connect(self.show_quantization_on_graph)
        panel.try_it_requested.connect(self.open_try_it)
        for record in self.manager.jobs.all():
            panel.on_job_changed(record)
        return panel

    def _make_export_panel(self):
        from workbench.gui.panels.export.export_panel import ExportPanel

        panel = ExportPanel(self.workspace, lambda task, spec: self.submit_job(task, spec), self)
        panel.status_message.connect(lambda text: self.statusBar().showMessage(text, 6000))
        panel.cancel_requested.connect(self._on_jobs_cancel_requested)
        panel.graph_requested.connect(self._on_export_graph_requested)
        panel.report_requested.connect(self.write_model_report)
        panel.set_default_device(self.device_picker.current_device() or "cpu")
        self.device_picker.device_chosen.connect(panel.set_default_device)
        for record in self.manager.jobs.all():
            panel.on_job_changed(record)
        return panel

    def open_spec(self, path) -> None:
        """Open a spec file in its job's wizard: a sample, a run's spec.toml or the user's own file."""
        from workbench.app_resources import spec_verb
        from workbench.specs import spec_for

        try:
            verb = spec_verb(path)
            data = spec_for(verb).load(path).to_dict()
        except SpecError as exc:
            QMessageBox.warning(self, "Open spec", str(exc))
            return
        # Asked before the wizard opens: its pages ask the worker about the data, which imports the spec's code.
        # Cancel still opens the wizard; its queries are then not sent, and it says why.
        self.trust_gate.allow(data, self)
        if verb == "train":
            self.new_training_run(start=data)
        elif verb == "quantize":
            self.new_quantization((data.get("source") or {}).get("run", ""), start=data)
        else:  # export or bench: the whole spec fills the wizard, its source run included
            self._open_export_wizard(verb if verb == "bench" else "export", start=data)

    def choose_spec_file(self) -> None:
        start = self.settings.get("spec_folder") or str(sample_specs()[0].parent)
        path, _ = QFileDialog.getOpenFileName(self, "Open spec", start, "Specs (*.toml *.json);;All files (*)")
        if path:
            self.settings.set("spec_folder", str(Path(path).parent))
            self.open_spec(path)

    def _open_export_wizard(self, which: str, source_run: str = "", start: dict | None = None) -> None:
        panel = self.export_panel
        self.show_tab(panel)
        (panel.new_export if which == "export" else panel.new_benchmark)(source_run, start)

    def _on_export_graph_requested(self, run_id: str, module: str) -> None:
        """The layer where an export first diverges, on its model's graph."""
        self.show_graph_of_run(run_id)
        self.statusBar().showMessage(f"The export first diverges at {module}: find it in the module table", 8000)
        self.graph_panel.search.setText(module)

    def write_model_report(self, run_id: str) -> Path | None:
        """Write the model's one-page HTML report (train → quantize → export → benchmark) and open it."""
        from workbench.report import write_report

        try:
            path = write_report(self.workspace, run_id)
        except WorkbenchError as exc:
            self.statusBar().showMessage(f"Cannot write the report: {exc}", 8000)
            return None
        self.log_panel.append(f"Report of {run_id}: {path}")
        self.statusBar().showMessage(f"Report written: {path}", 8000)
        if not os.environ.get("WORKBENCH_NO_OPEN"):  # tests and headless runs do not open a browser
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(path)))
        return path

    def new_quantization(self, source_run: str = "", start: dict | None = None) -> QuantSpec | None:
        """Open the quantization wizard (on a training run, or on a quantize run's spec for "Quantize again");
        on Quantize, start the job. Returns the spec it started, if any."""
        from workbench.gui.panels.quant.wizard import QuantWizard

        wizard = QuantWizard(self.quant_panel.training_runs(), source_run=source_run, start=start,
                             calibration=(self.dataset_state.calibration_count, self.dataset_state.calibration_seed),
                             device=self.device_picker.current_device() or "", settings=self.settings, parent=self)
        if not wizard.exec() or wizard.spec is None:
            return None
        return self.start_quantization(wizard.spec)

    def start_quantization(self, spec: QuantSpec) -> QuantSpec | None:
        record = self.submit_job("quant.analyze", spec.to_dict())
        if record is None:
            return None
        self.show_tab(self.quant_panel)
        self.quant_panel.on_job_changed(record)
        self.log_panel.append(f"Quantizing {spec.source.run or spec.model.name}: W{spec.weights.bits}"
                              f"A{spec.activations.bits}")
        return spec

    def _start_quantization_data(self, data: dict) -> None:
        try:
            spec = QuantSpec.from_dict(data)
        except SpecError as exc:
            self.statusBar().showMessage(f"Cannot start that quantization: {exc}", 8000)
            return
        self.start_quantization(spec)

    def show_quantization_on_graph(self, quant_run_id: str, source_run_id: str) -> None:
        """Paint a quantize run's per-layer SQNR on its model's graph in the Graph tab."""
        self.show_tab(self.graph_panel)
        self.graph_panel.show_quant_run(quant_run_id, source_run_id)

    def _on_quant_layer_requested(self, quant_run_id: str, module: str, tensor: str) -> None:
        """A node clicked on a graph coloured by SQNR: open that layer's histogram in the Quantization tab."""
        panel = self.quant_panel
        self.show_tab(panel)
        if panel.results is None or panel.results.run_id != quant_run_id:
            panel.open_run(quant_run_id)
        if not panel.select_layer(module, tensor):
            self.statusBar().showMessage(f"{module or 'That node'} has no quantizer in run {quant_run_id}", 5000)

    def show_graph_of_run(self, run_id: str, overlay: str = "") -> None:
        """Build (or show) the graph of a training run in the Graph tab, coloured by `overlay` when it has it (the
        Layers view's "Show on graph": a layer statistic)."""
        self.show_tab(self.graph_panel)
        self.graph_panel.build_graph_of_run(run_id, overlays=(overlay,) if overlay else ())

    def _on_bridge_job_changed_for_training(self, record) -> None:
        if self.training_tab.is_built:
            self.training_panel.on_job_changed(record)
        if self.graph_tab.is_built:
            self.graph_panel.on_job_changed(record)
        if self.quant_tab.is_built:
            self.quant_panel.on_job_changed(record)
        if self.export_tab.is_built:
            self.export_panel.on_job_changed(record)

    def _on_bridge_message_for_training(self, msg) -> None:
        if self.training_tab.is_built:
            self.training_panel.on_message(msg)
        if self.quant_tab.is_built:
            self.quant_panel.on_message(msg)
        if self.export_tab.is_built:
            self.export_panel.on_message(msg)

    def _add_dock(self, title: str, name: str, widget: QWidget, area) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(name)  # saveState() needs stable names to restore the layout
        dock.setWidget(widget)
        self.addDockWidget(area, dock)
        return dock

    def _build_toolbar(self) -> None:
        bar = QToolBar("Main", self)
        bar.setObjectName("mainToolbar")
        bar.setMovable(False)
        self.addToolBar(Qt.TopToolBarArea, bar)
        device_label = QLabel(" Device ", bar)
        self.device_picker = DevicePicker(bar)
        bar.addWidget(device_label)
        bar.addWidget(self.device_picker)
        spacer = QWidget(bar)
        spacer.setSizePolicy(spacer.sizePolicy().horizontalPolicy().Expanding, spacer.sizePolicy().verticalPolicy())
        bar.addWidget(spacer)
        self.status_light = StatusLight(bar)
        bar.addWidget(self.status_light)

    def _build_menus(self) -> None:
        # The menus in the menu bar's order.
        menu = self.menuBar()
        self._build_file_menu(menu)
        self._build_view_menu(menu)
        self._build_task_menus(menu)
        self._build_worker_menu(menu)
        self._build_help_menu(menu)

    def _build_file_menu(self, menu: QMenuBar) -> None:
        """Workspace, the sample and example specs, Quit."""
        file_menu = menu.addMenu("&File")
        self.choose_workspace_action = file_menu.addAction("Choose &workspace…", self.choose_workspace)
        self.choose_workspace_action.setToolTip("Pick the folder where runs, data caches and checkpoints live")
        file_menu.addAction("&Open workspace folder", lambda: open_folder(self, self.workspace))
        spec_menu = file_menu.addMenu("Open &spec")
        spec_menu.setToolTipsVisible(True)
        for path in sample_specs():  # the samples first
            action = spec_menu.addAction(f"Sample: {path.stem}", lambda _checked=False, p=path: self.open_spec(p))
            action.setToolTip(spec_summary(path))
        spec_menu.addSeparator()
        for path in example_specs():  # your-own-project examples: a Dataset and model of their own beside the spec
            action = spec_menu.addAction(f"Example: {path.parent.name}",
                                         lambda _checked=False, p=path: self.open_spec(p))
            action.setToolTip(spec_summary(path))
        spec_menu.addSeparator()
        other = spec_menu.addAction("&Other spec file…", self.choose_spec_file)
        other.setShortcut(QKeySequence.Open)
        file_menu.addSeparator()
        # Quit closes the window, so it asks the same question as the title bar's close button.
        self.quit_action = file_menu.addAction("&Quit", self.close)
        # Windows (and Qt's offscreen platform) bind no key to the standard Quit: Ctrl+Q everywhere then.
        has_quit_key = bool(QKeySequence.keyBindings(QKeySequence.Quit))
        self.quit_action.setShortcut(QKeySequence.Quit if has_quit_key else QKeySequence("Ctrl+Q"))

    def _build_view_menu(self, menu: QMenuBar) -> None:
        """The docks' toggles and the theme."""
        view_menu = menu.addMenu("&View")
        view_menu.addAction(self.jobs_dock.toggleViewAction())
        view_menu.addAction(self.log_dock.toggleViewAction())
        view_menu.addSeparator()
        theme_menu = view_menu.addMenu("&Theme")
        self.theme_actions = QActionGroup(self)
        for theme in THEMES:
            action = QAction(theme.capitalize(), self, checkable=True)
            action.setData(theme)
            self.theme_actions.addAction(action)
            theme_menu.addAction(action)
        self.theme_actions.triggered.connect(lambda action: self.set_theme(action.data()))

    def _build_task_menus(self, menu: QMenuBar) -> None:
        """Data, Training, Quantization, Export and Jobs: each starts, stops or cancels its kind of job."""
        data_menu = menu.addMenu("&Data")
        choose = data_menu.addAction("&Choose dataset…", self._choose_dataset)
        choose.setShortcut(QKeySequence("Ctrl+D"))

        training_menu = menu.addMenu("&Training")
        new_run = training_menu.addAction("&New training run…", self.new_training_run)
        new_run.setShortcut(QKeySequence("Ctrl+T"))
        training_menu.addSeparator()
        stop = training_menu.addAction("&Stop selected run", self._stop_selected_run)
        stop.setToolTip("Stop the run selected in the Training tab at its next step; a checkpoint is kept")
        resume = training_menu.addAction("&Resume selected run", self._resume_selected_run)
        resume.setToolTip("Continue the run selected in the Training tab from its last checkpoint")

        quant_menu = menu.addMenu("&Quantization")
        new_quant = quant_menu.addAction("&New quantization…", lambda: self.new_quantization())
        new_quant.setShortcut(QKeySequence("Ctrl+Shift+Q"))
        new_quant.setToolTip("Quantize a trained run with the white paper's PTQ pipeline")

        export_menu = menu.addMenu("E&xport")
        new_export = export_menu.addAction("New &export…", lambda: self._open_export_wizard("export"))
        new_export.setShortcut(QKeySequence("Ctrl+E"))
        new_bench = export_menu.addAction("New &benchmark…", lambda: self._open_export_wizard("bench"))
        new_bench.setShortcut(QKeySequence("Ctrl+B"))

        jobs_menu = menu.addMenu("&Jobs")
        cancel = jobs_menu.addAction("&Cancel job", self._cancel_current_job)
        cancel.setShortcut(QKeySequence("Ctrl+."))
        cancel.setToolTip("Cancel the job selected in the Jobs panel (or the newest running one)")
        jobs_menu.addAction("Clear &finished", self.jobs_panel.model.clear_finished)

    def _build_worker_menu(self, menu: QMenuBar) -> None:
        worker_menu = menu.addMenu("&Worker")
        self.restart_action = worker_menu.addAction("&Restart worker", self.restart_worker)
        self.restart_action.setShortcut(QKeySequence("Ctrl+Shift+R"))
        self.self_test_action = worker_menu.addAction("Run worker &self-test", self.run_self_test)
        self.self_test_action.setToolTip("A short job that checks the worker, the event stream and the run store")
        worker_menu.addAction("Refresh &devices", self._request_devices)

    def _build_help_menu(self, menu: QMenuBar) -> None:
        help_menu = menu.addMenu("&Help")
        shortcuts = help_menu.addAction("&Keyboard shortcuts", self._show_shortcuts)
        shortcuts.setShortcut(QKeySequence.HelpContents)
        help_menu.addAction("&Read me (getting started)", self._open_readme)
        help_menu.addSeparator()
        help_menu.addAction("&About Torch Workbench", self._show_about)

    def _connect(self) -> None:
        self.bridge.state_changed.connect(self._on_worker_state_changed)
        self.bridge.job_changed.connect(self._on_worker_job_changed)
        self.bridge.message_received.connect(self._on_worker_message)
        self.status_light.restart_requested.connect(self.restart_worker)
        self.banner.restart_button.clicked.connect(self.restart_worker)
        self.jobs_panel.cancel_requested.connect(self._on_jobs_cancel_requested)
        self.jobs_panel.force_stop_requested.connect(self._on_jobs_force_stop_requested)
        self.jobs_panel.open_run_requested.connect(self._on_jobs_open_run_requested)
        self.device_picker.device_chosen.connect(lambda device: self.settings.set("device", device))
        self.dataset_state.changed.connect(self._on_dataset_state_changed)
        self.bridge.job_changed.connect(self._on_bridge_job_changed_for_training)
        self.bridge.message_received.connect(self._on_bridge_message_for_training)

    # -- settings --------------------------------------------------------------------------------
    def _restore_settings(self) -> None:
        geometry, state = self.settings.get("geometry"), self.settings.get("window_state")
        if isinstance(geometry, QByteArray):
            self.restoreGeometry(geometry)
        if isinstance(state, QByteArray):
            self.restoreState(state)
        self.device_picker.set_preferred(self.settings.get("device") or "cpu")
        saved_spec = self.settings.get("dataset_spec")
        if saved_spec:
            try:
                self.dataset_state.spec = DataSpec.from_json(saved_spec, source="saved settings")
            except SpecError as exc:  # a setting from an older version: fall back to the default dataset
                self.log_panel.append(f"Ignoring the saved dataset choice: {exc}", "warning")
        self.dataset_state.set_calibration(int(self.settings.get("calibration_count") or 256),
                                           int(self.settings.get("calibration_seed") or 0))
        self.tabs.setCurrentIndex(int(self.settings.get("current_tab") or 0))
        self.set_theme(self.settings.get("theme"))
        self.log_panel.show_debug.setChecked(self.settings.get("show_debug_details"))

    def _save_settings(self) -> None:
        self.settings.set("geometry", self.saveGeometry())
        self.settings.set("window_state", self.saveState())
        self.settings.set("show_debug_details", self.log_panel.show_debug.isChecked())
        if self.data_tab.is_built:
            self.settings.set("thumbnail_size", self.dataset_panel.zoom.value())
        if self.quant_tab.is_built:
            self.settings.set("quant_splitters", self.quant_panel.splitter_states())
        self.settings.set("calibration_count", self.dataset_state.calibration_count)
        self.settings.set("calibration_seed", self.dataset_state.calibration_seed)
        self.settings.set("current_tab", self.tabs.currentIndex())
        self.settings.sync()

    def set_theme(self, theme: str) -> None:
        app = QApplication.instance()
        theme = apply_theme(app, theme) if app else "light"  # plots follow the palette change by themselves
        self.settings.set("theme", theme)
        for action in self.theme_actions.actions():
            action.setChecked(action.data() == theme)

    def choose_workspace(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Choose workspace", str(self.workspace))
        if path:
            self.set_workspace(path)

    def set_workspace(self, path: str | Path) -> None:
        from workbench.workspace import resolve_workspace

        self.workspace = resolve_workspace(path)
        self.settings.set("workspace", str(self.workspace))
        if self.runs_tab.is_built:
            self.runs_panel.set_workspace(self.workspace)
        if self.training_tab.is_built:
            self.training_panel.set_workspace(self.workspace)
        if self.graph_tab.is_built:
            self.graph_panel.set_workspace(self.workspace)
        if self.quant_tab.is_built:
            self.quant_panel.set_workspace(self.workspace)
        if self.export_tab.is_built:
            self.export_panel.set_workspace(self.workspace)
        self.queries.workspace = self.workspace
        self.statusBar().showMessage(f"Workspace: {self.workspace}")

    # -- worker ----------------------------------------------------------------------------------
    def submit_job(self, task: str, spec: dict | None = None, *, with_run: bool = True) -> JobRecord | None:
        """Start a job on the worker; returns None (and says why) when the worker cannot take it, or the user did not
        trust the code it would run."""
        if not self.trust_gate.allow(spec or {}, self):
            message = self.trust_gate.refusal(spec or {})["message"]
            self.log_panel.append(f"Did not start {task}: {message}", "warning")
            self.statusBar().showMessage(message, 8000)
            return None
        try:
            return self.manager.submit(task, spec or {}, self.workspace if with_run else None)
        except RuntimeError as exc:
            self.log_panel.append(f"Could not start {task}: {exc}", "error")
            self.statusBar().showMessage(str(exc), 8000)
            return None

    def new_training_run(self, start: dict | None = None) -> TrainSpec | None:
        """Open the training wizard (on `start`, a run's spec, for "Train again"; else on the last spec used);
        on Start, submit the run. Returns the spec it started, if any."""
        # The dialog's module loads when it is first opened, not at start-up.
        from workbench.gui.panels.training import wizard as wizards

        info = self.dataset_panel.info if self.data_tab.is_built else None
        wizard = wizards.TrainingWizard(self.dataset_state, self.device_picker.devices, self.device_picker.current_device(),
                                start=start, num_classes=len(info["classes"]) if info else None,
                                data_dir=str(self.workspace / "data"), parent=self, settings=self.settings)
        if not wizard.exec() or wizard.spec is None:
            return None
        return self.start_training(wizard.spec)

    def quick_start_training(self) -> TrainSpec | None:
        """The first-run button: a small CNN on the bundled digits, on the device picked in the toolbar."""
        from workbench.gui.panels.training.training_panel import QUICK_START_SPEC

        spec = TrainSpec.from_dict({**QUICK_START_SPEC, "device": self.device_picker.current_device() or "auto"})
        return self.start_training(spec)

    def start_training(self, spec: TrainSpec) -> TrainSpec | None:
        record = self.submit_job("train.classifier", spec.to_dict())
        if record is None:
            return None
        self.show_tab(self.training_panel)
        self.log_panel.append(f"Training {spec.model.name} on {spec.dataset.name} for {spec.epochs} epochs")
        return spec

    def _on_training_resume_requested(self, run_dir: str, spec: dict) -> None:
        if not self.trust_gate.allow(spec, self):
            self.log_panel.append(f"Did not resume: {self.trust_gate.refusal(spec)['message']}", "warning")
            return
        try:
            self.manager.submit("train.classifier", spec, self.workspace, resume=run_dir)
        except RuntimeError as exc:
            self.log_panel.append(f"Could not resume: {exc}", "error")
            return
        self.log_panel.append(f"Resuming {Path(run_dir).name}")

    def _on_training_sample_requested(self, dataset: dict, split: str, index: int, note: str = "") -> None:
        try:
            spec = DataSpec.from_dict(dataset)
        except SpecError as exc:
            self.log_panel.append(f"Cannot open that sample: {exc}", "error")
            return
        self.dataset_state.set_spec(spec)
        self.show_tab(self.dataset_panel)
        self.dataset_panel.show_sample(split, index, note)

    def open_try_it(self, run_id: str):
        """Try it: a finished training or quantize run's model on a dropped image or a dataset sample,
        in a window of its own beside the tabs; returns the dialog."""
        from workbench.gui.panels.try_it import TryItDialog

        if not run_id:
            return None
        dialog = TryItDialog(self.queries, self.workspace, run_id, data_sample=self._data_tab_sample, parent=self)
        dialog.setAttribute(Qt.WA_DeleteOnClose)
        dialog.show()
        self.try_it_dialog = dialog
        return dialog

    def _data_tab_sample(self) -> dict | None:
        """The sample the Data tab shows (its dataset spec, split and index), or None before one is clicked."""
        if not self.data_tab.is_built:
            return None
        shown = self.dataset_panel.sample_view.result
        if not shown or "split" not in shown:
            return None
        return {"dataset": self.dataset_state.spec.to_dict(), "split": shown["split"], "index": int(shown["index"])}

    def run_self_test(self) -> None:
        # debug.selftest runs beside any job (the worker's query pool): it never waits behind a training run.
        record = self.submit_job("debug.selftest", {"steps": 200, "delay": 0.01})
        if record:
            self.log_panel.append("Started the worker self-test")

    def _user_jobs(self) -> list[JobRecord]:
        return [r for r in self.manager.jobs.active() if not r.internal]

    def restart_worker(self) -> None:
        """Restart the worker; when it has jobs, ask first and name them (a restart stops them)."""
        jobs = self._user_jobs()
        if jobs and not confirm_stop_jobs(self, "Restart the worker?", "Restarting the worker stops", jobs,
                                          "Restart worker"):
            return
        self.log_panel.append("Restarting the worker…", "warning")
        self.banner.hide()
        self.manager.restart(wait=False)

    def _request_devices(self) -> None:
        self.queries.query("devices.list", {}, lambda result: self.device_picker.set_devices(result["devices"]),
                           lambda error: self.log_panel.append(f"Could not list devices: {error['message']}", "error"))

    def _on_worker_state_changed(self, state: str, detail: str) -> None:
        self.status_light.set_state(state, detail)
        if state == "ready":
            self.banner.hide()
            self.log_panel.append(f"Worker ready ({detail})" if detail else "Worker ready")
            if not self.device_picker.devices:
                self._request_devices()
            if self.data_tab.is_built:  # else it loads when it is built
                self.dataset_panel.ensure_loaded()
        elif state == "dead":
            text = f"The worker process stopped: {detail.splitlines()[0] if detail else 'unknown reason'}."
            self.log_panel.append(text, "error")
            if detail.count("\n"):
                self.log_panel.append(detail, "debug")
            self.banner.show_message(text + " Your runs and this window's state are kept; running jobs were "
                                     "marked failed. Restart the worker to go on.")
        elif state == "unresponsive":
            self.log_panel.append(f"The worker is not answering ({detail}); it may be busy in a long "
                                  "operation. Restart it if this persists.", "warning")
        elif state == "restarting":
            self.banner.show_message(f"The worker stopped ({detail}); restarting it automatically…")
        elif state == "starting":
            pass
        else:
            self.log_panel.append(f"Worker {state}" + (f": {detail}" if detail else ""), "debug")

    def _on_dataset_state_changed(self) -> None:
        self.settings.set("dataset_spec", self.dataset_state.spec.to_json())

    def _on_worker_job_changed(self, record: JobRecord) -> None:
        if record.internal:
            return  # a panel's own query (devices, thumbnails): answered through QueryRunner
        self.jobs_panel.update_job(record)
        if record.active:
            return
        if record.state == "done":
            self.log_panel.append(f"{record.task} finished" + (f": {record.run_dir}" if record.run_dir else ""))
        elif record.state == "cancelled":
            self.log_panel.append(f"{record.task} cancelled", "warning")
        else:
            self.log_panel.append(f"{record.task} failed: {record.error_message}", "error")
            traceback = (record.result or {}).get("traceback")
            if traceback:
                self.log_panel.append(traceback, "debug")
        if record.run_dir and self.runs_tab.is_built:  # an unbuilt Runs tab reads the store when it is built
            self.runs_panel.refresh()

    def _on_worker_message(self, msg: Message) -> None:
        if msg.msg_type == "log":
            self.log_panel.append(msg.content.get("text", ""), msg.content.get("level", "info"))

    def _on_jobs_cancel_requested(self, job_id: str) -> None:
        record = self.manager.jobs.get(job_id)
        self.manager.cancel(job_id)
        if record is not None and record.state in ("submitted", "queued"):
            self.statusBar().showMessage("Cancelled: the job leaves the queue without starting", 4000)
            return
        self.jobs_panel.note_cancel_requested(job_id)
        self.statusBar().showMessage("Cancel requested; the job stops at its next step", 4000)

    def _on_jobs_force_stop_requested(self, job_id: str) -> None:
        record = self.manager.jobs.get(job_id)
        if record is None or not record.active:
            return
        others = [r for r in self._user_jobs() if r.job_id != job_id]
        question = (f"Force-stop {describe_job(record)}?\n\nIt has not answered its cancel, so the only way to "
                    "stop it is to restart the worker. Its run is marked cancelled and can be resumed from its "
                    "last checkpoint.")
        if others and not confirm_stop_jobs(self, "Force stop", question + "\n\nThe restart also stops", others,
                                            "Force stop"):
            return
        if not others and QMessageBox.question(self, "Force stop", question, QMessageBox.Yes | QMessageBox.No,
                                               QMessageBox.No) != QMessageBox.Yes:
            return
        self.log_panel.append(f"Force-stopping {describe_job(record)} by restarting the worker", "warning")
        self.banner.hide()
        self.manager.force_stop(job_id)

    def _on_runs_open_requested(self, run_dir: str, task: str) -> None:
        """Show a run in the tab that owns its task (the Runs tab's double-click and "Open in its tab")."""
        run_id = Path(run_dir).name
        if task == "graph.build":
            self.show_tab(self.graph_panel)
            self.graph_panel.refresh()
            if self.graph_panel.show_graph_run(run_dir):
                return
        if task == "quant.analyze":
            self.show_tab(self.quant_panel)
            if self.quant_panel.open_run(run_id):
                return
        if task in ("export.model", "bench.latency"):
            self.show_tab(self.export_panel)
            if self.export_panel.open_run(run_id):
                return
        if task.startswith("train."):
            self.show_tab(self.training_panel)
            self.training_panel.refresh()
            if self.training_panel.select_run(run_id):
                self.training_panel.set_shown(run_id, True)
                return
        self.statusBar().showMessage(f"Run {run_id} has no tab of its own yet; its details are in the Runs tab",
                                     6000)

    def _on_jobs_open_run_requested(self, run_dir: str) -> None:
        run_id = Path(run_dir).name
        self.show_tab(self.runs_panel)
        self.runs_panel.refresh()
        self.runs_panel.select_run(run_id)

    def _choose_dataset(self) -> None:
        self.show_tab(self.dataset_panel)
        self.dataset_panel.choose_dataset()

    def _stop_selected_run(self) -> None:
        if not self.training_panel.stop_selected():
            self.statusBar().showMessage("Select a running run in the Training tab to stop it", 5000)

    def _resume_selected_run(self) -> None:
        if not self.training_panel.resume_selected():
            self.statusBar().showMessage("Select a stopped, failed or interrupted run in the Training tab to "
                                         "resume it", 5000)

    def _cancel_current_job(self) -> None:
        if not self.jobs_panel.cancel_current():
            self.statusBar().showMessage("No job to cancel: select one in the Jobs panel", 5000)

    def shortcut_rows(self) -> list[tuple[str, str]]:
        """(keys, what) for every menu action with a shortcut, plus the panels' own keys: read from the
        menus themselves, so the Help list can never disagree with them."""
        rows = []
        for top in self.menuBar().actions():
            for action in top.menu().actions() if top.menu() else []:
                keys = action.shortcut().toString(QKeySequence.NativeText)
                if keys:
                    rows.append((keys, f"{top.text().replace('&', '')} ▸ {action.text().replace('&', '')}"))
        rows += [("Ctrl++ / Ctrl+-", "Data ▸ zoom the thumbnails"), ("R", "Data ▸ re-roll the augmentation"),
                 ("F5", "Runs ▸ refresh"), ("Ctrl+L", "Log ▸ clear")]
        return rows

    def _show_shortcuts(self) -> None:
        rows = "".join(f"<tr><td style='padding-right:18px'><b>{keys}</b></td><td>{what}</td></tr>"
                       for keys, what in self.shortcut_rows())
        QMessageBox.information(self, "Keyboard shortcuts", f"<table>{rows}</table>")

    def _open_readme(self) -> None:
        readme = Path(__file__).resolve().parents[2] / "README.md"
        if readme.is_file() and QDesktopServices.openUrl(QUrl.fromLocalFile(str(readme))):
            return
        where = readme if readme.is_file() else "https://pypi.org/project/torch-workbench/"
        QMessageBox.information(self, "Read me", f"The README explains every tab, command and shortcut:\n\n{where}")

    def _show_about(self) -> None:
        QMessageBox.about(self, "About Torch Workbench",
                          f"<b>Torch Workbench {__version__}</b><p>See and steer the whole life of a PyTorch "
                          f"model. Torch runs in a separate worker process; this window never waits for it."
                          f"<p>Workspace: {self.workspace}")

    # -- closing ---------------------------------------------------------------------------------
    def closeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        if not self._quitting and self._close_answer is None:
            jobs = self._jobs_a_close_would_stop()
            if jobs:
                # Asked without blocking: the close is refused now and redone once the user has answered.
                event.ignore()
                self._ask_before_closing(jobs)
                return
        self._save_settings()
        if self.graph_tab.is_built:
            self.graph_panel.shutdown()  # the graph server never outlives the window
        self._elapsed_timer.stop()
        if not self._quitting:
            self._quitting = True
            if self._close_answer == LEAVE_RUNNING:
                self._leave_worker_running()
            else:
                self.manager.shutdown()
        super().closeEvent(event)

    def close_stopping_jobs(self) -> None:
        """Close without asking, stopping whatever runs (as "Stop jobs and close" would): for a caller that has
        already decided, such as a test's teardown."""
        self._close_answer = STOP_AND_CLOSE
        self.close()

    def _jobs_a_close_would_stop(self) -> list[JobRecord]:
        # A worker that is dead or stopped has no jobs left to stop: its jobs were already marked failed.
        return self._user_jobs() if self.manager.state in ("ready", "unresponsive") else []

    def _worker_elsewhere(self) -> str:
        """How to name the worker when this window attached to it rather than launching it; else ''."""
        if not self.manager.attach_only:
            return ""  # our own child: it cannot outlive the window (it watches our pid)
        conn = getattr(self.manager.client, "conn", None)
        if conn is not None and conn.needs_curve:  # a network address: another machine
            return f"the worker at {conn.ip}"
        return "a worker started outside this window"

    def _ask_before_closing(self, jobs: list[JobRecord]) -> None:
        if self.close_question is not None:  # closed again while asking: the same question, not a second one
            self.close_question.raise_()
            self.close_question.activateWindow()
            return
        box = self.close_question = close_question(self, jobs, self._worker_elsewhere())
        box.finished.connect(lambda _result: self._on_close_answered(box))
        box.open()

    def _on_close_answered(self, box: QMessageBox) -> None:
        clicked = box.clickedButton()
        answer = clicked.objectName() if clicked is not None else CANCEL_CLOSE
        self.close_question = None
        box.deleteLater()
        if answer in (STOP_AND_CLOSE, LEAVE_RUNNING):
            self._close_answer = answer
            self.close()

    def _leave_worker_running(self) -> None:
        """Let go of an attached worker without asking it to shut down: its jobs go on; we only disconnect.

        WorkerManager.shutdown() would send it a shutdown request, which cancels its jobs.
        """
        self.manager.detach()
