"""The window's chrome: the toolbar (device picker, worker light), the Jobs and Log docks, the menus and their
shortcuts, the Help dialogs, the theme, the workspace chooser and the settings the window keeps between
sessions."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QByteArray, QObject, QSize, Qt, QTimer, QUrl
from PySide6.QtGui import QAction, QActionGroup, QDesktopServices, QIcon, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QFileDialog,
    QLabel,
    QMenuBar,
    QMessageBox,
    QToolBar,
    QWidget,
)

from workbench import __version__
from workbench.app_resources import ICON_SIZES, example_specs, icon_path, sample_specs, spec_summary
from workbench.errors import SpecError
from workbench.gui.panels.jobs_panel import JobsPanel
from workbench.gui.panels.log_panel import LogPanel
from workbench.gui.theme import THEMES, apply_theme
from workbench.gui.widgets.device_picker import DevicePicker
from workbench.gui.widgets.open_folder import open_folder
from workbench.gui.widgets.status_light import StatusLight
from workbench.specs import DataSpec

WINDOW_TITLE = "Torch Workbench"


def app_icon() -> QIcon:
    """The app icon at every size it ships; Qt picks the nearest for a title bar, a task bar or a dialog."""
    icon = QIcon()
    for size in ICON_SIZES:
        icon.addFile(str(icon_path(size)), QSize(size, size))
    return icon


class WindowChrome(QObject):
    """Builds and owns the bars, docks and menus of `main` (a MainWindow whose tabs, launcher and worker
    control already exist: the menus' actions call them), and saves and restores what the window remembers."""

    def __init__(self, main):
        super().__init__(main)
        self.main = main
        self._build_toolbar()
        self._build_docks()
        self._build_menus()
        self._elapsed_timer = QTimer(self)  # the Jobs panel's elapsed times tick once a second
        self._elapsed_timer.setInterval(1000)
        self._elapsed_timer.timeout.connect(self.jobs_panel.refresh)
        self._elapsed_timer.start()

    # -- bars and docks --------------------------------------------------------------------------
    def _build_toolbar(self) -> None:
        bar = QToolBar("Main", self.main)
        bar.setObjectName("mainToolbar")
        bar.setMovable(False)
        self.main.addToolBar(Qt.TopToolBarArea, bar)
        device_label = QLabel(" Device ", bar)
        self.device_picker = DevicePicker(bar)
        bar.addWidget(device_label)
        bar.addWidget(self.device_picker)
        spacer = QWidget(bar)
        spacer.setSizePolicy(
            spacer.sizePolicy().horizontalPolicy().Expanding, spacer.sizePolicy().verticalPolicy()
        )
        bar.addWidget(spacer)
        self.status_light = StatusLight(bar)
        bar.addWidget(self.status_light)

    def _build_docks(self) -> None:
        self.jobs_panel = JobsPanel(self.main)
        self.log_panel = LogPanel(self.main)
        self.jobs_dock = self._add_dock("Jobs", "jobsDock", self.jobs_panel, Qt.BottomDockWidgetArea)
        self.log_dock = self._add_dock("Log", "logDock", self.log_panel, Qt.BottomDockWidgetArea)
        self.main.splitDockWidget(self.jobs_dock, self.log_dock, Qt.Horizontal)

    def _add_dock(self, title: str, name: str, widget: QWidget, area) -> QDockWidget:
        dock = QDockWidget(title, self.main)
        dock.setObjectName(name)  # saveState() needs stable names to restore the layout
        dock.setWidget(widget)
        self.main.addDockWidget(area, dock)
        return dock

    # -- menus -----------------------------------------------------------------------------------
    def _build_menus(self) -> None:
        # The menus in the menu bar's order.
        menu = self.main.menuBar()
        self._build_file_menu(menu)
        self._build_view_menu(menu)
        self._build_task_menus(menu)
        self._build_worker_menu(menu)
        self._build_help_menu(menu)

    def _build_file_menu(self, menu: QMenuBar) -> None:
        """Workspace, the sample and example specs, Quit."""
        launcher = self.main.launcher
        file_menu = menu.addMenu("&File")
        self.choose_workspace_action = file_menu.addAction("Choose &workspace…", self.choose_workspace)
        self.choose_workspace_action.setToolTip(
            "Pick the folder where runs, data caches and checkpoints live"
        )
        file_menu.addAction("&Open workspace folder", lambda: open_folder(self.main, self.main.workspace))
        spec_menu = file_menu.addMenu("Open &spec")
        spec_menu.setToolTipsVisible(True)
        for path in sample_specs():  # the samples first
            action = spec_menu.addAction(
                f"Sample: {path.stem}", lambda _checked=False, p=path: launcher.open_spec(p)
            )
            action.setToolTip(spec_summary(path))
        spec_menu.addSeparator()
        # your-own-project examples: a Dataset and model of their own beside the spec
        for path in example_specs():
            action = spec_menu.addAction(
                f"Example: {path.parent.name}", lambda _checked=False, p=path: launcher.open_spec(p)
            )
            action.setToolTip(spec_summary(path))
        spec_menu.addSeparator()
        other = spec_menu.addAction("&Other spec file…", launcher.choose_spec_file)
        other.setShortcut(QKeySequence.Open)
        file_menu.addSeparator()
        # Quit closes the window, so it asks the same question as the title bar's close button.
        self.quit_action = file_menu.addAction("&Quit", self.main.close)
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
        self.theme_actions = QActionGroup(self.main)
        for theme in THEMES:
            action = QAction(theme.capitalize(), self.main, checkable=True)
            action.setData(theme)
            self.theme_actions.addAction(action)
            theme_menu.addAction(action)
        self.theme_actions.triggered.connect(lambda action: self.set_theme(action.data()))

    def _build_task_menus(self, menu: QMenuBar) -> None:
        """Data, Training, Quantization, Export and Jobs: each starts, stops or cancels its kind of job."""
        launcher, navigation = self.main.launcher, self.main.navigation
        data_menu = menu.addMenu("&Data")
        choose = data_menu.addAction("&Choose dataset…", navigation.choose_dataset)
        choose.setShortcut(QKeySequence("Ctrl+D"))

        training_menu = menu.addMenu("&Training")
        new_run = training_menu.addAction("&New training run…", launcher.new_training_run)
        new_run.setShortcut(QKeySequence("Ctrl+T"))
        training_menu.addSeparator()
        stop = training_menu.addAction("&Stop selected run", navigation.stop_selected_run)
        stop.setToolTip("Stop the run selected in the Training tab at its next step; a checkpoint is kept")
        resume = training_menu.addAction("&Resume selected run", navigation.resume_selected_run)
        resume.setToolTip("Continue the run selected in the Training tab from its last checkpoint")

        quant_menu = menu.addMenu("&Quantization")
        new_quant = quant_menu.addAction("&New quantization…", lambda: launcher.new_quantization())
        new_quant.setShortcut(QKeySequence("Ctrl+Shift+Q"))
        new_quant.setToolTip("Quantize a trained run with the white paper's PTQ pipeline")

        export_menu = menu.addMenu("E&xport")
        new_export = export_menu.addAction("New &export…", lambda: launcher.open_export_wizard("export"))
        new_export.setShortcut(QKeySequence("Ctrl+E"))
        new_bench = export_menu.addAction("New &benchmark…", lambda: launcher.open_export_wizard("bench"))
        new_bench.setShortcut(QKeySequence("Ctrl+B"))

        jobs_menu = menu.addMenu("&Jobs")
        cancel = jobs_menu.addAction("&Cancel job", self.main.worker_control.cancel_current_job)
        cancel.setShortcut(QKeySequence("Ctrl+."))
        cancel.setToolTip("Cancel the job selected in the Jobs panel (or the newest running one)")
        jobs_menu.addAction("Clear &finished", self.jobs_panel.model.clear_finished)

    def _build_worker_menu(self, menu: QMenuBar) -> None:
        worker = self.main.worker_control
        worker_menu = menu.addMenu("&Worker")
        self.restart_action = worker_menu.addAction("&Restart worker", worker.restart_worker)
        self.restart_action.setShortcut(QKeySequence("Ctrl+Shift+R"))
        self.self_test_action = worker_menu.addAction("Run worker &self-test", worker.run_self_test)
        self.self_test_action.setToolTip(
            "A short job that checks the worker, the event stream and the run store"
        )
        worker_menu.addAction("Refresh &devices", worker.request_devices)

    def _build_help_menu(self, menu: QMenuBar) -> None:
        help_menu = menu.addMenu("&Help")
        shortcuts = help_menu.addAction("&Keyboard shortcuts", self.show_shortcuts)
        shortcuts.setShortcut(QKeySequence.HelpContents)
        help_menu.addAction("&Read me (getting started)", self.open_readme)
        help_menu.addSeparator()
        help_menu.addAction("&About Torch Workbench", self.show_about)

    # -- Help dialogs ----------------------------------------------------------------------------
    def shortcut_rows(self) -> list[tuple[str, str]]:
        """(keys, what) for every menu action with a shortcut, plus the panels' own keys: read from the
        menus themselves, so the Help list can never disagree with them."""
        rows = []
        for top in self.main.menuBar().actions():
            for action in top.menu().actions() if top.menu() else []:
                keys = action.shortcut().toString(QKeySequence.NativeText)
                if keys:
                    rows.append((keys, f"{top.text().replace('&', '')} ▸ {action.text().replace('&', '')}"))
        rows += [
            ("Ctrl++ / Ctrl+-", "Data ▸ zoom the thumbnails"),
            ("R", "Data ▸ re-roll the augmentation"),
            ("F5", "Runs ▸ refresh"),
            ("Ctrl+L", "Log ▸ clear"),
        ]
        return rows

    def show_shortcuts(self) -> None:
        rows = "".join(
            f"<tr><td style='padding-right:18px'><b>{keys}</b></td><td>{what}</td></tr>"
            for keys, what in self.shortcut_rows()
        )
        QMessageBox.information(self.main, "Keyboard shortcuts", f"<table>{rows}</table>")

    def open_readme(self) -> None:
        readme = Path(__file__).resolve().parents[2] / "README.md"
        if readme.is_file() and QDesktopServices.openUrl(QUrl.fromLocalFile(str(readme))):
            return
        where = readme if readme.is_file() else "https://pypi.org/project/torch-workbench/"
        QMessageBox.information(
            self.main, "Read me", f"The README explains every tab, command and shortcut:\n\n{where}"
        )

    def show_about(self) -> None:
        QMessageBox.about(
            self.main,
            "About Torch Workbench",
            f"<b>Torch Workbench {__version__}</b><p>See and steer the whole life of a PyTorch "
            f"model. Torch runs in a separate worker process; this window never waits for it."
            f"<p>Workspace: {self.main.workspace}",
        )

    # -- theme and workspace ---------------------------------------------------------------------
    def set_theme(self, theme: str) -> None:
        app = QApplication.instance()
        theme = apply_theme(app, theme) if app else "light"  # plots follow the palette change by themselves
        self.main.settings.set("theme", theme)
        for action in self.theme_actions.actions():
            action.setChecked(action.data() == theme)

    def choose_workspace(self) -> None:
        path = QFileDialog.getExistingDirectory(self.main, "Choose workspace", str(self.main.workspace))
        if path:
            self.set_workspace(path)

    def set_workspace(self, path: str | Path) -> None:
        from workbench.workspace import resolve_workspace

        main = self.main
        main.workspace = resolve_workspace(path)
        main.settings.set("workspace", str(main.workspace))
        main.navigation.set_workspace(main.workspace)
        main.queries.workspace = main.workspace
        main.statusBar().showMessage(f"Workspace: {main.workspace}")

    # -- what the window remembers ---------------------------------------------------------------
    def restore_settings(self) -> None:
        main, settings = self.main, self.main.settings
        geometry, state = settings.get("geometry"), settings.get("window_state")
        if isinstance(geometry, QByteArray):
            main.restoreGeometry(geometry)
        if isinstance(state, QByteArray):
            main.restoreState(state)
        self.device_picker.set_preferred(settings.get("device") or "cpu")
        saved_spec = settings.get("dataset_spec")
        if saved_spec:
            try:
                main.dataset_state.spec = DataSpec.from_json(saved_spec, source="saved settings")
            except SpecError as exc:  # a setting from an older version: fall back to the default dataset
                self.log_panel.append(f"Ignoring the saved dataset choice: {exc}", "warning")
        main.dataset_state.set_calibration(
            int(settings.get("calibration_count") or 256), int(settings.get("calibration_seed") or 0)
        )
        main.tabs.setCurrentIndex(int(settings.get("current_tab") or 0))
        self.set_theme(settings.get("theme"))
        self.log_panel.show_debug.setChecked(settings.get("show_debug_details"))

    def remember_device(self, device: str) -> None:
        self.main.settings.set("device", device)

    def remember_dataset(self) -> None:
        self.main.settings.set("dataset_spec", self.main.dataset_state.spec.to_json())

    def save_settings(self) -> None:
        main, settings = self.main, self.main.settings
        settings.set("geometry", main.saveGeometry())
        settings.set("window_state", main.saveState())
        settings.set("show_debug_details", self.log_panel.show_debug.isChecked())
        main.navigation.save_panel_settings(settings)
        settings.set("calibration_count", main.dataset_state.calibration_count)
        settings.set("calibration_seed", main.dataset_state.calibration_seed)
        settings.set("current_tab", main.tabs.currentIndex())
        settings.sync()

    def on_close(self) -> None:
        """The window is closing for good: keep its settings and stop the clock."""
        self.save_settings()
        self._elapsed_timer.stop()
