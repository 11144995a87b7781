"""Shared GUI fixtures: settings in a temporary INI file, and the main window attached to a fake worker."""

from __future__ import annotations

import pytest
from fake_worker import FakeWorker
from PySide6.QtCore import QSettings

from workbench.client import WorkerManager
from workbench.gui.main_window import MainWindow
from workbench.gui.settings import Settings


@pytest.fixture(autouse=True)
def trust_answers_once_for_test_files(monkeypatch, tmp_path):
    """The window asks before it runs user code from a folder not trusted (workbench.gui.trust_gate); a modal
    question would hang a test, so the tests' own files, written under tmp_path, are trusted once when asked.
    Any other file fails the test. tests/gui/test_trust_window.py answers the real dialog instead."""
    from workbench.gui import trust_gate

    def answer(files, parent):
        outside = [str(f.path) for f in files if tmp_path.resolve() not in f.path.resolve().parents]
        assert not outside, f"the window asked to trust {outside}, outside the test's folder"
        return trust_gate.ONCE

    monkeypatch.setattr(trust_gate, "ask", answer)


@pytest.fixture
def settings(tmp_path):
    return Settings(QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat))


@pytest.fixture
def fake_window(qtbot, tmp_path, settings):
    """The real window, shown, its worker a FakeWorker over the real protocol; ready when yielded."""
    worker = FakeWorker(tmp_path)
    manager = WorkerManager(connection_file=worker.connection_file, heartbeat_interval=0.2)
    window = MainWindow(manager, tmp_path / "workspace", settings)
    qtbot.addWidget(window)
    window.resize(1300, 850)
    window.show()
    manager.start(wait=False)
    # 30 s, not 10: with the tests on both cores (pytest -n auto) the other one may be importing torch
    # meanwhile.
    qtbot.waitUntil(lambda: window.status_light.state == "ready", timeout=30_000)
    yield window
    window.close_stopping_jobs()  # a test may end with a job still running: no question at teardown
    worker.stop()


@pytest.fixture
def real_window(qtbot, tmp_path, settings):
    """The real window with the real worker subprocess; yielded once the worker is ready."""
    manager = WorkerManager(runtime_dir=tmp_path / "rt")
    window = MainWindow(manager, tmp_path / "workspace", settings)
    qtbot.addWidget(window)
    window.show()
    manager.start(wait=False)
    qtbot.waitUntil(lambda: window.status_light.state == "ready", timeout=60_000)
    yield window
    window.close_stopping_jobs()  # a test may end with a job still running: no question at teardown
