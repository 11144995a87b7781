"""The main window, "Torch Workbench": the chrome (menus, toolbar, docks, settings) around the tabs, composed
here.

It holds GUI-side state only and never waits on the worker: everything from the worker arrives as a signal.
The pieces it composes each own one thing: `window_chrome` the bars, menus and persistence, `navigation` the
tabs and the hand-offs between them, `launcher` the wizards and spec files that start jobs, `worker_control`
the worker's state and jobs, `close_guard` the question before closing.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QMainWindow, QVBoxLayout, QWidget

from workbench.client import JobRecord, WorkerManager
from workbench.gui.close_guard import CloseGuard
from workbench.gui.launcher import JobLauncher
from workbench.gui.navigation import Navigation
from workbench.gui.queries import QueryRunner
from workbench.gui.settings import Settings
from workbench.gui.state import DatasetState
from workbench.gui.trust_gate import TrustGate
from workbench.gui.window_chrome import WINDOW_TITLE, WindowChrome, app_icon
from workbench.gui.worker_bridge import QtWorkerBridge
from workbench.gui.worker_control import WorkerBanner, WorkerControl
from workbench.specs import QuantSpec, TrainSpec

__all__ = ["WINDOW_TITLE", "MainWindow"]


class MainWindow(QMainWindow):
    """The window: its shared state (manager, workspace, settings, queries, trust gate, dataset) and the
    pieces that read it. Its methods are the window's public face; each hands the work to the piece that owns
    it."""

    def __init__(self, manager: WorkerManager, workspace: str | Path, settings: Settings | None = None):
        super().__init__()
        self.manager = manager
        self.workspace = Path(workspace)
        self.settings = settings or Settings()
        self.bridge = QtWorkerBridge(manager, self)
        self.queries = QueryRunner(self.bridge, self.workspace, self)
        self.trust_gate = TrustGate(lambda: self.workspace, self)
        self.queries.gate = self.trust_gate
        self.dataset_state = DatasetState(parent=self)
        self._quitting = False
        self.try_it_dialog = None  # the last Try it window opened
        self.setWindowTitle(WINDOW_TITLE)
        self.setWindowIcon(app_icon())
        self.resize(1280, 800)
        self.banner = WorkerBanner(self)
        self.navigation = Navigation(self)
        self.tabs = self.navigation.tabs
        self._build_central()
        self.launcher = JobLauncher(self)
        self.worker_control = WorkerControl(self)
        self.close_guard = CloseGuard(self)
        self.chrome = WindowChrome(self)  # last: its menus' actions call the pieces above
        self.device_picker, self.status_light = self.chrome.device_picker, self.chrome.status_light
        self.jobs_panel, self.log_panel = self.chrome.jobs_panel, self.chrome.log_panel
        self._connect()
        self.chrome.restore_settings()
        self.status_light.set_state(manager.state, manager.detail)
        self.statusBar().showMessage(f"Workspace: {self.workspace}")
        if manager.state == "ready":  # the worker was up before the window (tests, attach mode)
            self.worker_control.request_devices()

    def _build_central(self) -> None:
        central = QWidget(self)
        layout = QVBoxLayout(central)
        layout.setContentsMargins(6, 6, 6, 0)
        layout.addWidget(self.banner)
        layout.addWidget(self.tabs, 1)
        self.setCentralWidget(central)

    def _connect(self) -> None:
        worker, navigation, chrome = self.worker_control, self.navigation, self.chrome
        self.bridge.state_changed.connect(worker.on_state_changed)
        self.bridge.job_changed.connect(worker.on_job_changed)
        self.bridge.message_received.connect(worker.on_message)
        self.status_light.restart_requested.connect(worker.restart_worker)
        self.banner.restart_button.clicked.connect(worker.restart_worker)
        self.jobs_panel.cancel_requested.connect(worker.cancel_job)
        self.jobs_panel.force_stop_requested.connect(worker.force_stop_job)
        self.jobs_panel.open_run_requested.connect(navigation.open_in_runs_tab)
        self.device_picker.device_chosen.connect(chrome.remember_device)
        self.dataset_state.changed.connect(chrome.remember_dataset)
        # The tabs hear of jobs and messages after the Jobs panel and the log.
        self.bridge.job_changed.connect(navigation.on_job_changed)
        self.bridge.message_received.connect(navigation.on_message)

    # -- the tabs' panels, built on first use ------------------------------------------------------
    @property
    def dataset_panel(self):
        return self.navigation.dataset_panel

    @property
    def training_panel(self):
        return self.navigation.training_panel

    @property
    def runs_panel(self):
        return self.navigation.runs_panel

    @property
    def graph_panel(self):
        return self.navigation.graph_panel

    @property
    def quant_panel(self):
        return self.navigation.quant_panel

    @property
    def export_panel(self):
        return self.navigation.export_panel

    def show_tab(self, panel: QWidget) -> None:
        """Bring a panel's tab to the front (building the panel if it is not yet)."""
        self.navigation.show_tab(panel)

    def current_panel(self) -> QWidget:
        return self.navigation.current_panel()

    def show_graph_of_run(self, run_id: str, overlay: str = "") -> None:
        self.navigation.show_graph_of_run(run_id, overlay)

    def open_try_it(self, run_id: str):
        return self.navigation.open_try_it(run_id)

    def _on_runs_open_requested(self, run_dir: str, task: str) -> None:
        self.navigation.open_run_in_its_tab(run_dir, task)

    def _on_quant_layer_requested(self, quant_run_id: str, module: str, tensor: str) -> None:
        self.navigation.open_quant_layer(quant_run_id, module, tensor)

    # -- starting jobs -----------------------------------------------------------------------------
    def submit_job(self, task: str, spec: dict | None = None, *, with_run: bool = True) -> JobRecord | None:
        """Start a job on the worker; None (and says why) when the worker cannot take it or its code is not
        trusted."""
        return self.launcher.submit_job(task, spec, with_run=with_run)

    def open_spec(self, path) -> None:
        self.launcher.open_spec(path)

    def new_training_run(self, start: dict | None = None) -> TrainSpec | None:
        return self.launcher.new_training_run(start)

    def start_training(self, spec: TrainSpec) -> TrainSpec | None:
        return self.launcher.start_training(spec)

    def new_quantization(self, source_run: str = "", start: dict | None = None) -> QuantSpec | None:
        return self.launcher.new_quantization(source_run, start)

    def start_quantization(self, spec: QuantSpec) -> QuantSpec | None:
        return self.launcher.start_quantization(spec)

    def write_model_report(self, run_id: str) -> Path | None:
        return self.launcher.write_model_report(run_id)

    # -- the worker and its jobs -------------------------------------------------------------------
    def run_self_test(self) -> None:
        self.worker_control.run_self_test()

    def restart_worker(self) -> None:
        self.worker_control.restart_worker()

    def _user_jobs(self) -> list[JobRecord]:
        return self.worker_control.user_jobs()

    def _on_jobs_cancel_requested(self, job_id: str) -> None:
        self.worker_control.cancel_job(job_id)

    def _cancel_current_job(self) -> None:
        self.worker_control.cancel_current_job()

    # -- chrome ------------------------------------------------------------------------------------
    def set_theme(self, theme: str) -> None:
        self.chrome.set_theme(theme)

    def set_workspace(self, path: str | Path) -> None:
        self.chrome.set_workspace(path)

    def shortcut_rows(self) -> list[tuple[str, str]]:
        """(keys, what) for every menu shortcut and the panels' own keys, as the Help list shows them."""
        return self.chrome.shortcut_rows()

    # -- closing -----------------------------------------------------------------------------------
    @property
    def close_question(self):
        """The question asked before closing with jobs unfinished, while it is open; else None."""
        return self.close_guard.question

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        if self.close_guard.must_wait():
            event.ignore()  # redone once the user has answered
            return
        self.chrome.on_close()
        self.navigation.shutdown()
        if not self._quitting:
            self._quitting = True
            self.close_guard.let_go_of_worker()
        super().closeEvent(event)

    def close_stopping_jobs(self) -> None:
        """Close without asking, stopping whatever runs (as "Stop jobs and close" would): for a caller that
        has already decided, such as a test's teardown."""
        self.close_guard.close_stopping_jobs()
