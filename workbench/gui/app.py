"""Starts the GUI process: QApplication, theme, the worker (in the background) and the main window."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QEvent, QObject, Qt, QTimer
from PySide6.QtWidgets import QApplication

from workbench.client import WorkerManager
from workbench.gui.gui_thread_gc import GuiThreadGarbageCollector
from workbench.gui.main_window import MainWindow
from workbench.gui.settings import APPLICATION, ORGANIZATION, Settings

_T0 = time.perf_counter()


def prepare_qt_environment() -> None:
    """What Qt must be told before the QApplication exists (the app, the screenshot script and tests share
    it)."""
    # QtWebEngine (the Graph tab) reads these when it starts: Model Explorer draws with WebGL, which without a
    # GPU only SwiftShader provides; Chromium will not run as root with its sandbox on.
    os.environ.setdefault(
        "QTWEBENGINE_CHROMIUM_FLAGS",
        "--ignore-gpu-blocklist --enable-unsafe-swiftshader "
        "--use-gl=angle --use-angle=swiftshader-webgl --disable-gpu-compositing",
    )
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        os.environ.setdefault("QTWEBENGINE_DISABLE_SANDBOX", "1")
    # The Graph tab imports QtWebEngine lazily, which needs shared OpenGL contexts: settable only before the
    # app.
    if QApplication.instance() is None:
        QCoreApplication.setAttribute(Qt.AA_ShareOpenGLContexts)


def run_gui(
    workspace: Path | None = None, connection_file: str | None = None, argv: list[str] | None = None
) -> int:
    from workbench.workspace import resolve_workspace

    prepare_qt_environment()
    app = QApplication.instance() or QApplication(argv or sys.argv[:1])
    app.setOrganizationName(ORGANIZATION)
    app.setApplicationName(APPLICATION)
    app.setApplicationDisplayName(APPLICATION)
    # matches the window to its menu entry and icon (Wayland's app_id)
    app.setDesktopFileName("torch-workbench")
    GuiThreadGarbageCollector(parent=app)  # a child of the app: lives as long as it
    settings = Settings()
    workspace = resolve_workspace(workspace or settings.get("workspace") or None)
    manager = WorkerManager(connection_file=connection_file)
    window = MainWindow(manager, workspace, settings)
    window.show()
    manager.start(wait=False)  # the window is up before torch is even imported
    _report_startup_for_benchmarks(app, window)
    code = app.exec()
    if not window._quitting:
        manager.shutdown()
    return code


class _FirstPaint(QObject):
    """Prints once when the window first paints: the moment a person sees it."""

    def __init__(self, window):
        super().__init__(window)
        self.done = False
        window.installEventFilter(self)

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt override)
        if not self.done and event.type() == QEvent.Paint:
            self.done = True
            print(f"WORKBENCH_WINDOW_SHOWN {time.perf_counter() - _T0:.4f}", flush=True)
        return False


def _report_startup_for_benchmarks(app: QApplication, window: MainWindow) -> None:
    # benchmarks/startup.py and .ci/run set this: print when the window first paints and when its first tab is
    # built (tabs build after the first paint), then quit after N ms.
    exit_after = os.environ.get("WORKBENCH_EXIT_AFTER_MS")
    if exit_after is None:
        return
    _FirstPaint(window)

    def tab_ready(_panel) -> None:
        print(f"WORKBENCH_TAB_READY {time.perf_counter() - _T0:.4f}", flush=True)

    tab = window.tabs.currentWidget()
    if getattr(tab, "is_built", True):
        tab_ready(None)
    else:
        tab.built.connect(tab_ready)
    QTimer.singleShot(int(exit_after), app.closeAllWindows)
