"""The firm rule of three processes: the GUI never loads torch-side packages, the worker never loads Qt.

Each check runs in a fresh interpreter, since this test process may have imported anything already.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TORCH_SIDE = ("torch", "torchvision", "onnx", "onnxruntime", "model_explorer", "torch_tensorrt")
QT_SIDE = ("PySide6", "shiboken6", "pyqtgraph")


def _run(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, cwd=ROOT
    )


def test_gui_window_shown_without_torch(tmp_path):
    code = f"""
import sys
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication
import workbench.cli, workbench.gui.app
from workbench.client import WorkerManager
from workbench.gui.main_window import MainWindow
from workbench.gui.settings import Settings
app = QApplication([])
window = MainWindow(WorkerManager(), {str(tmp_path / "ws")!r}, Settings(QSettings({str(tmp_path / "s.ini")!r}, QSettings.IniFormat)))
window.show()
app.processEvents()
loaded = [m for m in {TORCH_SIDE!r} if m in sys.modules]
print("LOADED", loaded)
assert 'PySide6.QtWidgets' in sys.modules
"""  # noqa: E501
    result = _run(code)
    assert result.returncode == 0, result.stderr
    assert "LOADED []" in result.stdout


def test_worker_kernel_and_tasks_without_qt():
    code = f"""
import sys
from workbench.worker.kernel import Kernel
from workbench.worker.registry import list_tasks
from workbench.worker.runner import run_task
from workbench.worker.registry import get_task
result = run_task(get_task("devices.list"), {{}}, emit=lambda *a: None)
assert result["status"] == "done", result
assert "torch" in sys.modules  # the devices task really ran torch
print("LOADED", [m for m in {QT_SIDE!r} if m in sys.modules], len(list_tasks()))
"""
    result = _run(code)
    assert result.returncode == 0, result.stderr
    assert "LOADED []" in result.stdout


def test_shared_middle_loads_neither():
    code = f"""
import sys
import workbench.specs, workbench.protocol, workbench.client, workbench.runs, workbench.workspace, workbench.errors
import workbench.results, workbench.task_ids
print("LOADED", [m for m in {TORCH_SIDE + QT_SIDE!r} if m in sys.modules])
"""  # noqa: E501
    result = _run(code)
    assert result.returncode == 0, result.stderr
    assert "LOADED []" in result.stdout


def test_import_linter_contracts_hold():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if lint is None:
        pytest.fail("import-linter is not installed: pip install -e '.[dev]'")
    result = subprocess.run([lint], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 kept, 0 broken" in result.stdout


def test_listing_the_workers_tasks_loads_no_torch():
    """The worker answers its first ping before torch loads (each task imports torch when it runs), which
    keeps its start fast and its idle memory small: registering every task must not import torch."""
    code = f"""
import sys
from workbench.worker.registry import list_tasks
tasks = list_tasks()
print("TASKS", len(tasks), "LOADED", [m for m in {TORCH_SIDE!r} if m in sys.modules])
"""
    result = _run(code)
    assert result.returncode == 0, result.stderr
    assert "LOADED []" in result.stdout and "TASKS 0" not in result.stdout, result.stdout
