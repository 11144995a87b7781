"""Starts the GUI process: QApplication, theme, the worker (in the background) and the main window."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from workbench.client import WorkerManager
from workbench.gui.main_window import MainWindow
from workbench.gui.settings import APPLICATION, ORGANIZATION, Settings

_T0 = time.perf_counter()


def run_gui(workspace: Path | None = None, connection_file: str | None = None, argv: list[str] | None = None) -> int:
    from workbench.workspace import resolve_workspace

    app = QApplication.instance() or QApplication(argv or sys.argv[:1])
    app.setOrganizationName(ORGANIZATION)
    app.setApplicationName(APPLICATION)
    app.setApplicationDisplayName(APPLICATION)
    settings = Settings()
    workspace = resolve_workspace(workspace or settings.get("workspace") or None)
    manager = WorkerManager(connection_file=connection_file)
    window = MainWindow(manager, workspace, settings)
    window.show()
    manager.start(wait=False)  # the window is up before torch is even imported
    _report_startup_for_benchmarks(app)
    code = app.exec()
    if not window._quitting:
        manager.shutdown()
    return code


def _report_startup_for_benchmarks(app: QApplication) -> None:
    # benchmarks/startup.py and .ci/run set this: print when the window has painted, then quit after N ms.
    exit_after = os.environ.get("WORKBENCH_EXIT_AFTER_MS")
    if exit_after is None:
        return

    def shown() -> None:
        print(f"WORKBENCH_WINDOW_SHOWN {time.perf_counter() - _T0:.4f}", flush=True)

    QTimer.singleShot(0, shown)
    QTimer.singleShot(int(exit_after), app.closeAllWindows)
